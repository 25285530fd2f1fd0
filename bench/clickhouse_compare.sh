#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SQLite and ClickHouse side by side under the same simulated fleet: starts a private
# clickhouse-server (tests/tools/clickhouse-private.sh), one sysom-server per store, runs
# bench/ingest_load against each (same batches, agents, interval, seed), then times the
# whole-fleet flame graph query (median of 5), the collectives of one simulated node's job and
# its straggler analysis (median of 5 each; GPU batches only), and reports the bytes stored
# per batch and the NCCL call rows stored.
# Usage: bench/clickhouse_compare.sh BUILD_DIR BATCH_DIR [AGENTS] [INTERVAL_S] [SECONDS]
set -euo pipefail
build=$(cd "${1:?usage: clickhouse_compare.sh BUILD_DIR BATCH_DIR [AGENTS] [INTERVAL_S] [SECONDS]}" && pwd)
batches=${2:?batch directory (bench/capture_batches.sh)}
agents=${3:-200}
interval=${4:-1}
seconds=${5:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sysom-chbench.XXXXXX)
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

start() { # NAME ARGS...: a server; sets URL and PID
	local name=$1
	shift
	mkdir -p "$work/$name.data"
	"$build/sysom-server" --listen 127.0.0.1:0 --port-file "$work/$name.port" \
		--data-dir "$work/$name.data" --token-file "$work/token" --max-connections 4096 \
		--log-level warn "$@" >"$work/$name.log" 2>&1 &
	PID=$!
	pids+=("$PID")
	for _ in $(seq 100); do [ -s "$work/$name.port" ] && break; sleep 0.1; done
	URL=http://127.0.0.1:$(cat "$work/$name.port")
}

flame_ms() { # URL: median wall time of 5 whole-fleet flame graph queries, ms
	local url=$1 t
	for _ in 1 2 3 4 5; do
		curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $(cat "$work/token")" \
			"$url/api/v1/flamegraph?from=-1h&to=now&format=folded"
	done | sort -n | sed -n 3p | awk '{ printf "%.0f", $1 * 1000 }'
}

job_ms() { # URL PATH: median wall time of 5 queries of the first listed job's PATH, ms
	local url=$1 path=$2 job
	job=$(curl -s -H "Authorization: Bearer $(cat "$work/token")" "$url/api/v1/jobs?limit=1" |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["job"] if j else "")')
	[ -n "$job" ] || { echo "-"; return; }
	for _ in 1 2 3 4 5; do
		curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $(cat "$work/token")" \
			"$url/api/v1/jobs/$job/$path"
	done | sort -n | sed -n 3p | awk '{ printf "%.0f", $1 * 1000 }'
}

for store in sqlite clickhouse; do
	if [ $store = sqlite ]; then
		start sq
	else
		start chs --clickhouse-url "${ch}?database=bench"
	fi
	"$build/bench/ingest_load" --batches "$batches" --agents "$agents" --interval "$interval" \
		--seconds "$seconds" --url "$URL" --server-pid "$PID" --data-dir "$work/sq.data" \
		--token-file "$work/token" --report-every 3600 >"$work/$store.load" 2>&1 || true
	stored=$(sed -n 's/.*stored \([0-9]*\).*/\1/p' "$work/$store.load" | head -1)
	rate=$(grep -m1 -o '[0-9.]* batches/s' "$work/$store.load" || echo "? batches/s")
	cpu=$(grep -m1 -io 'server cpu[^;,]*' "$work/$store.load" || true)
	lat=$(grep -m1 -o 'p50 [0-9.]* ms.*p99 [0-9.]* ms' "$work/$store.load" || true)
	fl=$(flame_ms "$URL")
	coll=$(job_ms "$URL" "collectives?from=-1h&to=now")
	strag=$(job_ms "$URL" "stragglers?from=-1h&to=now")
	kill -TERM "$PID"
	wait "$PID" 2>/dev/null || true
	if [ $store = sqlite ]; then
		# The database after the server's last checkpoint (the symbol repository aside).
		bytes=$(cat "$work/sq.data"/sysom.db* | wc -c)
		calls=$(sqlite3 "$work/sq.data/sysom.db" "SELECT coalesce(sum(calls), 0) FROM nccl_call_chunks" 2>/dev/null || echo "?")
		held=$(sqlite3 "$work/sq.data/sysom.db" "SELECT count(*) FROM batches" 2>/dev/null || echo "?")
	else
		calls=$(curl -s "${ch}?database=bench" --data-binary "SELECT count() FROM nccl_calls")
		held=$(curl -s "${ch}?database=bench" --data-binary "SELECT count() FROM batches")
		bytes=$(curl -s "${ch}?database=bench" --data-binary \
			"SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = 'bench'")
	fi
	wire=$(grep -m1 -A2 '| agents |' "$work/$store.load" | tail -1 | awk -F'|' '{ print $5 }' | tr -d ' ')
	# A request the bench gave up on (timeout) may still be stored: bytes per batch divide by
	# the batches the store holds.
	per="?"
	[[ $held =~ ^[0-9]+$ ]] && [ "$held" -gt 0 ] && per=$((bytes / held))
	echo "$store: $rate; ingest latency $lat; $cpu; stored batches ${stored:-?} acknowledged," \
		"$held held; bytes $bytes ($per per batch held;" \
		"wire ${wire:-?} KiB zstd);" \
		"whole-fleet flame graph ${fl} ms; NCCL call rows $calls; one job's collectives" \
		"${coll} ms, stragglers ${strag} ms"
	grep -m3 -E 'errors|status|BENCH' "$work/$store.load" | sed 's/^/    /' || true
done
