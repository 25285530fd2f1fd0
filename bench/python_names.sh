#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent's Python name cache (agent/sampling/pyframes.c: direct-mapped, cache_slots 4096)
# on a process whose code objects never change, beside one that creates new code objects
# all the time (exec/compile in a loop): hit rate, unresolved frames and the agent's CPU.
#
#   bench/python_names.sh BUILD_DIR [--seconds S] [--rounds N] [--python PATH] [--work N]
#                         [--every K] [--drain S] [--batch S] [--markdown FILE]
#   e.g. sudo bench/python_names.sh build          (release build; 2 x 30 s, ~1.5 minutes)
#
# Options (environment variables in brackets):
#   --seconds S   how long each workload runs, the same for both (30) [PYNAMES_SECONDS]
#   --rounds N    rounds, each runs steady then churn (1) [PYNAMES_ROUNDS]
#   --python P    the interpreter of both workloads (/usr/bin/python3.11) [PYNAMES_PYTHON]
#   --work N      loop iterations in each leaf function per call (2000) [PYNAMES_WORK]
#   --every K     churn: a new generation of code objects every K iterations (20: 1,500-2,300
#                 new code objects a second on a 2-vCPU VM) [PYNAMES_EVERY]
#   --drain S     the agent's --drain-interval in seconds (5, its default) [PYNAMES_DRAIN]
#   --batch S     the agent's --batch-interval in seconds (30, its default) [PYNAMES_BATCH]
#   --markdown F  also write the tables to F
#
# Workloads (one Python script, written to the temporary directory): 10 chains of 5 functions
# (50 code objects, from one source text compiled with `exec(compile(src, "<gen-G>", "exec"),
# ns)`), called chain after chain, WORK iterations of arithmetic in each leaf; the stack is
# <module> → main → gG_cC_l1 → … → gG_cC_l5 (7 Python frames).
#   steady  generation 0 only: the same 50 code objects for the whole run;
#   churn   every EVERY iterations, the namespace is cleared (the functions and their code
#           objects are freed at once: no reference cycle is left to the GC) and a new
#           generation G+1 is compiled: 51 new code objects (50 functions + the module's) with
#           new unique names ("g{G}_c{C}_l{L}") and a new file name ("<gen-G>"). The rate of
#           new code objects per second is measured and printed.
# Each workload runs under its own agent (`--sample-rate 1`: every tick of the 99 Hz timer;
# `--symbol-upload=false`; drain and batch intervals as above), started before it, with the
# interpreter's unwind table built first (a sleeping copy of the interpreter, as
# bench/python_vs_austin.sh does). The workload runs SECONDS of wall time (single thread,
# CPU-bound), then sleeps alive while the agent drains its last samples (one drain interval
# and a second more), so frames are not lost to the process's exit; then the agent is stopped
# (SIGTERM: it seals and ships its last batch) and the workload killed.
#
# Measured, per workload:
#   * from the server's /metrics (sysom_agent_<counter>_total, summed over the batches this
#     agent shipped: the difference before its start and after its stop): py_frames (Python
#     frames the BPF walker stitched), py_name_lookups (frames named by the agent: once per
#     distinct stack per batch window, not per sample), py_name_cache_hits, py_unresolved
#     ("[python unresolved]": code object unreadable or no longer a code object when named).
#     These counters are node-wide: any other Python process on the node adds to them (the
#     script prints the Python processes the agent published besides the workload);
#   * from the server's flame graph of the workload's pid (sysomctl --format folded): its
#     samples (and their share of all the samples the agent shipped: the rest is the node's
#     other activity, whose processing is in the agent's CPU too), the Python frames in them
#     (and their share of the node's py_frames: below ~1, other Python processes ran and the
#     node counters above are not the workload's alone), the "[python unresolved]" ones, and
#     the samples whose generated frames are not what can
#     have run: a sampled stack is always gG_cC_l1 → gG_cC_l2 → … of one generation G and one
#     chain C, in "<gen-G>", each line inside its function; a sample that is not holds at
#     least one frame named after another code object than the one that ran (misnamed: e.g.
#     a freed code object's address reused by a later one before the agent read it); and how
#     many generations the names come from, of those that ran (a misnamed stack that happens
#     to look like one chain in order is not counted above, but shows here);
#   * agent CPU: utime + stime of the agent (/proc/PID/stat) from the workload's start to the
#     end of the drain after it, per CPU-second of the workload (its own utime + stime); and
#     the churn/steady ratio of that figure (per round).
# Needs root (BPF). Prints Markdown tables.
set -u
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
	sed -n '3,21p' "$0" >&2
	exit 2
