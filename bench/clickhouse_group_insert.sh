#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Group inserts against one INSERT per table per batch, side by side on one private
# clickhouse-server (tests/tools/clickhouse-private.sh): the same batches, agents, interval and
# seed offered to a sysom-server with --clickhouse-group-max 1 (the baseline: every batch its
# own INSERTs and duplicate checks) and to one with the default (the batches stored at the same
# time share them), each into a fresh database. Reports per run the batches/s stored, ingest
# latency, the server's CPU per stored batch (and so batches/s per server core), ClickHouse's
# CPU per stored batch, the mean group size (/metrics) and the bytes ClickHouse holds per
# batch, then the ratios.
# Usage: bench/clickhouse_group_insert.sh BUILD_DIR BATCH_DIR [AGENTS] [INTERVAL_S] [SECONDS]
set -euo pipefail
usage="usage: clickhouse_group_insert.sh BUILD_DIR BATCH_DIR [AGENTS] [INTERVAL_S] [SECONDS]"
build=$(cd "${1:?$usage}" && pwd)
batches=${2:?$usage}
agents=${3:-200}
interval=${4:-0.1}
seconds=${5:-40}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sysom-chgroup.XXXXXX)
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
ch_pid=$(cat "$work/ch/pid")
hz=$(getconf CLK_TCK)

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
sql() { curl -sS "${ch}?database=$1" --data-binary "$2"; }

printf '| run | batches/s stored | p50 ms | p99 ms | server CPU ms per batch | batches/s per server core | ClickHouse CPU ms per batch | mean group | bytes per batch held | wire bytes per batch |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
declare -A rate core chcpu
for run in baseline grouped; do
	db=grp_$run
	max=0
	[ $run = baseline ] && max=1
	mkdir -p "$work/$run.data"
	"$build/sysom-server" --listen 127.0.0.1:0 --port-file "$work/$run.port" \
		--data-dir "$work/$run.data" --token-file "$work/token" --max-connections 4096 \
		--log-level warn --clickhouse-url "${ch}?database=$db" --clickhouse-group-max "$max" \
		>"$work/$run.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do [ -s "$work/$run.port" ] && break; sleep 0.1; done
	url=http://127.0.0.1:$(cat "$work/$run.port")
	ch0=$(ticks "$ch_pid")
	"$build/bench/ingest_load" --batches "$batches" --agents "$agents" --interval "$interval" \
		--seconds "$seconds" --url "$url" --server-pid "$pid" --token-file "$work/token" \
		--report-every 3600 >"$work/$run.load" 2>&1 || true
	ch1=$(ticks "$ch_pid")
	metrics=$(curl -s -H "Authorization: Bearer $(cat "$work/token")" "$url/metrics")
	groups=$(awk '$1 == "sysom_store_insert_groups_total" { print $2 }' <<<"$metrics")
	grouped=$(awk '$1 == "sysom_store_grouped_batches_total" { print $2 }' <<<"$metrics")
	kill -TERM "$pid"
	wait "$pid" 2>/dev/null || true
	stored=$(sed -n 's/.*stored \([0-9]*\), duplicate.*/\1/p' "$work/$run.load" | head -1)
	r=$(sed -n 's/.*rate: \([0-9.]*\) batches.*/\1/p' "$work/$run.load" | head -1)
	p50=$(sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' "$work/$run.load" | head -1)
	p99=$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' "$work/$run.load" | head -1)
	per_batch=$(sed -n 's/.*server CPU per stored batch: \([0-9.]*\) ms (\([0-9]*\) batches.*/\1 \2/p' \
		"$work/$run.load" | head -1)
	held=$(sql "$db" "SELECT count() FROM batches")
	bytes=$(sql "$db" "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = '$db'")
	wire=$(sed -n 's/.*(stamp + encode + zstd -1, \([0-9.]*\) KiB sent on average).*/\1/p' \
		"$work/$run.load" | head -1)
	rate[$run]=$r
	core[$run]=${per_batch#* }
	chcpu[$run]=$(awk -v d=$((ch1 - ch0)) -v hz="$hz" -v n="${stored:-0}" \
		'BEGIN { if (n > 0) printf "%.2f", d / hz * 1000 / n; else print "?" }')
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$run" "$r" "$p50" "$p99" \
		"${per_batch% *}" "${per_batch#* }" "${chcpu[$run]}" \
		"$(awk -v g="${groups:-0}" -v b="${grouped:-0}" 'BEGIN { if (g > 0) printf "%.1f", b / g; else print "-" }')" \
		"$((bytes / (held > 0 ? held : 1)))" "$(awk -v k="${wire:-0}" 'BEGIN { printf "%.0f", k * 1024 }')"
	grep -m2 -E 'errors by status|e\.g\.' "$work/$run.load" | sed 's/^/    /' >&2 || true
done
awk -v a="${rate[baseline]}" -v b="${rate[grouped]}" -v c="${core[baseline]}" -v d="${core[grouped]}" \
	-v e="${chcpu[baseline]}" -v f="${chcpu[grouped]}" 'BEGIN {
	printf "\ngrouped / baseline: batches/s stored %.2fx, batches/s per server core %.2fx, ClickHouse CPU per batch %.2fx\n",
		b / a, d / c, f / e }'
