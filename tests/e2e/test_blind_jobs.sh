#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# No blind jobs (issue 17): a job started a few seconds after the agent, on a copy of the NCCL
# library the agent has never seen (fresh Build ID, no DWARF: communicator layout unknown).
#  1. --gpu-loader off: the library is found by the periodic scans, after the ranks' init
#     calls: every communicator has a per-process key and no size. The server groups the
#     ranks' call streams by sequence (server/analysis/seqmatch.c): the world communicator
#     is analysed with its 4 ranks and the rank delayed by 4 ms is named.
#  2. --gpu-loader hold: ld.so's notification stops each process that maps the library until
#     the probes are in: every init is seen, every iteration is an analysed instance.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
[ -x "$SIMJOB_DIR/simjob" ] || skip_all "simjob not built (needs nccl.h and cuda.h to build)"
command -v objcopy >/dev/null || skip_all "objcopy missing"

api() { curl -sf "$SERVER_URL$1"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

# fresh_copy DIR: simjob and its libraries in DIR, libnccl without debug info and with a new
# random Build ID (a file no agent has seen: a new inode, unknown layout).
fresh_copy() {
	mkdir -p "$1"
	cp "$SIMJOB_DIR/simjob" "$SIMJOB_DIR/libcuda.so.1" "$1/"
	objcopy --strip-debug "$SIMJOB_DIR/libnccl.so.2" "$1/libnccl.so.2" || return 1
	python3 - "$1/libnccl.so.2" <<'PY' || return 1
import os, subprocess, sys
path = sys.argv[1]
old = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
old = old.split("Build ID:")[1].split()[0]
data = open(path, "rb").read()
at = data.find(bytes.fromhex(old))
assert at > 0 and data.count(bytes.fromhex(old)) == 1
data = data[:at] + os.urandom(len(old) // 2) + data[at + len(old) // 2:]
open(path, "wb").write(data)
PY
}

build_id() { readelf -n "$1" | sed -n 's/.*Build ID: //p'; }

start_server srv || exit 1

# 1. Blind: periodic discovery only, init missed everywhere.
fresh_copy "$E2E_TMP/job1" || exit 1
check "the copy has a new Build ID" \
	test "$(build_id "$E2E_TMP/job1/libnccl.so.2")" != "$(build_id "$SIMJOB_DIR/libnccl.so.2")"
check "the copy has no DWARF" bash -c "! readelf -S '$E2E_TMP/job1/libnccl.so.2' | grep -q debug_info"
start_agent blind "$SERVER_URL" --gpu-loader off || exit 1
sleep 3
timeout 120 "$E2E_TMP/job1/simjob" --ranks 4 --seconds 6 --cpu-us 1000 --kernel-us 1000 --print-env \
	--fault rank=2,kind=delay,amount=4000 >"$E2E_TMP/job1.log" 2>&1
check "blind job exits 0" test $? -eq 0
check "the agent found the copy late (periodic scan)" \
	grep -q "job1/libnccl.so.2: communicator fields unknown" "$E2E_TMP/blind.log"
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
JOB1=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job1.log" | head -1)
ITER1=$(sed -n 's/^rank 0 iterations \([0-9]*\).*/\1/p' "$E2E_TMP/job1.log")
api "/api/v1/jobs/$JOB1/communicators" >"$E2E_TMP/job1-comms.json" 2>/dev/null || true
api "/api/v1/jobs/$JOB1/stragglers" >"$E2E_TMP/job1.json"
diag "blind job: $ITER1 iterations; $(json '(d["recovered_communicators"], d["unanalysed_communicators"], d["skipped_instances"], [(c["nranks"], c["instances"], c["stragglers"]) for c in d["communicators"]])' <"$E2E_TMP/job1.json")"
check "communicators recovered by sequence matching, none left unanalysed" \
	bash -c "json 'd[\"recovered_communicators\"] >= 1 and d[\"unanalysed_communicators\"] == 0' <'$E2E_TMP/job1.json' | grep -qx True"
# The world communicator: the most instances; the window (100) caps them, so ties go to the
# shortest period (an all-reduce every iteration against the split's all-gather every 4th).
WORLD1=$(json 'max(d["communicators"], key=lambda c: (c["instances"], -(c.get("period_ms") or 1e18)))["comm"]' <"$E2E_TMP/job1.json")
check "the busiest recovered communicator has the 4 ranks and the traced all-reduces (>= 20)" \
	bash -c "json '[c for c in d[\"communicators\"] if c[\"comm\"] == \"$WORLD1\" and c[\"nranks\"] == 4 and c[\"instances\"] >= min(20, $ITER1 // 4)] != []' <'$E2E_TMP/job1.json' | grep -qx True"
check "rank 2, delayed 4 ms, is its straggler, and the only one" \
	bash -c "json '[c[\"stragglers\"] for c in d[\"communicators\"] if c[\"comm\"] == \"$WORLD1\"][0] == [2]' <'$E2E_TMP/job1.json' | grep -qx True"
check "the job-level list names rank 2 with its pid" \
	bash -c "json '[s for s in d[\"stragglers\"] if s[\"rank\"] == 2 and s[\"pid\"] > 0]' <'$E2E_TMP/job1.json' | grep -q rank"

check "/metrics: the job's communicators recovered by its monitor evaluation" \
	wait_until 30 bash -c "curl -sf '$SERVER_URL/metrics' | grep -qE '^sysom_job_recovered_communicators\\{job=\"$JOB1\"\\} [1-9]'"

# 2. Hold: attached on ld.so's notification before the first call.
fresh_copy "$E2E_TMP/job2" || exit 1
start_agent hold "$SERVER_URL" --gpu-loader hold || exit 1
sleep 3
timeout 120 "$E2E_TMP/job2/simjob" --ranks 4 --iterations 200 --cpu-us 1000 --kernel-us 1000 \
	--print-env --fault rank=2,kind=delay,amount=4000 >"$E2E_TMP/job2.log" 2>&1
check "held job exits 0" test $? -eq 0
check "the agent attached on the loader's notification, holding the processes" \
	grep -q "after the loader's notification (held until then)" "$E2E_TMP/hold.log"
sleep 3
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
JOB2=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job2.log" | head -1)
api "/api/v1/jobs/$JOB2/stragglers" >"$E2E_TMP/job2.json"
diag "held job: $(json '(d["recovered_communicators"], [(c["nranks"], c["instances"], c["stragglers"]) for c in d["communicators"]])' <"$E2E_TMP/job2.json")"
check "held job: the world communicator (init seen) fills the 100-instance window, rank 2 named" \
	bash -c "json '[c for c in d[\"communicators\"] if c[\"nranks\"] == 4 and c[\"instances\"] == 100 and c[\"stragglers\"] == [2]] != []' <'$E2E_TMP/job2.json' | grep -qx True"
finish
