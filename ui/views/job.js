// SPDX-License-Identifier: Apache-2.0
// A training job: the ranks × collective-instance lateness heatmap (each rank's entry minus
// the instance's earliest, from /collectives), its stragglers, the CPU waterline, the GPU
// per-rank table and the job's incidents.
import { getJSON } from '../lib/api.js';
import { el, fmtNum, fmtTime, link, section, table } from '../lib/dom.js';

const CELL_W = 4, CELL_H = 14, LABEL_W = 70;

// Ranks × instances lateness matrix of a /collectives answer (collectives with a rank set
// only; point-to-point calls have no common entry).
export function latenessMatrix(doc) {
  const instances = (doc.instances || []).filter((i) => i.calls && i.calls.length > 1 && !/^(Send|Recv)$/.test(i.op));
  const ranks = [...new Set(instances.flatMap((i) => i.calls.map((c) => c.rank)).filter((r) => r !== null && r !== undefined))].sort((a, b) => a - b);
  const row = new Map(ranks.map((r, i) => [r, i]));
  const cells = ranks.map(() => new Float64Array(instances.length).fill(NaN));
  let max = 0;
  instances.forEach((inst, x) => {
    for (const c of inst.calls) {
      if (!row.has(c.rank)) continue;
      const ms = c.entry_delay_ns / 1e6;
      cells[row.get(c.rank)][x] = ms;
      if (ms > max) max = ms;
    }
  });
  return { instances, ranks, cells, max };
}

function heatmap(m) {
  const wrap = el('div', { class: 'heatmap', id: 'heatmap' });
  if (!m.instances.length) {
    wrap.append(el('p', { class: 'empty' }, 'No collective instance in this time range.'));
    return wrap;
  }
  const width = Math.min(4000, m.instances.length * CELL_W);
  const cw = width / m.instances.length;
  const canvas = el('canvas', { width: width, height: m.ranks.length * CELL_H });
  const g = canvas.getContext('2d');
  const color = d3.scaleSequential(d3.interpolateInferno).domain([m.max || 1, 0]);
  m.cells.forEach((row, y) => row.forEach((ms, x) => {
    g.fillStyle = Number.isNaN(ms) ? '#ddd' : color(ms);
    g.fillRect(x * cw, y * CELL_H, Math.ceil(cw), CELL_H - 1);
  }));
  const tip = el('div', { class: 'heatmap-tip' }, 'hover a cell');
  canvas.addEventListener('mousemove', (ev) => {
    const r = canvas.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) / cw), y = Math.floor((ev.clientY - r.top) / CELL_H);
    const inst = m.instances[x], rank = m.ranks[y];
    if (!inst || rank === undefined) return;
    const ms = m.cells[y][x];
    tip.textContent = `rank ${rank}, ${inst.op} #${inst.seq} on ${inst.comm} at ${fmtTime(inst.first_entry)}: ` +
      (Number.isNaN(ms) ? 'no call' : `${ms.toFixed(3)} ms after the first rank`);
  });
  const labels = el('div', { class: 'heatmap-ranks', style: `width:${LABEL_W}px` },
    m.ranks.map((r) => el('div', { class: 'rank-label', style: `height:${CELL_H}px;line-height:${CELL_H}px` }, `rank ${r}`)));
  const scale = el('p', { class: 'legend' }, `${m.instances.length} instances (oldest left), ${m.ranks.length} ranks; colour: lateness 0 (light) … ${m.max.toFixed(2)} ms (dark); grey: no call.`);
  wrap.append(el('div', { class: 'heatmap-body' }, labels, el('div', { class: 'heatmap-scroll' }, canvas)), tip, scale);
  return wrap;
}

function waterline(doc) {
  const rows = (doc.communicators || []).flatMap((c) => (c.flags || []).map((f) => ({ ...f, comm: c.comm })));
  if (!rows.length)
    return el('p', { class: 'empty' }, `No rank above the waterline (k = ${doc.params?.k}, at least ${doc.params?.min_pp} pp).`);
  const bar = (f) => {
    const max = Math.max(f.pct, f.mean_pct + 3 * (f.std_pct || 0), 1);
    return el('div', { class: 'bar', title: `${f.pct.toFixed(1)}% (others ${f.mean_pct.toFixed(1)} ± ${(f.std_pct || 0).toFixed(1)})` },
      el('div', { class: 'bar-fill', style: `width:${(100 * f.pct) / max}%` }),
      el('div', { class: 'bar-mark', style: `left:${(100 * (f.mean_pct + doc.params.k * (f.std_pct || 0))) / max}%` }));
  };
  return table([
    ['rank', (f) => f.rank], ['function', (f) => f.function],
    ['CPU %', (f) => f.pct.toFixed(1)], ['others mean %', (f) => f.mean_pct.toFixed(1)],
    ['σ', (f) => (f.std_pct || 0).toFixed(2)], ['', bar], ['communicator', (f) => f.comm],
  ], rows, { class: 'waterline' });
}

