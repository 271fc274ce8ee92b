// The job page: its summary, effective limits, attempts, output (live,
// from GET /v1/jobs/{id}/events), downloads, the trace as a waterfall and
// a cancel button.
import {api, query} from './api.js';
import {REASONS, badge, between, fill, fmtMS, fmtTime, h, status, terminal} from './dom.js';
import {waterfall} from './trace.js';

export function jobPage(root, id) {
  const enc = encodeURIComponent(id);
  const streams = [];
  let traceTimer = 0;
  let sum = null;
  let result = null;
  let gotOutput = false;
  let closed = false;

  const head = h('div', {class: 'bar'});
  const facts = h('dl', {class: 'facts', id: 'facts'});
  const limits = h('div', {id: 'limits'});
  const attempts = h('div', {id: 'attempts'});
  const out = {stdout: h('pre', {class: 'out', id: 'stdout'}), stderr: h('pre', {class: 'out err', id: 'stderr'})};
  const follow = h('input', {type: 'checkbox', id: 'follow', checked: true});
  const downloads = h('div', {class: 'downloads', id: 'downloads'});
  const trace = h('div', {class: 'trace', id: 'trace'}, h('p', {class: 'muted'}, 'loading the trace…'));
  const message = h('p', {class: 'error', id: 'job-error', role: 'alert'});
  const cancel = h('button', {type: 'button', id: 'cancel', class: 'danger', hidden: true}, 'Cancel');

  fill(root, h('p', {}, h('a', {href: '#/jobs'}, '← jobs')), head, message,
    h('section', {}, h('h2', {}, 'Job'), facts),
    h('section', {}, h('h2', {}, 'Effective limits'), limits),
    h('section', {}, h('h2', {}, 'Attempts'), attempts),
    h('section', {}, h('h2', {}, 'Output ', h('label', {class: 'small'}, follow, ' follow')),
      h('h3', {}, 'stdout'), out.stdout, h('h3', {}, 'stderr'), out.stderr, downloads),
    h('section', {}, h('h2', {}, 'Trace'), trace));

  function drawHead() {
    const st = result ? result.state : sum ? sum.state : '';
    const reason = result ? result.reason : sum && sum.reason;
    fill(head, h('h1', {}, 'Job ', h('code', {id: 'job-id'}, id)), h('span', {id: 'job-state'}, badge(st)),
      reason ? h('span', {class: 'reason', title: REASONS[reason] || ''}, reason) : null, h('span', {class: 'spacer'}), cancel);
    cancel.hidden = !st || terminal(st);
  }

  function drawFacts() {
    const r = result || {}, j = sum || {};
    const labels = Object.entries(r.labels || j.labels || {}).map(([k, v]) => h('span', {class: 'label'}, k + '=' + v));
    const rows = [
      ['tenant', r.tenant || j.tenant], ['command', j.command ? h('code', {}, j.command) : ''],
      ['image', r.image || j.image], ['queue', r.queue || j.queue], ['labels', labels.length ? labels : ''],
      ['worker', r.worker], ['submitted', fmtTime(r.submitted_at)], ['queued', fmtTime(r.queued_at || j.queued_at)],
      ['started', fmtTime(r.started_at || j.started_at)], ['finished', fmtTime(r.finished_at || j.finished_at)],
      ['took', fmtMS(between(r.started_at || j.started_at, r.finished_at || j.finished_at))],
      ['runs', r.runs || j.runs], ['exit code', r.exit_code ?? j.exit_code], ['fencing token', r.fencing_token],
      ['lock wait', r.lock_wait_ms ? fmtMS(r.lock_wait_ms) : ''], ['error', r.error],
    ];
    fill(facts, rows.filter(([, v]) => v !== undefined && v !== null && v !== '')
      .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }

  function drawLimits() {
    const l = result && result.limits;
    if (!l) {
      fill(limits, h('p', {class: 'muted'}, 'on the result, once the job has ended'));
      return;
    }
    const units = {memory_mb: ' MiB', tmpfs_mb: ' MiB', output_bytes: ' bytes', command_timeout_s: ' s', job_timeout_s: ' s'};
    fill(limits, h('table', {class: 'kv'}, Object.entries(l).map(([k, v]) =>
      h('tr', {}, h('th', {}, k), h('td', {class: 'num'}, String(v) + (units[k] || ''))))));
  }

  function drawAttempts() {
    const list = (result && result.attempts) || [];
    if (!list.length) {
      fill(attempts, h('p', {class: 'muted'}, result ? 'no attempt ran' : 'listed on the result, once the job has ended'));
      return;
    }
    fill(attempts, h('table', {class: 'attempts'},
      h('thead', {}, h('tr', {}, ['#', 'action', 'command', 'exit', 'reason', 'heal', 'duration'].map((c) => h('th', {}, c)))),
      h('tbody', {}, list.map((a) => h('tr', {'data-attempt': a.n},
        h('td', {class: 'num'}, a.n), h('td', {}, a.action),
        h('td', {class: 'cmd'}, a.install ? h('div', {class: 'muted'}, 'install: ', h('code', {}, a.install)) : null,
          h('code', {}, a.command), a.stderr_tail ? h('pre', {class: 'tail'}, a.stderr_tail) : null),
        h('td', {class: 'num'}, a.exit_code),
        h('td', {}, h('b', {}, a.reason), h('div', {class: 'muted'}, REASONS[a.reason] || '')),
        h('td', {}, a.note || ''), h('td', {class: 'num'}, fmtMS(a.duration_ms)))))));
  }

  function drawDownloads() {
    const links = [];
    if (result && result.kept) {
      for (const s of ['stdout', 'stderr']) {
        links.push(h('a', {href: '/v1/jobs/' + enc + '/output/' + s, download: id + '.' + s}, 'full ' + s));
      }
    }
    for (const a of (result && result.artifacts) || []) {
      const p = a.path.split('/').map(encodeURIComponent).join('/');
      links.push(h('a', {href: '/v1/jobs/' + enc + '/artifacts/' + p, download: a.path.split('/').pop()},
        a.path + ' (' + a.bytes + ' bytes)'));
    }
    fill(downloads, links.length ? [h('b', {}, 'Downloads: '), links] : null);
  }

  function showOutput(o, el) {
    if (!o) return;
    let text = o.text || '';
    if (o.truncated) text += '\n… ' + (o.omitted_bytes || 0) + ' bytes omitted …\n' + (o.tail || '');
    el.textContent = text;
  }

  function onResult(r) {
    result = r;
    if (!gotOutput) {
      showOutput(r.stdout, out.stdout);
      showOutput(r.stderr, out.stderr);
    }
    drawAll();
    loadTrace(0);
  }

  function drawAll() {
    drawHead();
    drawFacts();
    drawLimits();
    drawAttempts();
    drawDownloads();
  }

  function followOutput() {
    const es = new EventSource('/v1/jobs/' + enc + '/events');
    streams.push(es);
    es.addEventListener('output', (ev) => {
      const c = JSON.parse(ev.data);
      gotOutput = true;
      const el = out[c.stream] || out.stdout;
      if (c.skipped) el.append(document.createTextNode('\n… ' + c.skipped + ' bytes skipped …\n'));
      el.append(document.createTextNode(c.data));
      if (follow.checked) el.scrollTop = el.scrollHeight;
    });
    es.addEventListener('result', (ev) => {
      es.close();
      onResult(JSON.parse(ev.data));
    });
    es.addEventListener('error', (ev) => {
      if (ev.data) {
        es.close();
        const e = JSON.parse(ev.data).error || {};
        message.textContent = 'following the output failed: ' + (e.message || e.code);
      }
    });
  }

  // The summary stream: the job's state while it has no result.
  function followState() {
    const es = new EventSource('/v1/events');
    streams.push(es);
    es.addEventListener('job', (ev) => {
      const j = JSON.parse(ev.data);
      if (j.id !== id || result) return;
      sum = j;
      drawHead();
      drawFacts();
      if (terminal(j.state)) es.close();
    });
  }

  // loadTrace draws the spans; while the job runs, and a little after it
  // ended (spans are written when they end), it draws them again.
  async function loadTrace(n) {
    clearTimeout(traceTimer);
    try {
      const t = await api('GET', '/v1/jobs/' + enc + '/trace');
      if (closed) return;
      const spans = (t && t.spans) || [];
      fill(trace, spans.length ? waterfall(spans) : h('p', {class: 'muted'}, 'no spans yet'));
      const done = result && (spans.some((s) => s.name === 'paddock.attempt') || !(result.attempts || []).length);
      if (!done && n < 60) traceTimer = setTimeout(() => loadTrace(n + 1), result ? 1000 : 2000);
    } catch (e) {
      if (!closed) fill(trace, h('p', {class: 'error'}, 'the trace could not be read: ' + e.message));
    }
  }

  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try {
      const reply = await api('DELETE', '/v1/jobs/' + enc);
      status('cancel: ' + ((reply && reply.outcome) || 'sent'));
    } catch (e) {
      status('cancel failed: ' + e.message, 'error');
      cancel.disabled = false;
    }
  });

  // start finds the job's summary, then follows it. A job that is not
  // in the list (another tenant's, too old, or still waiting for a
  // scheduler slot) is looked for again every 2 s: nothing else is asked
  // about it, so another tenant's job answers nothing at all.
  let lookups = 0;
  async function start() {
    try {
      const page = await api('GET', '/v1/jobs' + query({q: id, limit: 200}));
      sum = (page.jobs || []).find((j) => j.id === id) || null;
    } catch (e) {
      status('the job list failed: ' + e.message, 'error');
    }
    if (closed) return;
    if (!sum) {
      message.textContent = 'no job ' + id + ' of your tenant is in the list (another tenant\'s, older than the ' +
        'retention, or not scheduled yet: looking again every 2 s)';
      drawAll();
      if (++lookups < 300) traceTimer = setTimeout(start, 2000);
      return;
    }
    message.textContent = '';
    drawAll();
    followOutput();
    if (!terminal(sum.state)) followState();
    loadTrace(0);
  }

  start();
  return () => {
    closed = true;
    streams.forEach((es) => es.close());
    clearTimeout(traceTimer);
  };
}
