// The trace as a waterfall: one row per span, indented under its parent,
// its bar placed on the job's timeline (SVG; text only as text nodes).
import {fmtMS, h, s} from './dom.js';

const ROW = 22, LABEL = 300, WIDTH = 980, PAD = 4;

// order returns the spans depth-first, children by start, with their depth.
function order(spans) {
  const byID = new Map(spans.map((sp) => [sp.span_id, sp]));
  const kids = new Map();
  const roots = [];
  for (const sp of spans) {
    const p = sp.parent_id || sp.parent_span_id;
    if (p && byID.has(p)) {
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(sp);
    } else {
      roots.push(sp);
    }
  }
  const byStart = (a, b) => Date.parse(a.start) - Date.parse(b.start);
  const out = [];
  const walk = (sp, depth) => {
    out.push([sp, depth]);
    (kids.get(sp.span_id) || []).sort(byStart).forEach((k) => walk(k, depth + 1));
  };
  roots.sort(byStart).forEach((r) => walk(r, 0));
  return out;
}

export function waterfall(spans) {
  const rows = order(spans);
  const t0 = Math.min(...spans.map((sp) => Date.parse(sp.start)));
  const t1 = Math.max(...spans.map((sp) => Date.parse(sp.end) || Date.parse(sp.start)));
  const total = Math.max(1, t1 - t0);
  const scale = (WIDTH - LABEL - PAD * 2) / total;
  const height = rows.length * ROW + 24;
  const svg = s('svg', {class: 'waterfall', id: 'waterfall', width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}`,
    role: 'img', 'aria-label': 'trace waterfall'});
  // The time axis: four ticks.
  for (let i = 0; i <= 4; i++) {
    const x = LABEL + PAD + ((WIDTH - LABEL - PAD * 2) * i) / 4;
    svg.append(s('line', {x1: x, x2: x, y1: 0, y2: height - 18, class: 'tick'}),
      s('text', {x, y: height - 4, class: 'axis', 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle'}, fmtMS((total * i) / 4)));
  }
  rows.forEach(([sp, depth], i) => {
    const start = Date.parse(sp.start);
    const end = Date.parse(sp.end) || start;
    const y = i * ROW;
    const x = LABEL + PAD + (start - t0) * scale;
    const w = Math.max(2, (end - start) * scale);
    const attrs = sp.attrs || sp.attributes || {};
    const tip = [sp.name + ' · ' + fmtMS(end - start) + (sp.status ? ' · ' + sp.status : '')]
      .concat(Object.entries(attrs).map(([k, v]) => k + '=' + (typeof v === 'object' ? JSON.stringify(v) : v)))
      .join('\n');
    const label = sp.name + (attrs['paddock.attempt'] ? ' #' + attrs['paddock.attempt'] : '');
    svg.append(s('g', {class: 'span ' + (sp.status === 'error' ? 'st-error' : 'st-ok'), 'data-name': sp.name},
      s('title', {}, tip),
      s('text', {x: 4 + depth * 12, y: y + 15, class: 'name'}, label.length > 40 ? label.slice(0, 39) + '…' : label),
      s('rect', {x, y: y + 4, width: w, height: ROW - 8, rx: 2}),
      w > 70 ? s('text', {x: x + w - 4, y: y + 15, class: 'dur in', 'text-anchor': 'end'}, fmtMS(end - start))
        : s('text', {x: x + w + 4 > WIDTH - 60 ? x - 4 : x + w + 4, y: y + 15, class: 'dur',
          'text-anchor': x + w + 4 > WIDTH - 60 ? 'end' : 'start'}, fmtMS(end - start))));
  });
  return h('div', {class: 'scroll'}, svg);
}
