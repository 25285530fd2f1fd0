#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server + agent + a real PyTorch training loop on the CPU (tests/fixtures/python/torch_train.py
# under Debian's python3-torch): the folded flame graph of the run shows
#   * the Python chain main → train_loop → train_step → TinyNet.forward / TinyNet.block, each
#     a Python frame ("TinyNet.forward (torch_train.py:N)"), stitched over
#   * native libtorch frames below them, symbolized from libtorch_cpu.so (C++ names, not
#     addresses), and
#   * the known Python function prep_batch with about the share of the training loop's samples
#     that the script measures itself around it (thread_time / perf_counter; ±10 points).
. "$(dirname "$0")/lib.sh"
require_root

PY=/usr/bin/python3
SCRIPT=$ROOT/tests/fixtures/python/torch_train.py
"$PY" -c 'import torch' 2>/dev/null || skip_all "no python3-torch for $PY (make deps installs it)"
TORCH_CPU=$(readlink -f "$(ldconfig -p | awk '/libtorch_cpu\.so/ {print $NF; exit}')")
[ -f "$TORCH_CPU" ] || skip_all "libtorch_cpu.so not found"
# CPU seconds of training (the script's main thread): about 500 samples at the test's 99 Hz.
TRAIN_S=${SYSOM_TORCH_SECONDS:-5}

start_server srv || exit 1
# Unlimited symbol upload: libtorch_cpu.so is 120 MB (30 s at the default 4 MiB/s).
start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug --symbol-upload-rate 0 || exit 1

# The agent builds a file's unwind table when it first samples a process mapping it (libtorch_cpu
# is 120 MB; until the table is loaded its frames unwind one deep): a sleeping copy of the script
# with torch imported keeps the libraries mapped while the tables build, and the measured run
# starts once libtorch_cpu's is logged.
"$PY" "$SCRIPT" block >"$E2E_TMP/blocker.out" &
BLOCKER=$!
E2E_PIDS+=("$BLOCKER")
TABLE=0
if wait_until 120 grep -q "unwinder: $TORCH_CPU: " "$E2E_TMP/agent.log"; then
	TABLE=1
else
	diag "$TORCH_CPU: no unwind table logged after 120 s"
fi
kill "$BLOCKER"
wait "$BLOCKER" 2>/dev/null

"$PY" "$SCRIPT" "$TRAIN_S" >"$E2E_TMP/train.out" 2>"$E2E_TMP/train.err" &
TRAIN=$!
wait "$TRAIN"
check "torch_train.py exits 0" test $? -eq 0
read -r CPU_SHARE WALL_SHARE STEPS < <(sed -n \
	's/^measured prep_batch wall_share=\([0-9.]*\) cpu_share=\([0-9.]*\) steps=\([0-9]*\).*/\2 \1 \3/p' \
	"$E2E_TMP/train.out")
diag "script: $(cat "$E2E_TMP/train.out")"
check "the script measured its prep_batch share" test -n "${CPU_SHARE:-}"

# The native frames are named on the server from the executables the agent uploads: wait for
# libtorch_cpu's before stopping the agent (its final flush ships the last batch).
check "the agent uploaded libtorch_cpu.so's symbols" \
	wait_until 180 grep -q "uploaded symbols of [^ ]*libtorch_cpu.so" "$E2E_TMP/agent.log"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

ctl flamegraph --pid "$TRAIN" --from -10m --to now --format folded >"$E2E_TMP/torch.folded"
check "the run has samples" test -s "$E2E_TMP/torch.folded"

python3 - "$E2E_TMP/torch.folded" >"$E2E_TMP/analysis.txt" <<'PY'
import re, sys

