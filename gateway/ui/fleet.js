// The fleet page (GET /v1/fleet, as the tenant may see it): the workers
// (anonymous) and the fleet's capacity, the tenant's own jobs by queue,
// and its own terminal reasons over time; and the queues page, the queue
// part alone, larger. No other tenant's numbers: queue depths and the
// fleet's reasons are sums over everyone's jobs. The page polls every 5 s.
import {api} from './api.js';
import {fill, fmtMS, fmtTime, h, s, status} from './dom.js';

const POLL = 5000;
const COLORS = {
  ok: '#3a8a5c', exit_nonzero: '#c0392b', timeout: '#d35400', oom: '#8e44ad', pids_limit: '#6c3483',
  output_cap: '#b9770e', fsize: '#a04000', signal: '#922b21', lease_lost: '#1f618d', canceled: '#7f8c8d',
  rejected: '#566573', infra: '#e74c3c',
};

function scalar(v) {
  return v === null || ['string', 'number', 'boolean'].includes(typeof v);
}

// cell shows one field's value, with units read from its name.
function cell(k, v) {
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v === 'number') {
    if (/_ms$/.test(k)) return fmtMS(v);
    if (/_s$/.test(k)) return fmtMS(v * 1000);
    if (/rate$/.test(k) && v <= 1) return (v * 100).toFixed(0) + ' %';
    return String(v);
  }
  if (typeof v === 'string' && /(_at|^time|^start|^started)$/.test(k) && !isNaN(Date.parse(v))) return fmtTime(v);
  return v === null ? '' : String(v);
}

// table renders an array of objects, one column per scalar field (an
// object field's scalar members become "field.member" columns).
export function table(list, id, extra) {
  if (!list || !list.length) return h('p', {class: 'muted'}, 'none');
  const flat = list.map((o) => {
    const r = {};
    for (const [k, v] of Object.entries(o)) {
      if (scalar(v)) r[k] = v;
      else if (v && typeof v === 'object' && !Array.isArray(v)) {
        for (const [k2, v2] of Object.entries(v)) if (scalar(v2)) r[k + '.' + k2] = v2;
      }
    }
    return r;
  });
  const cols = [...new Set(flat.flatMap((r) => Object.keys(r)))];
  return h('table', {class: 'fleet', id},
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', {}, c.replace(/_(ms|s)$/, '').replace(/_/g, ' '))), extra ? h('th', {}, extra.title) : null)),
    h('tbody', {}, flat.map((r, i) => h('tr', {}, cols.map((c) => h('td', {class: typeof r[c] === 'number' ? 'num' : ''}, cell(c, r[c]))),
      extra ? h('td', {}, extra.draw(list[i])) : null))));
}

// spark draws processed (and failed) per bucket of a queue's history.
function spark(hist, w = 240, ht = 36) {
  if (!Array.isArray(hist) || !hist.length) return h('span', {class: 'muted'}, 'no history');
  const max = Math.max(1, ...hist.map((b) => (b.processed || 0)));
  const bw = w / hist.length;
  const svg = s('svg', {class: 'spark', width: w, height: ht, viewBox: `0 0 ${w} ${ht}`, role: 'img', 'aria-label': 'processed per interval'});
  hist.forEach((b, i) => {
    const p = ((b.processed || 0) / max) * (ht - 2), f = ((b.failed || 0) / max) * (ht - 2);
    const when = b.time || b.date || '';
    svg.append(s('g', {}, s('title', {}, fmtTime(when) + ': ' + (b.processed || 0) + ' processed, ' + (b.failed || 0) + ' failed'),
      s('rect', {x: i * bw, y: ht - p, width: Math.max(1, bw - 1), height: p, class: 'ok'}),
      f ? s('rect', {x: i * bw, y: ht - f, width: Math.max(1, bw - 1), height: f, class: 'fail'}) : null));
  });
  return svg;
}

// buckets normalises the reasons over time to the 12 five-minute buckets
// of the last hour, oldest first: [{time, counts}]. It reads a list of
// {start|time, counts: {reason: n}} or of {start|time, reason, count}.
function buckets(reasons) {
  const list = Array.isArray(reasons) ? reasons : (reasons && reasons.buckets) || [];
  const step = 300000;
  const last = Math.floor(Date.now() / step) * step;
  const out = [];
  for (let t = last - 11 * step; t <= last; t += step) out.push({time: new Date(t).toISOString(), at: t, counts: {}});
  for (const r of list) {
    const t = Math.floor(Date.parse(r.start || r.time) / step) * step;
    const b = out.find((x) => x.at === t);
    if (!b) continue;
    if (r.counts) for (const [k, n] of Object.entries(r.counts)) b.counts[k] = (b.counts[k] || 0) + n;
    else if (r.reason) b.counts[r.reason] = (b.counts[r.reason] || 0) + (r.count || 0);
  }
  return out;
}

