#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Time to first render of a flame graph in the web UI, headless Chromium (Debian's chromium
# driven by puppeteer-core, tests/e2e/ui_browser.mjs "bench"): for each size, a fresh server
# gets one batch of N distinct stacks (depth 24, the shape of bench/export_bench.c, from
# `symtool profile`), and the page opens #view=flamegraph&comm=bigprof&limit=100000 ROUNDS
# times. Side by side: fetching the folded answer (the baseline: what any client of the API
# pays, e.g. sysomctl piping into flamegraph.pl) and building the tree + drawing the flame
# graph until the next animation frame; the ratio is render / fetch. Medians over the rounds.
# Usage: bench/ui_render.sh BUILD_DIR [SIZES] [ROUNDS]   (default 10000,100000 and 5)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
sizes=${2:-10000,100000}
rounds=${3:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/sysom-ui-bench.XXXXXX)
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
[ -x "${CHROMIUM:=/usr/bin/chromium}" ] || { echo "no $CHROMIUM: make deps" >&2; exit 1; }
export CHROMIUM
echo "ui-bench-token" >"$tmp/token"
chmod 600 "$tmp/token"
echo "| stacks | frames | answer fetched (ms) | tree built, drawn, first frame (ms) | render / fetch |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for n in ${sizes//,/ }; do
	rm -rf "$tmp/data" "$tmp/port"
	mkdir -p "$tmp/data"
	"$build/sysom-server" --listen 127.0.0.1:0 --data-dir "$tmp/data" --port-file "$tmp/port" \
		--token-file "$tmp/token" --ui-dir "$root/ui" >"$tmp/server.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
	url=http://127.0.0.1:$(cat "$tmp/port")
	key=$("$build/tests/tools/symtool" profile "$tmp/batch" 1 "$n" | cut -d' ' -f1)
	curl -sf -o /dev/null -H "Authorization: Bearer ui-bench-token" -H "Idempotency-Key: $key" \
		-H 'Content-Encoding: zstd' --data-binary "@$tmp/batch" "$url/api/v1/ingest"
	line=$(node "$root/tests/e2e/ui_browser.mjs" bench "$url" ui-bench-token comm=bigprof \
		rounds="$rounds" | tee "$tmp/bench.out" | sed -n 's/^DIAG BENCH //p')
	if [ -z "$line" ] || grep -q '^FAIL' "$tmp/bench.out"; then
		cat "$tmp/bench.out" >&2
		exit 1
	fi
	eval "$line" # stacks= frames= fetch_ms= render_ms= chart_ms= rounds=
	awk -v s="$stacks" -v f="$frames" -v a="$fetch_ms" -v b="$render_ms" \
		'BEGIN { printf "| %d | %d | %d | %d | %.1f |\n", s, f, a, b, b / (a > 0 ? a : 1) }'
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
done
