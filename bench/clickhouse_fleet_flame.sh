#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole-fleet flame graph on ClickHouse as the range and the fleet grow (issue 19's "24 h /
# 1,000-node flame graph" figure), from raw rows and from the fleet slots (schema 14), side by side.
#
# One server (this build) on a private clickhouse-server takes a few real batches
# (bench/ingest_load), so that its stacks, objects and processes are real; the densest stored
# batch becomes the template. Then NODES synthetic nodes each get one batch every 30 s for the
# last HOURS hours, every batch a copy of the template's sample rows (its stacks, counts, threads;
# the node's own process ids) and of its process rows (as an agent sends them with every batch),
# with their `batches` rows (one attempt each: committed), inserted by INSERT ... SELECT inside
# ClickHouse. Then the dashboard's whole-fleet flame graph (`/api/v1/flamegraph?from=-R&format=
# folded`) is timed over growing ranges R (one warm-up, median of 3) from raw rows (the serving
# replica builds no slots: --fleet-slots-interval 1h); then it stops, a replica alone on the
# database builds the slots (--fleet-slots-interval 1s; the time it took is printed), and the
# serving replica, started again, times the same ranges. Both answers are compared (the same
# folded stacks and counts: the ranges are fixed times, not relative to now). Each range is
# also read for one job of the real batches (`job=`), amid the synthetic fleet: a job's read
# never uses the slots, so it times a filtered row read as the fleet grows.
# Usage: bench/clickhouse_fleet_flame.sh BUILD_DIR BATCH_DIR [NODES (1000)] [HOURS (3)]
# FLEET_KEEP=1 leaves the ClickHouse and the server running (their URLs on stderr).
set -euo pipefail
usage="usage: clickhouse_fleet_flame.sh BUILD_DIR BATCH_DIR [NODES] [HOURS]"
build=$(cd "${1:?$usage}" && pwd)
batches=${2:?$usage}
nodes=${3:-1000}
hours=${4:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/sysom-chfleet.XXXXXX)
pid="" pid2="" url="" db=""
cleanup() {
	if [ -n "${FLEET_KEEP:-}" ]; then # leave both running, to query them by hand
		echo "kept: clickhouse $db, server $url (pid $pid), token $work/token;" \
			"stop with: kill $pid; $root/tests/tools/clickhouse-private.sh stop $work/ch" >&2
		return
	fi
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
	[ -n "$pid2" ] && kill -TERM "$pid2" 2>/dev/null || true
	wait 2>/dev/null || true
	"$root/tests/tools/clickhouse-private.sh" stop "$work/ch" || true
	rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
ch=$("$root/tests/tools/clickhouse-private.sh" start "$work/ch")
db="${ch}?database=fleet"
sql() { curl -sS --fail-with-body "$db${2:-}" --data-binary "$1"; } # SQL [URL SETTINGS]

mkdir -p "$work/data"
serve() { # PORT_FILE LOG SLOTS_INTERVAL: this build on the bench's database, in the background
	rm -f "$1"
	"$build/sysom-server" --listen 127.0.0.1:0 --port-file "$1" --data-dir "$work/data" \
		--token-file "$work/token" --clickhouse-url "$db" --fleet-slots-interval "$3" \
		--log-level warn >>"$2" 2>&1 &
	for _ in $(seq 300); do [ -s "$1" ] && return; sleep 0.1; done
	echo "the server did not start:" >&2
	cat "$2" >&2
	exit 1
}
# The serving replica builds no slots (the first pass would come after an hour).
serve "$work/port" "$work/server.log" 3600
pid=$!
url=http://127.0.0.1:$(cat "$work/port")
"$build/bench/ingest_load" --batches "$batches" --agents 4 --interval 5 --seconds 15 \
	--url "$url" --server-pid "$pid" --token-file "$work/token" --report-every 3600 \
	>"$work/load.log" 2>&1 || true

# The template: the committed batch with the most sample rows.
read -r tnode tattempt trows tmin < <(sql "SELECT node_id, attempt, count() AS c, min(time_ms)
	FROM samples WHERE attempt IN (SELECT min(attempt) FROM batches
	GROUP BY node_id, epoch, sequence) GROUP BY node_id, attempt ORDER BY c DESC LIMIT 1
	FORMAT TSV")
[ -n "${trows:-}" ] || { echo "no batch was stored:" >&2; cat "$work/load.log" >&2; exit 1; }
tprocs=$(sql "SELECT uniqExact(process) FROM samples WHERE node_id = '$tnode'
	AND attempt = $tattempt FORMAT TSV")
# One job of the real batches (one simulated agent's), read amid the synthetic fleet: a job's
# flame graph never uses the fleet slots, so it times the row read at fleet scale.
job=$(sql "SELECT job FROM job_ranks ORDER BY job LIMIT 1 FORMAT TSV")
echo "template: $trows sample rows of $tprocs processes (a real 30-s GPU-node batch)" >&2

# Node k's id and its batch i's attempt (odd, distinct, one per batch: the committed one).
node_sql="lower(hex(toFixedString(concat('fleet', toString(k)), 16)))"
attempt_sql="bitOr(cityHash64(k, i, 'fleet'), 1)"
now_ms=$(( $(date +%s) * 1000 - 60000 ))
per_hour=120 # batches per node
t0=$(date +%s)
for ((h = 0; h < hours; h++)); do
	# Batch i of the hour ends at now - ((hours - h) * 120 - i - 1) * 30 s.
	# (each row in the day partition of its own time, as the server writes them)
	sql "INSERT INTO samples (day, node_id, time_ms, process, tgid, tid, cpu, thread_comm,
		kernel_stack, user_stack, count, attempt)
		SELECT toDate(toDateTime(intDiv(ws + (t.time_ms - $tmin), 1000))), $node_sql, ws + (t.time_ms - $tmin),
		cityHash64(t.process, k), t.tgid, t.tid, t.cpu, t.thread_comm, t.kernel_stack,
		t.user_stack, t.count, $attempt_sql
		FROM (SELECT number % $nodes AS k, $((h * per_hour)) + intDiv(number, $nodes) AS i,
		      $now_ms - ($((hours * per_hour)) - i) * 30000 AS ws FROM numbers($((nodes * per_hour))))
		CROSS JOIN (SELECT time_ms, process, tgid, tid, cpu, thread_comm, kernel_stack,
		      user_stack, count FROM samples WHERE node_id = '$tnode' AND attempt = $tattempt) AS t
		SETTINGS max_block_size = 2048" # the join multiplies each block by the template's rows
	# (pn_*: the batch's processes and their comms, as a batch row carries them: schema 15.)
	sql "INSERT INTO batches (day, node_id, epoch, sequence, attempt, received_ns,
		window_start_ns, window_end_ns, samples, sample_rows, hostname, pn_process, pn_comm)
		SELECT toDate(toDateTime(intDiv(ws, 1000) + 31)), $node_sql, 1, i + 1, $attempt_sql,
		(ws + 31000) * 1000000, ws * 1000000, (ws + 30000) * 1000000, 0, $trows,
		concat('fleet-', toString(k)), arrayMap(x -> cityHash64(x, k), tp), tc
		FROM (SELECT number % $nodes AS k, $((h * per_hour)) + intDiv(number, $nodes) AS i,
		      $now_ms - ($((hours * per_hour)) - i) * 30000 AS ws FROM numbers($((nodes * per_hour))))
		CROSS JOIN (SELECT groupArray(process) AS tp, groupArray(comm) AS tc FROM
		      (SELECT process, any(comm) AS comm FROM processes WHERE process IN
		      (SELECT process FROM samples WHERE node_id = '$tnode' AND attempt = $tattempt)
		      GROUP BY process))" "&max_block_size=8192&min_insert_block_size_rows=8192"
	# (small insert blocks: the views on batches expand each row's arrays; 18.16 takes the
	# insert's block size from the request, not from a SETTINGS clause)
	# The processes the batch's samples name, as every batch carries them.
	sql "INSERT INTO processes (day, node_id, process, tgid, comm, first_seen_ns, last_seen_ns,
		received_ns, attempt)
		SELECT toDate(toDateTime(intDiv(ws, 1000) + 31)), $node_sql, cityHash64(p.process, k),
		p.tgid, p.comm, ws * 1000000, (ws + 30000) * 1000000, (ws + 31000) * 1000000,
		$attempt_sql
		FROM (SELECT number % $nodes AS k, $((h * per_hour)) + intDiv(number, $nodes) AS i,
		      $now_ms - ($((hours * per_hour)) - i) * 30000 AS ws FROM numbers($((nodes * per_hour))))
		CROSS JOIN (SELECT process, any(tgid) AS tgid, any(comm) AS comm FROM processes
		      WHERE process IN (SELECT process FROM samples WHERE node_id = '$tnode'
		      AND attempt = $tattempt) GROUP BY process) AS p
		SETTINGS max_block_size = 2048"
	echo "hour $((h + 1)) of $hours inserted ($(($(date +%s) - t0)) s)" >&2
