// The /v1 API, as the logged-in browser: the session cookie authenticates,
// and every request but a GET carries the CSRF header the gateway wants.

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const listeners = new Set();

// onUnauthorized(fn): fn runs when a request answers 401 (logged out, or
// the token was revoked).
export function onUnauthorized(fn) {
  listeners.add(fn);
}

export async function api(method, path, body) {
  const headers = {Accept: 'application/json'};
  if (method !== 'GET') headers['X-Paddock-CSRF'] = '1';
  const init = {method, headers, credentials: 'same-origin', cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, 'network', 'the gateway did not answer (' + e.message + ')');
  }
  if (resp.status === 204) return null;
  let data = null;
  const text = await resp.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      throw new APIError(resp.status, 'bad_answer', 'the gateway answered ' + resp.status + ' with something that is not JSON');
    }
  }
  if (!resp.ok) {
    const e = (data && data.error) || {};
    if (resp.status === 401 && !path.startsWith('/ui/')) listeners.forEach((fn) => fn());
    throw new APIError(resp.status, e.code || 'http_' + resp.status, e.message || 'HTTP ' + resp.status);
  }
  return data;
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}
