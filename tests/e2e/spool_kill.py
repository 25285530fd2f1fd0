#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Helpers of the SIGKILL phase of test_outage.sh.

  spool_kill.py kill-on-open DIR SUFFIX PID
      SIGKILLs PID as it opens a file whose name ends in SUFFIX in DIR, so the kill lands
      inside the write that opened it. With fanotify (root) the open is held until PID is
      dead: the file is left, empty. Without it, inotify reports the file's creation and the
      kill races with the write, which may complete first. Prints the file's name and "held"
      or "raced".

  spool_kill.py account [--interrupted SEQ,...] DB LOG SNAPSHOT...
      Exactly-once accounting of one agent's epoch, after the agent ran, was killed and was
      restarted on the same spool: DB is the server's store (sysom.db, read-only), LOG the
      agent's log over all its runs (appended to; runs start at "attached to" lines), each
      SNAPSHOT the batch file names in the spool right after a kill; --interrupted the
      sequences of the batch writes the kills are known to have interrupted (then exactly
      those may be missing). Prints one "ok ..." or "not ok ..." line per check and a "# ..."
      summary.
"""
import ctypes
import json
import os
import re
import signal
import sqlite3
import struct
import sys
import time

IN_CREATE = 0x100
FAN_CLOEXEC, FAN_CLASS_CONTENT, FAN_OPEN_PERM, FAN_EVENT_ON_CHILD = 0x1, 0x4, 0x10000, 0x08000000
FAN_MARK_ADD, FAN_ALLOW, AT_FDCWD = 0x1, 0x1, -100
FAN_EVENT = "IBBHQii"  # event_len, vers, reserved, metadata_len, mask, fd, pid


def kill_on_open(directory, suffix, pid):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                   ctypes.c_char_p]
    fan = libc.fanotify_init(FAN_CLOEXEC | FAN_CLASS_CONTENT, os.O_RDONLY)
    if fan >= 0 and libc.fanotify_mark(fan, FAN_MARK_ADD, FAN_OPEN_PERM | FAN_EVENT_ON_CHILD,
                                       AT_FDCWD, directory.encode()) == 0:
        while True:
            buf, at = os.read(fan, 65536), 0
            while at < len(buf):
                length, _, _, _, _, fd, _ = struct.unpack_from(FAN_EVENT, buf, at)
                at += length
                if fd < 0:
                    continue  # queue overflow: no file, nothing waits
                name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
                hit = name.endswith(suffix)
                if hit:
                    os.kill(pid, signal.SIGKILL)  # its open waits, killable, for our answer
                    wait_gone(pid)
                os.write(fan, struct.pack("iI", fd, FAN_ALLOW))
                os.close(fd)
                if hit:
                    print(name, "held")
                    return
    ino = libc.inotify_init1(os.O_CLOEXEC)
    if ino < 0 or libc.inotify_add_watch(ino, directory.encode(), IN_CREATE) < 0:
        sys.exit("inotify: " + os.strerror(ctypes.get_errno()))
    while True:
        buf, at = os.read(ino, 65536), 0
        while at < len(buf):
            _, _, _, n = struct.unpack_from("iIII", buf, at)  # wd, mask, cookie, len
            name = buf[at + 16:at + 16 + n].rstrip(b"\0").decode()
            at += 16 + n
            if name.endswith(suffix):
                os.kill(pid, signal.SIGKILL)
                print(name, "raced")
                return


def wait_gone(pid):
    """Waits until `pid` (not our child) has died: its /proc/PID/stat says zombie or is gone."""
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.001)


def account(db, log, snapshots, interrupted):
    text = open(log).read()
    m = re.search(r"new agent epoch ([0-9a-f]{16})", text)
    if not m:
        print("not ok the agent logged its epoch")
        return
    epoch = int(m.group(1), 16)
    signed = epoch - (1 << 64) if epoch >= 1 << 63 else epoch  # how the store keeps u64
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    stored = {seq: (samples, json.loads(counters)) for seq, samples, counters in con.execute(
        "SELECT sequence, samples, counters FROM batches WHERE epoch = ?", (signed,))}
    con.close()
    runs = [[(int(s), int(n)) for s, n in re.findall(r"\bbatch (\d+): (\d+) samples", part)]
            for part in text.split("attached to")[1:]]
    logged = [s for run in runs for s, _ in run]
    spooled = set()
    for path in snapshots:
        for line in open(path):
            if line.startswith(f"{epoch:016x}-"):
                spooled.add(int(line.split("-")[1].split(".")[0]))

    def check(ok, what):
        print(("ok " if ok else "not ok ") + what)

    check(len(runs) == len(snapshots) + 1, f"{len(runs)} agent runs in the log")
    check(len(logged) == len(set(logged)), "no sequence was handed out twice")
    missing = sorted(spooled - set(stored))
    check(not missing, f"all {len(spooled)} batches spooled at the kills are stored "
          f"(missing: {missing})")
    wrong = [(s, n, stored[s][0] if s in stored else None) for run in runs for s, n in run
             if s not in stored or stored[s][0] != n]
    check(not wrong, f"all {len(logged)} logged batches are stored with their sample counts "
          f"(wrong: {wrong})")
    extra = sorted(set(stored) - set(logged) - spooled)
    check(not extra, f"nothing stored that was neither logged nor spooled (extra: {extra})")
    # A kill may lose the one sequence it interrupted (reserved, never committed): at most one
    # per kill, and never one inside a run; exactly those of the batch writes known to have
    # been interrupted, when the caller knows them.
    seqs = sorted(stored)
    gaps = [s for s in range(seqs[0], seqs[-1] + 1) if s not in stored] if seqs else []
    spans = [(min(s for s, _ in run), max(s for s, _ in run)) for run in runs if run]
    inside = [g for g in gaps if any(lo < g < hi for lo, hi in spans)]
    if interrupted is not None:
        check(gaps == interrupted, f"the only sequences missing are those of the interrupted "
              f"batch writes (gaps: {gaps}, interrupted: {interrupted})")
    else:
        check(len(gaps) <= len(snapshots) and not inside,
              f"at most one sequence lost per kill, none inside a run (gaps: {gaps})")

    def total(name):
        return sum(c.get(name, 0) for _, c in stored.values())

    check(total("spool_dropped") == 0, "the agent's batches count no spool drop")
    check(total("upload_retries") > 0,
          f"the agent's batches count its failed uploads ({total('upload_retries')})")
    print(f"# {len(stored)} batches stored, {sum(n for n, _ in stored.values())} samples; "
          f"batches logged per run {[len(r) for r in runs]}; sequence gaps {gaps}")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "kill-on-open":
        kill_on_open(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "account":
        args = sys.argv[2:]
        interrupted = None
        if args[0] == "--interrupted":
            interrupted = sorted(int(x) for x in args[1].split(",") if x)
            args = args[2:]
        account(args[0], args[1], args[2:], interrupted)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
