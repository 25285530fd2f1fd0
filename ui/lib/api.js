// SPDX-License-Identifier: Apache-2.0
// The JSON API (docs/http-api.md) with the bearer token of this tab. The token comes from the
// token form or once from a `#token=...` fragment (removed from the address at once); it is
// kept in sessionStorage and sent only in the Authorization header, never in a URL.
const KEY = 'sysom-token';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

// Takes `token` out of the fragment parameters (and the address bar); returns the rest.
export function takeTokenFromFragment(params) {
  const t = params.get('token');
  if (t === null) return params;
  setToken(t.trim());
  params.delete('token');
  const rest = params.toString();
  history.replaceState(null, '', location.pathname + (rest ? '#' + rest : ''));
  return params;
}

// Listeners told when the server refuses the token (401): the app shows the token form.
const unauthorizedListeners = [];
export function onUnauthorized(fn) {
  unauthorizedListeners.push(fn);
}

async function request(path, params) {
  const qs = params ? new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== '')).toString() : '';
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  let resp;
  try {
    resp = await fetch(path + (qs ? '?' + qs : ''), { headers, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, `the server did not answer (${e.message})`);
  }
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    try {
      const body = await resp.json();
      if (body && body.error) message = body.error;
    } catch (e) { /* not JSON */ }
    const err = new ApiError(resp.status, message);
    if (resp.status === 401) unauthorizedListeners.forEach((fn) => fn(err, !!t));
    throw err;
  }
  return resp;
}

export async function getJSON(path, params) {
  return (await request(path, params)).json();
}

export async function getText(path, params) {
  return (await request(path, params)).text();
}

// The flame graph kinds the server knows: it lists them in the 400 answer to an unknown one
// ("parameter 'kind' must be cpu, gpu-launch or gpu-time"), so kinds added later show up.
let kindsCache = null;
export async function flamegraphKinds() {
  if (kindsCache) return kindsCache;
  const fallback = ['cpu', 'gpu-launch', 'gpu-time'];
  try {
    await request('/api/v1/flamegraph', { kind: '?', format: 'json', limit: 1 });
  } catch (e) {
    const m = e.status === 400 && /must be (.+)$/.exec(e.message);
    if (m) {
      const kinds = m[1].split(/,\s*|\s+or\s+/).map((s) => s.trim()).filter((s) => /^[a-z0-9-]+$/.test(s));
      if (kinds.length) return (kindsCache = kinds);
    }
    if (e.status === 401) throw e;
  }
  return fallback;
}
