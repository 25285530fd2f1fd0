#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server + agent + a real 4-rank torch.distributed job: Debian's torchrun (python3-torch 1.13,
# CPU) starts tests/fixtures/python/ddp_gloo.py as 4 processes that train a model in
# DistributedDataParallel over the gloo backend; rank 2 burns extra Python CPU in every step.
#   * the job (torchrun's TORCHELASTIC_RUN_ID) is listed once, with 4 ranks: ranks 0-3, each
#     once, each the rank's own process (the pids the ranks print), world size 4; torchrun's own
#     process (the ranks' parent, no RANK in its environment) is no rank and no worker;
#   * each rank's profile (job + rank filter) has its own training loop: train_loop → train_step
#     stitched with Python frames, the model's forward and autograd's backward over libtorch's
#     native frames;
#   * rank 2's profile puts about the CPU share the script measures in slow_rank_work (inside
#     train_step), and the other ranks' profiles have none of it;
#   * the job's behaviour patterns name rank 2 first, abnormal in slow_rank_work: a Python
#     function is a key function, not the interpreter's or libtorch's leaves below it.
. "$(dirname "$0")/lib.sh"
require_root

PY=/usr/bin/python3
TORCHRUN=/usr/bin/torchrun
SCRIPT=$ROOT/tests/fixtures/python/ddp_gloo.py
"$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
	skip_all "no python3-torch with gloo for $PY (make deps installs it)"
[ -x "$TORCHRUN" ] || skip_all "no $TORCHRUN (python3-torch installs it)"
TORCH_CPU=$(readlink -f "$(ldconfig -p | awk '/libtorch_cpu\.so/ {print $NF; exit}')")
[ -f "$TORCH_CPU" ] || skip_all "libtorch_cpu.so not found"
OUT=$E2E_TMP/ranks
mkdir -p "$OUT"

start_server srv || exit 1
# Unlimited symbol upload: libtorch_cpu.so is 120 MB (30 s at the default 4 MiB/s).
start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug --symbol-upload-rate 0 || exit 1

# The agent builds a file's unwind table when it first samples a process mapping it (libtorch_cpu
# is 120 MB; until the table is loaded its frames unwind one deep): a sleeping process with torch
# imported keeps the libraries mapped until libtorch_cpu's table is logged.
"$PY" "$ROOT/tests/fixtures/python/dataloader.py" block >/dev/null &
BLOCKER=$!
E2E_PIDS+=("$BLOCKER")
wait_until 120 grep -q "unwinder: $TORCH_CPU: " "$E2E_TMP/agent.log" ||
	diag "$TORCH_CPU: no unwind table logged after 120 s"
kill "$BLOCKER"
wait "$BLOCKER" 2>/dev/null

# Debian's torchrun 1.13 under Python 3.11 cannot parse "--redirects 0" (Std.from_str iterates
# an IntFlag, which no longer yields its 0 member) and its default is that string; a mapping
# for a local rank that does not exist means "redirect none" and parses.
timeout 300 "$TORCHRUN" --standalone --nnodes 1 --nproc_per_node 4 --redirects 9:1 --tee 9:1 \
	"$SCRIPT" "$OUT" 300 2 200000 >"$E2E_TMP/torchrun.log" 2>&1
check "torchrun's 4-rank gloo job exits 0" test $? -eq 0
for r in 0 1 2 3; do diag "$(cat "$OUT/rank$r.txt" 2>/dev/null || echo "rank $r: no output")"; done
field() { sed -n "s/^measured .*\b$2=\([^ ]*\).*/\1/p" "$OUT/rank$1.txt" 2>/dev/null; }
JOB=$(field 0 job)
check "the 4 ranks share torchrun's run id, and one parent (torchrun's agent)" \
	test -n "$JOB" -a "$(for r in 0 1 2 3; do echo "$(field $r job) $(field $r ppid)"; done | sort -u | wc -l)" -eq 1
LAUNCHER=$(field 0 ppid)
# The native frames are named on the server from the executables the agent uploads: wait for
# libtorch_cpu's before stopping the agent (its final flush ships the last batch).
check "the agent uploaded libtorch_cpu.so's symbols" \
	wait_until 180 grep -q "uploaded symbols of [^ ]*libtorch_cpu.so" "$E2E_TMP/agent.log"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

curl -s "$SERVER_URL/api/v1/jobs/$JOB" >"$E2E_TMP/job.json"
curl -s "$SERVER_URL/api/v1/jobs" >"$E2E_TMP/jobs.json"
check "the job lists exactly ranks 0-3, once each, as the ranks' own processes, world size 4" \
	python3 - "$E2E_TMP/job.json" "$(for r in 0 1 2 3; do field $r pid; done | paste -sd,)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted((r["rank"], r["pid"]) for r in d["ranks"])
