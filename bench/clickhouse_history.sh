#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Dashboard reads on ClickHouse as the history grows: two servers on one private
# clickhouse-server and one database (replicas), this build's and a baseline binary, answer the
# same queries over the last 15 minutes and hour, first with only a few minutes of real batches
# (bench/ingest_load), then after HISTORY_DAYS days of NODES nodes' batch and process rows
# (synthetic, one per 30 s per node, received before yesterday) are added: what a store with a
# long retention holds. Medians of 5 queries, and the ratio of this build's to the baseline's.
# Usage: bench/clickhouse_history.sh BUILD_DIR BASELINE_SERVER BATCH_DIR [HISTORY_DAYS] [NODES]
#   BASELINE_SERVER: a sysom-server of the same ClickHouse schema (e.g. built from an earlier
#   commit with `make build/sysom-server` in a git worktree).
set -euo pipefail
usage="usage: clickhouse_history.sh BUILD_DIR BASELINE_SERVER BATCH_DIR [HISTORY_DAYS] [NODES]"
build=$(cd "${1:?$usage}" && pwd)
baseline=${2:?$usage}
batches=${3:?$usage}
days=${4:-10}
nodes=${5:-1000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sysom-chhist.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	"$root/tests/tools/clickhouse-private.sh" stop "$work/ch" || true
	rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
ch=$("$root/tests/tools/clickhouse-private.sh" start "$work/ch")
db="${ch}?database=hist"

start() { # NAME BINARY: a server on the shared database; sets URL and PID
	local name=$1 bin=$2
	mkdir -p "$work/$name.data"
	"$bin" --listen 127.0.0.1:0 --port-file "$work/$name.port" --data-dir "$work/$name.data" \
		--token-file "$work/token" --clickhouse-url "$db" --log-level warn \
		>"$work/$name.log" 2>&1 &
	PID=$!
	pids+=("$PID")
	for _ in $(seq 300); do [ -s "$work/$name.port" ] && break; sleep 0.1; done
	[ -s "$work/$name.port" ] || { echo "server $name did not start:" >&2; cat "$work/$name.log" >&2; exit 1; }
	URL=http://127.0.0.1:$(cat "$work/$name.port")
}

median_ms() { # URL PATH: median wall time of 5 queries (after one warm-up), ms
	local url=$1 path=$2 code
	code=$(curl -s -o "$work/answer" -w '%{http_code}' -H "Authorization: Bearer $(cat "$work/token")" "$url$path")
	[ "$code" = 200 ] || { echo "error $code"; return; }
	for _ in 1 2 3 4 5; do
		curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $(cat "$work/token")" "$url$path"
	done | sort -n | sed -n 3p | awk '{ printf "%.0f", $1 * 1000 }'
}

start new "$build/sysom-server"
new_url=$URL new_pid=$PID
"$build/bench/ingest_load" --batches "$batches" --agents 20 --interval 5 --seconds 60 \
	--url "$new_url" --server-pid "$new_pid" --token-file "$work/token" --report-every 3600 \
	>"$work/load.log" 2>&1 || true
grep -m1 -o 'stored [0-9]*' "$work/load.log" | sed 's/^/real batches /'
start base "$baseline"
base_url=$URL
job=$(curl -s -H "Authorization: Bearer $(cat "$work/token")" "$new_url/api/v1/jobs?limit=1" |
	python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["job"] if j else "")')

queries=(
	"cpu flame graph, 15 min|/api/v1/flamegraph?from=-15m&to=now&format=folded"
	"cpu flame graph, 1 h|/api/v1/flamegraph?from=-1h&to=now&format=folded"
	"off-cpu flame graph, 1 h|/api/v1/flamegraph?kind=off-cpu&from=-1h&to=now&format=folded"
	"one job's flame graph, 1 h|/api/v1/flamegraph?job=$job&from=-1h&to=now&format=folded"
	"processes, 1 h|/api/v1/processes?from=-1h&to=now"
)
[ -n "$job" ] && queries+=("one job's stragglers, 1 h|/api/v1/jobs/$job/stragglers?from=-1h&to=now")

measure() { # LABEL
	local q name path a b
	for q in "${queries[@]}"; do
		name=${q%%|*} path=${q#*|}
		b=$(median_ms "$base_url" "$path")
		a=$(median_ms "$new_url" "$path")
		ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
		printf '| %s | %s | %s | %s | %s |\n' "$1" "$name" "$b" "$a" "$ratio"
	done
}

echo "| history | query | baseline ms | this build ms | ratio |"
echo "|---|---|---:|---:|---:|"
measure "none"
rows=$((days * nodes * 2880))
t0=$(date +%s)
curl -s "$db" --data-binary "INSERT INTO batches (day, node_id, epoch, sequence, attempt,
	received_ns, window_start_ns, window_end_ns, hostname)
	SELECT toDate(now()) - 2 - intDiv(number, $((nodes * 2880))) AS d,
	lower(hex(toFixedString(concat('hist', toString(number % $nodes)), 16))) AS node,
	1, number, rand64() + 1 AS a, toInt64(toUInt32(toDateTime(d))) * 1000000000 + (number % 2880) * 30000000000,
	0, 0, concat('hist-', toString(number % $nodes)) FROM numbers($rows)"
curl -s "$db" --data-binary "INSERT INTO processes (day, node_id, process, tgid, comm, received_ns, attempt)
	SELECT toDate(now()) - 2 - intDiv(number, $((nodes * 2880))) AS d,
	lower(hex(toFixedString(concat('hist', toString(number % $nodes)), 16))),
	number, 1000 + number % 30000, 'python3', toInt64(toUInt32(toDateTime(d))) * 1000000000, rand64() + 1
	FROM numbers($rows)"
curl -s "$db" --data-binary "OPTIMIZE TABLE batches" >/dev/null || true
held=$(curl -s "$db" --data-binary "SELECT count() FROM batches")
echo "history: $held batch rows and as many process rows ($days days x $nodes nodes), inserted in $(($(date +%s) - t0)) s" >&2
measure "$days d x $nodes nodes"