fi
export SYSOM_BUILD=$1 SYSOM_ROOT
SYSOM_ROOT=$(cd "$(dirname "$0")/.." && pwd)
shift
RUN_SECONDS=${PYNAMES_SECONDS:-30}
ROUNDS=${PYNAMES_ROUNDS:-1}
PY=${PYNAMES_PYTHON:-/usr/bin/python3.11}
WORK=${PYNAMES_WORK:-2000}
EVERY=${PYNAMES_EVERY:-20}
DRAIN=${PYNAMES_DRAIN:-5}
BATCH=${PYNAMES_BATCH:-30}
MARKDOWN=
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || { echo "$1 needs a value" >&2; exit 2; }
	case $1 in
	--seconds) RUN_SECONDS=$2 ;;
	--rounds) ROUNDS=$2 ;;
	--python) PY=$2 ;;
	--work) WORK=$2 ;;
	--every) EVERY=$2 ;;
	--drain) DRAIN=$2 ;;
	--batch) BATCH=$2 ;;
	--markdown) MARKDOWN=$2 ;;
	*)
		echo "unknown option $1" >&2
		exit 2
		;;
	esac
	shift 2
done
for v in RUN_SECONDS ROUNDS WORK EVERY DRAIN BATCH; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }
done
[ -x "$PY" ] || { echo "no interpreter $PY (--python PATH)" >&2; exit 1; }
# shellcheck source=tests/e2e/lib.sh
. "$SYSOM_ROOT/tests/e2e/lib.sh"
require_root

cat >"$E2E_TMP/names_work.py" <<'PY'
import json, os, sys, time

mode, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
work, every = int(sys.argv[4]), int(sys.argv[5])
CHAINS, LEVELS = 10, 5


def source(g):
    lines = []
    for c in range(CHAINS):
        for lv in range(1, LEVELS + 1):
            lines.append(f"def g{g}_c{c}_l{lv}(n):")
            if lv < LEVELS:
                lines.append(f"    return g{g}_c{c}_l{lv + 1}(n) + {lv}")
            else:
                lines += ["    s = 0", "    for i in range(n):", "        s += i * i % 7",
                          "    return s"]
    return "\n".join(lines) + "\n"


def load(g):
    ns = {}
    exec(compile(source(g), f"<gen-{g}>", "exec"), ns)
    return ns, [ns[f"g{g}_c{c}_l1"] for c in range(CHAINS)]


def main():
    g = 0
    ns, roots = load(g)
    gens = iters = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if mode == "churn" and iters and iters % every == 0:
            ns.clear()  # functions -> ns -> functions: break the cycle, free them now
            roots = None
            g += 1
            ns, roots = load(g)
            gens += 1
        for f in roots:
            f(work)
        iters += 1
    return ns, gens, iters


t0 = time.monotonic()
ns, gens, iters = main()
wall = time.monotonic() - t0
with open(out + ".tmp", "w") as f:
    json.dump({"new_generations": gens, "iterations": iters,
               "new_code_objects": gens * (CHAINS * LEVELS + 1), "wall_s": wall}, f)
os.rename(out + ".tmp", out)
while True:  # alive (and the last generation with it) until the agent has drained
    time.sleep(3600)
