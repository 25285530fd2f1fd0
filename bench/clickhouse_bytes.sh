#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Bytes ClickHouse holds per stored batch, with its default LZ4 part compression and with zstd
# (docs/operations.md), side by side: two private clickhouse-servers
# (tests/tools/clickhouse-private.sh, CLICKHOUSE_COMPRESSION), one sysom-server each, the same
# batches offered by bench/ingest_load with the same agents, interval and seed; then every
# table merged (OPTIMIZE ... FINAL, as the background merges end up) and the active parts'
# bytes divided by the batches held. Prints per compression the bytes per batch, its ratio to
# the batch's size on the wire (the agent's zstd), and the three largest tables.
# Usage: bench/clickhouse_bytes.sh BUILD_DIR BATCH_DIR [AGENTS] [INTERVAL_S] [SECONDS]
set -euo pipefail
usage="usage: clickhouse_bytes.sh BUILD_DIR BATCH_DIR [AGENTS] [INTERVAL_S] [SECONDS]"
build=$(cd "${1:?$usage}" && pwd)
batches=${2:?$usage}
agents=${3:-20}
interval=${4:-0.5}
seconds=${5:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sysom-chbytes.XXXXXX)
cleanup() {
	local c
	for c in lz4 zstd; do "$root/tests/tools/clickhouse-private.sh" stop "$work/$c" || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# The agent's batch on the wire: the spool files less their 64-byte header (docs/spool-format.md).
wire=$(for f in "$batches"/*.batch; do echo $(($(stat -c %s "$f") - 64)); done |
	awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else print 0 }')
[ "$wire" -gt 0 ] || { echo "clickhouse_bytes.sh: no *.batch files in $batches" >&2; exit 1; }
printf '| compression | batches held | bytes per batch | / wire (%s B) | largest tables (bytes per batch) |\n' "$wire"
printf '|---|---:|---:|---:|---|\n'
for c in lz4 zstd; do
	url=$(CLICKHOUSE_COMPRESSION=$c "$root/tests/tools/clickhouse-private.sh" start "$work/$c")
	"$build/bench/ingest_load" --batches "$batches" --agents "$agents" --interval "$interval" \
		--seconds "$seconds" --report-every 3600 \
		--server-args "--clickhouse-url ${url}?database=bytes --log-level warn" \
		>"$work/$c.load" 2>&1 || true
	for t in $(curl -sS "${url}?database=bytes" --data-binary \
		"SELECT name FROM system.tables WHERE database = 'bytes' AND engine LIKE '%MergeTree'"); do
		curl -sS "${url}?database=bytes" --data-binary "OPTIMIZE TABLE $t FINAL" >/dev/null || true
	done
	held=$(curl -sS "${url}?database=bytes" --data-binary "SELECT count() FROM batches")
	[ "$held" -gt 0 ] || { echo "clickhouse_bytes.sh: nothing stored ($c); see the load:" >&2; tail "$work/$c.load" >&2; exit 1; }
	bytes=$(curl -sS "${url}" --data-binary \
		"SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = 'bytes'")
	top=$(curl -sS "${url}" --data-binary "SELECT table, sum(bytes_on_disk) AS b FROM system.parts
		WHERE active AND database = 'bytes' GROUP BY table ORDER BY b DESC LIMIT 3
		FORMAT TabSeparated" | awk -v n="$held" '{ printf "%s%s %.0f", (NR > 1 ? ", " : ""), $1, $2 / n }')
	awk -v c="$c" -v n="$held" -v b="$bytes" -v w="$wire" -v top="$top" \
		'BEGIN { printf "| %s | %d | %.0f | %.2f | %s |\n", c, n, b / n, b / n / w, top }'
	"$root/tests/tools/clickhouse-private.sh" stop "$work/$c"
done
