// SPDX-License-Identifier: Apache-2.0
// A diagnosis (incident): its summary, action and evidence, and the flame graphs behind it:
// a straggler's CPU profile against the healthy rank it was compared with (differential),
// its GPU time; a regression's current profile against the baseline (two time ranges); a
// hang's or stall's ranks with their cause classes and links to their off-CPU flame graphs.
// Alerts link here (generatorURL = public URL + /ui/#view=diagnosis&id=N).
import { getJSON, getText } from '../lib/api.js';
import { el, fmtNum, fmtTime, link, section, table } from '../lib/dom.js';
import { diffTree, mergeFolded, parseFolded, renderFlame } from '../lib/flame.js';

function list(diags) {
  return diags.length
    ? table([
      ['id', (d) => link({ view: 'diagnosis', id: d.id }, '#' + d.id)], ['status', (d) => d.status],
      ['severity', (d) => d.severity], ['job', (d) => link({ view: 'job', job: d.job }, d.job)],
      ['kind', (d) => d.kind], ['rank', (d) => d.rank], ['summary', (d) => d.summary],
      ['opened', (d) => fmtTime(d.opened)], ['resolved', (d) => fmtTime(d.resolved)],
    ], diags, { class: 'incidents' })
    : el('p', { class: 'empty' }, 'No incident in the last 7 days.');
}

function flameSection(title, tree, labels) {
  const details = el('div', { class: 'details' });
  const graph = el('div', { class: 'flame' });
  const s = section(title, el('p', { class: 'legend' },
    `Widths: ${labels[1]}; colours: change of share from ${labels[0]} — `,
    el('span', { class: 'more' }, 'red: more'), ', ', el('span', { class: 'less' }, 'blue: less'), '.'), details, graph);
  return { s, draw: () => (tree.value ? renderFlame(graph, tree, { diff: true, details, labels })
    : graph.append(el('p', { class: 'empty' }, 'No samples on either side.'))) };
}

function cpuEvidence(cpu) {
  if (!cpu) return null;
  return el('div', null,
    el('p', null, `CPU samples: straggler ${fmtNum(cpu.straggler_samples)}, rank ${cpu.compared_with_rank} ${fmtNum(cpu.healthy_samples)}` +
      (cpu.enough_samples === false ? ' (too few to conclude)' : '')),
    cpu.functions && cpu.functions.length ? table([
      ['function', (f) => f.function], ['straggler %', (f) => f.straggler_pct?.toFixed(1)],
      ['healthy %', (f) => f.healthy_pct?.toFixed(1)], ['Δ pp', (f) => f.delta_pp?.toFixed(1)],
      ['z', (f) => (f.z === null || f.z === undefined ? null : f.z.toFixed(1))],
    ], cpu.functions, { class: 'cpu-functions' }) : null);
}

function gpuEvidence(gpu) {
  if (!gpu) return null;
  return el('div', null,
    el('p', null, `GPU layer: ${gpu.verdict}${gpu.slowdown ? `, slowdown ${gpu.slowdown.toFixed(2)}×` : ''}`),
    gpu.kernels && gpu.kernels.length ? table([
      ['kernel', (k) => k.name || k.kernel], ['ratio', (k) => (k.ratio ?? k.slowdown)?.toFixed?.(2)],
      ['excess', (k) => (k.excess_ns !== undefined ? `${fmtNum(k.excess_ns / 1e6, 2)} ms` : null)],
    ], gpu.kernels, { class: 'gpu-kernels' }) : null);
}

