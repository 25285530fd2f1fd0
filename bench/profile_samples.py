# SPDX-License-Identifier: Apache-2.0
"""Readers of the stacks the Python benchmarks compare (bench/python_accuracy.sh,
bench/python_vs_austin.sh): each yields (frames root first, weight)."""


def read_sysom(path):
    """A folded flame graph from sysomctl: "frame;frame;... COUNT"."""
    for line in open(path):
        frames, _, n = line.rstrip("\n").rpartition(" ")
        yield frames.split(";"), int(n)


def read_austin(path):
    """austin's output, one line per sample. 1.x with -a: "Thread ID;func (file:line);...
    METRIC"; 3.x: "P<pid>;T<iid>:<tid>;file:func:line;... METRIC" after "# key: value" lines,
    its frames rewritten as "func (file:line)". METRIC is the sample's time in µs (with -s,
    idle samples dropped), the weight."""
    for line in open(path, errors="replace"):
        if line.startswith("#"):
            continue
        frames, _, n = line.rstrip("\n").rpartition(" ")
        if not n.isdigit():
            continue
        fs = frames.split(";")
        if fs[0].startswith("P"):
            out = []
            for f in fs[2:]:
                file, func, lineno = (f.rsplit(":", 2) + ["", ""])[:3]
                out.append(f"{func} ({file}:{lineno})")
            yield out, int(n)
        else:
            yield fs[1:], int(n)
