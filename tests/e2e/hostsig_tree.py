#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes fixture /proc and /sys trees for the agent's host signals (--host-proc-root,
--host-sys-root), one per simulated node, and advances their counters every 0.5 s at healthy
rates (with a few percent of noise) until --seconds pass. Once the file --spike-file exists, the
node --spike-node retransmits 3,000 TCP segments/s and takes 300,000 NET_RX softirqs/s (a flapping
link). Files are replaced atomically (rename), as /proc never shows a half-written file."""
import argparse, os, random, time

p = argparse.ArgumentParser()
p.add_argument("--root", required=True)
p.add_argument("--nodes", type=int, default=3)
p.add_argument("--seconds", type=float, default=60)
p.add_argument("--spike-node", type=int, default=-1)
p.add_argument("--spike-file", default="")
a = p.parse_args()

def put(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)

rng = random.Random(7)
state = [dict(user=0, sys=0, idle=0, iowait=0, steal=0, ctxt=0, rx=0, tx=0, hi=0, psi_cpu=0,
              psi_io=0, out=0, retrans=0, inerr=0, lost=0, tmo=0, rxd=0, txd=0, rd=0, rdms=0,
              wr=0, wrms=0, pgmaj=0) for _ in range(a.nodes)]
rates = dict(user=55, sys=15, idle=25, iowait=3, steal=0, ctxt=20000, rx=5000, tx=800, hi=10,
             psi_cpu=30000, psi_io=2000, out=40000, retrans=1, inerr=0, lost=0, tmo=0, rxd=0,
             txd=0, rd=20, rdms=10, wr=80, wrms=120, pgmaj=2)
start = time.monotonic()
last = start
while True:
    now = time.monotonic()
    if now - start > a.seconds:
        break
    dt = now - last
    last = now
    for n in range(a.nodes):
        s = state[n]
        spike = n == a.spike_node and a.spike_file and os.path.exists(a.spike_file)
        for k, r in rates.items():
            if spike and k == "retrans":
                r = 3000
            if spike and k == "rx":
                r = 300000
            s[k] += int(r * dt * rng.uniform(0.95, 1.05) + rng.random())
        proc = f"{a.root}/node{n}/proc"
        sysd = f"{a.root}/node{n}/sys"
        put(f"{proc}/stat", f"cpu  {s['user']} 0 {s['sys']} {s['idle']} {s['iowait']} 0 0 "
            f"{s['steal']} 0 0\nctxt {s['ctxt']}\nprocs_running 2\nprocs_blocked 0\n")
        put(f"{proc}/softirqs", "                    CPU0\n"
            f"          HI:     {s['hi']}\n      NET_TX:     {s['tx']}\n"
            f"      NET_RX:     {s['rx']}\n")
        put(f"{proc}/pressure/cpu", f"some avg10=3.00 avg60=3.00 avg300=3.00 total={s['psi_cpu']}\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        put(f"{proc}/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        put(f"{proc}/pressure/io", f"some avg10=0.20 avg60=0.20 avg300=0.20 total={s['psi_io']}\n"
            f"full avg10=0.10 avg60=0.10 avg300=0.10 total={s['psi_io'] // 2}\n")
        put(f"{proc}/net/snmp", "Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs InErrs\n"
            f"Tcp: 1 200 {s['out']} {s['retrans']} {s['inerr']}\n")
        put(f"{proc}/net/netstat", "TcpExt: TCPLostRetransmit TCPTimeouts\n"
            f"TcpExt: {s['lost']} {s['tmo']}\n")
        put(f"{proc}/net/dev", "Inter-|   Receive |  Transmit\n face |bytes packets errs drop"
            " fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n"
            "    lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n"
            f"  eth0: 1 1 0 {s['rxd']} 0 0 0 0 1 1 0 {s['txd']} 0 0 0 0\n")
        put(f"{proc}/diskstats", f"   8       0 sda {s['rd']} 0 0 {s['rdms']} {s['wr']} 0 0 "
            f"{s['wrms']} 0 0 0 0 0 0 0 0 0\n")
        put(f"{sysd}/block/sda/size", "1\n")
        put(f"{proc}/meminfo", "MemTotal:       1000000 kB\nMemAvailable:    700000 kB\n")
        put(f"{proc}/vmstat", f"pgmajfault {s['pgmaj']}\n")
        for c in range(2):
            put(f"{sysd}/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq", "2400000\n")
    time.sleep(0.5)
