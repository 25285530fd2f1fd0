#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Detection power (issue 22): a 16-rank simulated job on this shared-CPU machine runs healthy
# for ONSET seconds, then rank 11 does 2.5 ms of extra CPU work per iteration. The server's
# monitor evaluates with its default interval (5 s) and thresholds; the agent ships every 2 s.
# The incident naming rank 11 must open within GOAL s of the onset (the whole-window robust
# test; the per-instance one's "persistent" verdict flickered: 47 s in the issue, no incident
# within 90 s here), and no incident may open for another rank. The time from onset to incident is recorded (measurements.txt: detection_latency_s).
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"
ONSET=${SYSOM_POWER_ONSET:-30}
RUN=${SYSOM_POWER_SECONDS:-80}
# Half the window must be past the onset for the "persistent" verdict (about 50 iterations:
# 4-10 s at this machine's 5-12 iterations/s), then the batch that carries it (2 s nominal,
# 8-11 s under a load of 20 with the ASan agent) and at most one 5 s analysis period.
GOAL=${SYSOM_POWER_GOAL:-30}

start_server srv || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" || exit 1
timeout $((RUN + 120)) "$SIMJOB" --ranks 16 --job-id e2e-power --seconds "$RUN" \
	--cpu-us 1000 --kernel-us 3000 --fault rank=11,kind=cpu,amount=2500,after=$ONSET \
	>"$E2E_TMP/job.log" 2>&1 &
JOB_PID=$!
opened=""
while kill -0 "$JOB_PID" 2>/dev/null; do
	if curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-power&from=-1h" >"$E2E_TMP/diagnoses.json" &&
		python3 -c "
import json, sys
sys.exit(0 if any(d['rank'] == 11 for d in json.load(open('$E2E_TMP/diagnoses.json'))['diagnoses']) else 1)"; then
		opened=$(date +%s.%N)
		break
	fi
	sleep 0.25
done
wait "$JOB_PID"
check "the 16-rank job exits 0" test $? -eq 0
check "an incident names rank 11" test -n "$opened"
# The onset: when the first rank started its extra work (simjob prints it), not when the job
# was launched (16 ranks take seconds to start on a loaded machine).
onset=$(sed -n 's/^rank [0-9]*: cpu fault from \([0-9.]*\)$/\1/p' "$E2E_TMP/job.log" | sort -n | head -1)
check "simjob reported the onset" test -n "$onset"
if [ -n "$opened" ] && [ -n "$onset" ]; then
	latency=$(python3 -c "print(round($opened - $onset, 1))")
else
	latency=none
fi
diag "fault onset to incident: ${latency} s of $((RUN - ONSET)) s after the onset (goal <= ${GOAL} s)"
echo "detection_latency_s $latency" >>"$BUILD/test-logs/measurements.txt"
check "onset to incident within $GOAL s" \
	python3 -c "import sys; sys.exit(0 if '$latency' != 'none' and 0 < float('$latency') <= $GOAL else 1)"
curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-power&from=-1h" >"$E2E_TMP/diagnoses.json"
diag "$(python3 -c "
import json
for d in json.load(open('$E2E_TMP/diagnoses.json'))['diagnoses']:
    print(d['rank'], d['status'], d['summary'][:100])")"
# 16 ranks share 2 CPUs here: rank 11's extra CPU work delays whichever ranks share its CPU,
# and such a neighbour can really be ~1-1.5 ms late for the whole window (a fresh-clone run
# named rank 13, 1.5 ms, beside rank 11's 4.3 ms). Another rank may be named only as a lesser
# straggler (at most half rank 11's lateness); rank 11 must be the worst.
check "no other rank is named as late as rank 11 (others at most half its lateness)" python3 -c "
import json, re, sys
ds = json.load(open('$E2E_TMP/diagnoses.json'))['diagnoses']
late = {d['rank']: float(m.group(1)) for d in ds
        for m in [re.search(r'\(([0-9.]+) ms late on average\)', d['summary'])] if m}
sys.exit(0 if 11 in late and all(r == 11 or ms <= 0.5 * late[11] for r, ms in late.items())
         and all(d['rank'] in late for d in ds) else 1)"
curl -sf "$SERVER_URL/api/v1/jobs/e2e-power/stragglers?from=-1h&diagnose=0" >"$E2E_TMP/stragglers.json"
# Persistent or intermittent: on 2 shared CPUs rank 11's extra work overlaps the others' waits
# in some instances, so its median lateness may stay under the bar while its mean is far above.
check "the stragglers report: rank 11 the straggler of the world communicator, the only one" python3 -c "
import json, sys
d = json.load(open('$E2E_TMP/stragglers.json'))
w = [c for c in d['communicators'] if c['nranks'] == 16]
r = [x for c in w for x in c['ranks'] if x['rank'] == 11]
print([(x['rank'], round(x['excess_ms'], 2), round(x['z'], 1), x['persistence']) for c in w for x in c['ranks'][:3]])
sys.exit(0 if w and w[0]['stragglers'] == [11] and r and r[0]['persistence'] in ('persistent', 'intermittent') else 1)"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
finish
