#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Agent overhead on a CPU-bound workload, side by side with a baseline, as ratios.

For each sampling setting (default 10 % of ticks, and 100 %), alternating rounds run the
chain_workload fixture on every CPU without the agent (baseline) and with it, and measure:

* agent cost per profiled CPU-second: the agent process's own CPU time (utime + stime from
  /proc) plus the run time of its BPF programs (kernel.bpf_stats_enabled), divided by the CPU
  time of the profiled CPUs (number of CPUs x wall time). This is the primary number: on a
  noisy 2-core VM a throughput ratio cannot resolve fractions of a percent;
* throughput ratio: workload iterations/s with the agent / without, with the baseline's own
  spread so the reader can see what the ratio can resolve;
* agent RSS (VmHWM, peak) and batch bytes shipped per minute;
* in-kernel aggregation ratio: samples recorded / distinct keys drained.

Usage: bench/overhead.py BUILD_DIR [--rounds N] [--seconds S] [--markdown FILE]
Needs root (BPF). A sysom-server runs on 127.0.0.1 for the duration.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count()


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def prog_ids_held(pid):
    """The ids of the BPF programs process `pid` holds (its program and link descriptors'
    fdinfo "prog_id:" lines)."""
    ids = set()
    fd_dir = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fd_dir):
        try:
            with open(os.path.join(fd_dir, fd)) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except (OSError, ValueError):
            pass
    return ids


def bpf_run_time_ns(pid=None):
    """(all sysom_* programs' run_time_ns, the tick program's run_time_ns, its run count); with
    `pid`, only the programs that process holds (another agent on the node is left out). None
    when the kernel's BPF statistics are off (another benchmark may have turned them off);
    bpftool leaves run_time_ns out while it is 0."""
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        if f.read().strip() == "0":
            return None
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True,
                         check=True).stdout
    held = prog_ids_held(pid) if pid is not None else None
    total = tick = ticks = 0
    for prog in json.loads(out):
        name = prog.get("name", "")
        if held is not None and prog.get("id") not in held:
            continue
        if name.startswith("sysom_"):
            total += prog.get("run_time_ns", 0)
            if name.startswith("sysom_profile"):
                tick += prog.get("run_time_ns", 0)
                ticks += prog.get("run_cnt", 0)
    return total, tick, ticks


