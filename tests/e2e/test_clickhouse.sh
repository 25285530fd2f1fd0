#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ClickHouse as the store: a real agent's requests go through a tee to a server on ClickHouse
# (a private clickhouse-server) and to a server on SQLite; both answer the same flame graph,
# totals, nodes and processes; with the simulated training job (when built) also the same
# off-CPU, GPU launch, GPU time and per-process wall-clock flame graphs and GPU view. ClickHouse
# down: ingest answers 503 with Retry-After, the agent spools, and once ClickHouse is back the
# spooled batches arrive with nothing lost. A simulated training job with a delayed rank: the
# same job, ranks, communicators and straggler analysis.
. "$(dirname "$0")/lib.sh"
require_root
[ -x /usr/sbin/clickhouse-server ] || skip_all "clickhouse-server is not installed (make deps)"

CHDIR=$E2E_TMP/clickhouse
ch_stop() { "$ROOT/tests/tools/clickhouse-private.sh" stop "$CHDIR"; }
# A process in a crafted systemd scope (its pod-shaped twin: test_identity.sh) gives the
# stores an identity to keep: ClickHouse must list and filter it as SQLite does.
CGROOT=
for d in /sys/fs/cgroup /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
	if [ "$d" = /sys/fs/cgroup ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then continue; fi
	[ -e "$d/cgroup.procs" ] && CGROOT=$d && break
done
UNIT=sysom-e2e-ch-$$.scope
UNIT_CG=
[ -n "$CGROOT" ] && mkdir -p "$CGROOT/sysom-e2e-ch.slice/$UNIT" 2>/dev/null &&
	UNIT_CG=$CGROOT/sysom-e2e-ch.slice/$UNIT
trap 'ch_stop; [ -n "$UNIT_CG" ] && rmdir "$UNIT_CG" "${UNIT_CG%/*}" 2>/dev/null; e2e_cleanup' EXIT
CH=$("$ROOT/tests/tools/clickhouse-private.sh" start "$CHDIR") || { echo "clickhouse did not start" >&2; exit 1; }
diag "clickhouse at $CH"

start_server sq || exit 1
SQ_URL=$SERVER_URL
# (Fleet slots every second: whichever replica owns them builds the settled minutes early, so
# that the fleet-wide reads below also read summaries.)
start_server chs --clickhouse-url "${CH}?database=e2e" --clickhouse-timeout 3s \
	--fleet-slots-interval 1 || exit 1
CH_URL=$SERVER_URL CH_PID=$SERVER_PID

python3 "$ROOT/tests/e2e/tee_proxy.py" "$E2E_TMP/tee.port" "$CH_URL" "$SQ_URL" "$E2E_TMP/tee.requests" \
	>>"$E2E_TMP/tee.log" 2>&1 &
E2E_PIDS+=("$!")
wait_until 10 test -s "$E2E_TMP/tee.port" || { echo "tee did not start" >&2; exit 1; }
TEE_URL=http://127.0.0.1:$(cat "$E2E_TMP/tee.port")

# The simulated training job (when built) adds off-CPU time, GPU launches, kernel timing,
# NCCL profiles and OS rows, so that those flame graphs are compared too.
SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
HAVE_SIMJOB=1
for f in "$SIMJOB" "$PLUGIN" "$CUPTI_LIB" "$SIMJOB_DIR/libcupti.so"; do
	[ -e "$f" ] || HAVE_SIMJOB=
done
GPU_OPTS=()
[ -n "$HAVE_SIMJOB" ] && GPU_OPTS=(--off-cpu-min 1ms --gpu-launch-duty 1
	--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1")
start_agent agent "$TEE_URL" --sample-rate 1 "${GPU_OPTS[@]}" || exit 1
UPID=
if [ -n "$UNIT_CG" ]; then
	# The shell moves itself into the scope, then becomes the workload (runs alongside).
	bash -c "echo \$\$ > '$UNIT_CG/cgroup.procs' && exec '$WORKLOAD_BIN' 2 --quiet" &
	UPID=$!
fi
read -r WPID WCPU < <(run_workload 4 --mode mixed --threads 2)
[ -n "$UPID" ] && wait "$UPID"
diag "workload pid $WPID used ${WCPU}s of CPU"
if [ -n "$HAVE_SIMJOB" ]; then
	SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock NCCL_PROFILER_PLUGIN=$PLUGIN \
		CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$SIMJOB_DIR/libcupti.so \
		SYSOM_NCCL_WINDOW_MS=250 SYSOM_CUPTI_WINDOW_MS=250 \
		timeout 120 "$SIMJOB" --ranks 2 --seconds 4 --cpu-us 2000 --kernel-us 3000 \
		--print-env >"$E2E_TMP/job.log" 2>&1
	# No fault: a straggler would open an incident, and the incident checks below expect none.
	check "simjob (2 ranks, 4 s) exits 0" test $? -eq 0
	sleep 3 # a batch interval
fi
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
LOGGED=$(agent_logged_samples "$E2E_TMP/agent.log")
INGESTS=$(grep -c '^POST /api/v1/ingest ' "$E2E_TMP/tee.requests")
diag "$INGESTS ingest requests; agent logged $LOGGED samples"
check "every ingest was stored by both servers (200 and 200)" \
	bash -c "[ $INGESTS -gt 0 ] && ! grep '^POST /api/v1/ingest ' '$E2E_TMP/tee.requests' | grep -vq ' 200 200\$'"

SERVER_URL=$CH_URL
CH_TOTAL=$(stored_total)
check "the ClickHouse server holds exactly the samples the agent shipped ($CH_TOTAL)" test "$CH_TOTAL" -eq "$LOGGED"
# Same groups on both; their order among equal counts follows stack ids, which differ.
ctl flamegraph --from -1d --to now --format folded | sort >"$E2E_TMP/ch.folded"
ctl flamegraph --pid "$WPID" --from -10m --to now --format folded | sort >"$E2E_TMP/ch.pid.folded"
# Receive times differ by server (the tee posts one after the other): the rest must not.
ctl nodes | awk '{ NF--; print }' >"$E2E_TMP/ch.nodes"
ctl processes --from -10m | sort >"$E2E_TMP/ch.processes"
# The agent's counters per node (schema 13 reads them from a summary kept at insert).
curl -sf "$CH_URL/metrics" | grep '^sysom_agent_' | sort >"$E2E_TMP/ch.counters"
SERVER_URL=$SQ_URL
SQ_TOTAL=$(stored_total)
ctl flamegraph --from -1d --to now --format folded | sort >"$E2E_TMP/sq.folded"
ctl flamegraph --pid "$WPID" --from -10m --to now --format folded | sort >"$E2E_TMP/sq.pid.folded"
ctl nodes | awk '{ NF--; print }' >"$E2E_TMP/sq.nodes"
ctl processes --from -10m | sort >"$E2E_TMP/sq.processes"
curl -sf "$SQ_URL/metrics" | grep '^sysom_agent_' | sort >"$E2E_TMP/sq.counters"
check "both servers hold the same total ($SQ_TOTAL)" test "$SQ_TOTAL" -eq "$CH_TOTAL"
check "the whole-node flame graph is the same on both ($(wc -l <"$E2E_TMP/ch.folded") stacks)" \
	bash -c "[ -s '$E2E_TMP/ch.folded' ] && diff -q '$E2E_TMP/sq.folded' '$E2E_TMP/ch.folded'"
check "the workload's flame graph is the same on both" \
	bash -c "[ -s '$E2E_TMP/ch.pid.folded' ] && diff -q '$E2E_TMP/sq.pid.folded' '$E2E_TMP/ch.pid.folded'"
check "kernel frames are symbolized on ClickHouse too (uploaded kallsyms)" \
	grep -Eq 'entry_SYSCALL|do_syscall' "$E2E_TMP/ch.folded"
check "nodes are listed the same (but for their last receive time)" diff -q "$E2E_TMP/sq.nodes" "$E2E_TMP/ch.nodes"
check "processes are listed the same" diff -q "$E2E_TMP/sq.processes" "$E2E_TMP/ch.processes"
check "the agent counters in /metrics are the same ($(wc -l <"$E2E_TMP/ch.counters") series)" \
	bash -c "[ -s '$E2E_TMP/ch.counters' ] && diff -q '$E2E_TMP/sq.counters' '$E2E_TMP/ch.counters'"
if [ -n "$UNIT_CG" ]; then
	for side in ch sq; do
		[ $side = ch ] && SERVER_URL=$CH_URL || SERVER_URL=$SQ_URL
		curl -sf "$SERVER_URL/api/v1/processes?from=-10m&unit=$UNIT" | python3 -c 'import json,sys
print(json.dumps(json.load(sys.stdin)["processes"], sort_keys=True))' >"$E2E_TMP/$side.unit.json"
		ctl flamegraph --unit "$UNIT" --from -1d --to now --format folded | sort \
			>"$E2E_TMP/$side.unit.folded"
	done
	check "processes?unit= on ClickHouse: the scope's process with its identity, as on SQLite" \
		bash -c "grep -q '\"unit\": \"$UNIT\"' '$E2E_TMP/ch.unit.json' && grep -q '\"pid\": $UPID,' '$E2E_TMP/ch.unit.json' && cmp -s '$E2E_TMP/sq.unit.json' '$E2E_TMP/ch.unit.json'"
	check "the unit's flame graph is the same on both ($(wc -l <"$E2E_TMP/ch.unit.folded") stacks)" \
		bash -c "[ -s '$E2E_TMP/ch.unit.folded' ] && diff -q '$E2E_TMP/sq.unit.folded' '$E2E_TMP/ch.unit.folded'"
	SERVER_URL=$CH_URL
	check "an unknown pod's flame graph on ClickHouse is empty, not 501" \
		test "$(curl -s -o /dev/null -w '%{http_code}' "$CH_URL/api/v1/flamegraph?from=-1d&pod=no-such-pod")" = 200
else
	diag "SKIP identity on ClickHouse: no writable cgroup hierarchy"
fi

# Off-CPU, GPU launch and GPU time flame graphs, and the wall-clock one of the workload and
# of each simjob rank (it needs one process): the same groups and weights.
VIEWS=("wall --pid $WPID")
[ -n "$HAVE_SIMJOB" ] && VIEWS+=(off-cpu gpu-launch gpu-time)
for pid in $([ -n "$HAVE_SIMJOB" ] && awk '$1 == "env" && $2 == "rank" { print $5 }' "$E2E_TMP/job.log"); do
	VIEWS+=("wall --pid $pid")
done
for view in "${VIEWS[@]}"; do
	name=${view// /_}
	for side in ch sq; do
		[ $side = ch ] && SERVER_URL=$CH_URL || SERVER_URL=$SQ_URL
		# shellcheck disable=SC2086 # the view is a kind and its options
		ctl flamegraph --kind $view --from -1d --to now --format folded --limit 100000 |
			sort >"$E2E_TMP/$side.$name.folded"
	done
	check "the $view flame graph is the same on both ($(wc -l <"$E2E_TMP/ch.$name.folded") stacks)" \
		bash -c "[ -s '$E2E_TMP/ch.$name.folded' ] && diff -q '$E2E_TMP/sq.$name.folded' '$E2E_TMP/ch.$name.folded'"
done
if [ -n "$HAVE_SIMJOB" ]; then
	# The job's GPU timing rows (kernels, NCCL profiles and links) and its ranks' off-CPU
	# graphs: the same on both.
	JOB=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job.log" | head -1)
	for side in ch sq; do
		[ $side = ch ] && SERVER_URL=$CH_URL || SERVER_URL=$SQ_URL
		# The range's ends are "now" on each server: the rest must be the same.
		curl -sf "$SERVER_URL/api/v1/jobs/$JOB/gpu?from=-1d&to=now" | python3 -c 'import json,sys
d = json.load(sys.stdin); d.pop("from"); d.pop("to"); print(json.dumps(d, sort_keys=True))' \
			>"$E2E_TMP/$side.gpu.json"
		ctl flamegraph --kind off-cpu --job "$JOB" --rank 1 --from -1d --to now --format folded \
			--limit 100000 | sort >"$E2E_TMP/$side.off1.folded"
	done
	check "job $JOB's GPU view is the same on both ($(wc -c <"$E2E_TMP/ch.gpu.json") bytes)" \
		bash -c "grep -q 'sim_gemm' '$E2E_TMP/ch.gpu.json' && cmp -s '$E2E_TMP/sq.gpu.json' '$E2E_TMP/ch.gpu.json'"
	check "rank 1's off-CPU flame graph is the same on both ($(wc -l <"$E2E_TMP/ch.off1.folded") stacks)" \
		bash -c "[ -s '$E2E_TMP/ch.off1.folded' ] && diff -q '$E2E_TMP/sq.off1.folded' '$E2E_TMP/ch.off1.folded'"
	check "ClickHouse's off-CPU flame graph shows the job's ranks blocked in the kernel" \
		bash -c "[ -s '$E2E_TMP/ch.off-cpu.folded' ] && grep -q 'schedule' '$E2E_TMP/ch.off-cpu.folded'"
	check "ClickHouse's GPU launch and time flame graphs are not empty" \
		test -s "$E2E_TMP/ch.gpu-launch.folded" -a -s "$E2E_TMP/ch.gpu-time.folded"
fi
SERVER_URL=$CH_URL


# Per-job settings are stored on ClickHouse: the same answers as on SQLite (baselines: the
# unit tests; computing one needs the job's collectives on ClickHouse).
for url in "$CH_URL" "$SQ_URL"; do
	curl -sf -X PUT --data '{"lookback_s": 20, "resolve_after_s": 2}' \
		"$url/api/v1/jobs/e2e-ch/settings" >/dev/null || echo "settings PUT to $url failed" >&2
	curl -sf "$url/api/v1/jobs/e2e-ch/settings" >"$E2E_TMP/settings.$([ "$url" = "$CH_URL" ] && echo ch || echo sq)"
done
check "job settings are stored and read back on ClickHouse" \
	bash -c "grep -q '\"lookback_s\": *20' '$E2E_TMP/settings.ch' && diff -q '$E2E_TMP/settings.sq' '$E2E_TMP/settings.ch'"
STATUS=$(curl -s -o "$E2E_TMP/diag.ch" -w '%{http_code}' "$CH_URL/api/v1/diagnoses?from=-1h&to=now")
# Jobs are on ClickHouse too: the monitor may already have opened incidents for jobs the agent
# saw on this machine (other tests' jobs), so the listing is checked, not its emptiness.
check "incidents are listed on ClickHouse ($STATUS)" \
	bash -c "[ '$STATUS' = 200 ] && python3 -c 'import json,sys; assert isinstance(json.load(open(sys.argv[1]))[\"diagnoses\"], list)' '$E2E_TMP/diag.ch'"

# Retention: a day partition long past (written straight into ClickHouse) is dropped by a
# replica started with --retention-days 1; today's data stay. A copy of everything stored so
# far, ten days back (new batch identities, the same attempts; no job ranks, so not their
# batch rows' copies of them either), raw rows and per-minute rollups: the replica drops its
# raw days but keeps the rollups and the batches and processes they are read through (90
# days), and draws the same ten-day-old flame graphs from them. The batch rows go last, as the
# server writes them: a fleet-slot pass of the first server between them and the rows would
# summarise the ten-day-old slots without their rows, current as far as their counts tell.
chq() { curl -sSf "${CH}?database=e2e" --data-binary "$1"; }
D10_MS=$((10 * 86400000))
D10_NS=$((D10_MS * 1000000))
chq "INSERT INTO processes SELECT day - 10, node_id, process, tgid, start_time_ns, generation,
  ppid, comm, exe, cmdline, first_seen_ns, last_seen_ns, received_ns, attempt FROM processes" &&
chq "INSERT INTO samples SELECT day - 10, node_id, time_ms - $D10_MS, process, tgid, tid, cpu,
  thread_comm, kernel_stack, user_stack, count, attempt FROM samples" &&
chq "INSERT INTO offcpu SELECT day - 10, node_id, time_ms - $D10_MS, process, tgid, tid,
  thread_comm, state, kernel_stack, user_stack, count, blocked_ns, max_ns, attempt FROM offcpu" &&
chq "INSERT INTO sample_minutes SELECT day - 10, node_id, minute_ms - $D10_MS, process, tgid,
  user_stack, kernel_stack, count, attempt FROM sample_minutes" &&
chq "INSERT INTO offcpu_minutes SELECT day - 10, node_id, minute_ms - $D10_MS, process, tgid,
  user_stack, kernel_stack, blocked_ns, attempt FROM offcpu_minutes" &&
chq "INSERT INTO batches SELECT day - 10, node_id, epoch + 1, sequence, attempt, content_hash,
  received_ns - $D10_NS, window_start_ns - $D10_NS, window_end_ns - $D10_NS, samples,
  sample_rows, hostname, kernel_release, machine, agent_version, boot_id, kernel_object,
  sample_hz, sample_rate_ppm, online_cpus, counter_ids, counter_values, window_day - 10,
  emptyArrayUInt64(), emptyArrayString(), emptyArrayInt32(), emptyArrayInt32(), pn_process,
  pn_comm FROM batches"
check "a ten-day-old copy written into ClickHouse" test $? -eq 0
# The raw answers come from the replica itself, started with a retention that keeps ten days
# (each server symbolizes user frames from its own symbol repository), read for this node
# (every row is this node's): a node's read never uses the fleet slots that the first server
# may already be building for the copy.
start_server chr --clickhouse-url "${CH}?database=e2e" --retention-days 30 || exit 1
RET_PID=$SERVER_PID
OLD_VIEWS=(cpu)
[ -n "$HAVE_SIMJOB" ] && OLD_VIEWS+=(off-cpu)
for view in "${OLD_VIEWS[@]}"; do
	ctl flamegraph --kind "$view" --from -11d --to -9d --node "$(hostname)" --format folded \
		--limit 100000 | sort >"$E2E_TMP/ch.old.raw.$view.folded"
done
old_total() { # [FILTER...]
	ctl flamegraph --from -11d --to -9d --format json "$@" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['total'])"
}
RAW_OLD=$(old_total --node "$(hostname)")
check "the ten-day-old copy answers from raw rows what today's did ($RAW_OLD)" \
	test "$RAW_OLD" -eq "$CH_TOTAL"
stop_pid "$RET_PID"
# Fleet slots (schema 14): a replica building them every second (this one or the first,
# whichever owns them) summarises the ten-day-old minutes and hours (settled long ago), and its
# fleet-wide flame graphs of that range, read from the summaries, are the raw rows' answers.
start_server chf --clickhouse-url "${CH}?database=e2e" --retention-days 30 \
	--fleet-slots-interval 1 || exit 1
RET_PID=$SERVER_PID
old_stale() { # ten-day-old slots whose newest summary is missing or older than their batches
	chq "SELECT count() FROM (SELECT span_ms, start_ms, sum(batches) AS n FROM fleet_slot_batches
	  WHERE day <= today() - 9 GROUP BY span_ms, start_ms) ANY LEFT JOIN (SELECT span_ms,
	  start_ms, argMax(batches, (at_ns, summary)) AS sb FROM fleet_slot_state
	  GROUP BY span_ms, start_ms) USING span_ms, start_ms WHERE n != sb"
}
old_summarised() { [ "$(old_stale)" = 0 ]; }
check "a replica with --fleet-slots-interval 1 summarises the ten-day-old slots" \
	wait_until 60 old_summarised
check "the summaries exist ($(chq "SELECT count() FROM fleet_slot_state WHERE day <= today() - 9") slots)" \
	test "$(chq "SELECT count() FROM fleet_slot_state WHERE day <= today() - 9")" -gt 0
check "the ten-day-old total from the summaries is the rows' ($(old_total))" \
	test "$(old_total)" -eq "$RAW_OLD"
for view in "${OLD_VIEWS[@]}"; do
	ctl flamegraph --kind "$view" --from -11d --to -9d --format folded --limit 100000 |
		sort >"$E2E_TMP/ch.old.slots.$view.folded"
	check "the same $view flame graph from the summaries ($(wc -l <"$E2E_TMP/ch.old.slots.$view.folded") stacks)" \
		diff -q "$E2E_TMP/ch.old.raw.$view.folded" "$E2E_TMP/ch.old.slots.$view.folded"
done
stop_pid "$RET_PID"
chq "INSERT INTO samples (day, node_id, time_ms, count, attempt) VALUES ('2020-01-01', 'old', 1577840400000, 5, 1)"
# A stack only 2020-01-01 named (schema 16: stacks are dated and collected with the rollups).
chq "INSERT INTO stack_days (day, id, ident) VALUES ('2020-01-01', 4242424242, 'old')"
old_parts() { chq "SELECT count() FROM system.parts WHERE database = 'e2e' AND active AND partition_id = '20200101'"; }
check "the old partition is there before retention" test "$(old_parts)" -ge 2
STACKS_BEFORE=$(chq "SELECT uniqExact(id) FROM stack_days WHERE day >= today() - 1")
start_server chr --clickhouse-url "${CH}?database=e2e" --retention-days 1 || exit 1
RET_PID=$SERVER_PID RET_URL=$SERVER_URL
SERVER_URL=$CH_URL
no_old_parts() { [ "$(old_parts)" = 0 ]; }
check "--retention-days 1 drops the 2020-01-01 partition" wait_until 20 no_old_parts
check "and logs it" wait_until 5 grep -q 'retention: dropped' "$E2E_TMP/chr.log"
check "today's data stay ($(stored_total) samples)" test "$(stored_total)" -eq "$CH_TOTAL"
check "the old stack goes with its day, today's $STACKS_BEFORE stay" \
	test "$(chq "SELECT count() FROM stack_days WHERE id = 4242424242")/$(chq "SELECT uniqExact(id) FROM stack_days")" = "0/$STACKS_BEFORE"
d10() { chq "SELECT count() FROM $1 WHERE day = today() - 10"; }
check "the ten-day-old raw rows are dropped" test "$(d10 samples)$(d10 offcpu)" = 00
check "their rollups, batches and processes stay" \
	bash -c "[ $(d10 sample_minutes) -gt 0 ] && [ $(d10 batches) -gt 0 ] && [ $(d10 processes) -gt 0 ]"
check "a server without retention (raw rows only) finds nothing of this node ten days back" \
	test "$(old_total --node "$(hostname)")" -eq 0
check "but its fleet-wide read, from the fleet summaries kept with the rollups, still does" \
	test "$(old_total)" -eq "$RAW_OLD"
SERVER_URL=$RET_URL
check "the replica with retention answers the ten-day-old total from the rollups" \
	test "$(old_total)" -eq "$RAW_OLD"
for view in "${OLD_VIEWS[@]}"; do
	ctl flamegraph --kind "$view" --from -11d --to -9d --format folded --limit 100000 |
		sort >"$E2E_TMP/ch.old.rollup.$view.folded"
	check "and the same $view flame graph ($(wc -l <"$E2E_TMP/ch.old.rollup.$view.folded") stacks)" \
		bash -c "[ -s '$E2E_TMP/ch.old.raw.$view.folded' ] && diff -q '$E2E_TMP/ch.old.raw.$view.folded' '$E2E_TMP/ch.old.rollup.$view.folded'"
done
SERVER_URL=$CH_URL
stop_pid "$RET_PID"

# ClickHouse goes away: the agent's batches are answered 503 and stay in its spool.
ch_stop
start_agent agent2 "$CH_URL" --sample-rate 1 || exit 1
read -r WPID2 _ < <(run_workload 3 --mode cpu --threads 1)
check "ingest answers 503 while ClickHouse is down (the agent retries)" \
	wait_until 20 grep -q 'not delivered.*(HTTP 503)' "$E2E_TMP/agent2.log"
STATUS=$(curl -s -D "$E2E_TMP/flame.headers" -o /dev/null -w '%{http_code}' \
	"$CH_URL/api/v1/flamegraph?from=-1h&to=now")
check "a query answers 503 with Retry-After while ClickHouse is down ($STATUS)" \
	bash -c "[ '$STATUS' = 503 ] && grep -qi '^retry-after:' '$E2E_TMP/flame.headers'"
check "the server keeps running" kill -0 "$CH_PID"
stop_pid "$AGENT_PID"
check "agent2 exits 0 with its undelivered batches in the spool" test $? -eq 0
"$ROOT/tests/tools/clickhouse-private.sh" start "$CHDIR" >/dev/null
check "ClickHouse is back on its port" curl -sf "${CH}ping" -o /dev/null
# The same spool again: the agent delivers what it kept, then its new batches.
start_agent agent2 "$CH_URL" --sample-rate 1 || exit 1
sleep 3
stop_pid "$AGENT_PID"
check "agent2 exits 0 after delivering its spool" test $? -eq 0
LOGGED2=$(agent_logged_samples "$E2E_TMP/agent2.log")
SERVER_URL=$CH_URL
total_is() { [ "$(stored_total)" -eq "$1" ]; }
check "nothing lost: the ClickHouse server holds both agents' samples" \
	wait_until 20 total_is $((LOGGED + LOGGED2))
diag "stored $(stored_total) of $((LOGGED + LOGGED2))"

# A training job through the tee: the simulated 8-rank job with rank 5 sleeping 4 ms before
# every all-reduce. Its ranks, communicators and NCCL calls are stored by both servers, and the
# straggler answer (API and sysomctl) is the same on both.
SIMJOB_DIR=$BUILD/tests/fixtures/simjob
if [ -x "$SIMJOB_DIR/simjob" ]; then
	start_agent agentj "$TEE_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
		--sample-rate 1 || exit 1
	wait_until 30 grep -q "batch 1:" "$E2E_TMP/agentj.log"
	timeout 120 "$SIMJOB_DIR/simjob" --ranks 8 --iterations 60 --cpu-us 1000 --kernel-us 1000 \
		--print-env --fault rank=5,kind=delay,amount=4000 >"$E2E_TMP/slow.log" 2>&1
	check "job with a 4 ms delay on rank 5 exits 0" test $? -eq 0
	sleep 3 # a batch interval
	stop_pid "$AGENT_PID"
	check "agentj exits 0 after SIGTERM" test $? -eq 0
	check "every ingest of agentj was stored by both servers (200 and 200)" \
		bash -c "! grep '^POST /api/v1/ingest ' '$E2E_TMP/tee.requests' | grep -vq ' 200 200\$'"
	SLOW=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/slow.log" | head -1)
	# The straggler analysis (lateness per rank and instance) must be the same; the layer
	# diagnosis of each straggler also reads GPU and OS rows, and the query's own from/to
	# (strip_analysis, lib.sh).
	for side in ch sq; do
		[ $side = ch ] && SERVER_URL=$CH_URL || SERVER_URL=$SQ_URL
		# agent2 posted to ClickHouse alone: compare the job both servers saw.
		curl -sf "$SERVER_URL/api/v1/jobs" | python3 -c 'import json,sys
for j in json.load(sys.stdin)["jobs"]:
    if j["job"] == sys.argv[1]: print(json.dumps(j, sort_keys=True))' "$SLOW" >"$E2E_TMP/$side.jobs"
		curl -sf "$SERVER_URL/api/v1/jobs/$SLOW" >"$E2E_TMP/$side.job.json"
		curl -sf "$SERVER_URL/api/v1/jobs/$SLOW/stragglers" | strip_analysis \
			>"$E2E_TMP/$side.stragglers.json"
		ctl stragglers --job "$SLOW" | grep -v '^  ' >"$E2E_TMP/$side.stragglers.txt"
	done
	check "the job is listed the same on both" \
		bash -c "[ -s '$E2E_TMP/sq.jobs' ] && diff -q '$E2E_TMP/sq.jobs' '$E2E_TMP/ch.jobs'"
	check "the job's ranks and communicators are the same on both" \
		bash -c "grep -q '\"communicators\"' '$E2E_TMP/sq.job.json' && cmp -s '$E2E_TMP/sq.job.json' '$E2E_TMP/ch.job.json'"
	check "rank 5 is a straggler on ClickHouse" \
		grep -qE '^STRAGGLER: rank 5 \(.* pid [0-9]+\), persistent' "$E2E_TMP/ch.stragglers.txt"
	check "the straggler analysis is the same on both (API: $(grep -c '"rank"' "$E2E_TMP/ch.stragglers.json") rank entries)" \
		bash -c "grep -q '\"instances\": 60' '$E2E_TMP/ch.stragglers.json' && cmp -s '$E2E_TMP/sq.stragglers.json' '$E2E_TMP/ch.stragglers.json'"
	check "the straggler answer is the same on both (sysomctl, but for the layer lines)" \
		diff -q "$E2E_TMP/sq.stragglers.txt" "$E2E_TMP/ch.stragglers.txt"
else
	diag "simjob not built (needs nccl.h and cuda.h): the straggler comparison is skipped"
fi

# A straggler incident opened by the monitor of a ClickHouse-backed server is listed, shown and
# resolved through the API. The monitor needs the job's collectives on ClickHouse: while those
# answer 501 (not stored there yet) this part is skipped and says so.
SIMJOB_DIR=$BUILD/tests/fixtures/simjob
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
start_server chd --clickhouse-url "${CH}?database=e2e_diag" --analysis-interval 1s || exit 1
DIAG_URL=$SERVER_URL
JOBS_STATUS=$(curl -s -o /dev/null -w '%{http_code}' "$DIAG_URL/api/v1/jobs")
if [ "$JOBS_STATUS" = 501 ] || [ ! -x "$SIMJOB_DIR/simjob" ] || [ ! -e "$PLUGIN" ]; then
	diag "SKIP straggler incident on ClickHouse: /api/v1/jobs answers $JOBS_STATUS, simjob $([ -x "$SIMJOB_DIR/simjob" ] && echo built || echo missing)"
else
	json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
	curl -sf -X PUT --data '{"lookback_s": 20, "resolve_after_s": 2}' \
		"$DIAG_URL/api/v1/jobs/e2e-chd/settings" >/dev/null
	start_agent agent3 "$DIAG_URL" --sample-rate 1 \
		--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" || exit 1
	SYSOM_SOCKET_PATH=$E2E_TMP/agent3.sock NCCL_PROFILER_PLUGIN=$PLUGIN SYSOM_NCCL_WINDOW_MS=250 \
		timeout 180 "$SIMJOB_DIR/simjob" --ranks 8 --job-id e2e-chd --seconds 10 --cpu-us 2000 \
		--kernel-us 1000 --fault rank=2,kind=cpu,amount=3000 >"$E2E_TMP/e2e-chd.log" 2>&1
	check "the straggler job exits 0" test $? -eq 0
	straggler_id() {
		curl -sf "$DIAG_URL/api/v1/diagnoses?job=e2e-chd&from=-1h&to=now" |
			json "next((x['id'] for x in d['diagnoses'] if x['kind'] == 'straggler' and x.get('rank') == 2), '')"
	}
	has_straggler() { [ -n "$(straggler_id)" ]; }
	check "the monitor opened a straggler incident for rank 2 on ClickHouse" wait_until 30 has_straggler
	ID=$(straggler_id)
	diag "incident $ID"
	check "it is shown by id (JSON)" \
		bash -c "curl -sf '$DIAG_URL/api/v1/diagnoses/$ID' | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"id\"] == $ID and d[\"rank\"] == 2'"
	check "and as text" bash -c "curl -sf '$DIAG_URL/api/v1/diagnoses/$ID?format=text' | grep -q 'diagnosis $ID'"
	resolved() {
		curl -sf "$DIAG_URL/api/v1/diagnoses/$ID" | json "d['status']" | grep -qx resolved
	}
	check "it resolves once the job's data are older than its lookback" wait_until 60 resolved
	stop_pid "$AGENT_PID"
fi
finish
