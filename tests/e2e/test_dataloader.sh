#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server + agent + a 2-rank PyTorch job on the CPU whose data comes from DataLoader workers
# (tests/fixtures/python/dataloader.py under Debian's python3-torch). Each rank is started as
# torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID); its two
# workers inherit that environment — rank 0's are forked, rank 1's spawned and persistent.
#   * GET /api/v1/jobs/{job} lists exactly ranks 0 and 1, each once, with the ranks' own pids;
#     the four workers are listed under "workers" with their rank and rank pid, and under their
#     rank's "workers" — never as another process of a rank;
#   * the job list counts 2 ranks;
#   * a profile filtered by job and rank includes the rank's workers: the Dataset's
#     BurnDataset.__getitem__ → burn_item chain is named, inside the workers' _worker_loop, with
#     about the share of the rank's CPU (its own and its workers') that the script measures;
#   * the rank's own process shows the training loop and no __getitem__.
. "$(dirname "$0")/lib.sh"
require_root

PY=/usr/bin/python3
SCRIPT=$ROOT/tests/fixtures/python/dataloader.py
"$PY" -c 'import torch' 2>/dev/null || skip_all "no python3-torch for $PY (make deps installs it)"
INTERP=$(readlink -f "$PY")
JOB="dl-test-$$"

start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug || exit 1

# Python frames are stitched once the interpreter's unwind table is loaded: a sleeping copy
# keeps it mapped until the table is logged.
"$PY" "$SCRIPT" block >/dev/null &
BLOCKER=$!
E2E_PIDS+=("$BLOCKER")
wait_until 60 grep -q "unwinder: $INTERP: " "$E2E_TMP/agent.log" ||
	diag "$INTERP: no unwind table logged after 60 s"
kill "$BLOCKER"
wait "$BLOCKER" 2>/dev/null

run_rank() { # RANK METHOD ITEMS [persistent]
	env RANK="$1" WORLD_SIZE=2 LOCAL_RANK="$1" LOCAL_WORLD_SIZE=2 GROUP_RANK=0 \
		TORCHELASTIC_RUN_ID="$JOB" MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
		"$PY" "$SCRIPT" "$3" "$2" "${4:-}" >"$E2E_TMP/rank$1.out" 2>"$E2E_TMP/rank$1.err"
}
run_rank 0 fork 400 &
R0=$!
run_rank 1 spawn 100 persistent &
R1=$!
wait "$R0"
check "rank 0 (fork workers) exits 0" test $? -eq 0
wait "$R1"
check "rank 1 (spawned persistent workers) exits 0" test $? -eq 0
diag "rank 0: $(cat "$E2E_TMP/rank0.out")"
diag "rank 1: $(cat "$E2E_TMP/rank1.out")"
field() { sed -n "s/^measured .*\b$2=\([^ ]*\).*/\1/p" "$E2E_TMP/rank$1.out"; }
PID0=$(field 0 pid) PID1=$(field 1 pid)
W0=$(field 0 workers) W1=$(field 1 workers)
SHARE0=$(field 0 share)
check "both ranks measured their workers" test -n "$W0" -a -n "$W1" -a -n "$SHARE0"

stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

curl -s "$SERVER_URL/api/v1/jobs/$JOB" >"$E2E_TMP/job.json"
curl -s "$SERVER_URL/api/v1/jobs" >"$E2E_TMP/jobs.json"
check "the job lists exactly ranks 0 and 1, once each, as the ranks' own processes" \
	python3 - "$E2E_TMP/job.json" "$PID0" "$PID1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted((r["rank"], r["pid"]) for r in d["ranks"])
print("# ranks:", got, file=sys.stderr)
sys.exit(got != [(0, int(sys.argv[2])), (1, int(sys.argv[3]))])
PY
check "the workers are listed with their rank and rank pid, and under their rank" \
	python3 - "$E2E_TMP/job.json" "$PID0" "$W0" "$PID1" "$W1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
workers = {w["pid"]: w for w in d.get("workers", [])}
print("# workers:", sorted((w["pid"], w["rank"], w["rank_pid"], w["comm"])
                           for w in workers.values()), file=sys.stderr)
ok = True
for rank, (pid, wl) in enumerate([(sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])]):
    pid = int(pid)
    want = {int(w) for w in wl.split(",")}
    r = next(r for r in d["ranks"] if r["rank"] == rank)
    for w in want:
        x = workers.get(w)
        ok &= x is not None and x["rank"] == rank and x["rank_pid"] == pid
    ok &= want <= set(r.get("workers", []))
sys.exit(not ok)
PY
check "the job list counts 2 ranks" python3 -c "
import json, sys
j = [j for j in json.load(open('$E2E_TMP/jobs.json'))['jobs'] if j['job'] == '$JOB']
sys.exit(not (j and j[0]['ranks'] == 2))"

ctl flamegraph --job "$JOB" --rank 0 --from -10m --to now --format folded >"$E2E_TMP/rank0.folded"
ctl flamegraph --pid "$PID0" --from -10m --to now --format folded >"$E2E_TMP/main0.folded"
check "rank 0's profile has samples" test -s "$E2E_TMP/rank0.folded"
read -r TOTAL GETITEM CHAIN LOOP < <(python3 - "$E2E_TMP/rank0.folded" <<'PY'
import re, sys
total = getitem = chain = loop = 0
for line in open(sys.argv[1]):
    frames, _, n = line.rstrip("\n").rpartition(" ")
    n = int(n)
    total += n
    fs = frames.split(";")
    if any(f.startswith("BurnDataset.__getitem__ (dataloader.py:") for f in fs):
        getitem += n
        s = ";".join(fs)
        if re.search(r"_worker_loop \(\S*worker\.py:\d+\);.*BurnDataset\.__getitem__ "
                     r"\(dataloader\.py:\d+\);burn_item \(dataloader\.py:\d+\)", s):
            chain += n
    if any(f.startswith("train_loop (dataloader.py:") for f in fs):
        loop += n
print(total, getitem, chain, loop)
PY
)
SHARE=$(python3 -c "print(f'{$GETITEM / $TOTAL:.3f}' if $TOTAL else 'nan')")
diag "rank 0 profile: $TOTAL samples, $GETITEM under __getitem__ ($CHAIN in _worker_loop → __getitem__ → burn_item), $LOOP under train_loop; share $SHARE, script $SHARE0"
check "__getitem__ → burn_item is named inside the workers' _worker_loop" test "$CHAIN" -ge 20
check "the rank's training loop is in the same rank profile" test "$LOOP" -ge 1
check "__getitem__'s sampled share of rank 0 is within ±0.10 of the script's ($SHARE0)" \
	python3 -c "import sys; sys.exit(not abs($SHARE - $SHARE0) <= 0.10)"
check "the rank's own process has the training loop and no __getitem__ (workers are apart)" \
	bash -c "grep -q 'train_loop (dataloader.py:' '$E2E_TMP/main0.folded' &&
		! grep -q '__getitem__ (dataloader.py:' '$E2E_TMP/main0.folded'"
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
