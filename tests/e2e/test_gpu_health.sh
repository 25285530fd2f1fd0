#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU health end to end (issue 22): the agent reads a fake NVML (tests/fixtures/nvml, the real
# symbol names and ABI) reporting thermal throttling on GPU 3, and an Xid line from a stand-in
# kernel log; the simulated 8-rank job's rank 3 (LOCAL_RANK 3) has every kernel 2x slower.
# The job runs with CUDA_VISIBLE_DEVICES=7,6,5,4,3,2,1,0 (a remapped node), so rank 3 uses
# NVML device 4: that is the GPU the fake NVML throttles, and GPU 3 is healthy (the old rule,
# NVML index == LOCAL_RANK, would look at GPU 3 and confirm nothing).
#   1. GET /api/v1/nodes/{node}/gpus shows 8 GPUs, GPU 4 with its reasons, clocks, Xid
#   2. the job's ranks carry their GPU (gpu_device 7 - local rank); the incident's GPU verdict
#      is a CONFIRMED hardware cause naming thermal throttling, GPU 4 (picked by the rank's
#      NVML index) and its PCI address; the alert's summary annotation carries it
#   3. an agent without NVML (library absent) says so once and runs on; the same fault then
#      keeps today's verdict ("hardware suspected", no confirmation)
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
FAKE_CUPTI=$SIMJOB_DIR/libcupti.so
FAKE_NVML=$BUILD/tests/fixtures/nvml/libnvidia-ml.so.1
for f in "$SIMJOB" "$PLUGIN" "$CUPTI_LIB" "$FAKE_CUPTI" "$FAKE_NVML"; do
	[ -e "$f" ] || skip_all "$f not built"
done

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

start_server srv --analysis-interval 1s || exit 1
export SERVER_URL E2E_TMP

# GPU 4 throttles (software and hardware thermal slowdown) at 92 C, SM clock 1100 of 1980 MHz.
export SYSOM_FAKE_NVML=$E2E_TMP/nvml.ctl
cat >"$SYSOM_FAKE_NVML" <<'CTL'
devices 8
gpu 4 reasons=0x60 sm=1100 temp=92 power=650000
CTL
: >"$E2E_TMP/kmsg"
echo "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1" >"$E2E_TMP/machine-id-nvml"
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--nvml-library "$FAKE_NVML" --nvml-kmsg "$E2E_TMP/kmsg" --nvml-interval 0.5s \
	--machine-id-file "$E2E_TMP/machine-id-nvml" || exit 1
AGENT1=$AGENT_PID
check "the agent found the 8 fake GPUs" grep -q "GPU health: 8 GPUs via NVML" "$E2E_TMP/agent.log"

settings() {
	curl -sf -X PUT --data "$2" "$SERVER_URL/api/v1/jobs/$1/settings" >/dev/null
}
# run_job AGENT JOB SIMJOB-ARGS...: the 8-rank job with the NCCL profiler plugin and the CUPTI
# library (GPU kernel time) reporting to agent AGENT's socket.
run_job() {
	local sock=$E2E_TMP/$1.sock job=$2
	shift 2
	SYSOM_SOCKET_PATH=$sock NCCL_PROFILER_PLUGIN=$PLUGIN \
		CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI \
		SYSOM_NCCL_WINDOW_MS=250 SYSOM_CUPTI_WINDOW_MS=250 \
		timeout 180 "$SIMJOB" --ranks 8 --job-id "$job" "$@" >"$E2E_TMP/$job.log" 2>&1
}
incident() {
	local job=$1 rank=$2 id=""
	local deadline=$((SECONDS + 60))
	while [ $SECONDS -lt $deadline ]; do
		id=$(curl -sf "$SERVER_URL/api/v1/diagnoses?job=$job&from=-1h&to=now" |
			json "next((x['id'] for x in d['diagnoses'] if x['kind'] == 'straggler' and str(x.get('rank')) == '$rank'), '')")
		[ -n "$id" ] && break
		sleep 0.5
	done
	[ -n "$id" ] || return 1
	echo "$id" >"$E2E_TMP/$job.id"
	curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/$job.json" &&
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/$job.txt"
}
# The incident is re-evaluated while it holds: wait until its report says EXPR.
report_becomes() {
	local job=$1 expr=$2 deadline=$((SECONDS + 60))
	while [ $SECONDS -lt $deadline ]; do
		curl -sf "$SERVER_URL/api/v1/diagnoses/$(cat "$E2E_TMP/$job.id")" >"$E2E_TMP/$job.json"
		json "$expr" <"$E2E_TMP/$job.json" | grep -qx True && return 0
		sleep 1
	done
	return 1
}
for job in e2e-hw e2e-nonvml; do
	settings "$job" '{"lookback_s": 20, "resolve_after_s": 2}'
