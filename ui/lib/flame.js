// SPDX-License-Identifier: Apache-2.0
// Flame graphs with d3-flame-graph (vendor/d3-flamegraph.min.js, global `flamegraph`): trees
// from the API's JSON stacks or from folded text, a differential tree of two profiles
// (width: the second; colour: red where its share grew, blue where it shrank), and the
// rendering with zoom (click), search and a details line.

function child(node, name, kind) {
  let c = node.index.get(name);
  if (!c) {
    c = { name, kind, value: 0, children: [], index: new Map() };
    node.index.set(name, c);
    node.children.push(c);
  }
  return c;
}

function finish(root) {
  // The lookup maps are only needed while building; d3.hierarchy walks `children`.
  const stack = [root];
  let nodes = 0;
  while (stack.length) {
    const n = stack.pop();
    nodes++;
    delete n.index;
    for (const c of n.children) stack.push(c);
  }
  root.nodes = nodes;
  return root;
}

// GET /api/v1/flamegraph?format=json: process comm, then frames root first; values inclusive.
export function treeFromJSON(doc) {
  const root = { name: 'all', kind: 'root', value: 0, children: [], index: new Map() };
  for (const s of doc.stacks || []) {
    let n = child(root, (s.process && s.process.comm) || '?', 'comm');
    root.value += s.count;
    n.value += s.count;
    for (const f of s.frames || []) {
      n = child(n, f.inlined ? f.name + ' (inlined)' : f.name, f.kind || 'user');
      n.value += s.count;
    }
  }
  return finish(root);
}

function kindOfFolded(name) {
  if (name.endsWith('_[k]')) return 'kernel';
  if (name.startsWith('[gpu] ')) return 'gpu';
  if (name.startsWith('[truncated') || name.startsWith('[no launch')) return 'error';
  return 'user';
}

// Folded lines with `ncols` counts after the stack ("stack a b" for a diff): an array of
// [frames, counts]. Names may hold spaces: the counts are the last fields.
export function parseFolded(text, ncols) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const parts = line.split(' ');
    if (parts.length <= ncols) continue;
    const counts = parts.slice(parts.length - ncols).map(Number);
    if (counts.some((c) => !Number.isFinite(c))) continue;
    out.push([parts.slice(0, parts.length - ncols).join(' ').split(';'), counts]);
  }
  return out;
}

// A differential tree from [frames, [a, b]] rows: value = b (the "after" side), with each
// node's a and b and the change of its share in percentage points (delta) for the colours.
export function diffTree(rows) {
  const root = { name: 'all', kind: 'root', value: 0, a: 0, b: 0, children: [], index: new Map() };
  let ta = 0, tb = 0;
  for (const [, [a, b]] of rows) { ta += a; tb += b; }
  for (const [frames, [a, b]] of rows) {
    let n = root;
    n.a += a; n.b += b; n.value += b;
    for (const f of frames) {
      n = child(n, f, kindOfFolded(f));
      if (n.a === undefined) { n.a = 0; n.b = 0; }
      n.a += a; n.b += b; n.value += b;
    }
  }
  const stack = [root];
  let maxAbs = 0;
  while (stack.length) {
    const n = stack.pop();
    n.delta = (tb ? (100 * n.b) / tb : 0) - (ta ? (100 * n.a) / ta : 0);
    maxAbs = Math.max(maxAbs, Math.abs(n.delta));
    for (const c of n.children) stack.push(c);
  }
  root.totals = { a: ta, b: tb, maxAbs };
  return finish(root);
}

// Two folded profiles (one count each) as diff rows.
export function mergeFolded(textA, textB) {
  const m = new Map();
  for (const [frames, [c]] of parseFolded(textA, 1)) {
    const k = frames.join(';');
    m.set(k, [frames, [(m.get(k)?.[1][0] || 0) + c, 0]]);
  }
  for (const [frames, [c]] of parseFolded(textB, 1)) {
    const k = frames.join(';');
    const e = m.get(k) || [frames, [0, 0]];
    e[1][1] += c;
    m.set(k, e);
  }
  return [...m.values()];
}

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (h >>> 0) / 4294967296;
}

function kindColor(d) {
  if (d.highlight) return '#e600e6';
  const k = d.data.kind;
  const v = hash(d.data.name);
  if (k === 'kernel') return `hsl(${190 + 30 * v}, 55%, ${60 + 10 * v}%)`;
  if (k === 'gpu') return `hsl(${275 + 20 * v}, 50%, ${62 + 10 * v}%)`;
  if (k === 'error' || k === 'root') return 'hsl(0, 0%, 75%)';
  if (k === 'comm') return 'hsl(45, 30%, 70%)';
  return `hsl(${10 + 40 * v}, 85%, ${55 + 10 * v}%)`;
}

function diffColor(maxAbs) {
  return (d) => {
    if (d.highlight) return '#e600e6';
    const delta = d.data.delta || 0;
    const t = maxAbs > 0 ? Math.min(1, Math.abs(delta) / maxAbs) : 0;
    if (Math.abs(delta) < 0.05) return 'hsl(0, 0%, 88%)';
    const light = 90 - 45 * t;
    return delta > 0 ? `hsl(0, 80%, ${light}%)` : `hsl(220, 80%, ${light}%)`;
  };
}

// Renders `root` into `container` (emptied); returns the chart with .search/.resetZoom and
// the time it took (ms) in chart.renderMs. opts: unit, diff, details (an element), labels.
export function renderFlame(container, root, opts = {}) {
  container.replaceChildren();
  const unit = opts.unit || 'samples';
  const total = root.value || 1;
  const width = Math.max(400, container.clientWidth || 1000);
  const t0 = performance.now();
  const chart = flamegraph()
    .width(width)
    .cellHeight(18)
    .transitionDuration(0)
    .minFrameSize(1)
    .sort(true)
    .inverted(false)
    .title('')
    .selfValue(false)
    // Plain case-insensitive text, not a regular expression (a stray '(' is no error).
    .setSearchMatch((d, term) => !!term && String(d.data.name).toLowerCase().includes(term.toLowerCase()))
    .setColorMapper(opts.diff ? diffColor(root.totals.maxAbs) : kindColor)
    .label((d) => {
      const pct = ((100 * d.value) / total).toFixed(2);
      if (opts.diff) {
        const sign = d.data.delta > 0 ? '+' : '';
        return `${d.data.name}: ${opts.labels?.[0] || 'A'} ${d.data.a}, ${opts.labels?.[1] || 'B'} ${d.data.b} (${sign}${d.data.delta.toFixed(2)} pp)`;
      }
      return `${d.data.name}: ${d.value.toLocaleString('en-US')} ${unit} (${pct}%)`;
    });
  if (opts.details) {
    chart.setDetailsElement(opts.details);
    chart.setSearchHandler((results, sum, rootValue) => {
      opts.details.textContent = results.length
        ? `${results.length} frames match, ${((100 * sum) / rootValue).toFixed(2)}% of ${unit}`
        : 'no match';
    });
  }
  d3.select(container).datum(root).call(chart);
  chart.renderMs = performance.now() - t0;
  return chart;
}
