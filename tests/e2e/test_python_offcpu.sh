#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Python frames where threads block and where they launch GPU kernels, end to end (server +
# agent on loopback), under every CPython 3.10–3.13 on the machine:
# * tests/fixtures/python/blocking.py (a training process by its environment, so off-CPU
#   recording follows it in the default "jobs" mode) blocks three threads in known Python
#   functions (time.sleep, queue.get, socket recv): the off-CPU flame graph of the process
#   shows each block under its Python chain, e.g. "<module>;main;block;outer;middle;wait_here"
#   above the kernel frames, for ≥ 90% of its blocked time.
# * the same script calls the fake libcuda's cuLaunchKernel through ctypes: the gpu-launch
#   flame graph names the launching Python chain "launch_outer;launch_here (blocking.py:N)".
. "$(dirname "$0")/lib.sh"
require_root

SCRIPT=$ROOT/tests/fixtures/python/blocking.py
LIBCUDA=$BUILD/tests/fixtures/simjob/libcuda.so.1
PYTHONS=()
for p in /root/.pyenv/versions/3.10*/bin/python3.10 /root/.pyenv/versions/3.11*/bin/python3.11 \
	/root/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.13*/bin/python3.13 \
	/usr/bin/python3.11; do
	[ -x "$p" ] && PYTHONS+=("$p")
