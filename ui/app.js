// SPDX-License-Identifier: Apache-2.0
// The sysom web UI: one page, views chosen by the URL fragment (#view=NAME&param=...), so
// every view and its filters can be linked to. No build step: plain ES modules.
import { ApiError, onUnauthorized, setToken, takeTokenFromFragment, token } from './lib/api.js';
import { el } from './lib/dom.js';
import { fleetView } from './views/fleet.js';
import { flamegraphView } from './views/flamegraph.js';
import { jobView } from './views/job.js';
import { diagnosisView } from './views/diagnosis.js';

const views = { fleet: fleetView, flamegraph: flamegraphView, job: jobView, diagnosis: diagnosisView };
const main = document.getElementById('main');
const status = document.getElementById('status');
const tokenForm = document.getElementById('token-form');
const tokenMessage = document.getElementById('token-message');
let generation = 0;

export function fragmentParams() {
  return new URLSearchParams(location.hash.replace(/^#/, ''));
}

// Sets the fragment to `params` (an object or URLSearchParams; empty values left out).
export function navigate(params) {
  const p = new URLSearchParams();
  for (const [k, v] of params instanceof URLSearchParams ? params.entries() : Object.entries(params))
    if (v !== undefined && v !== null && v !== '') p.set(k, v);
  location.hash = p.toString();
}

function showStatus(text, kind) {
  status.textContent = text || '';
  status.className = kind || '';
}

function showTokenForm(message) {
  tokenMessage.textContent = message;
  tokenForm.hidden = false;
  document.getElementById('token-input').focus();
}

onUnauthorized((err, hadToken) => {
  showTokenForm(hadToken
    ? `The server refused the API token (401: ${err.message}). Enter a valid one.`
    : 'This server needs an API token (a read credential).');
});

tokenForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = document.getElementById('token-input');
  setToken(input.value.trim());
  input.value = '';
  tokenForm.hidden = true;
  render();
});

document.getElementById('forget-token').addEventListener('click', () => {
  setToken('');
  showStatus('Token forgotten for this tab.');
});

async function render() {
  const params = takeTokenFromFragment(fragmentParams());
  const name = views[params.get('view')] ? params.get('view') : 'fleet';
  const mine = ++generation;
  for (const a of document.querySelectorAll('nav a'))
    a.classList.toggle('active', a.dataset.view === name);
  document.title = `sysom · ${name}`;
  const root = el('div', { class: 'view', id: 'view-' + name });
  main.replaceChildren(root);
  showStatus('Loading…', 'loading');
  try {
    await views[name](root, params, { navigate, stale: () => mine !== generation });
    if (mine === generation) showStatus('');
    if (token()) tokenForm.hidden = true;
  } catch (e) {
    if (mine !== generation) return;
    if (e instanceof ApiError) {
      showStatus(e.status ? `Error ${e.status}: ${e.message}` : e.message, 'error');
    } else {
      showStatus(`Error: ${e.message}`, 'error');
      throw e;
    }
  } finally {
    // For the browser tests: which render finished, and what the status line said.
    if (mine === generation) window.sysomRendered = { view: name, n: mine, status: status.textContent };
  }
}

window.addEventListener('hashchange', render);
render();
