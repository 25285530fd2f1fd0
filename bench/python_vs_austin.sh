#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sysom and austin side by side on the same Python workloads: per-function shares and the
# overhead on the workload, as ratios to the workload run alone.
#
#   bench/python_vs_austin.sh BUILD_DIR [ROUNDS (default 3)]
#   AUSTIN=/path/to/austin bench/python_vs_austin.sh ...   (another austin build, e.g. 3.7.0)
#
# Workloads, each a fixed amount of work (so wall times compare):
#   chain  tests/fixtures/python/chain.py's <module> → level1 … level6 pure-Python chain, driven
#          for CHAIN_ITERS inner loops (default 15000) instead of a CPU-time budget; run by
#          AUSTIN_PYTHON (default: with Debian 12's austin 1.0.1, which reads CPython up to
#          3.10 only, the pyenv CPython 3.10; with austin 3.x, /usr/bin/python3);
#   torch  tests/fixtures/python/torch_train.py for TORCH_STEPS batches (default 40) under
#          Debian's /usr/bin/python3 (3.11) and python3-torch; the script's own measured
#          prep_batch share (thread_time) is the anchor. austin is run on it too and reported
#          as "n/a" when it reads no sample (1.0.1 on 3.11: "Interpreter state search timed out").
# Each round runs every workload three ways, one after the other: alone; under austin
# (`austin -s -i 10000 -o FILE [-a] CMD`: 100 Hz, idle samples suppressed, one line per sample
# with its duration in µs as the metric); under the sysom agent
# (`--sample-rate 1`: every tick of its 99 Hz timer, started for the run and stopped after it;
# before the measured run a sleeping copy of the workload keeps the interpreter mapped until the
# agent has logged its unwind table). Wall time and CPU time (the workload's, plus austin's own
# or the agent's own during the run) are the medians over the rounds.
# Shares: of the samples under the workload's root function (level1, train_loop), the fraction
# that contain each Python function (inclusive; keyed by function name and file base name, as
# austin names functions without their class), summed over the rounds.
set -u
export SYSOM_BUILD=${1:-build} SYSOM_ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${2:-3}
. "$SYSOM_ROOT/tests/e2e/lib.sh"
require_root
AUSTIN=${AUSTIN:-austin}
command -v "$AUSTIN" >/dev/null || { echo "$AUSTIN not installed (make deps)" >&2; exit 1; }
AUSTIN_V=$("$AUSTIN" -V 2>&1 | head -1)
# 1.x: "-a" for "func (file:line)" frames (its default is "func (file);L<line>"); 3.x reads
# CPython 3.8-3.13 and has one format ("file:func:line"), so the chain runs under the same
# Debian python3 as the torch workload.
case $AUSTIN_V in
"austin 1."*) AUSTIN_FMT=-a DEFAULT_PY=$(ls /root/.pyenv/versions/3.10*/bin/python3.10 2>/dev/null | head -1) ;;
*) AUSTIN_FMT= DEFAULT_PY=/usr/bin/python3 ;;
esac
AUSTIN_PYTHON=${AUSTIN_PYTHON:-$DEFAULT_PY}
[ -x "${AUSTIN_PYTHON:-}" ] || { echo "no CPython 3.10 for austin 1.0.1: set AUSTIN_PYTHON" >&2; exit 1; }
TORCH_PYTHON=/usr/bin/python3
CHAIN_ITERS=${CHAIN_ITERS:-15000}
TORCH_STEPS=${TORCH_STEPS:-40}
FIX=$SYSOM_ROOT/tests/fixtures/python

# chain.py's level6 spins until time.process_time() passes a budget: the driver hands it a
# counter instead, so a run is CHAIN_ITERS iterations of its inner loop whatever the machine's load.
cat >"$E2E_TMP/chain_fixed.py" <<EOF
import sys, time, types
sys.path.insert(0, "$FIX")
import chain
ticks = [0]
def process_time():
    ticks[0] += 1
    return ticks[0]
if sys.argv[1] == "block":
    chain.level1("block", 0)
