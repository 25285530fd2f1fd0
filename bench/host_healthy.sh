#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Host anomaly scores on a healthy node reading the real /proc and /sys: the server, N agents
# as N nodes of one simulated job, and the healthy simjob for SECONDS. Every 2 s it reads
# GET /api/v1/jobs/{job}/hosts and prints, per node, the largest score / threshold, the most
# periods over, the largest |z| of one signal and that signal, and whether it was anomalous.
# With NODES=1 (default) there are no peers, so the deviation is the own-history z alone: the
# worst case of a node whose peers would agree with any change, on this (busy, shared)
# machine. Agents on one machine read the same /proc, so N > 1 exercises peers only trivially.
# Usage: SYSOM_BUILD=build/san SYSOM_ROOT=$PWD bench/host_healthy.sh [SECONDS] [NODES]
set -u
. "$(dirname "$0")/../tests/e2e/lib.sh"
require_root
SECS=${1:-120}
NODES=${2:-1}
SIMJOB_DIR=$BUILD/tests/fixtures/simjob
start_server srv --analysis-interval 1s || exit 1
for n in $(seq 0 $((NODES - 1))); do
	printf '%032x\n' $((0xbeef00 + n)) >"$E2E_TMP/mid-$n"
	start_agent "n$n" "$SERVER_URL" --machine-id-file "$E2E_TMP/mid-$n" --off-cpu off --hz 49 \
		--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" || exit 1
done
timeout $((SECS + 60)) "$SIMJOB_DIR/simjob" --ranks 4 --job-id healthy-hosts --seconds "$SECS" \
	--cpu-us 300 --kernel-us 3000 >"$E2E_TMP/job.log" 2>&1 &
JOB=$!
while kill -0 $JOB 2>/dev/null; do
	curl -sf "$SERVER_URL/api/v1/jobs/healthy-hosts/hosts" >>"$E2E_TMP/hosts.jsonl" && echo >>"$E2E_TMP/hosts.jsonl"
	sleep 2
done
curl -sf "$SERVER_URL/api/v1/diagnoses?job=healthy-hosts&from=-1d" >"$E2E_TMP/diag.json"
python3 - "$E2E_TMP/hosts.jsonl" "$E2E_TMP/diag.json" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    for n in json.loads(line)["nodes"]:
        b = best.setdefault(n["node_id"], dict(ratio=0, periods=0, z=0, sig="-", signals=0, anomalous=False, judged=0))
        b["signals"] = max(b["signals"], n["signals"])
        b["judged"] += n["has_history"] and n["has_peers"]
        if n["threshold"]:
            b["ratio"] = max(b["ratio"], n["score"] / n["threshold"])
        b["periods"] = max(b["periods"], n["periods_over"])
        b["anomalous"] |= n["anomalous"]
        for d in n["deviations"]:
            if abs(d["z"]) > b["z"]:
                b["z"], b["sig"] = abs(d["z"]), d["signal"]
for k, b in sorted(best.items()):
    print(f"node {k}: signals {b['signals']}, judged polls {b['judged']}, max score/threshold {b['ratio']:.2f}, "
          f"max periods over {b['periods']}, max |z| {b['z']:.2f} ({b['sig']}), anomalous {b['anomalous']}")
inc = [d for d in json.load(open(sys.argv[2]))["diagnoses"] if d["kind"] == "host-anomaly"]
print("host-anomaly incidents:", len(inc))
PY
