// SPDX-License-Identifier: Apache-2.0
// Small DOM helpers: elements from tag, attributes and children; tables; formatting.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// A table of `rows` with `columns` = [[header, row => cell (text or Node)], ...].
export function table(columns, rows, attrs) {
  return el('table', attrs,
    el('thead', null, el('tr', null, columns.map(([h]) => el('th', null, h)))),
    el('tbody', null, rows.map((r) => el('tr', null, columns.map(([, f]) => {
      const v = f(r);
      return el('td', null, v === undefined || v === null ? '—' : v);
    })))));
}

export function section(title, ...children) {
  return el('section', null, el('h2', null, title), ...children);
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function fmtNum(v, digits = 0) {
  if (v === undefined || v === null) return '—';
  return Number(v).toLocaleString('en-US', { maximumFractionDigits: digits });
}

// "12.3 s ago" style age of an ISO time.
export function fmtAge(iso) {
  const d = Date.parse(iso);
  if (isNaN(d)) return '—';
  const s = (Date.now() - d) / 1000;
  if (s < 120) return `${Math.max(0, Math.round(s))} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function link(params, text) {
  return el('a', { href: '#' + new URLSearchParams(params).toString() }, text);
}
