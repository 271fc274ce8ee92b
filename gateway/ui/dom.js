// DOM helpers. Job data (ids, commands, output, labels) is hostile: it only
// ever reaches the page as text nodes or attribute values, never as HTML.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (/^on/i.test(k)) throw new Error('dom: no inline event handlers (' + k + ')');
    el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// h builds an HTML element: h('a', {href: '#/jobs'}, 'Jobs').
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s builds an SVG element.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// clear empties el, then appends children.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  if (isNaN(d)) return '';
  const now = new Date();
  const hms = d.toLocaleTimeString([], {hour12: false});
  return d.toDateString() === now.toDateString() ? hms : d.toISOString().slice(0, 10) + ' ' + hms;
}

export function fmtMS(ms) {
  if (ms === undefined || ms === null || isNaN(ms)) return '';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  const m = Math.floor(ms / 60000);
  return m + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
}

// span returns the milliseconds between two times ("" when either is
// missing); an open end is now.
export function between(from, to) {
  if (!from) return undefined;
  const a = Date.parse(from), b = to ? Date.parse(to) : Date.now();
  return isNaN(a) || isNaN(b) ? undefined : Math.max(0, b - a);
}

export function badge(state) {
  return h('span', {class: 'badge st-' + (state || 'unknown'), 'data-state': state || ''}, state || '?');
}

// status shows a line in the footer (kind: '', 'error').
export function status(text, kind) {
  const el = document.getElementById('status');
  if (!el) return;
  el.textContent = text || '';
  el.className = 'status' + (kind ? ' ' + kind : '');
}

export function jobHref(id) {
  return '#/jobs/' + encodeURIComponent(id);
}

// The reasons' meanings (docs/job-contract.md), shown beside an attempt.
export const REASONS = {
  ok: 'the command exited 0',
  exit_nonzero: 'the command exited non-zero; healing was off, found no repair, or ran out of attempts',
  timeout: 'a command ran past its timeout, or the job past its session; every process was killed',
  oom: 'the kernel OOM killer killed a process at the memory limit',
  pids_limit: 'the job hit its pids limit (a fork was refused), e.g. a fork bomb',
  output_cap: 'the job produced more output than its cap allows',
  fsize: 'a write went past the file-size limit, or the volume grew past max_bytes',
  signal: 'the command died of a signal (SIGSEGV, SIGABRT, a SIGKILL from inside, …)',
  lease_lost: 'the volume lease was lost while it ran; the container was killed (safe to resubmit)',
  canceled: 'the job was canceled',
  rejected: 'the spec was invalid; nothing ran',
  infra: 'Paddock itself failed (engine, Redis, NATS, the worker); usually safe to resubmit',
};

export const STATES = ['queued', 'running', 'succeeded', 'failed', 'rejected', 'canceled', 'infra'];

export function terminal(state) {
  return ['succeeded', 'failed', 'rejected', 'canceled', 'infra'].includes(state);
}
