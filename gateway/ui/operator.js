// The operator's fleet page (GET /v1/operator/fleet, with the operator
// token only): per host its workers, concurrency, running jobs, warm pool
// and heartbeat age; every worker; Redis's health and role and what the
// Sentinels name; the NATS servers, the meta leader and each stream's
// leader and followers; the failovers seen and the runs rescued. It names
// hosts: a tenant's login never reaches it (the API answers 403). The
// page polls every 5 s.
import {api} from './api.js';
import {fmtTime, h} from './dom.js';
import {poller, table} from './fleet.js';

function health(ok, text) {
  return h('span', {class: ok ? 'ok' : 'error'}, ok ? 'ok' : 'NOT OK', text ? ': ' + text : '');
}

function redisPart(r) {
  const rows = [{role: r.role || '', connected_replicas: r.connected_replicas || 0, master_link: r.master_link || '', replid: r.replid || ''}];
  return h('section', {id: 'redis'}, h('h2', {}, 'Redis ', health(r.ok, r.error)),
    r.ok ? table(rows, 'redis-role') : null,
    (r.replicas || []).length ? h('ul', {}, r.replicas.map((x) => h('li', {}, 'replica ' + x))) : null,
    (r.sentinels || []).length ? table(r.sentinels, 'sentinels') : null);
}

function streamRows(streams) {
  return (streams || []).map((st) => ({
    name: st.name, leader: st.leader || 'NONE', messages: st.messages,
    followers: (st.replicas || []).map((r) => r.name + (r.offline ? ' OFFLINE' : r.current ? ' current' : ' LAGGING ' + r.lag + ' ops')).join(', '),
  }));
}

function natsPart(n) {
  return h('section', {id: 'nats'}, h('h2', {}, 'NATS ', health(n.ok, n.error)),
    h('p', {}, 'meta leader: ' + (n.meta_leader || '?')),
    table(n.servers, 'nats-servers'),
    h('h3', {}, 'Streams'), table(streamRows(n.streams), 'streams'),
    n.streams_partial ? h('p', {class: 'muted'}, 'more streams than shown') : null);
}

function draw(f) {
  const fo = f.failovers || {};
  return [
    h('h1', {}, 'Fleet (operator)'),
    h('section', {}, h('h2', {}, 'Hosts'), table(f.hosts, 'hosts')),
    h('section', {}, h('h2', {}, 'Workers'), table(f.workers, 'op-workers')),
    redisPart(f.redis || {}),
    natsPart(f.nats || {}),
    h('section', {id: 'failovers'}, h('h2', {}, 'Failovers and rescues'),
      h('p', {}, 'Redis master changes: ' + (fo.redis_master_changes || 0) + (fo.redis_last_change ? ' (last ' + fmtTime(fo.redis_last_change) + ')' : '')),
      h('p', {}, 'stream leader changes: ' + (fo.stream_leader_changes || 0) + (fo.stream_last_change ? ' (last ' + fmtTime(fo.stream_last_change) + ')' : '')),
      h('p', {}, 'runs rescued: ' + (f.rescued || 0))),
  ];
}

export function operatorPage(root) {
  return poller(root, '/v1/operator/fleet', draw);
}