def run_workload(build, seconds):
    out = subprocess.run([f"{build}/tests/fixtures/chain_workload", str(seconds), "--quiet",
                          "--report", "--threads", str(NCPU)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"iterations (\d+) seconds ([0-9.]+)", out)
    return int(m.group(1)) / float(m.group(2))


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def start_server(build, work):
    """A sysom-server on 127.0.0.1 with its data under `work`: (process, base URL)."""
    port_file = os.path.join(work, "port")
    server = subprocess.Popen([f"{build}/sysom-server", "--listen", "127.0.0.1:0", "--data-dir",
                               os.path.join(work, "data"), "--port-file", port_file],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(), 30)
    return server, "http://127.0.0.1:" + open(port_file).read().strip()


def start_agent(build, server_url, work, args=(), log_name="agent.log"):
    """A sysom-agent shipping to `server_url` with a fresh spool (and its registration socket)
    under `work`, started with `args` and waited for until it has attached: (process, log path).
    Its output goes to the log."""
    spool = os.path.join(work, "spool")
    shutil.rmtree(spool, ignore_errors=True)
    log_path = os.path.join(work, log_name)
    with open(log_path, "w") as log:
        agent = subprocess.Popen([f"{build}/sysom-agent", "--server", server_url, "--spool-dir",
                                  spool, "--socket", os.path.join(work, "agent.sock"), *args],
                                 stdout=log, stderr=subprocess.STDOUT)
    if not wait_for(lambda: "attached to" in open(log_path).read(), 30):
        agent.kill()
        agent.wait()
        raise RuntimeError("agent did not attach:\n" + open(log_path).read())
    return agent, log_path


def agent_round(build, server_url, work, rate, seconds):
    agent, log_path = start_agent(build, server_url, work, ["--sample-rate", str(rate)])
    try:
        time.sleep(1)  # let start-up work (kernel symbol upload) finish outside the window
        cpu0 = proc_cpu_seconds(agent.pid)
        bpf0, tick0, ticks0 = bpf_run_time_ns(agent.pid) or (0, 0, 0)
        t0 = time.monotonic()
        throughput = run_workload(build, seconds)
        wall = time.monotonic() - t0
        cpu1 = proc_cpu_seconds(agent.pid)
        bpf1, tick1, ticks1 = bpf_run_time_ns(agent.pid) or (0, 0, 0)
        rss_peak = proc_status(agent.pid, "VmHWM")
        rss_now = proc_status(agent.pid, "VmRSS")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
    text = open(log_path).read()
    batches = [(int(s), int(k), int(b)) for s, k, b in
               re.findall(r"batch \d+: (\d+) samples from (\d+) keys, \d+ stacks, \d+ processes, "
                          r"(\d+) bytes", text)]
    return {
        "throughput": throughput,
        "agent_cpu_s": cpu1 - cpu0,
        "bpf_s": (bpf1 - bpf0) / 1e9,
        "tick_s": (tick1 - tick0) / 1e9,
        "ticks": ticks1 - ticks0,
        "wall_s": wall,
        "rss_peak": rss_peak,
        "rss_now": rss_now,
        "batch_bytes": sum(b for _, _, b in batches),
        "samples": sum(s for s, _, _ in batches),
        "keys": sum(k for _, k, _ in batches),
        "batches": len(batches),
    }


def pct(x):
    return f"{100 * x:.3f}%"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--markdown")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if os.geteuid() != 0:
        sys.exit("bench/overhead.py loads BPF programs: run it as root")

    work = tempfile.mkdtemp(prefix="sysom-bench.")
    stats_path = "/proc/sys/kernel/bpf_stats_enabled"
    stats_before = open(stats_path).read().strip()
    open(stats_path, "w").write("1")
    server, url = start_server(build, work)
    results = {}
    try:
        for name, rate in (("default (10% of ticks)", 0.10), ("100% of ticks", 1.0)):
            base, with_agent = [], []
            for r in range(args.rounds):
                base.append(run_workload(build, args.seconds))
                with_agent.append(agent_round(build, url, work, rate, args.seconds))
                print(f"{name} round {r + 1}: baseline {base[-1]:.1f} it/s, with agent "
                      f"{with_agent[-1]['throughput']:.1f} it/s, agent CPU "
                      f"{with_agent[-1]['agent_cpu_s']:.3f}s + BPF {with_agent[-1]['bpf_s']:.3f}s "
                      f"over {with_agent[-1]['wall_s']:.1f}s", flush=True)
            results[name] = (base, with_agent)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        open(stats_path, "w").write(stats_before)
        shutil.rmtree(work, ignore_errors=True)

    lines = [f"Machine: {NCPU} CPUs, kernel {os.uname().release}; {args.rounds} alternating "
             f"rounds of {args.seconds:g} s per setting; workload: chain_workload on every CPU.", "",
             "| setting | agent CPU / profiled CPU-s | of which BPF | BPF per tick | BPF per "
             "sample | throughput ratio (agent/baseline) | baseline spread | agent RSS peak | "
             "batch bytes / min | aggregation (samples/keys) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, (base, runs) in results.items():
        profiled = sum(NCPU * r["wall_s"] for r in runs)
        agent_cpu = sum(r["agent_cpu_s"] for r in runs)
        bpf = sum(r["bpf_s"] for r in runs)
        tick_s = sum(r["tick_s"] for r in runs)
        ticks = sum(r["ticks"] for r in runs)
        ratio = statistics.mean(r["throughput"] for r in runs) / statistics.mean(base)
        spread = (max(base) - min(base)) / statistics.mean(base)
        rss = max(r["rss_peak"] for r in runs)
        per_min = sum(r["batch_bytes"] for r in runs) / sum(r["wall_s"] for r in runs) * 60
        samples = sum(r["samples"] for r in runs)
        keys = sum(r["keys"] for r in runs)
        agg = f"{samples / keys:.1f}" if keys else "n/a"
        per_tick = f"{tick_s * 1e9 / ticks:.0f} ns" if ticks else "n/a"
        per_sample = f"{tick_s * 1e6 / samples:.1f} µs" if samples else "n/a"
        lines.append(f"| {name} | {pct((agent_cpu + bpf) / profiled)} | {pct(bpf / profiled)} | "
                     f"{per_tick} | {per_sample} | {ratio:.4f} | "
                     f"±{pct(spread / 2)} | {rss / 2**20:.1f} MiB | {per_min / 1024:.1f} KiB | {agg} |")
    table = "\n".join(lines)
    print()
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