done

# 1. The node's GPUs.
node=$(curl -sf "$SERVER_URL/api/v1/nodes" | json "[n['hostname'] for n in d['nodes'] if n['node_id'] == 'a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1'][0]")
gpus_ok() {
	curl -sf "$SERVER_URL/api/v1/nodes/a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1/gpus?from=-5m" >"$E2E_TMP/gpus.json" &&
		python3 - "$E2E_TMP/gpus.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = [w for w in d['gpus'] if w['device'] == 4]
assert len({w['device'] for w in d['gpus']}) == 8, d
assert g and 'hw_thermal_slowdown' in g[-1]['reasons'] and g[-1]['temp_max_c'] == 92, g
assert g[-1]['sm_clock_min_mhz'] == 1100 and g[-1]['sm_clock_max_mhz'] == 1980, g
assert g[-1]['pci_bus_id'] == '00000000:5C:00.0' and g[-1]['samples'] >= 2, g
for dev in (0, 3):
    h = [w for w in d['gpus'] if w['device'] == dev][-1]
    assert h['reasons'] == '' and h['temp_max_c'] == 45 and h['ecc_volatile_uncorrected'] == 0, h
PY
}
check "GET /nodes/{node}/gpus: 8 GPUs, GPU 4 thermal throttling at 92 C, 1100/1980 MHz, GPU 3 healthy" \
	wait_until 20 gpus_ok
diag "node $node, GPU 4: $(json "[w for w in d['gpus'] if w['device'] == 4][-1]" <"$E2E_TMP/gpus.json" 2>/dev/null)"
check "an unknown resource under a node is 404" \
	bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' '$SERVER_URL/api/v1/nodes/x/nope')\" = 404 ]"

# 2. Rank 3's kernels uniformly 2x slower: a confirmed hardware verdict on its GPU, NVML 4.
# An Xid for GPU 4 (fake NVML's GPU i is at PCI bus 0x18 + 0x11 * i) while the job runs.
(sleep 1; echo "4,900,1,-;NVRM: Xid (PCI:0000:5c:00): 79, pid=4242, name=simjob, GPU has fallen off the bus." \
	>>"$E2E_TMP/kmsg") &
CUDA_VISIBLE_DEVICES=7,6,5,4,3,2,1,0 \
	run_job agent e2e-hw --seconds 20 --cpu-us 1000 --kernel-us 3000 --fault rank=3,kind=gpu,amount=2
check "job 1 exits 0" test $? -eq 0
check "the job's ranks carry their GPU: NVML index 7 - local rank (CUDA_VISIBLE_DEVICES reversed)" \
	wait_until 10 bash -c "curl -sf '$SERVER_URL/api/v1/jobs/e2e-hw' | json \"sorted((r['rank'], r['gpu_device']) for r in d['ranks']) == [(i, 7 - i) for i in range(8)]\" | grep -qx True"
