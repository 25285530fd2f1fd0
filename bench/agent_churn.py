#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The agent under process and thread churn: memory stays flat and sampling continues.

A real sysom-agent ships to a real sysom-server on 127.0.0.1 while three workloads run:

* steady: the chain_workload fixture (one thread, known call chain main → run_worker →
  chain_level_1..6 → spin_compute) for the whole run: warm-up, storm and cool-down;
* exec storm (the storm phase): churn_workload exec, --exec-rate short-lived processes a
  second, each spinning --child-spin-us in a library; --fresh-rate times a second the program
  and the library (libsysom_nofp_late.so, no frame pointers: the hybrid unwinder compiles its
  CFI) are copied to new files with fresh random Build IDs, so the agent's per-object caches
  (identities, unwind tables, symbol uploads) keep meeting new objects;
* thread waves (the storm phase): churn_workload threads, --threads short-lived threads in
  waves of --thread-wave, in a process with a training job's environment so the agent's OS
  signals measure each thread.

Measured:

* agent RSS (VmRSS every 0.25 s): before the storm, the maximum, at the end of the run; what
  the storm added (the median RSS over its last quarter over the RSS before it) and how much
  of that came in its second half (last quarter's median over the second quarter's); the
  slope over the second half of the storm (Theil-Sen: the median of pairwise slopes, which a
  transient spike does not tilt). "Memory flat" means that slope is at most
  --flat-kib-per-min: 256 KiB/min by default (15 MiB/h), under 15 bytes per exec at the
  default rate, so a leak of any per-process allocation fails it, while caches that are
  bounded (object identities, unwind tables kept a minute after their last process, Build IDs
  seen) must have stopped growing by then;
* agent CPU: utime + stime of the process, and the run time of its own BPF programs (read from
  the program descriptors it holds, with BPF statistics enabled for the run), as a share of
  one CPU, per phase;
* sampling continues: the steady process's samples stored by the server in every
  --slice-seconds slice of the run (none may be empty), and their total over what its CPU time
  predicts (CPU seconds x hz x sample rate: 1.0 means no sample was lost), during the storm
  and after it; the share of its samples whose stack holds the whole known chain;
* the agent's drop and loss counters, summed over the stored batches (server /metrics).

Usage: bench/agent_churn.py BUILD_DIR [--warmup S] [--storm S] [--cooldown S]
       [--exec-rate N] [--fresh-rate F] [--child-spin-us U] [--threads N] [--thread-wave W]
       [--sample-rate R] [--batch-interval S] [--json FILE] [--markdown FILE] [--keep]
       [--work-dir DIR]
