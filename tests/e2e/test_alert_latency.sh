#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Time from fault onset to alert, with the default intervals: the agent drains every 5 s and
# ships every 30 s, the server evaluates a job at most every 5 s and re-sends every 60 s, a real
# Alertmanager receives. The simulated 8-rank job runs healthy for 40 s, then rank 5 sleeps
# 4 ms before every all-reduce; the alert must reach Alertmanager within 60 s of the onset.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"
ONSET=40
GOAL=60

am_start am || exit 1
start_server srv --alertmanager-url "$AM_URL" || exit 1
# The agent with its defaults (start_agent would shorten the intervals).
"$AGENT_BIN" --server "$SERVER_URL" --spool-dir "$E2E_TMP/agent.spool" --socket "$E2E_TMP/agent.sock" \
	--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" >>"$E2E_TMP/agent.log" 2>&1 &
AGENT_PID=$!
E2E_PIDS+=("$AGENT_PID")
check "agent attached with default intervals" wait_until 30 grep -q "attached to" "$E2E_TMP/agent.log"

timeout 300 "$SIMJOB" --ranks 8 --job-id e2e-latency --seconds $((ONSET + GOAL + 10)) \
	--stop-file "$E2E_TMP/job-done" --cpu-us 1000 --kernel-us 3000 --fault rank=5,kind=delay,amount=4000,after=$ONSET \
	>"$E2E_TMP/job.log" 2>&1 &
JOB_PID=$!
start=$(date +%s.%N)
alert=""
while kill -0 "$JOB_PID" 2>/dev/null; do
	if curl -sf "$AM_URL/api/v2/alerts?active=true" | python3 -c "
import json, sys
sys.exit(0 if any(a['labels'].get('job') == 'e2e-latency' and a['labels'].get('rank') == '5'
                  for a in json.load(sys.stdin)) else 1)"; then
		alert=$(date +%s.%N)
		break
	fi
	sleep 0.5
done
touch "$E2E_TMP/job-done" # the alert came (or the job ended): no need to run it out
wait "$JOB_PID"
check "the job exits 0" test $? -eq 0
check "the straggler alert for rank 5 reached Alertmanager" test -n "$alert"
latency=$(python3 -c "print(round(${alert:-0} - $start - $ONSET, 1))")
diag "fault onset to alert in Alertmanager: ${latency} s (goal < ${GOAL} s; agent batch interval 30 s, analysis interval 5 s)"
echo "alert_latency_s $latency" >>"$BUILD/test-logs/measurements.txt"
check "fault onset to alert under $GOAL s" python3 -c "import sys; sys.exit(0 if 0 < $latency < $GOAL else 1)"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
finish
