#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent under an exec storm (short-lived processes, programs and libraries with fresh Build
# IDs) and 10,000 short-lived threads, next to a steady process with a known call chain: its
# memory stops growing, the steady process's samples keep arriving during and after the storm,
# nothing is lost, and it exits cleanly (no leak under LeakSanitizer). A short run of
# bench/agent_churn.py (the benchmark measures the same over minutes), so neither can rot.
. "$(dirname "$0")/lib.sh"
require_root
[ -x "$BUILD/tests/fixtures/churn_workload" ] || { echo "missing churn_workload: build first" >&2; exit 1; }

# So that RSS follows the live heap: in sanitizer builds no quarantine (freed blocks are reused
# at once rather than filling ASan's 256 MiB quarantine; leaks are still reported at exit); in
# release builds a fixed mmap threshold (glibc raises it after a large free, then keeps freed
# symbol upload buffers resident: a step in RSS, not growth).
export ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072

# Rates below the benchmark's (300 execs/s over 150 s): a 2-core machine with sanitized daemons
# and other tests just before must keep up. Assertions have wide margins; none is on timing.
if ! python3 "$ROOT/bench/agent_churn.py" "$BUILD" --warmup 4 --storm 24 --cooldown 8 \
	--exec-rate 200 --fresh-rate 10 --threads 10000 --thread-wave 500 \
	--work-dir "$E2E_TMP/churn" --json "$E2E_TMP/churn.json" >"$E2E_TMP/bench.log" 2>&1; then
	not_ok "the churn run completed"
	cp "$E2E_TMP"/churn/*.log "$E2E_TMP"/ 2>/dev/null
	finish
	exit 1
fi
ok "the churn run completed"
sed 's/^/# /' "$E2E_TMP/bench.log"

# field PATH: one number of the run's JSON ("memory.rss_max", "agent.losses.events_lost").
field() {
	python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(int(v) if isinstance(v, (bool, int)) or float(v).is_integer() else round(v, 3))' \
		"$E2E_TMP/churn.json" "$1"
}
MIB=$((1 << 20))

check "the storm ran: $(field storm.execs) execs, none failed" \
	test "$(field storm.execs)" -ge 2400 -a "$(field storm.exec_failures)" -eq 0
check "fresh Build IDs: $(field storm.fresh_objects) programs and libraries" \
	test "$(field storm.fresh_objects)" -ge 100
check "all 10000 threads ran" test "$(field storm.threads)" -eq 10000

# Memory (medians over quarters of the storm, so a transient spike does not count): a bound on
# what the storm added, and a smaller one on what its second half added, where caches filling
# up to their bounds (fresh objects, unwind tables kept a minute) add 1-1.5 MiB. 2400 processes
# separate the two quarters compared: a leak of about 1.5 KiB per process fails this; the
# benchmark, over minutes, sees 15 bytes per exec.
GROWTH=$(field memory.growth_storm_bytes)
LATER=$(field memory.growth_second_half_bytes)
check "agent RSS grew by $((GROWTH / 1024)) KiB in the storm (at most 64 MiB)" \
	test "$GROWTH" -le $((64 * MIB))
check "of which $((LATER / 1024)) KiB in its second half (at most 4 MiB)" \
	test "$LATER" -le $((4 * MIB))

# Sampling continues: the steady process has samples in every 5-second slice, and about as many
# as its CPU time predicts (1.0 when nothing was lost; no tight bound).
check "no 5-second slice without the steady process's samples ($(field sampling.empty_slices) empty)" \
	test "$(field sampling.empty_slices)" -eq 0
check "its samples kept arriving during the storm ($(field sampling.storm_samples)) and after ($(field sampling.cooldown_samples))" \
	test "$(field sampling.storm_samples)" -gt 0 -a "$(field sampling.cooldown_samples)" -gt 0
COVERAGE=$(field sampling.coverage)
check "samples over CPU time x Hz x rate: $COVERAGE (at least 0.8)" \
	python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= 0.8)" "$COVERAGE"
CHAINED=$(field sampling.full_chain_share)
check "stacks hold the whole known chain: $CHAINED of the samples (at least 0.8)" \
	python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= 0.8)" "$CHAINED"
check "every batch the agent sealed is stored ($(field agent.batches_stored))" \
	test "$(field agent.batches_stored)" -eq "$(field agent.batches_logged)"
check "the server reports the agent's counters ($(field agent.counters.samples) samples)" \
	test "$(field agent.counters.samples)" -gt 0
for counter in count_map_full stack_map_full events_lost batch_limit_drops spool_dropped; do
	check "agent counter $counter is 0" test "$(field "agent.losses.$counter")" -eq 0
done
# A thread is counted lost only when it was never measured (its one insert failed for a moment).
check "threads not measured: $(field agent.losses.os_threads_lost) of 10000 (at most 1%)" \
	test "$(field agent.losses.os_threads_lost)" -le 100
diag "processes gone before their mappings were read: $(field agent.losses.processes_vanished)"
check "the agent exits 0 after SIGTERM (no leak report)" test "$(field agent.exit_status)" -eq 0
[ "$TAP_FAILED" -eq 0 ] || cp "$E2E_TMP"/churn/*.log "$E2E_TMP"/
finish