done
[ ${#PYTHONS[@]} -gt 0 ] || skip_all "no CPython 3.10-3.13 on this machine"
GPU_OPTS=()
[ -e "$LIBCUDA" ] && GPU_OPTS=(--gpu-libraries "$LIBCUDA" --gpu-launch-duty 1)

start_server srv || exit 1
# Room for the unwind tables of every process on a busy shared machine (the default 64M fills
# up with other processes' tables: libc's would then be frame pointers only, and a walk from
# a blocking libc call stops at its first frame).
start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug --off-cpu-min 1ms \
	--unwind-table-memory 256M "${GPU_OPTS[@]}" || exit 1

# Waits until the agent logged an unwind table (or its absence) for every executable file
# process $1 maps; returns 1 when one is still missing after $2 seconds.
tables_ready() {
	local pid=$1 limit=$2 f missing=
	for f in $(awk '$2 ~ /x/ && $6 ~ /^\// { print $6 }' "/proc/$pid/maps" | sort -u); do
		if ! wait_until "$limit" grep -qF "unwinder: $f: " "$E2E_TMP/agent.log"; then
			diag "pid $pid: no unwind table logged for $f"
			missing=1
		fi
	done
	[ -z "$missing" ]
}
BLOCK_S=4
PIDS=() TABLES=() LAUNCHERS=() LTABLES=()
for i in "${!PYTHONS[@]}"; do
	p=${PYTHONS[$i]}
	GO=$E2E_TMP/go$i
	TORCHELASTIC_RUN_ID=pyoff-$i "$p" "$SCRIPT" block "$GO" $BLOCK_S >"$E2E_TMP/block$i.out" &
	pid=$!
	PIDS+=("$pid")
	E2E_PIDS+=("$pid")
	# It spins until told to go: by then the agent has sampled it, published its interpreter,
	# built the unwind tables of every file it maps (libc, the interpreter, the socket and
	# select modules; until then the native walk from the blocking call stops early) and, a
	# drain later, started recording its blocks.
	wait_until 60 grep -q "python: pid $pid: " "$E2E_TMP/agent.log" ||
		diag "pid $pid: no 'python: pid' line after 60 s"
	if tables_ready "$pid" 90; then TABLES+=(1); else TABLES+=(0); fi
	sleep 1.5
	touch "$GO"
	wait "$pid"
	check "$p blocking.py block exits 0" test $? -eq 0
	if [ -e "$LIBCUDA" ]; then
		# The same wait (its libcuda, _ctypes and libffi tables included) before it
		# launches: the launch stacks of a process the agent is still learning stop early.
		TORCHELASTIC_RUN_ID=pyoff-launch-$i "$p" "$SCRIPT" launch "$LIBCUDA" 300 \
			"$E2E_TMP/lgo$i" >"$E2E_TMP/launch$i.out" &
		pid=$!
		LAUNCHERS+=("$pid")
		E2E_PIDS+=("$pid")
		wait_until 60 grep -q "python: pid $pid: " "$E2E_TMP/agent.log" ||
			diag "pid $pid: no 'python: pid' line after 60 s"
		wait_until 30 grep -q "pid $pid mapped CUDA" "$E2E_TMP/agent.log" ||
			diag "pid $pid: the agent did not see it map libcuda in 30 s"
		if tables_ready "$pid" 90; then LTABLES+=(1); else LTABLES+=(0); fi
		touch "$E2E_TMP/lgo$i"
		wait "$pid"
		check "$p blocking.py launch exits 0" test $? -eq 0
	fi
done
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

# The fraction of blocked time (folded weights) whose stack holds one of the three known
# Python chains in order, above a kernel frame of the block. Prints "MATCHED TOTAL FRACTION".
offcpu_fraction() {
	python3 - "$1" <<'PY'
import re, sys
chains = [["<module>", "main", "block", "outer", "middle", "wait_here"],
          ["queue_worker", "queue_wait"],
          ["socket_worker", "socket_wait"]]
total = matched = 0
for line in open(sys.argv[1]):
    frames, _, count = line.rstrip("\n").rpartition(" ")
    n = int(count)
    total += n
    fs = frames.split(";")
    py = [(k, f.split(" (")[0]) for k, f in enumerate(fs) if "(blocking.py" in f]
    names = [name for _, name in py]
    for chain in chains:
        for s in range(len(names) - len(chain) + 1):
            if names[s:s + len(chain)] == chain:
                last = py[s + len(chain) - 1][0]
                # the kernel part of the block lies above (after) the Python leaf
                if any("schedule" in f for f in fs[last + 1:]):
                    matched += n
                break
        else:
            continue
        break
print(matched, total, f"{matched / total:.3f}" if total else "0")
PY
}

for i in "${!PYTHONS[@]}"; do
	p=${PYTHONS[$i]} pid=${PIDS[$i]}
	ctl flamegraph --kind off-cpu --pid "$pid" --from -10m --to now --format folded \
		--limit 100000 >"$E2E_TMP/off$i.folded"
	read -r MATCHED TOTAL FRACTION < <(offcpu_fraction "$E2E_TMP/off$i.folded")
	diag "$p (pid $pid): $MATCHED of $TOTAL us blocked under a known Python chain ($FRACTION)"
	grep -m2 'wait_here' "$E2E_TMP/off$i.folded" | cut -c1-400 | while read -r l; do diag "  $l"; done
	if [ "${TABLES[$i]}" = 1 ]; then
		# Three threads blocked for BLOCK_S seconds each: at least half of it recorded.
		check "$p: ≥ 90% of the blocked time shows its Python chain above the kernel frames" \
			python3 -c "import sys; sys.exit(not ($TOTAL >= 0.5 * 3 * $BLOCK_S * 1e6 and $FRACTION >= 0.90))"
	else
		ok "$p: ≥ 90% of the blocked time shows its Python chain # SKIP no unwind table"
	fi
	for fn in wait_here queue_wait socket_wait; do
		check "$p: $fn is named with its file and line" \
			grep -Eq "(^|;)$fn \(blocking\.py:[0-9]+\)" "$E2E_TMP/off$i.folded"
	done
	check "$p: native frames stay below the Python frames (a libpython or python frame)" \
		grep -Eq "^[^;]*;[^(]+;<module> \(blocking\.py" "$E2E_TMP/off$i.folded"
done

if [ -e "$LIBCUDA" ]; then
	for i in "${!PYTHONS[@]}"; do
		p=${PYTHONS[$i]} pid=${LAUNCHERS[$i]}
		ctl flamegraph --kind gpu-launch --pid "$pid" --from -10m --to now --format folded \
			--limit 100000 >"$E2E_TMP/launch$i.folded"
		read -r MATCHED TOTAL < <(python3 - "$E2E_TMP/launch$i.folded" <<'PY'
import sys
chain = ["<module>", "main", "launch", "launch_outer", "launch_here"]
total = matched = 0
for line in open(sys.argv[1]):
    frames, _, count = line.rstrip("\n").rpartition(" ")
    if not frames.endswith(";[gpu] py_launched_kernel"):
        continue
    n = int(count)
    total += n
    # the Python frames in order (3.10 has native frames between them), file and line each
    py = [f for f in frames.split(";") if "(blocking.py:" in f]
    if [f.split(" (")[0] for f in py] == chain and all(f.endswith(")") for f in py):
        matched += n
print(matched, total)
PY
)
		diag "$p (pid $pid): $MATCHED of $TOTAL launches under <module> → … → launch_here"
		grep -m1 'launch_here' "$E2E_TMP/launch$i.folded" | cut -c1-400 | while read -r l; do diag "  $l"; done
		if [ "${LTABLES[$i]}" = 1 ]; then
			check "$p: ≥ 95% of the recorded launches carry the Python chain" \
				python3 -c "import sys; sys.exit(not ($TOTAL >= 50 and $MATCHED >= 0.95 * $TOTAL))"
		else
			ok "$p: ≥ 95% of the recorded launches carry the Python chain # SKIP no unwind table"
		fi
	done
else
	ok "gpu-launch stacks carry Python frames # SKIP $LIBCUDA not built"
fi
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