PYF = re.compile(r"^(\S+) \(torch_train\.py:\d+\)$")
loop = prep = chain = native_below = total = 0
for line in open(sys.argv[1]):
    frames, _, count = line.rstrip("\n").rpartition(" ")
    n = int(count)
    total += n
    fs = frames.split(";")
    names = [m.group(1) if (m := PYF.match(f)) else None for f in fs]
    py = [x for x in names if x]
    if "train_loop" not in py:
        continue
    loop += n
    if "prep_batch" in py:
        prep += n
    # the whole chain into the model, in order (native frames may lie between)
    want = ["main", "train_loop", "train_step", "TinyNet.forward"]
    it = iter(py)
    if all(w in it for w in want):
        chain += n
        # a symbolized libtorch frame below (after) the deepest Python frame
        last = max(i for i, x in enumerate(names) if x)
        if any(("at::" in f or "c10::" in f or "torch::" in f) and "+0x" not in f
               for f in fs[last + 1:]):
            native_below += n
print(total, loop, prep, chain, native_below)
PY
read -r TOTAL LOOP PREP CHAIN NATIVE <"$E2E_TMP/analysis.txt"
diag "samples: $TOTAL in the process, $LOOP under train_loop, $PREP under prep_batch," \
	"$CHAIN with main → train_loop → train_step → TinyNet.forward, $NATIVE of those with libtorch frames below"
SHARE=$(python3 -c "print(f'{$PREP / $LOOP:.3f}' if $LOOP else 'nan')")
diag "prep_batch: profiler share $SHARE of the loop's samples; script: cpu $CPU_SHARE, wall $WALL_SHARE"

if [ "$TABLE" = 1 ]; then
	check "≥ 200 samples under train_loop" test "$LOOP" -ge 200
	check "the forward chain main → train_loop → train_step → TinyNet.forward is stitched" \
		test "$CHAIN" -ge 10
	check "TinyNet.block and the backward path (train_step → a native autograd frame) are named" \
		bash -c "grep -q 'TinyNet.block (torch_train.py:' '$E2E_TMP/torch.folded' &&
			grep -Eq 'train_step \(torch_train.py:[0-9]+\);.*(autograd::Engine::execute|Backward)' '$E2E_TMP/torch.folded'"
	check "symbolized libtorch_cpu frames lie below the model's Python frames" test "$NATIVE" -ge 5
	check "prep_batch's sampled share is within ±0.10 of the script's own (cpu $CPU_SHARE)" \
		python3 -c "import sys; sys.exit(not abs($SHARE - $CPU_SHARE) <= 0.10)"
else
	for d in "≥ 200 samples under train_loop" "the forward chain is stitched" \
		"TinyNet.block and the backward path are named" "libtorch_cpu frames below" \
		"prep_batch's share"; do
		ok "$d # SKIP no unwind table for libtorch_cpu.so"
	done
fi
# libtorch_cpu.so is stripped (its .symtab is in a -dbgsym package): .dynsym names its exported
# functions, and a frame left as "libtorch_cpu.so.1.13.0+0xOFF" must lie outside all of them.
readelf -W --dyn-syms "$TORCH_CPU" >"$E2E_TMP/dynsym.txt"
check "libtorch_cpu frames are named wherever .dynsym has a function (raw offsets only outside them)" \
	python3 - "$E2E_TMP/torch.folded" "$E2E_TMP/dynsym.txt" <<'PY'
import bisect, re, sys
named = raw = 0
offs = []
for line in open(sys.argv[1]):
    frames, _, count = line.rstrip("\n").rpartition(" ")
    for f in frames.split(";"):
        m = re.match(r"libtorch_cpu\.so[.0-9]*\+0x([0-9a-f]+)$", f)
        if m:
            raw += int(count)
            offs.append(int(m.group(1), 16))
        elif "::" in f and "+0x" not in f:
            named += int(count)
funcs = []
for l in open(sys.argv[2]):
    c = l.split()
    if len(c) >= 8 and c[3] == "FUNC" and c[6] != "UND" and int(c[2]) > 0:
        funcs.append((int(c[1], 16), int(c[2])))
funcs.sort()
starts = [a for a, _ in funcs]
inside = [o for o in offs if (i := bisect.bisect_right(starts, o) - 1) >= 0
          and funcs[i][0] <= o < funcs[i][0] + funcs[i][1]]
print(f"# libtorch frames: {named} named (C++), {raw} raw offsets, {len(inside)} raw inside a "
      f".dynsym function {[hex(o) for o in inside[:5]]}", file=sys.stderr)
sys.exit(not (named > 0 and not inside))
PY
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