Needs root (BPF). Prints a Markdown table; --json writes every number (tests read it).
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
HZ = 99  # the agent's default timer frequency, used as is
CHAIN = ["run_worker"] + [f"chain_level_{i}" for i in range(1, 7)] + ["spin_compute"]
# Counters of the agent that say something was dropped, lost or degraded (docs/wire-format.md).
LOSS_COUNTERS = ["count_map_full", "stack_map_full", "events_lost", "batch_limit_drops",
                 "processes_vanished", "spool_dropped", "os_threads_lost", "os_rows_dropped",
                 "frames_unmapped", "unwind_fallback_fp", "unwind_stop_no_mapping", "upload_retries"]


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def bpf_enable_stats():
    """BPF_ENABLE_STATS: run-time statistics on while the returned descriptor is open (unlike
    the kernel.bpf_stats_enabled sysctl, another benchmark cannot switch it off under us)."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 2)(0, 0)  # enable_stats.type = BPF_STATS_RUN_TIME
    fd = libc.syscall(321, 32, ctypes.byref(attr), ctypes.sizeof(attr))  # bpf, BPF_ENABLE_STATS
    return fd if fd >= 0 else None


def bpf_run_time_ns(pid):
    """Run time of the BPF programs whose descriptors the process holds (its own programs,
    not those of another agent on the machine)."""
    total, seen = 0, set()
    fd_dir = f"/proc/{pid}/fdinfo"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return 0
    for name in names:
        try:
            with open(os.path.join(fd_dir, name)) as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if "prog_id" in info and "run_time_ns" in info:
            prog = int(info["prog_id"])
            if prog not in seen:
                seen.add(prog)
                total += int(info["run_time_ns"])
    return total


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def http_get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode()


def flamegraph(server, pid, t0, t1, limit=1):
    q = urllib.parse.urlencode({"pid": pid, "from": f"{t0:.3f}", "to": f"{t1:.3f}",
                                "format": "json", "limit": limit})
    return json.loads(http_get(f"{server}/api/v1/flamegraph?{q}"))


def agent_counters(server):
    totals = {}
    for line in http_get(f"{server}/metrics").splitlines():
        m = re.match(r"sysom_agent_(\w+)_total(?:\{[^}]*\})? (\d+)$", line)
        if m:
            totals[m.group(1)] = totals.get(m.group(1), 0) + int(m.group(2))
    return totals


def function_ranges(binary):
    """name -> (file offset start, end) of the binary's functions (nm -S and its LOAD
    segments), to recognise frames the server could not name yet ("chain_workload+0x1234")."""
    segs = []
    for line in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            segs.append((int(parts[2], 16), int(parts[1], 16), int(parts[4], 16)))
    funcs = {}
    for line in subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            vaddr, size = int(parts[0], 16), int(parts[1], 16)
            for seg_vaddr, seg_off, seg_size in segs:
                if seg_vaddr <= vaddr < seg_vaddr + seg_size:
                    funcs[parts[3]] = (vaddr - seg_vaddr + seg_off, vaddr - seg_vaddr + seg_off + size)
    return funcs


def has_chain(frames, binary, funcs):
    """Whether the user frames (root first) hold CHAIN in order, named by the server or as
    offsets in `binary` (return addresses looked up at offset - 1)."""
    user = [f for f in frames if f.get("kind") == "user"]
    names = []
    for i, f in enumerate(user):
        if f["name"] in funcs:
            names.append(f["name"])
        elif f.get("object", "").endswith("/" + os.path.basename(binary)):
            off = int(f["offset"], 16) - (0 if i == len(user) - 1 else 1)
            names += [n for n, (lo, hi) in funcs.items() if lo <= off < hi]
    it = iter(names)
    return all(any(n == want for n in it) for want in CHAIN)


def slope_per_s(points):
    """Theil-Sen slope of [(t, y)]: the median of the pairwise slopes, so that a transient
    spike (a symbol upload's chunk buffer, a large batch being encoded) does not tilt it."""
    slopes = sorted((y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(points)
                    for t2, y2 in points[i + 1:] if t2 > t1)
    return statistics.median(slopes) if slopes else 0.0


def level(points, t0, t1):
    """Median RSS of the samples in [t0, t1): the level, spikes aside."""
    values = [y for t, y in points if t0 <= t < t1]
    return statistics.median(values) if values else 0


class Monitor(threading.Thread):
    """Samples the agent's RSS, CPU time and BPF run time every `period` seconds."""

    def __init__(self, pid, period=0.25):
        super().__init__(daemon=True)
        self.pid, self.period, self.points = pid, period, []
        self.stop = threading.Event()

    def sample(self):
        self.points.append((time.time(), proc_rss(self.pid), proc_cpu_seconds(self.pid),
                            bpf_run_time_ns(self.pid) / 1e9))

    def run(self):
        while not self.stop.is_set():
            try:
                self.sample()
            except OSError:
                return
            self.stop.wait(self.period)

    def at(self, t):
        """The last sample at or before wall time t (the first one if none)."""
        best = self.points[0]
        for p in self.points:
            if p[0] <= t:
                best = p
        return best


def run(args):
    build = os.path.abspath(args.build)
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
    work = args.work_dir or tempfile.mkdtemp(prefix="sysom-churn.")
    procs = []
    logs = []

    def popen(cmd, name, **kw):
        log = open(os.path.join(work, name + ".log"), "w")
        logs.append(log)
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **kw)
        procs.append(p)
        return p

    stats_fd = bpf_enable_stats()
    result = {"params": {k: v for k, v in vars(args).items()
                         if k not in ("json", "markdown", "work_dir", "keep")}}
    try:
        port_file = os.path.join(work, "port")
        server = popen([f"{build}/sysom-server", "--listen", "127.0.0.1:0", "--data-dir",
                        os.path.join(work, "data"), "--port-file", port_file], "server")
        if not wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(), 30):
            raise RuntimeError("the server did not start")
        url = "http://127.0.0.1:" + open(port_file).read().strip()
        agent_log = os.path.join(work, "agent.log")
        agent = popen([f"{build}/sysom-agent", "--server", url, "--spool-dir",
                       os.path.join(work, "spool"), "--socket", os.path.join(work, "agent.sock"),
                       "--sample-rate", str(args.sample_rate), "--drain-interval", "1s",
                       "--batch-interval", f"{args.batch_interval:g}s",
                       "--shutdown-timeout", "30s"], "agent")
        if not wait_for(lambda: "attached to" in open(agent_log).read(), 60):
            raise RuntimeError("the agent did not attach:\n" + open(agent_log).read())
        time.sleep(1)  # start-up work (kernel symbol upload) outside the measured window
        mon = Monitor(agent.pid)
        mon.start()

        total = args.warmup + args.storm + args.cooldown
        t_start = time.time()
        steady = popen([f"{build}/tests/fixtures/chain_workload", f"{total:g}", "--quiet"],
                       "steady")
        time.sleep(args.warmup)
        t_storm = time.time()
        churn = f"{build}/tests/fixtures/churn_workload"
        execs = popen([churn, "exec", f"{args.storm:g}", "--rate", f"{args.exec_rate:g}",
                       "--fresh-rate", f"{args.fresh_rate:g}", "--spin-us",
                       str(args.child_spin_us), "--library",
                       f"{build}/tests/fixtures/libsysom_nofp_late.so"], "exec")
        job_env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                       LOCAL_WORLD_SIZE="1", TORCHELASTIC_RUN_ID="sysom-churn")
        threads = popen([churn, "threads", f"{args.storm:g}", "--total", str(args.threads),
                         "--wave", str(args.thread_wave), "--spin-us", "1000"], "threads",
                        env=job_env)
        rc_exec, rc_threads = execs.wait(), threads.wait()
        t_calm = time.time()
        _, status, usage = os.wait4(steady.pid, 0)
        steady.returncode = os.waitstatus_to_exitcode(status)
        t_end = time.time()
        steady_cpu = usage.ru_utime + usage.ru_stime
        mon.stop.set()
        mon.join()
        mon.sample()
        agent.send_signal(signal.SIGTERM)
        agent_rc = agent.wait(timeout=120)
        if rc_exec or rc_threads or steady.returncode:
            raise RuntimeError(f"a workload failed: exec {rc_exec}, threads {rc_threads}, "
                               f"steady {steady.returncode} (logs in {work})")

        exec_out = open(os.path.join(work, "exec.log")).read()
        threads_out = open(os.path.join(work, "threads.log")).read()
        m = re.search(r"exec spawned (\d+) failed (\d+) child_errors (\d+) fresh (\d+) "
                      r"seconds ([0-9.]+)", exec_out)
        n = re.search(r"threads created (\d+) failed (\d+) waves (\d+)", threads_out)
        result["storm"] = {
            "execs": int(m.group(1)), "exec_failures": int(m.group(2)) + int(m.group(3)),
            "fresh_objects": int(m.group(4)), "exec_rate": int(m.group(1)) / float(m.group(5)),
            "threads": int(n.group(1)), "thread_failures": int(n.group(2)),
            "thread_waves": int(n.group(3)),
        }

        # Memory and CPU.
        pts = mon.points
        storm_pts = [(t, rss) for t, rss, _, _ in pts if t_storm <= t <= t_calm]
        mid = t_storm + (t_calm - t_storm) / 2
        second_half = [(t, rss) for t, rss in storm_pts if t >= mid]

        def cpu_share(t0, t1):
            a, b = mon.at(t0), mon.at(t1)
            wall = b[0] - a[0]
            return ((b[2] - a[2]) / wall if wall > 0 else 0.0,
                    (b[3] - a[3]) / wall if wall > 0 else 0.0)

        slope = slope_per_s(second_half)
        quarter = (t_calm - t_storm) / 4
        rss = [(t, r) for t, r, _, _ in pts]
        before = level(rss, t_storm - 2, t_storm) or mon.at(t_storm)[1]
        q2, q4 = level(rss, t_storm + quarter, mid), level(rss, t_calm - quarter, t_calm)
        result["memory"] = {
            "rss_storm_start": int(before),  # median of the 2 s before the storm
            "rss_max": max(r for _, r in rss),
            "rss_storm_end": mon.at(t_calm)[1],
            "rss_end": rss[-1][1],
            # What the storm added (median RSS over its last quarter, over the RSS before it),
            # and how much of that came in its second half (the last quarter's median over the
            # second quarter's): a steady leak grows it, caches that stopped growing do not.
            "growth_storm_bytes": int(q4 - before),
            "growth_second_half_bytes": int(q4 - q2),
            "slope_second_half_bytes_per_s": slope,
            "flat_limit_bytes_per_s": args.flat_kib_per_min * 1024 / 60,
            "flat": slope <= args.flat_kib_per_min * 1024 / 60,
            "series": [(round(t - t_start, 2), rss) for t, rss, _, _ in pts],
        }
        result["cpu"] = {
            "warmup": cpu_share(t_start, t_storm),
            "storm": cpu_share(t_storm, t_calm),
            "cooldown": cpu_share(t_calm, t_end),
        }

        # Sampling: the steady process's samples per slice, and against its CPU time.
        slices = []
        t = t_start
        while t_end - t > 0.5:  # the last slice may be shorter, not empty
            t1 = min(t + args.slice_seconds, t_end)
            phase = ("warmup" if t1 <= t_storm else "storm" if t1 <= t_calm
                     else "cooldown" if t >= t_calm else "mixed")
            slices.append({"from": round(t - t_start, 2), "to": round(t1 - t_start, 2),
                           "phase": phase, "samples": flamegraph(url, steady.pid, t, t1)["total"]})
            t = t1
        whole = flamegraph(url, steady.pid, t_start - 5, t_end + 5, limit=1000)
        steady_bin = f"{build}/tests/fixtures/chain_workload"
        funcs = function_ranges(steady_bin)
        chained = sum(s["count"] for s in whole["stacks"]
                      if has_chain(s["frames"], steady_bin, funcs))
        expected = steady_cpu * HZ * args.sample_rate
        result["sampling"] = {
            "steady_pid": steady.pid,
            "steady_cpu_s": steady_cpu,
            "steady_samples": whole["total"],
            "coverage": whole["total"] / expected if expected else 0.0,
            "full_chain_share": chained / whole["total"] if whole["total"] else 0.0,
            "slices": slices,
            "empty_slices": sum(1 for s in slices if s["samples"] == 0),
            "storm_samples": sum(s["samples"] for s in slices if s["phase"] == "storm"),
            "cooldown_samples": sum(s["samples"] for s in slices if s["phase"] == "cooldown"),
        }
        nodes = json.loads(http_get(f"{url}/api/v1/nodes"))["nodes"]
        counters = agent_counters(url)
        text = open(agent_log).read()
        units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
        uploads = [sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+) (B|KiB|MiB|GiB)\b",
                                                                  line.split("): ", 1)[-1]))
                   for line in text.splitlines() if "uploaded symbols of " in line]
        result["agent"] = {
            "exit_status": agent_rc,
            # Files the symbol uploader sent (any process sampled on the machine): its chunk
            # buffers are the large allocations of the agent, and steps in its RSS follow them.
            "symbol_uploads": len(uploads),
            "symbol_upload_bytes": int(sum(uploads)),
            "batches_stored": sum(nd["batches"] for nd in nodes),
            "batches_logged": len(re.findall(r"\bbatch \d+: \d+ samples", text)),
            "warnings": len(re.findall(r"\b(warn|error)\b", text, re.I)),
            "counters": counters,
            "losses": {k: counters.get(k, 0) for k in LOSS_COUNTERS},
        }
        result["work_dir"] = work
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        if stats_fd is not None:
            os.close(stats_fd)
        if args.work_dir:
            pass  # the caller's
        elif not args.keep and "work_dir" in result:
            shutil.rmtree(work, ignore_errors=True)
        elif os.path.isdir(work):
            print(f"logs kept in {work}", file=sys.stderr)


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def markdown(r):
    s, m, c, smp, a = r["storm"], r["memory"], r["cpu"], r["sampling"], r["agent"]
    p = r["params"]
    slope_kib_min = m["slope_second_half_bytes_per_s"] * 60 / 1024
    lines = [
        f"Machine: {os.cpu_count()} CPUs, kernel {os.uname().release}. Warm-up {p['warmup']:g} s, "
        f"storm {p['storm']:g} s, cool-down {p['cooldown']:g} s; sampling {100 * p['sample_rate']:g}% "
        f"of ticks at {HZ} Hz, batches every {p['batch_interval']:g} s.",
        f"Storm: {s['execs']} execs ({s['exec_rate']:.0f}/s, {s['exec_failures']} failed), "
        f"{s['fresh_objects']} fresh programs + libraries, {s['threads']} threads in "
        f"{s['thread_waves']} waves ({s['thread_failures']} failed).",
        "",
        "| agent RSS before the storm | max | end of run | storm added | of which in its second "
        "half | slope, 2nd half of storm | flat (≤ {:g} KiB/min) | agent CPU warm-up / storm / "
        "after (of one CPU) | of which BPF (storm) |".format(p["flat_kib_per_min"]),
        "|---:|---:|---:|---:|---:|---:|:--:|---:|---:|",
        f"| {mib(m['rss_storm_start'])} | {mib(m['rss_max'])} | {mib(m['rss_end'])} | "
        f"{mib(m['growth_storm_bytes'])} | {mib(m['growth_second_half_bytes'])} | "
        f"{slope_kib_min:+.1f} KiB/min | {'yes' if m['flat'] else 'NO'} | "
        f"{100 * sum(c['warmup']):.1f}% / {100 * sum(c['storm']):.1f}% / "
        f"{100 * sum(c['cooldown']):.1f}% | {100 * c['storm'][1]:.1f}% |",
        "",
        "| steady samples stored | of CPU time × Hz × rate | with the whole chain | empty "
        f"{p['slice_seconds']:g}-s slices | storm / after | batches stored / logged |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {smp['steady_samples']} | {smp['coverage']:.3f} | {100 * smp['full_chain_share']:.1f}% | "
        f"{smp['empty_slices']} of {len(smp['slices'])} | {smp['storm_samples']} / "
        f"{smp['cooldown_samples']} | {a['batches_stored']} / {a['batches_logged']} |",
        "",
        "Agent loss counters (sum over stored batches): " +
        ", ".join(f"{k} {v}" for k, v in a["losses"].items()) + ".",
        f"Symbol uploads during the run (every process sampled on the machine): "
        f"{a['symbol_uploads']} files, {mib(a['symbol_upload_bytes'])}; steps in the agent's RSS "
        "follow the large ones (the upload's buffers).",
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--storm", type=float, default=150)
    ap.add_argument("--cooldown", type=float, default=30)
    ap.add_argument("--exec-rate", type=float, default=300)
    ap.add_argument("--fresh-rate", type=float, default=10)
    ap.add_argument("--child-spin-us", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=10000)
    ap.add_argument("--thread-wave", type=int, default=500)
    ap.add_argument("--sample-rate", type=float, default=1.0)
    ap.add_argument("--batch-interval", type=float, default=5)
    ap.add_argument("--slice-seconds", type=float, default=5)
    ap.add_argument("--flat-kib-per-min", type=float, default=256)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and its logs")
    ap.add_argument("--work-dir", help="use (and keep) this directory for logs and data")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/agent_churn.py loads BPF programs: run it as root")
    r = run(args)
    table = markdown(r)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
