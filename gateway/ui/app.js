// The dashboard's shell: login, the router (#/jobs, #/jobs/<id>, #/fleet,
// #/queues; #/operator for the operator's login, which sees only that
// page) and the page in view. A page is a function (root, params) that
// draws into root and returns its cleanup (it closes its event streams).
import {api, onUnauthorized} from './api.js';
import {fill, status} from './dom.js';
import {jobsPage} from './jobs.js';
import {jobPage} from './job.js';
import {fleetPage, queuesPage} from './fleet.js';
import {operatorPage} from './operator.js';

const $ = (id) => document.getElementById(id);
let cleanup = null;
let session = null;

function route() {
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const root = fill($('page'));
  status('');
  if (!session) return;
  const [path, qs] = (location.hash.replace(/^#/, '') || '/jobs').split('?');
  const params = new URLSearchParams(qs || '');
  const parts = path.split('/').filter(Boolean);
  // The operator token opens the operator's page only.
  const page = session.operator ? 'operator' : parts[0] || 'jobs';
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === page));
  if (page === 'jobs' && parts.length > 1) {
    cleanup = jobPage(root, decodeURIComponent(parts.slice(1).join('/')));
  } else if (page === 'fleet') {
    cleanup = fleetPage(root);
  } else if (page === 'operator') {
    cleanup = operatorPage(root);
  } else if (page === 'queues') {
    cleanup = queuesPage(root);
  } else {
    cleanup = jobsPage(root, params);
  }
}

function showLogin(message) {
  session = null;
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  fill($('page'));
  $('login').hidden = false;
  $('nav').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  $('login-error').textContent = message || '';
  $('login-token').focus();
}

function loggedIn(info) {
  session = info;
  $('login').hidden = true;
  $('nav').hidden = false;
  $('logout').hidden = false;
  $('who').textContent = info.operator ? 'operator' : 'tenant ' + info.tenant;
  document.querySelectorAll('#nav a').forEach((a) => { a.hidden = (a.dataset.page === 'operator') !== Boolean(info.operator); });
  route();
}

async function login(ev) {
  ev.preventDefault();
  const input = $('login-token');
  $('login-error').textContent = '';
  try {
    const info = await api('POST', '/ui/login', {token: input.value.trim()});
    input.value = '';
    loggedIn(info);
  } catch (e) {
    $('login-error').textContent = e.message;
  }
}

async function logout() {
  try {
    await api('POST', '/ui/logout');
  } catch (e) {
    status(e.message, 'error');
  }
  showLogin('logged out');
}

async function start() {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', route);
  onUnauthorized(() => showLogin('your login ended (the token is unknown or was revoked): log in again'));
  try {
    const info = await api('GET', '/ui/session');
    if (info && (info.tenant || info.operator)) loggedIn(info);
    else showLogin(info && info.message);
  } catch (e) {
    showLogin(e.message);
  }
}

start();