function gpuTable(doc, job) {
  if (!doc.processes || !doc.processes.length) return el('p', { class: 'empty' }, 'No GPU timing from this job (CUPTI library or NCCL profiler plugin not loaded).');
  return table([
    ['rank', (p) => p.rank], ['host', (p) => p.hostname], ['pid', (p) => p.pid],
    ['GPU kernel time', (p) => `${fmtNum(p.gpu_kernel_ns / 1e6, 2)} ms`],
    ['kernels run', (p) => fmtNum(p.kernel_executions)],
    ['× median', (p) => {
      const r = p.gpu_time_ratio_to_median;
      return r === null || r === undefined ? null : el('span', { class: r > 1.15 ? 'bad' : '' }, r.toFixed(2));
    }],
    ['top kernel', (p) => p.kernels?.[0]?.name],
    ['flame graph', (p) => link({ view: 'flamegraph', kind: 'gpu-time', job, rank: p.rank }, 'GPU time')],
  ], doc.processes, { class: 'gpu' });
}

export async function jobView(root, params, ctx) {
  const job = params.get('job');
  if (!job) {
    const jobs = await getJSON('/api/v1/jobs', { limit: 200 });
    root.append(section('Jobs', jobs.jobs.length
      ? el('ul', null, jobs.jobs.map((j) => el('li', null, link({ view: 'job', job: j.job }, j.job), ` — ${j.ranks} ranks`)))
      : el('p', { class: 'empty' }, 'No training job seen.')));
    return;
  }
  const range = { from: params.get('from') || '-1h', to: params.get('to') || 'now' };
  const enc = '/api/v1/jobs/' + encodeURIComponent(job);
  const [detail, coll, strag, water, gpu, diags] = await Promise.all([
    getJSON(enc),
    getJSON(enc + '/collectives', { ...range, limit: params.get('limit') || 500 }),
    getJSON(enc + '/stragglers', { ...range, diagnose: 0 }),
    getJSON(enc + '/waterline', range).catch((e) => ({ error: e.message })),
    getJSON(enc + '/gpu', range),
    getJSON('/api/v1/diagnoses', { job, from: params.get('from') || '-1d', limit: 100 }),
  ]);
  if (ctx.stale()) return;
  const m = latenessMatrix(coll);
  const ranks = [...new Set(detail.ranks.map((r) => r.rank))];
  root.append(
    el('h1', null, `Job ${job}`),
    el('p', null, `${ranks.length} ranks${detail.world_size ? ' of ' + detail.world_size : ''} on ${detail.nodes.length} nodes (${detail.nodes.map((n) => n.hostname).join(', ')}); `,
      link({ view: 'flamegraph', job, ...range }, 'CPU flame graph'), ' · ',
      link({ view: 'flamegraph', job, kind: 'gpu-time', ...range }, 'GPU time'), ' · ',
      link({ view: 'flamegraph', job, kind: 'gpu-launch', ...range }, 'GPU launches')),
    section('Straggler timeline: lateness per collective instance', heatmap(m)),
    section('Stragglers', strag.stragglers.length
      ? table([
        ['rank', (s) => s.rank], ['host', (s) => s.hostname], ['persistence', (s) => s.persistence],
        ['max excess', (s) => `${s.max_excess_ms.toFixed(2)} ms`],
        ['compare', (s) => {
          const healthy = ranks.find((r) => r !== s.rank && !strag.stragglers.some((x) => x.rank === r));
          return healthy === undefined ? null : link({ view: 'flamegraph', diff: 'ranks', job, a: healthy, b: s.rank, ...range }, `diff vs rank ${healthy}`);
        }],
      ], strag.stragglers, { class: 'stragglers' })
      : el('p', { class: 'empty' }, `No straggler${strag.iteration_ms ? ` (iteration ${strag.iteration_ms.toFixed(1)} ms)` : ''}.`)),
    section('CPU waterline', water.error ? el('p', { class: 'error' }, water.error) : waterline(water)),
    section('GPU per rank', gpuTable(gpu, job)),
    section('Incidents', diags.diagnoses.length
      ? table([
        ['id', (d) => link({ view: 'diagnosis', id: d.id }, '#' + d.id)], ['status', (d) => d.status],
        ['rank', (d) => d.rank], ['layer', (d) => d.layer], ['summary', (d) => d.summary],
        ['opened', (d) => fmtTime(d.opened)],
      ], diags.diagnoses, { class: 'incidents' })
      : el('p', { class: 'empty' }, 'No incident.')));
}