want = list(enumerate(int(p) for p in sys.argv[2].split(",")))
worlds = {r.get("world_size") for r in d["ranks"]}
print("# ranks:", got, "want", want, "world sizes", worlds, file=sys.stderr)
sys.exit(not (got == want and worlds == {4}))
PY
check "torchrun's own process ($LAUNCHER) is neither a rank nor a worker" \
	python3 - "$E2E_TMP/job.json" "$LAUNCHER" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
pid = int(sys.argv[2])
sys.exit(any(r["pid"] == pid for r in d["ranks"]) or
         any(w["pid"] == pid for w in d.get("workers", [])))
PY
check "the job list counts 4 ranks" python3 -c "
import json, sys
j = [j for j in json.load(open('$E2E_TMP/jobs.json'))['jobs'] if j['job'] == '$JOB']
sys.exit(not (j and j[0]['ranks'] == 4))"

# Per rank: samples, under train_loop → train_step, in slow_rank_work, in Net.forward, in
# backward (torch/autograd) with native frames below it.
profile() { # RANK
	ctl flamegraph --job "$JOB" --rank "$1" --from -10m --to now --format folded >"$E2E_TMP/rank$1.folded"
	python3 - "$E2E_TMP/rank$1.folded" <<'PY'
import re, sys
total = step = slow = fwd = bwd = 0
for line in open(sys.argv[1]):
    frames, _, n = line.rstrip("\n").rpartition(" ")
    n = int(n)
    total += n
    fs = frames.split(";")
    s = ";".join(fs)
    if re.search(r"train_loop \(ddp_gloo\.py:\d+\);train_step \(ddp_gloo\.py:\d+\)", s):
        step += n
    if re.search(r"train_step \(ddp_gloo\.py:\d+\);slow_rank_work \(ddp_gloo\.py:\d+\)", s):
        slow += n
    if re.search(r"train_step \(ddp_gloo\.py:\d+\);.*Net\.forward \(ddp_gloo\.py:\d+\)", s):
        fwd += n
    # autograd's backward (torch/autograd/__init__.py), then libtorch's engine (native)
    if re.search(r"Tensor\.backward \(_tensor\.py:\d+\);backward \(__init__\.py:\d+\);"
                 r".*;torch::autograd::Engine::execute\(", s):
        bwd += n
print(total, step, slow, fwd, bwd)
PY
}
declare -A TOTAL STEP SLOW FWD BWD
for r in 0 1 2 3; do
	read -r TOTAL[$r] STEP[$r] SLOW[$r] FWD[$r] BWD[$r] < <(profile $r)
	diag "rank $r profile: ${TOTAL[$r]} samples, ${STEP[$r]} in train_loop → train_step, ${SLOW[$r]} in slow_rank_work, ${FWD[$r]} in Net.forward, ${BWD[$r]} in autograd's backward over native frames"
done
for r in 0 1 2 3; do
	check "rank $r: its training loop is named (train_loop → train_step)" test "${STEP[$r]:-0}" -ge 5
done
check "the model's forward and autograd's backward over libtorch frames are named on the ranks" \
	test $((FWD[0] + FWD[1] + FWD[2] + FWD[3])) -ge 4 -a $((BWD[0] + BWD[1] + BWD[2] + BWD[3])) -ge 4
SHARE2=$(field 2 share)
SAMPLED2=$(python3 -c "print(f'{${SLOW[2]:-0} / ${TOTAL[2]:-0}:.3f}' if ${TOTAL[2]:-0} else 'nan')")
check "rank 2: slow_rank_work's sampled share ($SAMPLED2) is within ±0.15 of the script's ($SHARE2)" \
	python3 -c "import sys; sys.exit(not abs($SAMPLED2 - $SHARE2) <= 0.15)"
check "ranks 0, 1 and 3 have no slow_rank_work" test $((SLOW[0] + SLOW[1] + SLOW[3])) -eq 0
curl -s "$SERVER_URL/api/v1/jobs/$JOB/patterns?from=-10m&to=now" >"$E2E_TMP/patterns.json"
diag "patterns, the first findings: $(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print([(f['rank'], f['function'], f['dimension'], round(f['value'], 3), round(f['median'], 3)) for f in d['findings'][:4]])" "$E2E_TMP/patterns.json" 2>&1)"
check "behaviour patterns: rank 2 first, abnormal in slow_rank_work (its Python function, not the interpreter's leaves)" \
	python3 -c "
import json, sys
f = json.load(open(sys.argv[1]))['findings']
sys.exit(not (f and f[0]['rank'] == 2 and f[0]['function'] == 'slow_rank_work (ddp_gloo.py)' and f[0]['value'] > 0.3))" "$E2E_TMP/patterns.json"
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
