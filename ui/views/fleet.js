// SPDX-License-Identifier: Apache-2.0
// Fleet: nodes and their agents (last batch, batches, drops from /metrics), training jobs,
// open incidents.
import { getJSON, getText } from '../lib/api.js';
import { el, fmtAge, fmtNum, fmtTime, link, section, table } from '../lib/dom.js';

// Per node id: the agents' loss counters (sysom_agent_*{lost,dropped,drops,full}_total) from
// the Prometheus text of /metrics (per-node series need a read credential).
export function dropsByNode(text) {
  const out = new Map();
  const re = /^sysom_agent_([a-z0-9_]*(?:lost|dropped|drops|full)[a-z0-9_]*)_total\{([^}]*)\}\s+([0-9.eE+-]+)/;
  for (const line of text.split('\n')) {
    const m = re.exec(line);
    if (!m) continue;
    const id = /node_id="([^"]*)"/.exec(m[2]);
    const v = Number(m[3]);
    if (!id || !(v > 0)) continue;
    const e = out.get(id[1]) || { total: 0, counters: [] };
    e.total += v;
    e.counters.push(`${m[1]} ${v}`);
    out.set(id[1], e);
  }
  return out;
}

function health(node) {
  const age = (Date.now() - Date.parse(node.last_seen)) / 1000;
  if (age < 120) return el('span', { class: 'ok' }, 'reporting');
  if (age < 3600) return el('span', { class: 'warn' }, 'late');
  return el('span', { class: 'bad' }, 'silent');
}

export async function fleetView(root, params) {
  const [nodes, jobs, diagnoses, metrics] = await Promise.all([
    getJSON('/api/v1/nodes'),
    getJSON('/api/v1/jobs', { limit: 200 }),
    getJSON('/api/v1/diagnoses', { status: 'open', from: params.get('from') || '-1d', limit: 200 }),
    getText('/metrics').catch(() => ''),
  ]);
  const drops = dropsByNode(metrics);
  root.append(
    section(`Nodes (${nodes.nodes.length})`,
      nodes.nodes.length
        ? table([
          ['host', (n) => link({ view: 'flamegraph', node: n.hostname || n.node_id, from: '-15m' }, n.hostname || n.node_id)],
          ['health', health],
          ['last batch', (n) => el('span', { title: fmtTime(n.last_seen) }, fmtAge(n.last_seen))],
          ['batches', (n) => fmtNum(n.batches)],
          ['drops', (n) => {
            const d = drops.get(n.node_id);
            return d ? el('span', { class: 'warn', title: d.counters.join('\n') }, fmtNum(d.total)) : '0';
          }],
          ['agent', (n) => n.agent_version],
          ['kernel', (n) => n.kernel_release],
          ['CPUs', (n) => n.online_cpus],
          ['sampling', (n) => `${n.sample_hz} Hz`],
          ['first seen', (n) => fmtTime(n.first_seen)],
        ], nodes.nodes, { class: 'nodes' })
        : el('p', { class: 'empty' }, 'No node has sent data yet: start sysom-agent --server URL on the nodes.')),
    section(`Jobs (${jobs.jobs.length})`,
      jobs.jobs.length
        ? table([
          ['job', (j) => link({ view: 'job', job: j.job }, j.job)],
          ['ranks', (j) => `${j.ranks}${j.world_size !== null ? ' / ' + j.world_size : ''}`],
          ['processes', (j) => j.processes],
          ['nodes', (j) => j.nodes],
          ['last seen', (j) => el('span', { title: fmtTime(j.last_seen) }, fmtAge(j.last_seen))],
          ['profile', (j) => link({ view: 'flamegraph', job: j.job, from: '-1h' }, 'flame graph')],
        ], jobs.jobs, { class: 'jobs' })
        : el('p', { class: 'empty' }, 'No training job seen.')),
    section(`Open incidents (${diagnoses.diagnoses.length})`,
      diagnoses.diagnoses.length
        ? table([
          ['id', (d) => link({ view: 'diagnosis', id: d.id }, '#' + d.id)],
          ['severity', (d) => el('span', { class: d.severity === 'critical' ? 'bad' : 'warn' }, d.severity)],
          ['job', (d) => link({ view: 'job', job: d.job }, d.job)],
          ['kind', (d) => d.kind],
          ['rank', (d) => d.rank],
          ['layer', (d) => d.layer],
          ['summary', (d) => d.summary],
          ['opened', (d) => fmtTime(d.opened)],
        ], diagnoses.diagnoses, { class: 'incidents' })
        : el('p', { class: 'empty' }, 'No open incident.')));
}