done
sql "OPTIMIZE TABLE batches" >/dev/null || true
total=$(sql "SELECT count() FROM samples FORMAT TSV")
bytes=$(sql "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'fleet'
	AND table = 'samples' AND active FORMAT TSV")
echo "fleet: $nodes nodes x $hours h: $total sample rows ($((bytes / 1048576)) MiB on disk)," \
	"inserted in $(($(date +%s) - t0)) s" >&2

median_ms() { # PATH: median wall time of 3 queries after one warm-up (ms), or "error CODE"
	local code
	code=$(curl -s -o "$work/answer" -w '%{http_code}' --max-time 600 \
		-H "Authorization: Bearer $(cat "$work/token")" "$url$1")
	[ "$code" = 200 ] || { echo "error $code"; return; }
	for _ in 1 2 3; do
		curl -s -o /dev/null -w '%{time_total}\n' --max-time 600 \
			-H "Authorization: Bearer $(cat "$work/token")" "$url$1"
	done | sort -n | sed -n 2p | awk '{ printf "%.0f", $1 * 1000 }'
}

ranges=(15m 1h)
for r in 3h 6h 12h 24h; do [ "$hours" -ge "${r%h}" ] && ranges+=("$r"); done
declare -A raw_ms raw_rows raw_nb raw_sum job_ms job_sum
to_ms=$(( $(date +%s) * 1000 )) # one fixed range per R for both timings: from = to - R
time_ranges() { # PREFIX: times every range into raw_ms[PREFIX R], keeps the answers
	local r span from
	for r in "${ranges[@]}"; do
		case $r in *m) span=$(( ${r%m} * 60000 )) ;; *h) span=$(( ${r%h} * 3600000 )) ;; esac
		from=$(( to_ms - span ))
		raw_rows[$r]=$(sql "SELECT count() FROM samples WHERE time_ms BETWEEN $from AND $to_ms
			AND node_id LIKE '666c656574%' FORMAT TSV")
		raw_nb[$r]=$(sql "SELECT count() FROM batches WHERE window_end_ns >= $from * 1000000
			AND window_start_ns <= $to_ms * 1000000 AND node_id LIKE '666c656574%' FORMAT TSV")
		raw_ms[$1$r]=$(median_ms "/api/v1/flamegraph?from=$((from / 1000)).$(printf %03d $((from % 1000)))&to=$((to_ms / 1000)).$(printf %03d $((to_ms % 1000)))&format=folded&limit=100000")
		raw_sum[$1$r]="$(grep -c '' "$work/answer" || true) $(awk '{ s += $NF } END { print s + 0 }' "$work/answer")"
		sort "$work/answer" >"$work/answer-$1$r"
		[ -n "$job" ] || continue
		job_ms[$1$r]=$(median_ms "/api/v1/flamegraph?job=$job&from=$((from / 1000)).$(printf %03d $((from % 1000)))&to=$((to_ms / 1000)).$(printf %03d $((to_ms % 1000)))&format=folded&limit=100000")
		job_sum[$1$r]="$(grep -c '' "$work/answer" || true) $(awk '{ s += $NF } END { print s + 0 }' "$work/answer")"
		sort "$work/answer" >"$work/job-$1$r"
	done
}
time_ranges raw

# The slots are built by a replica alone on the database (with another alive, the slots' owner
# might be that one), then the serving replica comes back for the second timing.
kill -TERM "$pid" && wait "$pid" 2>/dev/null || true
pid=""
t1=$(date +%s.%N)
serve "$work/port2" "$work/server2.log" 1
pid2=$!
stale_sql="SELECT count() FROM (SELECT span_ms, start_ms, sum(batches) AS n FROM fleet_slot_batches
	GROUP BY span_ms, start_ms) ANY LEFT JOIN (SELECT span_ms, start_ms,
	argMax(batches, (at_ns, summary)) AS sb FROM fleet_slot_state GROUP BY span_ms, start_ms)
	USING span_ms, start_ms WHERE n != sb"
