#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks folded flame-graph output against a binary's functions.

  folded.py chain BINARY FOLDED       fraction of samples whose user frames hold the chain
                                      run_worker → chain_level_1 … chain_level_6 in order
  folded.py kernel FOLDED             fraction of samples with kernel frames, and the names
  folded.py total FOLDED              total samples

User frames appear as "<file basename>+0x<file offset>" when the server has no symbols for the
file (this maps file offsets back to functions with `nm -S` and the ELF program headers), or as
function names once the agent has uploaded the file (taken as they are).
"""
import re
import subprocess
import sys

CHAIN = ["run_worker"] + [f"chain_level_{i}" for i in range(1, 7)]


def load_segments(binary):
    segs = []
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            offset, vaddr, filesz = int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)
            segs.append((vaddr, offset, filesz))
    return segs


def load_functions(binary):
    """name -> (file offset start, end)"""
    segs = load_segments(binary)
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    funcs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[2] not in "tTwW":
            continue
        vaddr, size, name = int(parts[0], 16), int(parts[1], 16), parts[3]
        for seg_vaddr, seg_off, seg_size in segs:
            if seg_vaddr <= vaddr < seg_vaddr + seg_size:
                start = vaddr - seg_vaddr + seg_off
                funcs[name] = (start, start + size)
    return funcs


def parse(folded):
    for line in open(folded):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        yield stack.split(";"), int(count)


def function_at(funcs, base, offset):
    for name, (start, end) in funcs.items():
        if start <= offset < end:
            return name
    return None


def chain(binary, folded):
    base = binary.rsplit("/", 1)[-1]
    funcs = load_functions(binary)
    pattern = re.compile(re.escape(base) + r"\+0x([0-9a-f]+)$")
    total = matched = 0
    for frames, count in parse(folded):
        total += count
        names = []
        user = [f for f in frames if not f.endswith("_[k]")]
        for i, f in enumerate(user):
            if f in funcs:
                names.append(f)  # symbolized by the server
                continue
            m = pattern.match(f)
            if not m:
                continue
            off = int(m.group(1), 16)
            # Non-leaf frames are return addresses: the call is the byte before.
            leaf = i == len(user) - 1
            name = function_at(funcs, base, off if leaf else off - 1)
            if name:
                names.append(name)
        it = iter(names)
        if all(any(n == want for n in it) for want in CHAIN):
            matched += count
    print(f"{matched} {total} {matched / total if total else 0:.3f}")


def kernel(folded):
    total = with_kernel = 0
    names = {}
    for frames, count in parse(folded):
        total += count
        k = [f[:-4] for f in frames if f.endswith("_[k]")]
        if k:
            with_kernel += count
            for n in k:
                names[n] = names.get(n, 0) + count
    top = sorted(names.items(), key=lambda kv: -kv[1])[:8]
    print(f"{with_kernel} {total} " + ",".join(n for n, _ in top))


def total(folded):
    print(sum(c for _, c in parse(folded)))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "chain":
        chain(sys.argv[2], sys.argv[3])
    elif cmd == "kernel":
        kernel(sys.argv[2])
    elif cmd == "total":
        total(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd}")