PY

proc_cpu() {
	awk '{ print ($14 + $15) / '"$(getconf CLK_TCK)"' }' "/proc/$1/stat" 2>/dev/null || echo 0
}

interp_file() {
	local lib
	lib=$(ldd "$1" 2>/dev/null | awk '/libpython/ {print $3}')
	readlink -f "${lib:-$1}"
}

# metrics FILE: the server's agent counters, "name value" summed over series.
metrics() {
	curl -sf "$SERVER_URL/metrics" |
		awk 'match($0, /^sysom_agent_[a-z0-9_]+_total/) {
			name = substr($0, 13, RLENGTH - 18); v[name] += $NF }
			END { for (n in v) printf "%s %.0f\n", n, v[n] }' >"$1"
}

# undelivered LOG: the batches LOG says were sealed and not delivered (one number a line).
undelivered() {
	sed -n 's/.* batch \([0-9]*\): [0-9]* samples from.*/\1/p' "$1" | sort -u >"$1.sealed"
	sed -n 's/.* batch \([0-9]*\) delivered.*/\1/p' "$1" | sort -u >"$1.delivered"
	comm -23 "$1.sealed" "$1.delivered" | tr '\n' ' '
}

INTERP=$(interp_file "$PY")
start_server srv || exit 1
for r in $(seq 1 "$ROUNDS"); do
	for mode in steady churn; do
		run=$mode.$r
		echo "# round $r: $mode for ${RUN_SECONDS}s" >&2
		metrics "$E2E_TMP/$run.m0"
		start_agent "agent.$run" "$SERVER_URL" --sample-rate 1 --symbol-upload=false \
			--log-level debug --drain-interval "${DRAIN}s" --batch-interval "${BATCH}s" || exit 1
		log=$E2E_TMP/agent.$run.log
		"$PY" -c 'import time; time.sleep(600)' &
		blocker=$!
		wait_until 120 grep -q "unwinder: $INTERP: " "$log" ||
			echo "# no unwind table logged for $INTERP" >&2
		kill "$blocker"
		wait "$blocker" 2>/dev/null
		a0=$(proc_cpu "$AGENT_PID")
		"$PY" "$E2E_TMP/names_work.py" "$mode" "$RUN_SECONDS" "$E2E_TMP/$run.work" "$WORK" "$EVERY" &
		wpid=$!
		E2E_PIDS+=("$wpid")
		wait_until $((RUN_SECONDS + 120)) test -s "$E2E_TMP/$run.work" ||
			echo "# $mode workload did not finish" >&2
		wcpu=$(proc_cpu "$wpid")
		a1=$(proc_cpu "$AGENT_PID")
		sleep $((DRAIN + 1))
		a2=$(proc_cpu "$AGENT_PID")
		stop_pid "$AGENT_PID"
		arc=$?
		kill "$wpid"
		wait "$wpid" 2>/dev/null
		# the agent delivers its last batch before it exits (--shutdown-timeout)
		lost=$(undelivered "$log")
		[ -z "$lost" ] || echo "# $run: batches not delivered (counters incomplete): $lost" >&2
		echo "$lost" >"$E2E_TMP/$run.undelivered"
		metrics "$E2E_TMP/$run.m1"
		echo "$wpid $wcpu $a0 $a1 $a2 $arc" >"$E2E_TMP/$run.cpu"
		# Python processes the agent published besides the workload and the blocker
		grep -o "python: pid [0-9]*:" "$log" | sort -u | grep -v -e "pid $wpid:" -e "pid $blocker:" |
			sed 's/python: pid //; s/:$//' | tr '\n' ' ' >"$E2E_TMP/$run.others"
		ctl flamegraph --pid "$wpid" --from -1h --to now --format folded >"$E2E_TMP/$run.folded" ||
			echo "# no flame graph for pid $wpid" >&2
		: >"$E2E_TMP/$run.others.folded"
		read -ra others <"$E2E_TMP/$run.others"
		for o in "${others[@]}"; do
			ctl flamegraph --pid "$o" --from -1h --to now --format folded >>"$E2E_TMP/$run.others.folded"
		done
	done