settled_sql() { echo "$stale_sql AND start_ms + span_ms <= $(( $(date +%s) * 1000 - 180000 )) FORMAT TSV"; }
for _ in $(seq 3600); do
	left=$(sql "$(settled_sql)")
	[ "$left" = 0 ] && break
	sleep 1
done
t2=$(date +%s.%N)
kill -TERM "$pid2" && wait "$pid2" 2>/dev/null || true
pid2=""
serve "$work/port" "$work/server.log" 3600
pid=$!
url=http://127.0.0.1:$(cat "$work/port")
slots=$(sql "SELECT uniqExact(span_ms, start_ms), sum(span_ms = 60000), sum(span_ms = 3600000)
	FROM (SELECT span_ms, start_ms FROM fleet_slot_state GROUP BY span_ms, start_ms) FORMAT TSV")
srows=$(sql "SELECT count() FROM fleet_slots FORMAT TSV")
sbytes=$(sql "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'fleet'
	AND table = 'fleet_slots' AND active FORMAT TSV")
echo "slots built by a replica in $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", b - a }') s" \
	"(slots, minutes, hours: $slots; $srows summary rows, $((sbytes / 1024)) KiB on disk)" >&2
time_ranges slots

echo "| range | nodes | batches | sample rows | raw rows ms | fleet slots ms | ratio | stacks (raw / slots) | samples (raw / slots) | answers |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for r in "${ranges[@]}"; do
	a=${raw_ms[raw$r]} b=${raw_ms[slots$r]}
	ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", b / a; else print "-" }')
	read -r sa na <<<"${raw_sum[raw$r]}"
	read -r sb nb <<<"${raw_sum[slots$r]}"
	same=$(cmp -s "$work/answer-raw$r" "$work/answer-slots$r" && echo same || echo DIFFERENT)
	[ "${a%% *}" = error ] && same="-"
	echo "| $r | $nodes | ${raw_nb[$r]} | ${raw_rows[$r]} | $a | $b | $ratio | $sa / $sb | $na / $nb | $same |"
done
[ -n "$job" ] || exit 0
echo
echo "| range | one job ($job) ms, raw phase | slots phase | stacks | samples | answers |"
echo "|---|---:|---:|---:|---:|---|"
for r in "${ranges[@]}"; do
	read -r sa na <<<"${job_sum[raw$r]}"
	same=$(cmp -s "$work/job-raw$r" "$work/job-slots$r" && echo same || echo DIFFERENT)
	echo "| $r | ${job_ms[raw$r]} | ${job_ms[slots$r]} | $sa | $na | $same |"
done