// reasonsChart: stacked bars per bucket, one colour per reason.
function reasonsChart(reasons) {
  const bs = buckets(reasons);
  if (!bs.some((b) => Object.keys(b.counts).length)) return h('p', {class: 'muted'}, 'no job ended in the last hour');
  const w = 720, ht = 140, bw = w / bs.length;
  const max = Math.max(1, ...bs.map((b) => Object.values(b.counts).reduce((a, c) => a + c, 0)));
  const seen = new Set();
  const svg = s('svg', {class: 'reasons', id: 'reasons-chart', width: w, height: ht + 18, viewBox: `0 0 ${w} ${ht + 18}`, role: 'img',
    'aria-label': 'terminal reasons over time'});
  bs.forEach((b, i) => {
    let y = ht;
    for (const [reason, n] of Object.entries(b.counts)) {
      if (!n) continue;
      seen.add(reason);
      const bh = (n / max) * (ht - 4);
      y -= bh;
      svg.append(s('rect', {x: i * bw + 1, y, width: Math.max(1, bw - 2), height: bh, fill: COLORS[reason] || '#999'},
        s('title', {}, fmtTime(b.time) + ': ' + n + ' ' + reason)));
    }
  });
  svg.append(s('text', {x: 0, y: ht + 14, class: 'axis'}, fmtTime(bs[0].time)),
    s('text', {x: w, y: ht + 14, class: 'axis', 'text-anchor': 'end'}, fmtTime(bs[bs.length - 1].time)));
  const legend = h('div', {class: 'legend'}, [...seen].map((r) => h('span', {class: 'key', 'data-reason': r},
    s('svg', {width: 10, height: 10}, s('rect', {width: 10, height: 10, fill: COLORS[r] || '#999'})), ' ' + r)));
  return h('div', {}, svg, legend);
}

// poller fills root with draw(the answer of GET path) every 5 s, and
// returns the function that stops it (the page's unmount).
export function poller(root, path, draw) {
  let timer = 0, closed = false;
  async function tick() {
    try {
      const f = await api('GET', path);
      if (closed) return;
      fill(root, draw(f || {}));
      status('updated ' + fmtTime(new Date().toISOString()));
    } catch (e) {
      if (!closed) status('reading the fleet failed: ' + e.message, 'error');
    }
    if (!closed) timer = setTimeout(tick, POLL);
  }
  fill(root, h('p', {class: 'muted'}, 'loading…'));
  tick();
  return () => {
    closed = true;
    clearTimeout(timer);
  };
}

// throughput is the jobs that ended per five minutes over the last hour,
// and how many of them failed, from the reasons (asynq keeps only daily
// counts per queue, so this is every queue's).
function throughput(reasons, w, ht) {
  const hist = buckets(reasons).map((b) => {
    const all = Object.values(b.counts).reduce((a, c) => a + c, 0);
    return {time: b.time, processed: all, failed: all - (b.counts.ok || 0) - (b.counts.canceled || 0)};
  });
  return h('figure', {class: 'throughput'}, spark(hist, w, ht),
    h('figcaption', {class: 'muted'}, 'your jobs ended per 5 minutes over the last hour, all queues (red: failed)'));
}

const queueChart = {title: 'last hour', draw: (q) => (q.history ? spark(q.history) : null)};

export function fleetPage(root) {
  return poller(root, '/v1/fleet', (f) => [
    h('h1', {}, 'Fleet'),
    h('section', {}, h('h2', {}, 'Workers'), table(f.workers, 'workers'),
      f.capacity ? table([f.capacity], 'capacity') : null),
    h('section', {}, h('h2', {}, 'Your queues'), table(f.queues, 'queues', (f.queues || []).some((q) => q.history) ? queueChart : null),
      throughput(f.reasons, 480, 60)),
    h('section', {}, h('h2', {}, 'Your reasons over the last hour'), reasonsChart(f.reasons)),
    f.partial ? h('p', {class: 'muted'}, 'Your counts stopped at the view\'s bound: they are lower bounds.') : null,
  ]);
}

export function queuesPage(root) {
  return poller(root, '/v1/fleet', (f) => [
    h('h1', {}, 'Queues'),
    h('p', {class: 'muted'}, 'Your jobs in each queue: queued and running now, ended and failed within the hour (another tenant\'s jobs are not counted).'),
    (f.queues || []).length ? (f.queues || []).map((q) => h('section', {class: 'queue', 'data-queue': q.name},
      h('h2', {}, q.name || '?'), table([q], null), q.history ? spark(q.history, 720, 90) : null)) : h('p', {class: 'muted'}, 'no queue'),
    h('section', {}, h('h2', {}, 'Throughput'), throughput(f.reasons, 720, 90)),
  ]);
}