done

python3 - "$E2E_TMP" "$ROUNDS" "$RUN_SECONDS" "$PY" "$WORK" "$EVERY" "$DRAIN" "$BATCH" "${MARKDOWN:-}" \
	"$("$AGENT_BIN" --version) ($AGENT_BIN), $("$PY" -V 2>&1), kernel $(uname -r), $(nproc) CPUs" <<'PY'
import json, os, re, sys

tmp, rounds, secs, py, work, every, drain, batch, md, where = sys.argv[1:11]
rounds = int(rounds)
PYFRAME = re.compile(r"^(\S+) \((.+):(\d+)\)$")
GEN_NAME = re.compile(r"^g(\d+)_c(\d+)_l(\d+)$")
GEN_FILE = re.compile(r"^<gen-(\d+)>$")


def counters(path):
    d = {}
    for line in open(path):
        k, v = line.split()
        d[k] = int(v)
    return d


def right_chain(gen_frames):
    """Whether the generated frames of one stack (outermost first) can be what ran: one
    generation and chain, levels 1, 2, ... in order, the file of that generation, and each line
    inside its function (line 0: unknown, accepted). The source puts chain C level L's "def" at
    line 1 + 13 C + 2 (L - 1) (the line of a frame at its first instruction); levels 1-4 have
    one body line, level 5 four. An unresolved frame (None) holds its level's place: a stack
    with some frames unresolved and the others right is not misnamed."""
    named = [(i, f) for i, f in enumerate(gen_frames) if f is not None]
    if not named:
        return True
    g0, c0 = named[0][1][0], named[0][1][1]
    for i, (g, c, lv, fg, line) in named:
        if g != g0 or c != c0 or lv != i + 1 or fg != g:
            return False
        first = 1 + 13 * c + 2 * (lv - 1)
        if line and not first <= line <= first + (4 if lv == 5 else 1):
            return False
    return True


def folded(path):
    out = {"samples": 0, "pyframes": 0, "unresolved": 0, "wrong": 0, "gen_samples": 0,
           "gens": set()}
    if not os.path.exists(path):
        return None
    for line in open(path):
        frames, _, n = line.rstrip("\n").rpartition(" ")
        if not n.isdigit():
            continue
        n = int(n)
        out["samples"] += n
        # The generated chain starts below the workload's main (levels 1.. in order, an
        # unresolved frame in its place as None).
        gen_frames, other, below_main = [], False, False
        for f in frames.split(";"):
            if f.startswith("[python unresolved]"):
                out["pyframes"] += n
                out["unresolved"] += n
                if below_main:
                    gen_frames.append(None)
                continue
            m = PYFRAME.match(f)
            if not m:
                continue
            out["pyframes"] += n
            if m.group(1) == "main":
                gen_frames, below_main = [], True
                continue
            q = GEN_NAME.match(m.group(1).rsplit(".", 1)[-1])
            fl = GEN_FILE.match(m.group(2))
            if q:
                out["gens"].add(int(q.group(1)))
                gen_frames.append((int(q.group(1)), int(q.group(2)), int(q.group(3)),
                                   int(fl.group(1)) if fl else -1, int(m.group(3))))
            elif fl:
                other = True  # a frame of a generated file under another name
        if any(gen_frames) or other:
            out["gen_samples"] += n
            if other or not right_chain(gen_frames):
                out["wrong"] += n
    return out


def share(a, b):
    return f"{a / b:.3f}" if b else "n/a"