chain.time = types.SimpleNamespace(process_time=process_time, sleep=time.sleep)
chain.level1("spin", int(sys.argv[1]))
EOF
declare -A CMD BLOCK ROOTFN INTERP
CMD[chain]="$AUSTIN_PYTHON $E2E_TMP/chain_fixed.py $CHAIN_ITERS"
BLOCK[chain]="$AUSTIN_PYTHON $E2E_TMP/chain_fixed.py block"
ROOTFN[chain]=level1
INTERP[chain]=$AUSTIN_PYTHON
CMD[torch]="$TORCH_PYTHON $FIX/torch_train.py 1e9 $TORCH_STEPS"
BLOCK[torch]="$TORCH_PYTHON $FIX/torch_train.py block"
ROOTFN[torch]=train_loop
INTERP[torch]=$TORCH_PYTHON
WORKLOADS=(chain torch)
"$TORCH_PYTHON" -c "import torch" 2>/dev/null || { echo "# no python3-torch: chain only" >&2; WORKLOADS=(chain); }

# timed OUT_PREFIX CMD...: runs CMD, writes "PID WALL_S CPU_S" (CPU: the child and the children
# it waited for, so austin's figure holds its own and the workload's) to OUT_PREFIX.time.
timed() {
	local out=$1
	shift
	python3 - "$out" "$@" <<'PY'
import os, subprocess, sys, time
out = sys.argv[1]
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[2:], stdout=open(out + ".out", "w"), stderr=open(out + ".err", "w"))
_, status, ru = os.wait4(p.pid, 0)
wall = time.perf_counter() - t0
open(out + ".time", "w").write(f"{p.pid} {wall:.3f} {ru.ru_utime + ru.ru_stime:.3f} {status}\n")
PY
}

proc_cpu() {
	awk '{ print ($14 + $15) / '"$(getconf CLK_TCK)"' }' "/proc/$1/stat" 2>/dev/null || echo 0
}

interp_file() {
	local lib
	lib=$(ldd "$1" 2>/dev/null | awk '/libpython/ {print $3}')
	readlink -f "${lib:-$1}"
}

start_server srv || exit 1
for r in $(seq 1 "$ROUNDS"); do
	for w in "${WORKLOADS[@]}"; do
		echo "# round $r: $w alone" >&2
		timed "$E2E_TMP/$w.alone.$r" ${CMD[$w]}
		echo "# round $r: $w under austin" >&2
		timed "$E2E_TMP/$w.austin.$r" "$AUSTIN" -s -i 10000 $AUSTIN_FMT -o "$E2E_TMP/$w.austin.$r.txt" ${CMD[$w]}
		echo "# round $r: $w under sysom" >&2
		start_agent agent "$SERVER_URL" --sample-rate 1 --log-level debug --symbol-upload=false || exit 1
		${BLOCK[$w]} >/dev/null &
		blocker=$!
		wait_until 120 grep -q "unwinder: $(interp_file "${INTERP[$w]}"): " "$E2E_TMP/agent.log" ||
			echo "# no unwind table logged for ${INTERP[$w]}" >&2
		kill "$blocker"
		wait "$blocker" 2>/dev/null
		a0=$(proc_cpu "$AGENT_PID")
		timed "$E2E_TMP/$w.sysom.$r" ${CMD[$w]}
		a1=$(proc_cpu "$AGENT_PID")
		echo "$a0 $a1" >"$E2E_TMP/$w.sysom.$r.agentcpu"
		stop_pid "$AGENT_PID" || echo "# agent exited non-zero" >&2
		# the unwind-table line is looked for afresh in the next round's log
		cp "$E2E_TMP/agent.log" "$E2E_TMP/agent.$w.$r.log"
		: >"$E2E_TMP/agent.log"
	done
done

for w in "${WORKLOADS[@]}"; do
	for r in $(seq 1 "$ROUNDS"); do
		read -r pid _ <"$E2E_TMP/$w.sysom.$r.time"
		ctl flamegraph --pid "$pid" --from -1h --to now --format folded >"$E2E_TMP/$w.sysom.$r.folded"
	done
done

PYTHONPATH="$SYSOM_ROOT/bench" python3 - "$E2E_TMP" "$ROUNDS" "$AUSTIN_V" "${WORKLOADS[@]}" <<'PY'
import os, re, statistics, sys
from profile_samples import read_austin, read_sysom

tmp, rounds, austin_v, workloads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
ROOT = {"chain": "level1", "torch": "train_loop"}
PYFRAME = re.compile(r"^(\S+) \((.+):(\d+)\)$")
CHAIN = ["level%d" % i for i in range(1, 7)]


def key(frame):
    m = PYFRAME.match(frame)
    if not m:
        return None
    name = m.group(1).rsplit(".", 1)[-1]  # "TinyNet.forward", "f.<locals>.<listcomp>"
    return f"{name} ({os.path.basename(m.group(2))})"


