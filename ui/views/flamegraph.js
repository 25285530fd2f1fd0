// SPDX-License-Identifier: Apache-2.0
// Flame graphs: any kind the server lists, filters (node, job, rank, pid, comm, time range,
// stack limit), zoom (click a frame), search, and differential flame graphs of two ranks of a
// job (/api/v1/flamegraph/diff) or of two time ranges (two folded profiles).
import { flamegraphKinds, getJSON, getText } from '../lib/api.js';
import { el, fmtNum } from '../lib/dom.js';
import { diffTree, mergeFolded, parseFolded, renderFlame, treeFromJSON } from '../lib/flame.js';

const FIELDS = [
  ['node', 'node (host or id)'], ['job', 'job'], ['rank', 'rank'], ['pid', 'pid'],
  ['comm', 'comm'], ['from', 'from'], ['to', 'to'], ['limit', 'stacks'],
];

// A job rank as the flame graph's node and pid filters: its latest process incarnation.
async function rankFilter(job, rank) {
  const detail = await getJSON('/api/v1/jobs/' + encodeURIComponent(job));
  const matches = detail.ranks.filter((r) => String(r.rank) === String(rank));
  if (!matches.length) throw new Error(`job ${job} has no rank ${rank}`);
  matches.sort((x, y) => Date.parse(y.last_seen) - Date.parse(x.last_seen));
  return { node: matches[0].node_id, pid: matches[0].pid };
}

function filterForm(params, kinds, ctx) {
  const kind = el('select', { name: 'kind' }, kinds.map((k) => el('option', { value: k, selected: k === (params.get('kind') || 'cpu') }, k)));
  const diff = el('select', { name: 'diff' },
    el('option', { value: '' }, 'no'),
    el('option', { value: 'ranks', selected: params.get('diff') === 'ranks' }, 'two ranks (a → b)'),
    el('option', { value: 'time', selected: params.get('diff') === 'time' }, 'two time ranges'));
  const input = (name, label, ph) => el('label', null, label,
    el('input', { name, value: params.get(name) || '', placeholder: ph || '', size: 12 }));
  const form = el('form', { class: 'filters', id: 'flame-filters' },
    el('label', null, 'kind ', kind),
    FIELDS.map(([n, l]) => input(n, l + ' ', n === 'from' ? '-1h' : n === 'to' ? 'now' : '')),
    el('label', null, 'differential ', diff),
    input('a', 'rank a ', ''), input('b', 'rank b ', ''),
    input('from2', 'from (b) ', ''), input('to2', 'to (b) ', ''),
    el('button', { type: 'submit' }, 'Show'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = { view: 'flamegraph' };
    for (const [k, v] of new FormData(form).entries()) if (v) p[k] = v;
    ctx.navigate(p);
  });
  return form;
}

export async function flamegraphView(root, params, ctx) {
  const kinds = await flamegraphKinds();
  const kind = params.get('kind') || 'cpu';
  const diff = params.get('diff') || '';
  const details = el('div', { class: 'details', id: 'flame-details' });
  const graph = el('div', { class: 'flame', id: 'flame' });
  const info = el('p', { class: 'render-info', id: 'render-info' });
  const search = el('input', { type: 'search', id: 'flame-search', placeholder: 'search frames' });
  const reset = el('button', { type: 'button' }, 'Reset zoom');
  root.append(filterForm(params, kinds, ctx),
    el('div', { class: 'toolbar' }, search, reset, info), details, graph);

  const q = {};
  for (const k of ['node', 'job', 'pid', 'comm', 'from', 'to', 'limit']) if (params.get(k)) q[k] = params.get(k);
  q.kind = kind;
  const t0 = performance.now();
  let tree, unit = 'samples', labels, stacks;
  if (diff === 'ranks') {
    if (!q.job || !params.get('a') || !params.get('b')) throw new Error('a differential of two ranks needs job, rank a and rank b');
    const text = await getText('/api/v1/flamegraph/diff', { job: q.job, a: params.get('a'), b: params.get('b'), from: q.from, to: q.to, limit: q.limit });
    const rows = parseFolded(text, 2);
    stacks = rows.length;
    tree = diffTree(rows);
    labels = ['rank ' + params.get('a'), 'rank ' + params.get('b')];
  } else {
    if (params.get('rank')) {
      if (!q.job) throw new Error('a rank filter needs the job');
      Object.assign(q, await rankFilter(q.job, params.get('rank')));
    }
    if (diff === 'time') {
      const qb = { ...q, from: params.get('from2'), to: params.get('to2') };
      if (!qb.from) throw new Error('a differential of two time ranges needs from (b)');
      const [ta, tb] = await Promise.all([
        getText('/api/v1/flamegraph', { ...q, format: 'folded' }),
        getText('/api/v1/flamegraph', { ...qb, format: 'folded' })]);
      const rows = mergeFolded(ta, tb);
      stacks = rows.length;
      tree = diffTree(rows);
      labels = [`${q.from || '-1h'}..${q.to || 'now'}`, `${qb.from}..${qb.to || 'now'}`];
    } else {
      const doc = await getJSON('/api/v1/flamegraph', { ...q, format: 'json' });
      unit = doc.unit || 'samples';
      stacks = doc.stacks.length;
      tree = treeFromJSON(doc);
      if (doc.truncated) details.textContent = `Showing the ${fmtNum(stacks)} largest stacks of ${fmtNum(doc.total)} ${unit} (raise "stacks").`;
    }
  }
  if (ctx.stale()) return;
  const fetched = performance.now();
  if (!tree.value) {
    graph.append(el('p', { class: 'empty' }, diff ? 'Neither side has samples for these filters.' : `No ${kind} data for these filters and time range.`));
    info.textContent = '0 stacks';
    window.sysomLastRender = { stacks: 0, frames: 0, fetchMs: fetched - t0, renderMs: 0 };
    return;
  }
  if (diff) {
    graph.before(el('p', { class: 'legend' },
      `Widths: ${labels[1]} (${fmtNum(tree.totals.b)} samples); colours: change of share from ${labels[0]} (${fmtNum(tree.totals.a)} samples) — `,
      el('span', { class: 'more' }, 'red: more'), ', ', el('span', { class: 'less' }, 'blue: less'), '.'));
  }
  const chart = renderFlame(graph, tree, { unit, diff: !!diff, details, labels });
  // First paint: the frame after the chart's DOM is in place.
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const painted = performance.now();
  const stat = { stacks, frames: tree.nodes - 1, fetchMs: fetched - t0, renderMs: painted - fetched, chartMs: chart.renderMs };
  window.sysomLastRender = stat;
  info.textContent = `${fmtNum(stacks)} stacks, ${fmtNum(stat.frames)} frames; fetched in ${stat.fetchMs.toFixed(0)} ms, rendered in ${stat.renderMs.toFixed(0)} ms`;
  search.addEventListener('input', () => chart.search(search.value));
  reset.addEventListener('click', () => chart.resetZoom());
}