rows, rows2, notes = [], [], []
for r in range(1, rounds + 1):
    per_cpu = {}
    for mode in ("steady", "churn"):
        run = f"{mode}.{r}"
        m0, m1 = counters(f"{tmp}/{run}.m0"), counters(f"{tmp}/{run}.m1")
        d = {k: m1.get(k, 0) - m0.get(k, 0) for k in set(m0) | set(m1)}
        pid, wcpu, a0, a1, a2, arc = open(f"{tmp}/{run}.cpu").read().split()
        wcpu, agent = float(wcpu), float(a2) - float(a0)
        try:
            w = json.load(open(f"{tmp}/{run}.work"))
        except (OSError, ValueError):
            w = None
        rate = f"{w['new_code_objects'] / w['wall_s']:,.0f}" if w else "n/a"
        pc = agent / wcpu if wcpu else float("nan")
        per_cpu[mode] = pc
        lk, hits, unres = d.get("py_name_lookups", 0), d.get("py_name_cache_hits", 0), d.get("py_unresolved", 0)
        ratio = f"{pc / per_cpu['steady']:.2f}" if mode == "churn" and per_cpu.get("steady") else "—"
        rows.append(f"| {mode} ({r}) | {rate} | {wcpu:.2f} | {d.get('py_frames', 0):,} | {lk:,} | "
                    f"{share(hits, lk)} | {unres:,} ({share(unres, lk)}) | {agent:.2f} | "
                    f"{100 * pc:.2f}% | {ratio} |")
        f = folded(f"{tmp}/{run}.folded")
        if f:
            rows2.append(f"| {mode} ({r}) | {f['samples']:,} | "
                         f"{share(f['samples'], d.get('samples', 0))} | {f['pyframes']:,} | "
                         f"{share(f['pyframes'], d.get('py_frames', 0))} | "
                         f"{f['unresolved']:,} ({share(f['unresolved'], f['pyframes'])}) | "
                         f"{f['wrong']:,} ({share(f['wrong'], f['gen_samples'])}) | "
                         f"{len(f['gens']):,} of {w['new_generations'] + 1 if w else '?':,} |")
        else:
            rows2.append(f"| {mode} ({r}) | n/a: no flame graph read | | | | | | |")
        others = open(f"{tmp}/{run}.others").read().split()
        if others:
            o = folded(f"{tmp}/{run}.others.folded")
            notes.append(f"{mode} ({r}): {len(others)} other Python process(es) ran and were "
                         f"published by the agent (pids {', '.join(others)}): {o['samples']} samples, "
                         f"{o['pyframes']} Python frames, {o['unresolved']} of them unresolved in "
                         "their flame graphs; their lookups and unresolved frames are in the node "
                         "counters above")
        if arc != "0":
            notes.append(f"{mode} ({r}): the agent exited with status {arc}")
        lost = open(f"{tmp}/{run}.undelivered").read().strip()
        if lost:
            notes.append(f"{mode} ({r}): batches {lost} not delivered: its counters are incomplete")
        if not w:
            notes.append(f"{mode} ({r}): the workload wrote no summary")

lines = [
    f"{secs} s per workload, {rounds} round(s); {py}; leaf loop {work} iterations; churn: a new "
    f"generation (51 code objects) every {every} iterations; agent --sample-rate 1 (99 Hz), "
    f"--drain-interval {drain}s, --batch-interval {batch}s. {where}.",
    "",
    "| run | new code objects / s | workload CPU s | Python frames sampled (py_frames) | name "
    "lookups | cache hit rate | unresolved (of lookups) | agent CPU s | agent CPU per workload "
    "CPU-s | churn / steady |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
    "",
    "From the server's flame graph of the workload's pid:",
    "",
    "| run | samples | of the node's samples | Python frames | of the node's py_frames | "
    "`[python unresolved]` (share) "
    "| samples whose generated frames are not one chain in order (share of samples with "
    "generated frames) | generations named (of those run) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    *rows2,
]
if notes:
    lines += [""] + [f"* {n}" for n in notes]
text = "\n".join(lines)
print("\n" + text)
if md:
    open(md, "w").write(text + "\n")
PY
stop_pid "$SERVER_PID"
