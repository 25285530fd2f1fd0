#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Agent CPU per profiled CPU-second on a Python workload beside a native one, at the defaults.

Issue 23's goal: on a CPU-bound Python workload the agent may cost at most 1.5x what it costs on
a native one. Each round runs, in alternating order, three windows, each under its own freshly
started agent at its DEFAULT settings (no --sample-rate, drain or batch override; only its spool
and registration socket are put in a temporary directory):

  native   tests/fixtures/chain_workload --depth D-11 on every CPU: ~D native frames
           (start_thread/clone or libc start, main/run_worker, chain_deep x (D-11),
           chain_level_1..6, spin_compute);
  python   tests/fixtures/python/deep.py, one process per CPU, alternately `chain` (D Python
           frames: <module> → main → descend … → leaf, integer arithmetic) and `sorted` (the
           leaf calls sorted(key=...), C calling back into Python: key → inner under it);
  idle     no workload: what the agent costs on this node with nothing of ours running.

Before each window the workload runs once for a second (then sleeps, alive, to the end of the
window: an executable's unwind table lives while a process maps it; a process's mappings and
tables are read at its first sample, so a sleeping copy would not do) and the window starts only
when the agent's CPU time has stopped rising: the one-time unwind tables and first sightings of
the executables are outside the window and reported apart ("warm-up"). The window then runs from the workload's start, SECONDS of wall time of
work, the workload kept alive (sleeping) while the agent drains (one default drain interval,
5 s, and a second more), and ends when the agent, stopped with SIGTERM, has sealed and shipped
its last batch (a Python frame is named when its stack is first folded into a batch window: the
whole window's stacks are in the figure); the workload is killed after. Measured:

* agent CPU: the agent process's utime + stime (/proc at the window's start, wait4's rusage at
  its exit), per workload CPU-second (the workload processes' utime + stime);
* the same net of the idle window of the round (the idle agent's CPU per second of window x the
  window's wall time, subtracted), which takes out the cost of sampling the node's other
  activity (other builds on a shared VM) as far as it is steady;
* BPF: run time of the agent's sysom_* programs (kernel.bpf_stats_enabled) per workload
  CPU-second (the Python frame walk happens there), not in the ratio the issue asks for;
* the ratio python / native of each figure, per round; medians and min-max over rounds;
* with --perf, where the agent's CPU goes: `perf record -g` of the agent over each window
  (cpu-clock samples, so in proportion to its CPU time); the share of its samples whose call
  chain holds Python-only code (pyframes_*, py_linetable_*: publishing an interpreter, naming
  frames) turns the agent's CPU into the Python-only part of it. The node's other Python
  processes cost some in every window; the python window's part less the native window's,
  per workload CPU-second, is what the Python workload adds, which the node's other activity
  blurs far less than the totals. Against the native figure it bounds the ratio; the agent's
  top functions per window are printed.

Usage: bench/python_agent_cost.py BUILD_DIR [--rounds R] [--seconds S] [--depth D]
                                  [--python PATH] [--perf] [--markdown FILE]
Needs root (BPF). A sysom-server runs on 127.0.0.1 for the duration.
"""
import argparse
import collections
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import (NCPU, bpf_run_time_ns, proc_cpu_seconds,  # noqa: E402
                      start_agent, start_server, wait_for)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAIN_S = 5  # the agent's default --drain-interval
PY_ONLY = re.compile(r"^(pyframes_|py_linetable_|python_name$|read_code$|read_str$)")


def perf_shares(path):
    """(samples, samples with Python-only code in their chain, Counter of leaf symbols, Counter
    of the outermost Python-only function of those samples) of a perf.data file."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "ip,sym", "--no-inline"],
                         capture_output=True, text=True).stdout
    total = py = 0
    leaves, entries = collections.Counter(), collections.Counter()
    for block in out.split("\n\n"):
        syms = [(ln.split(None, 1) + ["?"])[1].split("+")[0].strip()
                for ln in block.strip().splitlines() if ln.strip()]
        if not syms:
            continue
        total += 1
        leaves[syms[0]] += 1
        py_syms = [x for x in syms if PY_ONLY.match(x)]
        if py_syms:
            py += 1
            entries[py_syms[-1]] += 1  # chains are leaf first
    return total, py, leaves, entries


def wait_quiet(pid, step=0.5, still=0.01, timeout=60):
    """Waits until process `pid` used under `still` CPU seconds in a `step`-second interval
    (twice in a row)."""
    last = proc_cpu_seconds(pid)
    quiet = 0
    deadline = time.monotonic() + timeout
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(step)
        now = proc_cpu_seconds(pid)
        quiet = quiet + 1 if now - last < still else 0
        last = now


def stop_and_rusage(proc):
    """SIGTERM, then the process's own CPU seconds from wait4 (it is reaped here)."""
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            deadline = float("inf")
        time.sleep(0.05)


def workload_cmds(kind, args, build, seconds):
    if kind == "native":
        return [[f"{build}/tests/fixtures/chain_workload", str(seconds), "--quiet",
                 "--report", "--threads", str(NCPU), "--depth", str(max(args.depth - 11, 0)),
                 "--linger", "3600"]]
    script = os.path.join(ROOT, "tests/fixtures/python/deep.py")
    return [[args.python, script, ("chain", "sorted")[i % 2], str(seconds), str(args.depth)]
            for i in range(NCPU)]


def run_until_done(cmds):
    """Starts the commands; returns their processes once each has printed its one line (its
    work is done; it sleeps on)."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
    for p in procs:
        if not p.stdout.readline():
            for q in procs:
                q.kill()
                q.wait()
            raise RuntimeError(f"{p.args[0]} exited early")
    return procs


def window(kind, args, build, url, work, perf_path=None):
    agent, log_path = start_agent(build, url, work, log_name=f"agent.{kind}.log")
    procs = []
    try:
        cpu_w = proc_cpu_seconds(agent.pid)
        if kind != "idle":
            procs += run_until_done(workload_cmds(kind, args, build, 1))
        wait_quiet(agent.pid)
        warm = proc_cpu_seconds(agent.pid) - cpu_w
        perf = None
        if perf_path:  # ends by itself when the agent exits
            perf = subprocess.Popen(["perf", "record", "-q", "-F", "4999", "-g", "-p",
                                     str(agent.pid), "-o", perf_path],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
        cpu0 = proc_cpu_seconds(agent.pid)
        bpf0 = bpf_run_time_ns(agent.pid)
        t0 = time.monotonic()
        workload_cpu = 0.0
        if kind == "idle":
            time.sleep(args.seconds)
        else:
            window_procs = run_until_done(workload_cmds(kind, args, build, args.seconds))
            procs += window_procs
            workload_cpu = sum(proc_cpu_seconds(p.pid) for p in window_procs)
        time.sleep(DRAIN_S + 1)
        bpf1 = bpf_run_time_ns(agent.pid)
        total = stop_and_rusage(agent)
        wall = time.monotonic() - t0
        if perf:
            perf.wait(timeout=60)
    finally:
        if agent.returncode is None:
            agent.kill()
            agent.wait()
        for p in procs:
            p.kill()
            p.wait()
    if agent.returncode != 0:
        raise RuntimeError(f"agent exited with {agent.returncode}:\n" + open(log_path).read())
    # None: the kernel's BPF statistics were off at either end (another bench turned them off)
    bpf = (bpf1[0] - bpf0[0]) / 1e9 if bpf0 and bpf1 else None
    res = {"agent_cpu": total - cpu0, "bpf": bpf, "wall": wall,
           "workload_cpu": workload_cpu, "warm": warm}
    if perf_path:
        res["perf"] = perf_shares(perf_path)
    return res


def med(xs):
    return statistics.median(xs)


def spread(xs, fmt):
    """Median (min–max) of the values that are known; "n/a" when none is."""
    xs = [v for v in xs if v is not None]
    if not xs:
        return "n/a"
    n = f" [{len(xs)} rounds]" if len(xs) < spread.rounds else ""
    return f"{fmt(med(xs))} ({fmt(min(xs))}–{fmt(max(xs))}){n}"


spread.rounds = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--depth", type=int, default=20, help="frames deep (~)")
    ap.add_argument("--python", default="/usr/bin/python3.11")
    ap.add_argument("--perf", action="store_true",
                    help="perf record the agent: the share of its CPU in Python-only code")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if os.geteuid() != 0:
        sys.exit("bench/python_agent_cost.py loads BPF programs: run it as root")

    # SIGTERM (and SIGINT, ignored in a background job) unwind: the agents, workloads and the
    # server are stopped by the finally blocks
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = tempfile.mkdtemp(prefix="sysom-pycost.")
    stats_path = "/proc/sys/kernel/bpf_stats_enabled"
    stats_before = open(stats_path).read().strip()
    open(stats_path, "w").write("1")
    server, url = start_server(build, work)
    rounds = []
    spread.rounds = args.rounds
    try:
        for r in range(args.rounds):
            order = ("native", "python", "idle") if r % 2 == 0 else ("idle", "python", "native")
            res = {}
            for kind in order:
                res[kind] = window(kind, args, build, url, work,
                                   os.path.join(work, f"perf.{kind}.data") if args.perf else None)
                w = res[kind]
                bpf = "n/a" if w["bpf"] is None else f"{w['bpf']:.3f} s"
                print(f"round {r + 1} {kind}: agent CPU {w['agent_cpu']:.3f} s, BPF "
                      f"{bpf} over {w['wall']:.1f} s, workload CPU "
                      f"{w['workload_cpu']:.2f} s, warm-up {w['warm']:.3f} s" +
                      (f", perf: {w['perf'][1]} of {w['perf'][0]} samples in Python-only code"
                       if "perf" in w else ""), flush=True)
            rounds.append(res)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        open(stats_path, "w").write(stats_before)
        shutil.rmtree(work, ignore_errors=True)

    def per_wl(w, idle=None):
        cpu = w["agent_cpu"]
        if idle is not None:
            cpu -= idle["agent_cpu"] / idle["wall"] * w["wall"]
        return cpu / w["workload_cpu"]

    fig = {}
    for kind in ("native", "python"):
        fig[kind] = {
            "gross": [per_wl(r[kind]) for r in rounds],
            "net": [per_wl(r[kind], r["idle"]) for r in rounds],
            "bpf": [r[kind]["bpf"] / r[kind]["workload_cpu"] if r[kind]["bpf"] is not None
                    else None for r in rounds],
            "wl": [r[kind]["workload_cpu"] for r in rounds],
            "warm": [r[kind]["warm"] for r in rounds],
        }
    ratio = {k: [p / n if p is not None and n is not None and n > 0 else None for p, n in
                 zip(fig["python"][k], fig["native"][k])] for k in ("gross", "net", "bpf")}
    idle_rate = [r["idle"]["agent_cpu"] / r["idle"]["wall"] for r in rounds]
    pct = lambda x: f"{100 * x:.3f}%"  # noqa: E731
    x = lambda v: f"{v:.2f}×"  # noqa: E731
    s = lambda v: f"{v:.2f} s"  # noqa: E731
    py_ver = subprocess.run([args.python, "-V"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"Machine: {NCPU} CPUs, kernel {os.uname().release}, load average "
        f"{os.getloadavg()[0]:.1f} at the end; {args.rounds} rounds of {args.seconds:g} s of "
        f"work per window (+{DRAIN_S + 1} s drain and the agent's shutdown), ~{args.depth} frames "
        f"deep; {py_ver}; agent at its defaults (99 Hz, 10% of ticks, 5 s drain, 30 s batch). "
        "Medians, (min–max) over rounds.",
        "",
        "| workload | workload CPU s | agent CPU / workload CPU-s | net of idle | BPF / workload "
        "CPU-s (n/a: BPF statistics off) | warm-up (unwind table) agent CPU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in ("native", "python"):
        f = fig[kind]
        lines.append(f"| {kind} | {spread(f['wl'], s)} | {spread(f['gross'], pct)} | "
                     f"{spread(f['net'], pct)} | {spread(f['bpf'], pct)} | "
                     f"{spread(f['warm'], s)} |")
    lines.append(f"| python / native (per round) | | {spread(ratio['gross'], x)} | "
                 f"{spread(ratio['net'], x)} | {spread(ratio['bpf'], x)} | |")
    lines += ["", f"Idle agent (no workload of ours): {spread(idle_rate, pct)} of one CPU, i.e. "
              "agent CPU-seconds per wall second."]
    if args.perf:
        def py_only(r, kind):
            total, py = r[kind]["perf"][:2]
            return r[kind]["agent_cpu"] * py / total if total else 0.0
        # Python-only code also serves the node's other Python processes, in every window:
        # what our Python workload adds is its window's figure less the native window's.
        py_s = [py_only(r, "python") for r in rounds]
        nat_s = [py_only(r, "native") for r in rounds]
        extra = [(p - n) / r["python"]["workload_cpu"] for p, n, r in zip(py_s, nat_s, rounds)]
        implied = [(n + max(e, 0.0)) / n if n > 0 else None
                   for n, e in zip(fig["native"]["gross"], extra)]
        lines += ["", "From `perf record -g` of the agent (--perf): its CPU in Python-only code "
                  "(pyframes_*, py_linetable_*, …):", "",
                  "| Python-only agent CPU, python window | the same, native window | "
                  "difference / python workload CPU-s | (native figure + that) / native figure, "
                  "per round |", "|---:|---:|---:|---:|",
                  f"| {spread(py_s, lambda v: f'{v:.4f} s')} | "
                  f"{spread(nat_s, lambda v: f'{v:.4f} s')} | "
                  f"{spread(extra, lambda v: f'{100 * v:.4f}%')} | {spread(implied, x)} |"]
        for kind in ("idle", "native", "python"):
            leaves = collections.Counter()
            for r in rounds:
                leaves.update(r[kind]["perf"][2])
            n = sum(leaves.values())
            top = ", ".join(f"{sym} {100 * c / n:.0f}%" for sym, c in leaves.most_common(6))
            lines.append(f"\nTop functions of the agent ({kind}, self): {top}.")
        for kind in ("native", "python"):
            entries = collections.Counter()
            for r in rounds:
                entries.update(r[kind]["perf"][3])
            n = sum(entries.values())
            top = ", ".join(f"{sym} {c}" for sym, c in entries.most_common(6))
            lines.append(f"\nPython-only samples ({kind} windows, {n}) by outermost Python-only "
                         f"function: {top or 'none'}.")
    table = "\n".join(lines)
    print()
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
