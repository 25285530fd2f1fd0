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

// The flame graph kinds this page knows; the server may know more (a kind can be typed: an
// unknown one is answered with a 400 that lists the server's kinds).
// off-cpu: time threads spent blocked; wall: on-CPU + off-CPU time of one process (pid, or job
// and rank; the server answers 400 for anything wider).
export const FLAME_KINDS = ['cpu', 'off-cpu', 'wall', 'gpu-launch', 'gpu-time'];
export const KIND_UNITS = {
  cpu: 'samples', 'off-cpu': 'µs', wall: 'µs', 'gpu-launch': 'launches', 'gpu-time': 'ns',
};
