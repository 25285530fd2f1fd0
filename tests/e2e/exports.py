#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads the exports back, independently of the server, and compares them with folded output.

  exports.py pprof TEXT FOLDED       TEXT: `protoc --decode=perftools.profiles.Profile` of the
                                     gunzipped pprof answer. Rebuilds "comm;root;...;leaf count"
                                     lines (labels, leaf-first location ids, caller-last lines)
                                     and compares them with FOLDED without its "_[k]"/"_[i]"
                                     marks (pprof tells kernel frames by their mapping, and
                                     folded marks every frame of the kernel stack, also module
                                     and unknown addresses, which have mappings of their own). Prints
                                     "TOTAL SAMPLES FUNCTIONS MAPPINGS_WITH_BUILD_ID", exits 1
                                     with the differences when they are not the same.
  exports.py pprof-names TEXT        one function name per line
  exports.py pprof-buildid TEXT FILE the Build ID of the mapping whose file is FILE
  exports.py speedscope JSON FOLDED  checks the speedscope file (schema fields, frame indexes,
                                     endValue = sum of weights) and its stacks against FOLDED
  exports.py trace JSON COLLECTIVES  checks the Chrome trace against the job's collectives
                                     answer (GET /jobs/{job}/collectives): one complete event
                                     per call. Prints "EVENTS PROCESSES TRUNCATED"
"""
import codecs
import collections
import json
import sys


def parse_text(text):
    """Protobuf text format (as protoc --decode prints it) into nested dicts of lists."""
    root = collections.defaultdict(list)
    stack = [root]
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
        elif line.endswith("{"):
            child = collections.defaultdict(list)
            stack[-1][line[:-1].strip()].append(child)
            stack.append(child)
        else:
            key, value = line.split(":", 1)
            value = value.strip()
            if value.startswith('"'):
                value = codecs.escape_decode(value[1:-1].encode("latin-1"))[0].decode("utf-8")
            elif value in ("true", "false"):
                value = value == "true"
            else:
                value = int(value)
            stack[-1][key].append(value)
    return root


def one(msg, key, default=0):
    v = msg.get(key)
    return v[0] if v else default


def folded_lines(path):
    lines = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, count = line.rsplit(" ", 1)
            lines[stack] += int(count)
    return lines


def unmarked(lines):
    """Folded lines without the kernel (_[k]) and inlined (_[i]) marks of their frames."""
    out = collections.Counter()
    for k, v in lines.items():
        out[";".join(n[:-4] if n.endswith(("_[k]", "_[i]")) else n for n in k.split(";"))] += v
    return out


def pprof_lines(p):
    strings = p["string_table"]
    assert strings[0] == "", "string_table[0] must be empty"
    by_id = lambda items: {one(m, "id"): m for m in items}
    functions, locations, mappings = by_id(p["function"]), by_id(p["location"]), by_id(p["mapping"])
    lines = collections.Counter()
    for s in p["sample"]:
        labels = {strings[one(l, "key")]: l for l in s["label"]}
        parts = [strings[one(labels["comm"], "str")]]
        for lid in reversed(s["location_id"]):  # leaf first in pprof
            loc = locations[lid]
            mid = one(loc, "mapping_id")
            assert mid == 0 or mid in mappings, f"location {lid}: no mapping {mid}"
            for ln in reversed(loc["line"]):  # the caller last in pprof
                name = strings[one(functions[one(ln, "function_id")], "name")]
                parts.append(name.replace(";", ":").replace("\n", " ").replace("\r", " "))
        lines[";".join(parts)] += s["value"][0]
    return lines


def load_pprof(path):
    with open(path, encoding="utf-8") as f:
        return parse_text(f.read())


def diff(a, b, what):
    bad = [(k, a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b) if a.get(k, 0) != b.get(k, 0)]
    for k, x, y in sorted(bad)[:10]:
        print(f"{what}: {k!r}: {x} vs folded {y}", file=sys.stderr)
    return not bad


def main():
    cmd = sys.argv[1]
    if cmd == "pprof":
        p = load_pprof(sys.argv[2])
        got, want = pprof_lines(p), unmarked(folded_lines(sys.argv[3]))
        strings = p["string_table"]
        with_id = sum(1 for m in p["mapping"] if len(strings[one(m, "build_id")]) == 40)
        print(sum(got.values()), len(p["sample"]), len(p["function"]), with_id)
        sys.exit(0 if diff(got, want, "pprof") else 1)
    if cmd == "pprof-names":
        p = load_pprof(sys.argv[2])
        for f in p["function"]:
            print(p["string_table"][one(f, "name")])
        return
    if cmd == "pprof-buildid":
        p = load_pprof(sys.argv[2])
        s = p["string_table"]
        print(" ".join(s[one(m, "build_id")] for m in p["mapping"] if s[one(m, "filename")] == sys.argv[3]))
        return
    if cmd == "speedscope":
        with open(sys.argv[2], encoding="utf-8") as f:
            d = json.load(f)
        assert d["$schema"] == "https://www.speedscope.app/file-format-schema.json"
        frames = d["shared"]["frames"]
        assert all(isinstance(fr["name"], str) for fr in frames)
        prof = d["profiles"][d.get("activeProfileIndex", 0)]
        assert prof["type"] == "sampled" and prof["startValue"] == 0
        assert len(prof["samples"]) == len(prof["weights"])
        assert prof["endValue"] == sum(prof["weights"]), "endValue is not the sum of the weights"
        got = collections.Counter()
        for sample, weight in zip(prof["samples"], prof["weights"]):
            assert all(0 <= i < len(frames) for i in sample)
            got[";".join(frames[i]["name"] for i in sample)] += weight
        # Folded marks kernel frames _[k] and inlined ones _[i]; speedscope names them plainly.
        want = unmarked(folded_lines(sys.argv[3]))
        print(prof["endValue"], len(prof["samples"]), len(frames))
        sys.exit(0 if diff(got, want, "speedscope") else 1)
    if cmd == "trace":
        with open(sys.argv[2], encoding="utf-8") as f:
            d = json.load(f)
        with open(sys.argv[3], encoding="utf-8") as f:
            coll = json.load(f)
        events = d["traceEvents"]
        complete = [e for e in events if e["ph"] == "X"]
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
        for e in complete:
            assert e["pid"] in names and e["dur"] >= 0 and e["cat"] == "nccl"
            assert e["name"] == e["args"]["op"] and e["args"]["bytes"] >= 0
        calls = collections.Counter()
        for inst in coll["instances"]:
            for c in inst["calls"]:
                calls[(inst["comm"], inst["op"], inst["seq"], c["rank"], c["pid"])] += 1
        got = collections.Counter((e["args"]["comm"], e["args"]["op"], e["args"]["seq"],
                                   e["args"]["rank"], e["args"]["pid"]) for e in complete)
        truncated = d["otherData"]["truncated"]
        if not truncated and not coll["truncated"] and got != calls:
            print(f"trace: {sum(got.values())} events, collectives: {sum(calls.values())} calls",
                  file=sys.stderr)
            sys.exit(1)
        if truncated and not got <= calls + collections.Counter():
            print("trace: events that are no call of the collectives answer", file=sys.stderr)
            sys.exit(1)
        print(len(complete), len(names), str(truncated).lower())
        return
    sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