export async function diagnosisView(root, params, ctx) {
  const id = params.get('id');
  if (!id) {
    const all = await getJSON('/api/v1/diagnoses', { status: 'all', from: '-7d', limit: 200 });
    root.append(section('Diagnoses (last 7 days)', list(all.diagnoses)));
    return;
  }
  const [d, text] = await Promise.all([
    getJSON('/api/v1/diagnoses/' + encodeURIComponent(id)),
    getText('/api/v1/diagnoses/' + encodeURIComponent(id), { format: 'text' }),
  ]);
  if (ctx.stale()) return;
  const report = d.report || {};
  const draws = [];
  root.append(
    el('h1', null, `Diagnosis #${d.id}: ${d.kind}${d.rank !== null && d.rank !== undefined ? ' rank ' + d.rank : ''}`),
    el('p', { class: 'summary', id: 'diagnosis-summary' }, d.summary),
    el('p', { class: 'action' }, el('strong', null, 'Action: '), d.action || '—'),
    table([['job', (x) => link({ view: 'job', job: x.job }, x.job)], ['status', (x) => x.status],
      ['severity', (x) => x.severity], ['layer', (x) => x.layer], ['host', (x) => x.hostname],
      ['communicators', (x) => (x.communicators || []).join(', ')],
      ['opened', (x) => fmtTime(x.opened)], ['updated', (x) => fmtTime(x.updated)],
      ['resolved', (x) => fmtTime(x.resolved)]], [d], { class: 'diagnosis-meta' }));

  const st = report.straggler;
  if (st) {
    const dg = st.diagnosis || {};
    root.append(section('Evidence',
      el('p', null, `Persistence ${st.persistence}, max excess ${st.max_excess_ms?.toFixed?.(2)} ms` +
        (report.iteration_ms ? `, iteration ${report.iteration_ms.toFixed(1)} ms` : '')),
      cpuEvidence(dg.cpu), gpuEvidence(dg.gpu),
      dg.os ? el('details', null, el('summary', null, 'OS layer'), el('pre', null, JSON.stringify(dg.os, null, 1))) : null));
    const healthy = dg.cpu?.compared_with_rank;
    const to = d.resolved || d.updated || 'now';
    const from = new Date(Date.parse(to) - 10 * 60 * 1000).toISOString();
    if (healthy !== undefined && healthy !== null) {
      const folded = await getText('/api/v1/flamegraph/diff', { job: d.job, a: healthy, b: d.rank, from, to });
      const f = flameSection(`CPU: rank ${d.rank} against rank ${healthy}`, diffTree(parseFolded(folded, 2)),
        [`rank ${healthy}`, `rank ${d.rank}`]);
      root.append(f.s, el('p', null, link({ view: 'flamegraph', diff: 'ranks', job: d.job, a: healthy, b: d.rank, from, to }, 'open in the flame graph view'), ' · ',
        link({ view: 'flamegraph', kind: 'gpu-time', job: d.job, rank: d.rank, from, to }, `GPU time of rank ${d.rank}`)));
      draws.push(f.draw);
    }
  } else if (report.baseline) {
    const b = report.baseline;
    root.append(section('Evidence',
      el('p', null, `Iteration ${report.iteration_ms?.toFixed(1)} ms against a baseline of ${report.baseline_iteration_ms?.toFixed(1)} ms (rise ${(100 * (report.rise || 0)).toFixed(1)}%).`),
      report.functions?.length ? table([
        ['function', (f) => f.function], ['current %', (f) => f.current_pct?.toFixed(1)],
        ['baseline %', (f) => f.baseline_pct?.toFixed(1)], ['Δ pp', (f) => f.delta_pp?.toFixed(1)],
      ], report.functions, { class: 'cpu-functions' }) : null));
    const to = Date.parse(d.updated || d.opened);
    const bfrom = new Date(b.from_ms).toISOString(), bto = new Date(b.to_ms).toISOString();
    const cfrom = new Date(to - (report.window_ms || b.to_ms - b.from_ms)).toISOString(), cto = new Date(to).toISOString();
    const [ta, tb] = await Promise.all([
      getText('/api/v1/flamegraph', { job: d.job, from: bfrom, to: bto, format: 'folded' }),
      getText('/api/v1/flamegraph', { job: d.job, from: cfrom, to: cto, format: 'folded' })]);
    const f = flameSection('CPU: now against the baseline', diffTree(mergeFolded(ta, tb)), ['the baseline', 'now']);
    root.append(f.s);
    draws.push(f.draw);
  } else if (report.instance && report.ranks) {
    // A hang or stall: each named rank's cause class, and where its threads block.
    const to = d.resolved || d.updated || 'now';
    const from = new Date(report.instance.since_ms).toISOString();
    root.append(section('Evidence',
      table([['rank', (r) => r.rank], ['node', (r) => r.hostname], ['pid', (r) => r.pid],
        ['state', (r) => r.state], ['cause', (r) => (r.cause ? r.cause.class : '—')],
        ['detail', (r) => (r.cause ? r.cause.detail : '')],
        ['off-CPU', (r) => (r.rank >= 0 ? link({ view: 'flamegraph', kind: 'off-cpu', job: d.job, rank: r.rank, from, to }, 'flame graph') : '')]],
      report.ranks, { class: 'hang-ranks' })));
  }
  root.append(section('Report (text)', el('pre', { class: 'report' }, text)));
  for (const draw of draws) draw();
}
