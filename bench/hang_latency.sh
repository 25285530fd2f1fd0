#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Time from a rank stopping to the hang alert, with the default intervals: the agent's (5 s
# drain, 30 s batches), the server's (5 s analysis interval) and the default hang threshold
# (max(30 s, 5 x the instance spacing)). RUNS 4-rank simulated jobs run at once under one agent
# and server on loopback with a real Alertmanager; each job's rank 1 gets SIGSTOP at a random
# moment 20-50 s after the job starts (so the stops fall at every phase of the 30 s batch
# cycle); the latency is from that SIGSTOP to the SysomHang alert of the job being listed by
# Alertmanager (polled every 0.2 s). Prints each latency, then median and max.
#   bench/hang_latency.sh BUILD_DIR [RUNS (default 6)]
set -u
export SYSOM_BUILD=${1:-build} SYSOM_ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${2:-6}
. "$SYSOM_ROOT/tests/e2e/lib.sh"
require_root
SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || { echo "$SIMJOB not built" >&2; exit 1; }

am_start am || exit 1
start_server srv --alertmanager-url "$AM_URL" || exit 1
"$AGENT_BIN" --server "$SERVER_URL" --spool-dir "$E2E_TMP/agent.spool" --socket "$E2E_TMP/agent.sock" \
	--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" >>"$E2E_TMP/agent.log" 2>&1 &
AGENT_PID=$!
E2E_PIDS+=("$AGENT_PID")
wait_until 30 grep -q "attached to" "$E2E_TMP/agent.log" || { cat "$E2E_TMP/agent.log"; exit 1; }

has_alert() {
	curl -sf "$AM_URL/api/v2/alerts?active=true" | python3 -c "
import json, sys
sys.exit(0 if any(a['labels'].get('alertname') == 'SysomHang' and a['labels'].get('job') == '$1' for a in json.load(sys.stdin)) else 1)"
}

# one JOB: runs the job, stops rank 1 at a random moment, prints the latency to the alert.
one() {
	local job=$1 launcher rank pid t_stop t_alert
	SIMJOB_NCCL_TIMEOUT_S=900 setsid "$SIMJOB" --ranks 4 --job-id "$job" --seconds 900 --cpu-us 200 \
		--kernel-us 20000 --print-env >"$E2E_TMP/$job.log" 2>&1 &
	launcher=$!
	sleep "$(python3 -c 'import random; print(round(random.uniform(20, 50), 2))')"
	pid=$(sed -n 's/^env rank 1 pid \([0-9]*\).*/\1/p' "$E2E_TMP/$job.log" | head -1)
	[ -n "$pid" ] || pid=$(pgrep -P "$launcher" | sed -n 2p)
	t_stop=$(date +%s.%N)
	kill -STOP "$pid"
	local deadline=$((SECONDS + 300))
	until has_alert "$job"; do
		[ $SECONDS -lt $deadline ] || { echo "$job none"; kill -KILL -- "-$launcher"; return; }
		sleep 0.2
	done
	t_alert=$(date +%s.%N)
	echo "$job $(python3 -c "print(round($t_alert - $t_stop, 1))")"
	kill -KILL -- "-$launcher" 2>/dev/null
}

runs=()
for i in $(seq 1 "$RUNS"); do
	one "bench-hang-$i" >"$E2E_TMP/lat.$i" &
	runs+=("$!")
	sleep 1
done
for p in "${runs[@]}"; do wait "$p"; done
cat "$E2E_TMP"/lat.* | sort -V
python3 - "$E2E_TMP" "$RUNS" <<'PY'
import glob, statistics, sys
v = []
for f in glob.glob(sys.argv[1] + "/lat.*"):
    for line in open(f):
        parts = line.split()
        if len(parts) == 2 and parts[1] != "none":
            v.append(float(parts[1]))
missed = int(sys.argv[2]) - len(v)
if v:
    print(f"hang alert latency (default intervals): runs {len(v)}, missed {missed}, "
          f"median {statistics.median(v):.1f} s, max {max(v):.1f} s, min {min(v):.1f} s")
else:
    print(f"hang alert latency: no alert in {sys.argv[2]} runs")
PY
