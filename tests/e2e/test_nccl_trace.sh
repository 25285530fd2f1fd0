#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server + agent + the simulated 8-rank training job on loopback: the agent traces every NCCL
# call and kernel launch with uprobes, learns each rank's job identity from its environment,
# and the server matches every collective instance across the 8 ranks; the GPU-launch flame
# graph names the kernels under their launching stacks. Then a job the agent did not see
# start: its libraries are found in the running processes.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"
ITER=30

api() { curl -sf "$SERVER_URL$1"; }
# json EXPR: evaluates a Python expression over the JSON on stdin (as `d`), prints the result.
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

start_server srv || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--gpu-launch-duty 1 || exit 1
check "agent attached the simulated libnccl.so.2 at start" \
	grep -q "libnccl.so.2: [0-9]* functions traced" "$E2E_TMP/agent.log"
timeout 60 "$SIMJOB" --ranks 8 --iterations $ITER --cpu-us 1000 --kernel-us 2000 --print-env \
	>"$E2E_TMP/job.log" 2>&1
check "simjob (8 ranks, $ITER iterations) exits 0" test $? -eq 0
RUN_ID=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job.log" | head -1)
# The launching stacks are symbolized from the files the agent uploads.
check "the agent uploads simjob's symbols" \
	wait_until 30 grep -q "uploaded symbols of $SIMJOB " "$E2E_TMP/agent.log"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

api /api/v1/jobs >"$E2E_TMP/jobs.json"
check "GET /api/v1/jobs lists the job $RUN_ID with world size 8 and 8 ranks" \
	bash -c "json '[j for j in d[\"jobs\"] if j[\"job\"] == \"$RUN_ID\" and j[\"world_size\"] == 8 and j[\"ranks\"] == 8]' <'$E2E_TMP/jobs.json' | grep -q job"
api "/api/v1/jobs/$RUN_ID" >"$E2E_TMP/job.json"
check "GET /api/v1/jobs/{job}: ranks 0..7, each world size 8, from the environment" \
	bash -c "json 'sorted(r[\"rank\"] for r in d[\"ranks\"] if r[\"world_size\"] == 8 and r[\"source\"] == \"environment\") == list(range(8))' <'$E2E_TMP/job.json' | grep -qx True"
WORLD=$(json '[c["key"] for c in d["communicators"] if c["nranks"] == 8][0]' <"$E2E_TMP/job.json")
check "the world communicator: 8 ranks seen, keyed by the unique id" \
	bash -c "json '[c for c in d[\"communicators\"] if c[\"key\"] == \"$WORLD\" and len(c[\"ranks\"]) == 8 and c[\"key_source\"] == \"unique_id\"]' <'$E2E_TMP/job.json' | grep -q key"
check "two CommSplit children of 4 ranks each, with the world as parent" \
	bash -c "test \"\$(json 'len([c for c in d[\"communicators\"] if c.get(\"parent_key\") == \"$WORLD\" and len(c[\"ranks\"]) == 4])' <'$E2E_TMP/job.json')\" = 2"

api "/api/v1/jobs/$RUN_ID/collectives?comm=$WORLD&op=AllReduce&limit=1000" >"$E2E_TMP/coll.json"
N=$(json 'len(d["instances"])' <"$E2E_TMP/coll.json")
COMPLETE=$(json 'len([i for i in d["instances"] if i["complete"] and sorted(c["rank"] for c in i["calls"]) == list(range(8))])' <"$E2E_TMP/coll.json")
diag "AllReduce on the world communicator: $N instances, $COMPLETE complete"
check "$ITER AllReduce instances, every one matched across all 8 ranks" \
	test "$N" = "$ITER" -a "$COMPLETE" = "$ITER"
check "instance sequence numbers are 0..$((ITER - 1))" \
	bash -c "json 'sorted(i[\"seq\"] for i in d[\"instances\"]) == list(range($ITER))' <'$E2E_TMP/coll.json' | grep -qx True"
check "every rank's exit is after its entry, bytes = 8" \
	bash -c "json 'all(r[\"exit_ns\"] >= r[\"entry_ns\"] for i in d[\"instances\"] for r in i[\"calls\"]) and all(i[\"bytes\"] == 8 for i in d[\"instances\"])' <'$E2E_TMP/coll.json' | grep -qx True"

# The same through sysomctl, as an SRE reads it.
ctl jobs >"$E2E_TMP/ctl-jobs.txt"
check "sysomctl jobs lists $RUN_ID: world 8, 8 ranks" \
	grep -qE "^$RUN_ID +8 +8 " "$E2E_TMP/ctl-jobs.txt"
ctl collectives --job "$RUN_ID" --comm "$WORLD" --op AllReduce --limit 100 >"$E2E_TMP/ctl-coll.txt"
check "sysomctl collectives: $ITER AllReduce rows with 8/8 ranks, each naming the last rank to enter" \
	test "$(grep -cE '^AllReduce +[0-9]+ +[0-9a-f]{16} +8 +8/8 +[0-9.]+ +rank [0-7] \(' "$E2E_TMP/ctl-coll.txt")" = "$ITER"
