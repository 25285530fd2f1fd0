#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Python frame accuracy per CPython version (issue 23's measure): every interpreter of the
# machine (pyenv's 3.10-3.13 and Debian's python3.11) runs two CPU-bound workloads under one
# sysom agent (--sample-rate 1: every tick of its 99 Hz timer), one after the other:
#   chain     tests/fixtures/python/chain.py: <module> → level1 … level6, pure Python
#   callback  tests/fixtures/python/callback.py: <module> → outer → sorted() (C) → key → leaf,
#             Python called back from C
# and scores the server's flame graph of each pid. Of the samples under the root function
# (level1, outer): "whole stacks" have every expected Python frame, in order (and for callback
# at least one native frame between outer and key: the C function that called back); "frames"
# is the share of the expected frames found in order, over those samples. Goal: >= 98% whole
# stacks, >= 99% frames.
# The anchor: after the agent has stopped, each workload runs again under austin (a Python
# sampling profiler; `austin -s -i 10000`: 100 Hz, idle samples dropped), scored the same way
# from its samples; "n/a" where that austin cannot read the interpreter (Debian 12's 1.0.1
# reads CPython up to 3.10). AUSTIN=path picks another build, AUSTIN= (empty) skips it.
#   bench/python_accuracy.sh BUILD_DIR [SECONDS (default 8)]
set -u
export SYSOM_BUILD=${1:-build} SYSOM_ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=${2:-8}
. "$SYSOM_ROOT/tests/e2e/lib.sh"
require_root
FIX=$SYSOM_ROOT/tests/fixtures/python
PYTHONS=(/root/.pyenv/versions/3.10*/bin/python3.10 /root/.pyenv/versions/3.11*/bin/python3.11
	/root/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13
	/usr/bin/python3.11)

start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug --symbol-upload=false || exit 1
RUNS=()
for p in "${PYTHONS[@]}"; do
	[ -x "$p" ] || { echo "# $p: not installed" >&2; continue; }
	for w in chain callback; do
		# A first short run maps the interpreter so the agent builds its unwind table.
		if [ $w = chain ]; then
			"$p" "$FIX/chain.py" spin 0.3 >/dev/null
			"$p" "$FIX/chain.py" spin "$SECONDS_EACH" >/dev/null &
		else
			"$p" "$FIX/callback.py" 0.3 >/dev/null
			"$p" "$FIX/callback.py" "$SECONDS_EACH" >/dev/null &
		fi
		pid=$!
		wait "$pid"
		RUNS+=("$p $w $pid")
		echo "# $p $w: pid $pid" >&2
	done
done
sleep 12 # the agent's next drain and batch
stop_pid "$AGENT_PID" || echo "# agent exited non-zero" >&2
AUSTIN=${AUSTIN-austin}
AUSTIN_FMT=
if [ -n "$AUSTIN" ] && command -v "$AUSTIN" >/dev/null; then
	AUSTIN_V=$("$AUSTIN" -V 2>&1 | head -1)
	# 1.x: -a for "func (file:line)" frames; 3.x has one format, "file:func:line".
	case $AUSTIN_V in "austin 1."*) AUSTIN_FMT=-a ;; esac
else
	AUSTIN= AUSTIN_V="no austin"
fi
for run in "${RUNS[@]}"; do
	read -r p w pid <<<"$run"
	ctl flamegraph --pid "$pid" --from -1h --to now --format folded >"$E2E_TMP/$pid.folded"
	: >"$E2E_TMP/$pid.austin"
	[ -n "$AUSTIN" ] || continue
	if [ $w = chain ]; then args=("$FIX/chain.py" spin "$SECONDS_EACH"); else args=("$FIX/callback.py" "$SECONDS_EACH"); fi
	"$AUSTIN" -s -i 10000 $AUSTIN_FMT -o "$E2E_TMP/$pid.austin" "$p" "${args[@]}" >/dev/null 2>"$E2E_TMP/$pid.austin.err"
	echo "$?" >"$E2E_TMP/$pid.austin.rc"
done
echo "sysom: this build's agent; austin: $AUSTIN_V"
echo
echo "| interpreter | workload | samples | under the root | whole stacks | frames | austin samples | under the root | whole stacks | frames |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for run in "${RUNS[@]}"; do
	read -r p w pid <<<"$run"
	PYTHONPATH="$SYSOM_ROOT/bench" python3 - "$E2E_TMP/$pid.folded" "$w" "$("$p" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') ($p)" \
		"$E2E_TMP/$pid.austin" "$(cat "$E2E_TMP/$pid.austin.rc" 2>/dev/null)" <<'PY'
import re, sys
from profile_samples import read_austin, read_sysom
path, workload, interp, austin_path, austin_rc = sys.argv[1:6]
PY = re.compile(r"^(\S+) \((\S+?\.py):\d+\)$")


if workload == "chain":
    root, chain, native_after = "level1", ["level%d" % i for i in range(1, 7)], None
else:
    root, chain, native_after = "outer", ["outer", "key", "leaf"], "outer"


def score(stacks, need_native=True):
    total = under = whole = found = 0
    for fs, n in stacks:
        total += n
        names = [m.group(1) if m else None for m in map(PY.match, fs)]
        if root not in names:
            continue
        under += n
        # the expected frames in order (a greedy match), each at its position in the stack
        pos, at = [], 0
        for c in chain:
            while at < len(names) and names[at] != c:
                at += 1
            if at == len(names):
                break
            pos.append(at)
            at += 1
        found += n * len(pos)
        ok = len(pos) == len(chain)
        if ok and native_after and need_native:
            i = chain.index(native_after)
            ok = any(names[k] is None for k in range(pos[i] + 1, pos[i + 1]))
        whole += n * ok
    return (f"{total} | {under} | {whole / under if under else 0:.3f} |"
            f" {found / (under * len(chain)) if under else 0:.3f}")


sysom = score(read_sysom(path))
if austin_rc == "0":
    # austin shows no native frames; one line per sample (its weight is time: counted as 1)
    a = score(((fs, 1) for fs, _ in read_austin(austin_path)), need_native=False)
elif austin_rc:
    a = f"n/a (exit {austin_rc}) | | | "
else:
    a = "not run | | | "
print(f"| {interp} | {workload} | {sysom} | {a} |")
PY
done