def shares(stacks, root):
    total = 0
    inc = {}
    own = {}
    chain = 0
    for frames, n in stacks:
        keys = [k for k in map(key, frames) if k]
        names = [k.split(" ", 1)[0] for k in keys]
        if root not in names:
            continue
        total += n
        for k in set(keys):
            inc[k] = inc.get(k, 0) + n
        own[keys[-1]] = own.get(keys[-1], 0) + n  # the innermost Python frame
        it = iter(names)
        if all(c in it for c in CHAIN):
            chain += n
    return total, inc, own, chain


def med(vals):
    return statistics.median(vals) if vals else float("nan")


for w in workloads:
    S = [s for r in range(1, rounds + 1) for s in read_sysom(f"{tmp}/{w}.sysom.{r}.folded")]
    A = [s for r in range(1, rounds + 1) for s in read_austin(f"{tmp}/{w}.austin.{r}.txt")]
    st, si, so, sc = shares(S, ROOT[w])
    at, ai, ao, ac = shares(A, ROOT[w])
    t = {}
    for mode in ("alone", "austin", "sysom"):
        rows = []
        for r in range(1, rounds + 1):
            pid, wall, cpu, status = open(f"{tmp}/{w}.{mode}.{r}.time").read().split()
            extra = 0.0
            if mode == "sysom":
                a0, a1 = map(float, open(f"{tmp}/{w}.sysom.{r}.agentcpu").read().split())
                extra = a1 - a0
            rows.append((float(wall), float(cpu) + extra, int(status)))
        t[mode] = (med([x[0] for x in rows]), med([x[1] for x in rows]), [x[2] for x in rows])
    print(f"\n### {w} ({rounds} rounds; {austin_v})\n")
    print("| run | wall s (median) | ratio to alone | CPU s incl. profiler | ratio | exit statuses |")
    print("|---|---|---|---|---|---|")
    for mode in ("alone", "austin", "sysom"):
        wall, cpu, sts = t[mode]
        if mode == "austin" and not at:
            # austin read nothing: its run says nothing about overhead
            why = [l.strip() for r in range(1, rounds + 1)
                   for l in open(f"{tmp}/{w}.austin.{r}.err", errors="replace") if l.strip()]
            print(f"| austin | n/a: exit statuses {','.join(map(str, sts))}, "
                  f"\"{why[-1] if why else ''}\" | | | | |")
            continue
        print(f"| {mode} | {wall:.2f} | {wall / t['alone'][0]:.3f} | {cpu:.2f} | "
              f"{cpu / t['alone'][1]:.3f} | {','.join(map(str, sts))} |")
    anchor = ""
    if w == "torch":
        m = [re.search(r"cpu_share=([0-9.]+)", open(f"{tmp}/torch.{mo}.{r}.out").read())
             for mo in ("alone", "austin", "sysom") for r in range(1, rounds + 1)]
        vals = [float(x.group(1)) for x in m if x]
        anchor = f"{med(vals):.3f}" if vals else "?"
    unres = sum(n for fr, n in S if "[python unresolved]" in fr)
    print(f"\nSamples under {ROOT[w]}: sysom {st} (count; {unres} of its {sum(n for _, n in S)} samples "
          f"of the process hold a \"[python unresolved]\" frame), austin "
          f"{'n/a: no sample read' if not at else f'{len(A)} samples, {at / 1e6:.2f} s'}"
          + (f"; whole chain level1…level6: sysom {sc / st:.3f}, austin "
             f"{(ac / at if at else float('nan')):.3f}" if w == "chain" and st else "") + "\n")
    print("| Python function | sysom inclusive | austin inclusive | sysom innermost | austin innermost |"
          + (" script's own |" if anchor else ""))
    print("|---|---|---|---|---|" + ("---|" if anchor else ""))
    def frac(d, k, total):
        return d.get(k, 0) / total if total else None

    def fmt(v):
        return "n/a" if v is None else f"{v:.3f}"

    top = sorted(set(si) | set(ai), key=lambda k: (-max(frac(si, k, st) or 0, frac(ai, k, at) or 0),
                                                   -(frac(so, k, st) or 0)))[:12]
    for k in top:
        mine = (f" {anchor} |" if k.startswith("prep_batch ") else " |") if anchor else ""
        print(f"| {k} | {fmt(frac(si, k, st))} | {fmt(frac(ai, k, at))} | {fmt(frac(so, k, st))} | "
              f"{fmt(frac(ao, k, at))} |{mine}")
PY
stop_pid "$SERVER_PID"