ctl flamegraph --kind gpu-launch --format folded >"$E2E_TMP/ctl-launch.folded"
check "sysomctl flamegraph --kind gpu-launch shows the kernels" \
	grep -q '\[gpu\] sim_gemm_bwd [0-9]*$' "$E2E_TMP/ctl-launch.folded"

api "/api/v1/flamegraph?kind=gpu-launch&from=-1h&to=now&format=folded" >"$E2E_TMP/launch.folded"
FWD=$(awk '/\[gpu\] sim_gemm_fwd [0-9]+$/ { s += $NF } END { print s + 0 }' "$E2E_TMP/launch.folded")
BWD=$(awk '/\[gpu\] sim_gemm_bwd [0-9]+$/ { s += $NF } END { print s + 0 }' "$E2E_TMP/launch.folded")
diag "GPU-launch flame graph: sim_gemm_fwd $FWD, sim_gemm_bwd $BWD launches"
check "every launch counted under its kernel name (8 x $ITER each)" \
	test "$FWD" = $((8 * ITER)) -a "$BWD" = $((8 * ITER))
check "launching stacks reach the rank's training loop" \
	grep -q 'rank_main;.*\[gpu\] sim_gemm_fwd' "$E2E_TMP/launch.folded"

# A job started before the agent saw its libraries: found by scanning the running processes.
start_agent late "$SERVER_URL" --gpu-launch-duty 1 || exit 1
timeout 60 "$SIMJOB" --ranks 4 --seconds 6 --cpu-us 1000 --kernel-us 2000 >"$E2E_TMP/late.log" 2>&1 &
JOB=$!
E2E_PIDS+=("$JOB")
check "the late agent finds libnccl.so.2 in the job's processes within 5 s" \
	wait_until 5 grep -q "gputrace: .*libnccl.so.2: [0-9]* functions traced" "$E2E_TMP/late.log"
wait "$JOB"
check "the late job exits 0" test $? -eq 0
sleep 1
stop_pid "$AGENT_PID"
check "late agent exits 0" test $? -eq 0
api /api/v1/jobs >"$E2E_TMP/jobs2.json"
check "the late job is listed with world size 4" \
	bash -c "json 'len([j for j in d[\"jobs\"] if j[\"world_size\"] == 4])' <'$E2E_TMP/jobs2.json' | grep -qx 1"
# A rank that registers over the agent's socket with libsysom-client: its word (job, rank,
# groups) is stored, marked as a registration. It registers as soon as the agent is up, while
# the agent is still compiling the unwind tables of every process on the machine: the loop
# builds one file per turn and answers a registration in the turn that accepts it, so every
# ACK comes within the client's 100 ms (20 tries, 50 ms apart, each a new connection as a
# newly launched rank's would be).
CLIENT_LIB=$BUILD/lib/libsysom-client.so
start_agent reg "$SERVER_URL" || exit 1
SYSOM_SOCKET_PATH=$E2E_TMP/reg.sock python3 - "$CLIENT_LIB" >"$E2E_TMP/register.log" 2>&1 <<'PY' &
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
class Registration(ctypes.Structure):
    _fields_ = [("job", ctypes.c_char_p), ("rank", ctypes.c_int), ("local_rank", ctypes.c_int),
                ("world_size", ctypes.c_int), ("local_world_size", ctypes.c_int),
                ("group_rank", ctypes.c_int), ("groups", ctypes.c_char_p)]
r = Registration(b"registered-job", 3, 1, 4, 2, 1, b"tp=1,dp=0")
codes, slowest = set(), 0.0
for i in range(20):
    if i:
        lib.sysom_client_close()
        time.sleep(0.05)
    t = time.monotonic()
    codes.add(lib.sysom_client_register(ctypes.byref(r)))
    slowest = max(slowest, time.monotonic() - t)
print("register", *sorted(codes), flush=True)
print("slowest %.1f ms" % (slowest * 1000), flush=True)
time.sleep(4)
PY
REG=$!
E2E_PIDS+=("$REG")
wait "$REG"
diag "registrations during the agent's start: $(tr '\n' ' ' <"$E2E_TMP/register.log")"
check "sysom_client_register() returns 0 against the agent's socket, 20 of 20 times" \
	grep -qx "register 0" "$E2E_TMP/register.log"
sed -n 's/^slowest \([0-9.]*\) ms$/registration_ack_max_ms \1/p' "$E2E_TMP/register.log" \
	>>"$BUILD/test-logs/measurements.txt"
stop_pid "$AGENT_PID"
check "registering agent exits 0" test $? -eq 0
api /api/v1/jobs/registered-job >"$E2E_TMP/reg.json"
check "the registered rank is stored: rank 3 of 4, local 1 of 2, groups, source registration" \
	bash -c "json '[r for r in d[\"ranks\"] if r[\"rank\"] == 3 and r[\"world_size\"] == 4 and r[\"local_rank\"] == 1 and r[\"source\"] == \"registration\" and r[\"groups\"] == \"tp=1,dp=0\"]' <'$E2E_TMP/reg.json' | grep -q rank"
finish
