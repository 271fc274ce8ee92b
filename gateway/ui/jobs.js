// The jobs page: a table of GET /v1/jobs, kept live by GET /v1/events
// (one "job" event per changed job), with filters, an id search, the
// "older" button (next_cursor) and a submit box.
import {api, query} from './api.js';
import {REASONS, STATES, badge, between, fill, fmtMS, fmtTime, h, jobHref, status} from './dom.js';

const PAGE = 50;

export function jobsPage(root, params) {
  const f = {
    state: params.get('state') || '', reason: params.get('reason') || '', queue: params.get('queue') || '',
    label: params.get('label') || '', q: params.get('q') || '',
  };
  const rows = new Map(); // id → {tr, sum}
  let cursor = '';
  let es = null;
  let gen = 0; // drops answers of a superseded load

  const tbody = h('tbody', {id: 'jobs-body'});
  const empty = h('p', {class: 'muted', id: 'jobs-empty', hidden: true}, 'No jobs match.');
  const older = h('button', {type: 'button', id: 'older', hidden: true}, 'Older');
  const live = h('span', {class: 'live', id: 'live'}, 'connecting…');

  const select = (name, values) => h('select', {name, 'aria-label': name},
    h('option', {value: ''}, 'any ' + name), values.map((v) => h('option', {value: v}, v)));
  const form = h('form', {class: 'filters', id: 'filters'},
    select('state', STATES), select('reason', Object.keys(REASONS)),
    h('input', {name: 'queue', placeholder: 'queue', size: 10}),
    h('input', {name: 'label', placeholder: 'label k=v', size: 14}),
    h('input', {name: 'q', placeholder: 'id starts with…', size: 18, type: 'search'}),
    h('button', {type: 'submit'}, 'Filter'));
  for (const [k, v] of Object.entries(f)) form.elements[k].value = v;

  const cmd = h('input', {name: 'command', placeholder: 'a command to run, e.g. echo hello', class: 'grow', id: 'submit-command'});
  const submit = h('form', {class: 'submit', id: 'submit-form'}, cmd, h('button', {type: 'submit', id: 'submit-button'}, 'Submit'));

  fill(root,
    h('div', {class: 'bar'}, h('h1', {}, 'Jobs'), live),
    form,
    h('table', {class: 'jobs', id: 'jobs'},
      h('thead', {}, h('tr', {}, ['id', 'state', 'reason', 'queue', 'command', 'labels', 'queued', 'took', 'runs', 'exit']
        .map((c) => h('th', {}, c)))),
      tbody),
    empty, older,
    h('details', {class: 'submit-box', id: 'submit-box'}, h('summary', {}, 'Submit a job'), submit));

  function matches(j) {
    if (f.state && j.state !== f.state) return false;
    if (f.reason && j.reason !== f.reason) return false;
    if (f.queue && (j.queue || 'default') !== f.queue) return false;
    if (f.q && !j.id.startsWith(f.q)) return false;
    if (f.label) {
      const [k, v] = f.label.split('=');
      const labels = j.labels || {};
      if (!(k in labels) || (v !== undefined && labels[k] !== v)) return false;
    }
    return true;
  }

  function cells(j) {
    const labels = Object.entries(j.labels || {}).map(([k, v]) => h('span', {class: 'label'}, k + '=' + v));
    return [
      h('td', {class: 'id'}, h('a', {href: jobHref(j.id)}, j.id)),
      h('td', {}, badge(j.state)),
      h('td', {title: REASONS[j.reason] || ''}, j.reason || ''),
      h('td', {}, j.queue || ''),
      h('td', {class: 'cmd'}, h('code', {}, j.command || '')),
      h('td', {}, labels),
      h('td', {class: 'num'}, fmtTime(j.queued_at)),
      h('td', {class: 'num'}, j.started_at ? fmtMS(between(j.started_at, j.finished_at)) : ''),
      h('td', {class: 'num'}, j.runs || ''),
      h('td', {class: 'num'}, j.exit_code ?? ''),
    ];
  }

  function put(j, where) {
    let row = rows.get(j.id);
    if (row) {
      if (row.sum.updated_at && j.updated_at && Date.parse(j.updated_at) < Date.parse(row.sum.updated_at)) return;
      row.sum = j;
      fill(row.tr, cells(j));
      row.tr.dataset.state = j.state;
      return;
    }
    const tr = h('tr', {'data-id': j.id, 'data-state': j.state}, cells(j));
    row = {tr, sum: j};
    rows.set(j.id, row);
    if (where === 'end') {
      tbody.append(tr);
    } else {
      // Newest first: before the first row queued earlier.
      const t = Date.parse(j.queued_at) || Date.now();
      const after = [...rows.values()].find((r) => r !== row && r.tr.isConnected && (Date.parse(r.sum.queued_at) || 0) < t);
      if (after) tbody.insertBefore(tr, after.tr);
      else if (!cursor) tbody.append(tr);
      else { rows.delete(j.id); return; } // it belongs to an older page
    }
    empty.hidden = true;
  }

  async function load(more) {
    const my = ++gen;
    try {
      const page = await api('GET', '/v1/jobs' + query({...f, cursor: more ? cursor : '', limit: PAGE}));
      if (my !== gen) return;
      if (!more) {
        rows.clear();
        tbody.replaceChildren();
      }
      for (const j of page.jobs || []) put(j, 'end');
      cursor = page.next_cursor || '';
      older.hidden = !cursor;
      empty.hidden = rows.size > 0 || !!cursor;
      status('');
    } catch (e) {
      status('listing jobs failed: ' + e.message, 'error');
    }
  }

  function follow() {
    es = new EventSource('/v1/events');
    es.addEventListener('open', () => { live.textContent = 'live'; live.className = 'live on'; });
    es.addEventListener('job', (ev) => {
      const j = JSON.parse(ev.data);
      if (rows.has(j.id) || matches(j)) put(j);
    });
    es.addEventListener('error', () => {
      live.textContent = es.readyState === EventSource.CLOSED ? 'not live (reload to retry)' : 'reconnecting…';
      live.className = 'live';
    });
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    for (const k of Object.keys(f)) f[k] = form.elements[k].value.trim();
    const qs = query(f);
    history.replaceState(null, '', '#/jobs' + qs);
    load(false);
  });
  form.addEventListener('change', (ev) => {
    if (ev.target.tagName === 'SELECT') form.requestSubmit();
  });
  older.addEventListener('click', () => load(true));
  submit.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const command = cmd.value.trim();
    if (!command) return;
    try {
      const acc = await api('POST', '/v1/jobs', {command});
      cmd.value = '';
      status('submitted ' + acc.id);
      // The list shows a job once a scheduler took it; until then, the
      // answer's "queued" (any event of the job replaces it).
      const now = new Date().toISOString();
      if (matches({id: acc.id, state: 'queued', command})) {
        put({id: acc.id, tenant: acc.tenant, state: acc.state || 'queued', command, queued_at: now, updated_at: '1970-01-01T00:00:00Z'});
      }
    } catch (e) {
      status('submit failed: ' + e.message, 'error');
    }
  });

  load(false);
  follow();
  return () => {
    gen++;
    if (es) es.close();
  };
}
