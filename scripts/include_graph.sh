#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The include graph of a program's modules (module = directory under the program's root, e.g.
# server/query; files directly in the root, such as server/main.c, are the module "main"):
# prints every module-to-module edge with the files that make it, then the cycles (strongly
# connected components of more than one module). Exits 1 when there is a cycle.
# Usage: scripts/include_graph.sh [ROOT]   (default: server; run from the repository root)
set -euo pipefail
root=${1:-server}
cd "$(dirname "$0")/.."

# "from to file" for every #include "ROOT/..." between different modules.
edges=$(find "$root" -name '*.[ch]' | sort | while read -r file; do
	rel=${file#"$root"/}
	from=main
	[[ $rel == */* ]] && from=${rel%%/*}
	sed -n "s#^[[:space:]]*\#[[:space:]]*include[[:space:]]*\"$root/\([^\"]*\)\".*#\1#p" "$file" |
		while read -r inc; do
			to=main
			[[ $inc == */* ]] && to=${inc%%/*}
			[ "$from" != "$to" ] && echo "$from $to $file"
		done
done)

echo "edges (module -> module: files):"
echo "$edges" | awk 'NF { k = $1 " -> " $2; if (!((k, $3) in had)) { had[k, $3] = 1; f[k] = f[k] " " $3 } } END { for (k in f) print "  " k ":" f[k] }' | sort

# Strongly connected components (Tarjan) over the module graph.
echo "$edges" | awk '
NF { if (!(($1 SUBSEP $2) in seen)) { seen[$1, $2] = 1; adj[$1] = adj[$1] " " $2 }
     node[$1] = 1; node[$2] = 1 }
function visit(v,   i, n, w, list, c) {
	index_[v] = low[v] = ++counter; stack[++sp] = v; on[v] = 1
	n = split(adj[v], list, " ")
	for (i = 1; i <= n; i++) {
		w = list[i]
		if (!(w in index_)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
		else if (on[w] && index_[w] < low[v]) low[v] = index_[w]
	}
	if (low[v] == index_[v]) {
		c = ""; size = 0
		do { w = stack[sp--]; on[w] = 0; c = w " " c; size++ } while (w != v)
		if (size > 1) { print "cycle: " c; cycles++ }
	}
}
END {
	for (v in node) if (!(v in index_)) visit(v)
	if (cycles) { print cycles " cycle(s)"; exit 1 }
	print "no cycles"
}'
