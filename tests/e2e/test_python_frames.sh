#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server + agent + tests/fixtures/python/chain.py under every CPython 3.10–3.13 on the machine
# (pyenv builds, Debian's python3.11): the folded stacks of each run show the pure-Python chain
# <module> → level1 … level6 as Python frames ("level3 (chain.py:32)"), in order, stitched
# into the native stack; the agent's counters say how many Python frames it inserted.
. "$(dirname "$0")/lib.sh"
require_root

SCRIPT=$ROOT/tests/fixtures/python/chain.py
PYTHONS=()
for p in /root/.pyenv/versions/3.10*/bin/python3.10 /root/.pyenv/versions/3.11*/bin/python3.11 \
	/root/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13 \
	/usr/bin/python3.11; do
	[ -x "$p" ] && PYTHONS+=("$p")
done
[ ${#PYTHONS[@]} -gt 0 ] || skip_all "no CPython 3.10-3.13 on this machine"

start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug || exit 1
# The agent compiles each interpreter's unwind table when it first samples a process mapping
# it (until then a build without frame pointers unwinds one frame): a sleeping copy of the
# script keeps the file mapped while the table builds (the agent logs it at debug level), and
# the measured run starts once it is loaded.
interp_file() {
	local lib
	lib=$(ldd "$1" 2>/dev/null | awk '/libpython/ {print $3}')
	readlink -f "${lib:-$1}"
}
PIDS=() TABLES=()
for p in "${PYTHONS[@]}"; do
	"$p" "$SCRIPT" block >/dev/null &
	BLOCKER=$!
	file=$(interp_file "$p")
	if wait_until 90 grep -q "unwinder: $file: " "$E2E_TMP/agent.log"; then
		TABLES+=(1)
	else
		TABLES+=(0)
		diag "$file: no unwind table logged after 90 s"
	fi
	# 3 s of spinning: interpreter start-up (site, .pth imports; ~0.1-0.2 s on a loaded machine,
	# no chain yet) stays a small share of the samples.
	"$p" "$SCRIPT" spin 3 &
	PIDS+=("$!")
	wait "$!"
	check "$p chain.py exits 0" test $? -eq 0
	kill "$BLOCKER"
	wait "$BLOCKER" 2>/dev/null
done
# JIT code: CPython 3.12+ with -X perf runs each Python function through a trampoline compiled
# at run time and lists it in /tmp/perf-PID.map; the agent names those frames from the map.
# Every 3.12 and 3.13 of the machine.
JITPYS=() JITPIDS=()
for p in /root/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13; do
	[ -x "$p" ] || continue
	"$p" -X perf "$SCRIPT" spin 2 &
	JITPIDS+=("$!")
	JITPYS+=("$(basename "$p")")
	wait "$!"
done
# A process that renames itself after exec (prctl(PR_SET_NAME), as setproctitle and PyTorch's
# launchers do), 1 s into its run: its later stacks come under the new name (the agent took
# the name seen at its first sample for good before).
/usr/bin/python3.11 -c '
import ctypes, time
def spin(s):
    end = time.process_time() + s
    while time.process_time() < end:
        sum(i * i for i in range(1000))
spin(1)
ctypes.CDLL(None).prctl(15, b"trainer-main", 0, 0, 0)
spin(3)
' &
RENAMED=$!
wait "$RENAMED"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

for i in "${!PYTHONS[@]}"; do
	p=${PYTHONS[$i]} pid=${PIDS[$i]}
	ctl flamegraph --pid "$pid" --from -10m --to now --format folded >"$E2E_TMP/py$i.folded"
	read -r MATCHED TOTAL FRACTION < <(python3 - "$E2E_TMP/py$i.folded" "$E2E_TMP/py$i.unmatched" <<'PY'
import re, sys
unmatched = []
chain = ["<module> (chain.py:46)"] + [f"level{i} (chain.py:{40 - 4 * (i - 1)})" for i in range(1, 6)] + ["level6 (chain.py:"]
total = matched = 0
for line in open(sys.argv[1]):
    frames, _, count = line.rstrip("\n").rpartition(" ")
    n = int(count)
    total += n
    # the Python frames, root first, in order; native frames may lie between them (3.10
    # calls each Python function through _PyEval_Vector)
    fr = [f for f in frames.split(";") if "(chain.py" in f]
    for k in range(len(fr) - len(chain) + 1):
        if all(fr[k + j].startswith(chain[j]) for j in range(len(chain))):
            matched += n
            break
    else:
        unmatched.append((n, frames))
# The stacks without the chain, most samples first, their innermost 300 characters.
with open(sys.argv[2], "w") as out:
    for n, frames in sorted(unmatched, reverse=True)[:8]:
        out.write(f"{n} ...{frames[-300:]}\n")
print(matched, total, f"{matched / total:.3f}" if total else "0")
PY
)
	diag "$p (pid $pid): $MATCHED of $TOTAL samples carry <module> → level1..level6 ($FRACTION)"
	if [ "${TABLES[$i]}" = 1 ]; then
		if python3 -c "import sys; sys.exit(not ($TOTAL >= 50 and $FRACTION >= 0.90))"; then
			ok "$p: ≥ 90% of the samples show the Python chain in order"
		else
			not_ok "$p: ≥ 90% of the samples show the Python chain in order"
			diag "the stacks without it: $(cat "$E2E_TMP/py$i.unmatched")"
		fi
	else
		# Without the interpreter's unwind table (the agent's build queue, starved by a busy
		# machine's stream of new files) the native walk stops before the eval loop: that
		# is the CFI unwinder's matter, not the Python walker's.
		ok "$p: ≥ 90% of the samples show the Python chain in order # SKIP no unwind table"
	fi
	check "$p: native frames stay below the Python frames (a libpython or python frame)" \
		grep -Eq "(libpython|python3[.0-9]*)[^;]*;(<module>|.*<module> \(chain.py)" "$E2E_TMP/py$i.folded"
done

for i in "${!JITPIDS[@]}"; do
	jp=${JITPYS[$i]} jpid=${JITPIDS[$i]}
	ctl flamegraph --pid "$jpid" --from -10m --to now --format folded >"$E2E_TMP/jit$i.folded"
	rm -f "/tmp/perf-$jpid.map"
	diag "$jp JIT frames: $(grep -o 'py::[^;]*_\[j\]' "$E2E_TMP/jit$i.folded" | sort | uniq -c | sort -rn | head -4 | tr '\n' ' ')"
	check "$jp -X perf: its trampolines are named from its perf map (py::level3:...chain.py_[j])" \
		grep -q ';py::level3:[^;]*chain\.py_\[j\]' "$E2E_TMP/jit$i.folded"
	check "$jp -X perf: most samples carry a named trampoline, none an [anon] frame" \
		awk '{ t += $NF; if ($0 ~ /py::level6:[^;]*_\[j\]/) j += $NF; if ($0 ~ /\[anon\]/) a += $NF } END { exit !(t > 0 && j >= t / 2 && a == 0) }' "$E2E_TMP/jit$i.folded"
done
if [ ${#JITPIDS[@]} -eq 0 ]; then
	ok "python3.12+ -X perf: its trampolines are named # SKIP no CPython 3.12 or 3.13"
	ok "python3.12+ -X perf: most samples carry a named trampoline # SKIP no CPython 3.12 or 3.13"
fi
ctl flamegraph --pid "$RENAMED" --from -10m --to now --format folded >"$E2E_TMP/renamed.folded"
diag "renamed process: $(awk '{ split($1, f, ";"); n[f[1]] += $NF } END { for (c in n) printf "%s %d  ", c, n[c] }' "$E2E_TMP/renamed.folded")"
check "a process renamed after exec shows under its new name (most of its samples)" \
	awk '{ split($1, f, ";"); t += $NF; if (f[1] == "trainer-main") r += $NF } END { exit !(t > 0 && r >= t / 2) }' "$E2E_TMP/renamed.folded"
ctl flamegraph --pid "${PIDS[0]}" --from -10m --to now --format json >"$E2E_TMP/py.json"
check "json marks Python frames with kind \"python\" and their file and line" \
	python3 -c "import json,sys; d=json.load(open('$E2E_TMP/py.json')); fs=[f for s in d['stacks'] for f in s['frames'] if f['kind']=='python' and not f['name'].startswith('[python')]; sys.exit(not (fs and all(f.get('file') for f in fs) and any(f['file'].endswith('chain.py') and f.get('line') for f in fs)))"
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
