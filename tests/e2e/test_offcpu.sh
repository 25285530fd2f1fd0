#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Off-CPU end to end: server + agent on loopback (off-CPU recording in its default "jobs" mode)
# and the simulated 2-rank job whose rank 1 sleeps 20 ms in nanosleep before every all-reduce
# (simjob's delay fault, from 3 s in). The off-CPU flame graph of rank 1 must show that sleep
# under rank_main with its kernel path as a large share of its blocked time; rank 0 must show
# none of it (it waits in the all-reduce instead); the JSON total must be the folded weights'
# sum in microseconds; the wall-clock view of one rank must hold at least its off-CPU time and
# at most its run time.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"
SECONDS_RUN=8
AFTER=3
DELAY_US=20000

api_status() { curl -s -o /dev/null -w '%{http_code}' "$SERVER_URL$1"; }

# Names for the frames from the start: simjob, its fake libraries and the libc it runs on.
LIBC=$(ldd "$SIMJOB" | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p')
mkdir -p "$E2E_TMP/srv.data"
for f in "$SIMJOB" "$SIMJOB_DIR/libcuda.so.1" "$SIMJOB_DIR/libnccl.so.2" ${LIBC:+"$(readlink -f "$LIBC")"}; do
	"$BUILD/sysom-symrepo" --repo "$E2E_TMP/srv.data/symbols" add "$f" >>"$E2E_TMP/symrepo.log" 2>&1
done
start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 --off-cpu-min 1ms || exit 1
check "the agent says off-CPU recording is on for training jobs" \
	bash -c "! grep -q 'off-CPU recording off' '$E2E_TMP/agent.log'"
timeout 120 "$SIMJOB" --ranks 2 --seconds $SECONDS_RUN --cpu-us 2000 --kernel-us 3000 \
	--fault rank=1,kind=delay,amount=$DELAY_US,after=$AFTER --print-env >"$E2E_TMP/job.log" 2>&1
check "simjob (2 ranks, ${SECONDS_RUN}s, rank 1 delayed ${DELAY_US} us) exits 0" test $? -eq 0
JOB=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job.log" | head -1)
WALL1=$(awk '$1 == "rank" && $2 == 1 { print $6 }' "$E2E_TMP/job.log")
diag "job $JOB, rank 1 ran ${WALL1}s"
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0

RANGE=(--job "$JOB" --from -10m --to now)
for r in 0 1; do
	ctl flamegraph --kind off-cpu "${RANGE[@]}" --rank $r --format folded --limit 100000 \
		>"$E2E_TMP/off$r.folded"
	ctl flamegraph --kind off-cpu "${RANGE[@]}" --rank $r --format json --limit 100000 \
		>"$E2E_TMP/off$r.json"
done
check "rank 1 has off-CPU stacks" test -s "$E2E_TMP/off1.folded"
# The delay: nanosleep called by rank_main itself, not by cuStreamSynchronize's sleep.
delay_us() {
	awk '/rank_main/ && /nanosleep/ && !/cuStreamSynchronize/ && !/sleep_until/ { s += $NF }
	     END { print s + 0 }' "$1"
}
D1=$(delay_us "$E2E_TMP/off1.folded")
D0=$(delay_us "$E2E_TMP/off0.folded")
T1=$(awk '{ s += $NF } END { print s + 0 }' "$E2E_TMP/off1.folded")
diag "rank 1: ${D1} us blocked in the delay's nanosleep, ${T1} us off-CPU in all; rank 0: ${D0} us in such a sleep"
grep -m3 'rank_main' "$E2E_TMP/off1.folded" | cut -c1-300 | while read -r l; do diag "  $l"; done
check "rank 1's off-CPU graph shows the delay's nanosleep under rank_main" test "$D1" -gt 0
check "a kernel frame of the sleep is there too (hrtimer / nanosleep in the kernel part)" \
	grep -qE 'rank_main.*nanosleep.*(hrtimer_nanosleep|do_nanosleep|schedule)' "$E2E_TMP/off1.folded"
# Each delayed iteration spends 20 ms in the delay against ~3 ms in cuStreamSynchronize's
# sleep: the delay is the largest share of what rank 1 blocked in (how much of the run was
# recorded depends on when the agent started tracking the job on a busy host).
check "the delay is at least 35% of rank 1's off-CPU time, and within its run" \
	python3 -c "import sys; sys.exit(not ($D1 >= 0.35 * $T1 and $D1 <= 1e6 * $WALL1))"
check "rank 0 has no such delay (< 5% of rank 1's)" python3 -c "import sys; sys.exit(not ($D0 * 20 < $D1))"
check "the JSON says microseconds and its total is the folded weights' sum" \
	python3 -c "import json,sys; d = json.load(open('$E2E_TMP/off1.json')); sys.exit(not (d['unit'] == 'us' and d['total'] == $T1 and not d['truncated']))"

ctl flamegraph --kind wall "${RANGE[@]}" --rank 1 --format json --limit 100000 >"$E2E_TMP/wall1.json"
check "sysomctl flamegraph --kind wall --rank 1 exits 0" test $? -eq 0
W1=$(python3 -c "import json; print(json.load(open('$E2E_TMP/wall1.json'))['total'])")
diag "rank 1 wall-clock view: ${W1} us over a ${WALL1} s run"
check "rank 1's wall-clock time holds its off-CPU time and stays within its run (+10%)" \
	python3 -c "import sys; sys.exit(not ($W1 >= $T1 and $W1 <= 1.1e6 * $WALL1 + 1e6))"
check "kind=wall for a whole job is refused (400)" \
	test "$(api_status "/api/v1/flamegraph?kind=wall&job=$JOB")" = 400
check "an unknown kind is refused (400)" test "$(api_status "/api/v1/flamegraph?kind=blocked")" = 400
finish
