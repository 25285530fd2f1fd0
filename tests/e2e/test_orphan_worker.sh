#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A DataLoader-style worker whose rank exited before the agent first read the worker's exec'd
# image (tests/fixtures/python/orphan_worker.py: fork, wait for the rank's exit, exec): the
# worker has been reparented, no parent of its rank is left to walk to, and the agent's memory
# of rank processes (jobenv_ranks) still names it the rank's worker:
#   * GET /api/v1/jobs/{job} lists rank 0 once, with the rank's pid;
#   * the worker is listed under "workers" with rank 0 and the rank's pid.
. "$(dirname "$0")/lib.sh"
require_root

PY=/usr/bin/python3
JOB="orphan-test-$$"
start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 || exit 1

env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 TORCHELASTIC_RUN_ID="$JOB" \
	MASTER_ADDR=127.0.0.1 MASTER_PORT=29512 \
	"$PY" "$ROOT/tests/fixtures/python/orphan_worker.py" rank 1 "$E2E_TMP/worker.out" &
RANK_PID=$!
wait "$RANK_PID"
check "the rank exits 0" test $? -eq 0
wait_until 30 test -s "$E2E_TMP/worker.out"
check "the worker ran to its end" test -s "$E2E_TMP/worker.out"
WORKER=$(sed -n 's/^worker=\([0-9]*\).*/\1/p' "$E2E_TMP/worker.out")
diag "rank $RANK_PID, worker: $(cat "$E2E_TMP/worker.out")"
check "the worker was reparented before it ran" bash -c "! grep -q 'ppid=$RANK_PID\$' '$E2E_TMP/worker.out'"

stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0

curl -s "$SERVER_URL/api/v1/jobs/$JOB" >"$E2E_TMP/job.json"
check "the job lists rank 0 once, as the rank's own process" \
	python3 - "$E2E_TMP/job.json" "$RANK_PID" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted((r["rank"], r["pid"]) for r in d.get("ranks", []))
print("# ranks:", got, file=sys.stderr)
sys.exit(got != [(0, int(sys.argv[2]))])
PY
check "the orphaned worker is listed as rank 0's worker" \
	python3 - "$E2E_TMP/job.json" "$RANK_PID" "$WORKER" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ws = [(w["pid"], w["rank"], w["rank_pid"]) for w in d.get("workers", [])]
print("# workers:", ws, file=sys.stderr)
sys.exit((int(sys.argv[3]), 0, int(sys.argv[2])) not in ws)
PY
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
