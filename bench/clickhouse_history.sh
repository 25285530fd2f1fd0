#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Dashboard reads on ClickHouse as the history grows: a baseline binary and this build's
# server, each on its own database of one private clickhouse-server (a baseline of an older
# schema cannot open a database this build migrated), answer the same queries over the last
# 15 minutes and hour and the all-time lists (nodes, jobs, /metrics' agent counters), first
# with only a minute of real batches (bench/ingest_load, into each), then after HISTORY_DAYS
# days of NODES nodes' batch, process and job rank rows (synthetic, one per 30 s per node,
# consecutive sequence numbers per node, received before yesterday) are added to both: what a
# store with a long retention holds. Medians of 5 queries, and the ratio of this build's to
# the baseline's. Last, this build opens the baseline's database (an upgrade: its migrations
# run, timed) and answers the all-time lists there.
# Usage: bench/clickhouse_history.sh BUILD_DIR BASELINE_SERVER BATCH_DIR [HISTORY_DAYS] [NODES]
#   BASELINE_SERVER: a sysom-server of this ClickHouse schema or an older one (e.g. built from
#   an earlier commit with `make build/sysom-server` in a git worktree).
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
db_base="${ch}?database=hist_base"
db_new="${ch}?database=hist"

start() { # NAME BINARY DB_URL: a server on that database; sets URL and PID
	local name=$1 bin=$2 db=$3
	mkdir -p "$work/$name.data"
	"$bin" --listen 127.0.0.1:0 --port-file "$work/$name.port" --data-dir "$work/$name.data" \
		--token-file "$work/token" --clickhouse-url "$db" --log-level warn \
		>"$work/$name.log" 2>&1 &
	PID=$!
	pids+=("$PID")
	for _ in $(seq 36000); do [ -s "$work/$name.port" ] && break; sleep 0.1; done
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

load() { # URL PID: a minute of real batches from 20 agents
	"$build/bench/ingest_load" --batches "$batches" --agents 20 --interval 5 --seconds 60 \
		--url "$1" --server-pid "$2" --token-file "$work/token" --report-every 3600 \
		>"$work/load.log" 2>&1 || true
	grep -m1 -o 'stored [0-9]*' "$work/load.log" | sed 's/^/real batches /' >&2
}
start base "$baseline" "$db_base"
base_url=$URL base_pid=$PID
load "$base_url" "$base_pid"
start new "$build/sysom-server" "$db_new"
new_url=$URL new_pid=$PID
load "$new_url" "$new_pid"
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
lists=(
	"node list|/api/v1/nodes"
	"job list|/api/v1/jobs"
	"agent counters (/metrics)|/metrics"
)
queries+=("${lists[@]}")

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
history() { # DB_URL: the synthetic history (the same rows into either database)
	local db=$1 jr= pn=
	# This build's batch rows carry their job rank (schema 13) and their processes' comms
	# (schema 15), as the server writes them.
	curl -s "$db" --data-binary "SELECT count() FROM system.columns WHERE database = currentDatabase()
		AND table = 'batches' AND name = 'jr_job'" | grep -q 1 && jr=1
	curl -s "$db" --data-binary "SELECT count() FROM system.columns WHERE database = currentDatabase()
		AND table = 'batches' AND name = 'pn_comm'" | grep -q 1 && pn=1
	curl -s "$db" --data-binary "INSERT INTO batches (day, node_id, epoch, sequence, attempt,
		received_ns, window_start_ns, window_end_ns, hostname, counter_ids, counter_values
		${jr:+, window_day, jr_process, jr_job, jr_rank, jr_world_size}
		${pn:+, pn_process, pn_comm})
		SELECT toDate(now()) - 2 - intDiv(number, $((nodes * 2880))) AS d,
		lower(hex(toFixedString(concat('hist', toString(number % $nodes)), 16))) AS node,
		1, intDiv(number, $nodes), rand64() + 1 AS a,
		toInt64(toUInt32(toDateTime(d))) * 1000000000 + intDiv(number % ($nodes * 2880), $nodes) * 30000000000 AS r,
		r - 31000000000, r - 1000000000, concat('hist-', toString(number % $nodes)), [1, 2], [990, 22]
		${jr:+, d, [number % $nodes], [concat('hist-job-', toString(intDiv(number % $nodes, 8)))],
		[toInt32(number % 8)], [toInt32(8)]} ${pn:+, [toUInt64(number)], ['python3']}
		FROM numbers($rows)"
	curl -s "$db" --data-binary "INSERT INTO processes (day, node_id, process, tgid, comm, received_ns, attempt)
		SELECT toDate(now()) - 2 - intDiv(number, $((nodes * 2880))) AS d,
		lower(hex(toFixedString(concat('hist', toString(number % $nodes)), 16))),
		number, 1000 + number % 30000, 'python3', toInt64(toUInt32(toDateTime(d))) * 1000000000, rand64() + 1
		FROM numbers($rows)"
	curl -s "$db" --data-binary "INSERT INTO job_ranks (day, job, node_id, process, rank, world_size,
		window_start_ns, window_end_ns, received_ns, attempt)
		SELECT toDate(now()) - 2 - intDiv(number, $((nodes * 2880))) AS d,
		concat('hist-job-', toString(intDiv(number % $nodes, 8))),
		lower(hex(toFixedString(concat('hist', toString(number % $nodes)), 16))),
		number % $nodes, toInt32(number % 8), 8,
		toInt64(toUInt32(toDateTime(d))) * 1000000000, toInt64(toUInt32(toDateTime(d))) * 1000000000 + 30000000000,
		toInt64(toUInt32(toDateTime(d))) * 1000000000 + 31000000000, rand64() + 1
		FROM numbers($rows)"
	curl -s "$db" --data-binary "OPTIMIZE TABLE batches" >/dev/null || true
}
t0=$(date +%s)
history "$db_base"
history "$db_new"
held=$(curl -s "$db_new" --data-binary "SELECT count() FROM batches")
echo "history: $held batch rows and as many process and job rank rows per database ($days days x $nodes nodes), inserted in $(($(date +%s) - t0)) s" >&2
measure "$days d x $nodes nodes"

# The upgrade: this build opens the baseline's database (its migrations backfill what it
# needs from the rows there) and answers the all-time lists.
kill -TERM "$base_pid" "$new_pid" 2>/dev/null || true
wait "$base_pid" "$new_pid" 2>/dev/null || true
t0=$(date +%s.%N)
start upg "$build/sysom-server" "$db_base"
echo "upgrade: this build opened the baseline's database in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" >&2
for q in "${lists[@]}"; do
	printf '| %s, upgraded | %s | - | %s | - |\n' "$days d x $nodes nodes" "${q%%|*}" "$(median_ms "$URL" "${q#*|}")"
done