check "the monitor opened a straggler incident on rank 3" incident e2e-hw 3
CONFIRMED="d['rank'] == 3 and d['report']['straggler']['diagnosis']['gpu']['verdict'] == 'uniform' and (d['report']['straggler']['diagnosis']['gpu']['hardware'] or {}).get('confirmed') is True"
check "rank 3, GPU layer, uniform, hardware cause confirmed" report_becomes e2e-hw "$CONFIRMED"
diag "$(json "d['summary']" <"$E2E_TMP/e2e-hw.json")"
check "the confirmed GPU is the one rank 3 uses (local rank 3, CUDA_VISIBLE_DEVICES position 3): GPU 4" \
	bash -c "json \"d['report']['straggler']['diagnosis']['gpu']['hardware']['device'] == 4 and d['report']['straggler']['diagnosis']['gpu']['hardware']['picked_by'] == 'nvml index from the rank' and d['report']['straggler']['diagnosis']['gpu']['hardware']['matched_by_local_rank']\" <'$E2E_TMP/e2e-hw.json' | grep -qx True"
check "the summary names thermal throttling, GPU 4, its PCI address, clocks and temperature" \
	bash -c "json \"d['summary']\" <'$E2E_TMP/e2e-hw.json' | grep 'CONFIRMED' | grep 'thermal throttling' | grep 'GPU 4 (00000000:5C:00.0, the GPU the rank uses' | grep '1100-1980 MHz' | grep -q 'up to 92 C'"
xid_named() {
	curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-hw&from=-1h&to=now" |
		json "any('last Xid 79' in x['summary'] for x in d['diagnoses'] if x.get('rank') == 3)" | grep -qx True
}
check "the Xid is named too (in one of rank 3's incidents)" wait_until 20 xid_named
check "and counted in the node's GPU 4 windows" \
	bash -c "curl -sf '$SERVER_URL/api/v1/nodes/a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1/gpus?from=-5m' | json \"sum(w['xid_count'] for w in d['gpus'] if w['device'] == 4) == 1 and sum(w['xid_count'] for w in d['gpus']) == 1\" | grep -qx True"
check "the action says to cool GPU 4" bash -c "json \"d['action']\" <'$E2E_TMP/e2e-hw.json' | grep -q '^cool GPU 4'"
check "the diagnoses list (the alert's summary annotation) carries the confirmation" \
	bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-hw&from=-1h&to=now' | json \"any('CONFIRMED' in x['summary'] for x in d['diagnoses'])\" | grep -qx True"
stop_pid "$AGENT1"

# 3. No NVML: the agent says so once and works; the verdict stays as before.
echo "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2" >"$E2E_TMP/machine-id-plain"
start_agent agent2 "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--nvml-library "$E2E_TMP/absent/libnvidia-ml.so.1" --machine-id-file "$E2E_TMP/machine-id-plain" || exit 1
check "NVML absent: one line in the agent's log" \
	bash -c "[ \"\$(grep -c 'GPU health off' '$E2E_TMP/agent2.log')\" = 1 ]"
run_job agent2 e2e-nonvml --seconds 20 --cpu-us 1000 --kernel-us 3000 --fault rank=3,kind=gpu,amount=2
check "job 2 exits 0" test $? -eq 0
check "without NVML the ranks' GPUs are unknown (null)" \
	bash -c "curl -sf '$SERVER_URL/api/v1/jobs/e2e-nonvml' | json \"len(d['ranks']) == 8 and all(r['gpu_device'] is None for r in d['ranks'])\" | grep -qx True"
check "the monitor opened a straggler incident on rank 3" incident e2e-nonvml 3
check "without NVML data: uniform slowdown, hardware suspected, nothing confirmed" \
	report_becomes e2e-nonvml "d['rank'] == 3 and d['report']['straggler']['diagnosis']['gpu']['verdict'] == 'uniform' and d['report']['straggler']['diagnosis']['gpu']['hardware'] is None and 'hardware suspected' in d['summary'] and 'CONFIRMED' not in d['summary']"
check "the agent without NVML shipped batches" grep -q "batch [0-9]*:" "$E2E_TMP/agent2.log"
check "no GPU windows for the node without NVML" \
	bash -c "curl -sf '$SERVER_URL/api/v1/nodes/b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2/gpus?from=-5m' | json \"d['gpus'] == []\" | grep -qx True"
stop_pid "$AGENT_PID"
finish
