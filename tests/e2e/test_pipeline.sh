#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Pipeline stragglers end to end (issue 22): server + agent on loopback, the simulated job in
# pipeline mode (simjob --pipeline: 4 stages, each microbatch received from the previous stage,
# computed, sent to the next through the fake libnccl's blocking ncclSend/ncclRecv), traced
# with uprobes. The server pairs every send with its receive (per-peer sequence numbers) and:
#   stage 2 sleeping 4 ms per microbatch -> an incident "pipeline stage 2 (rank 2) is slow:
#     +4 ms per microbatch", nothing else slow, stage 3 waiting for it in its receives;
#   link 1->2 taking 4 ms per transfer (SIMJOB_LINK_DELAY) -> an incident "link 1->2";
#   stage 2's kernels 4x slower with its host time unchanged (--pipeline-async: no stage waits
#     for its kernel, as real Send/Recv return once enqueued; the CUPTI library and the NCCL
#     profiler plugin loaded) -> the GPU clock names it: "pipeline stage 2 (rank 2) is slow on
#     the GPU", clock gpu;
#   the healthy pipeline -> every transfer paired, no slow stage or link, no incident.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

start_server srv --analysis-interval 1s || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 || exit 1
wait_until 30 grep -q "batch 1:" "$E2E_TMP/agent.log"

# run_job JOB MICROBATCHES SIMJOB-ARGS...: the 4-stage pipeline, in the background ($JOB_PID).
run_job() {
	local job=$1 n=$2
	shift 2
	timeout 180 "$SIMJOB" --ranks 4 --pipeline --iterations "$n" --cpu-us 300 --kernel-us 200 \
		--job-id "$job" "$@" >"$E2E_TMP/$job.log" 2>&1 &
	JOB_PID=$!
}

# incident JOB [RANK]: waits (45 s at most) for the job's first straggler incident (naming
# RANK: a CPU-bound stage on a loaded machine also slows its link for a while, a second
# incident), saved as JOB.json.
incident() {
	local job=$1 rank=${2:-} id="" deadline=$((SECONDS + 45))
	while [ $SECONDS -lt $deadline ]; do
		id=$(curl -sf "$SERVER_URL/api/v1/diagnoses?job=$job&from=-1h&to=now" |
			json "next((x['id'] for x in d['diagnoses'] if x['kind'] == 'straggler' and ('$rank' == '' or x['rank'] == int('0$rank'))), '')")
		[ -n "$id" ] && break
		sleep 0.5
	done
	[ -n "$id" ] && curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/$job.json" &&
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/$job.txt"
}

is_true() { grep -qx True; }
export -f is_true

# ---- a slow stage ----
run_job e2e-pipe-slow 1500 --fault rank=2,kind=delay,amount=4000
check "slow stage: an incident opens while the job runs" incident e2e-pipe-slow
diag "incident: $(json 'd.get("summary")' <"$E2E_TMP/e2e-pipe-slow.json")"
check "it names stage 2 (rank 2), +4 ms per microbatch (3-20 ms: sleeps stretch under load)" \
	bash -c "json 'd[\"summary\"]' <'$E2E_TMP/e2e-pipe-slow.json' | grep -qE '^pipeline stage 2 \(rank 2\) is slow: \+([3-9]|1[0-9])\.[0-9] ms per microbatch'"
check "its rank is 2, its layer pipeline-stage" \
	bash -c "json 'd[\"rank\"] == 2 and d[\"layer\"] == \"pipeline-stage\"' <'$E2E_TMP/e2e-pipe-slow.json' | is_true"
check "the text report lists stage 2 (rank 2) as SLOW, and stage 3 not" \
	bash -c "grep -qE '^  stage +2 \(rank 2 on [^)]+\) +busy .* SLOW\$' '$E2E_TMP/e2e-pipe-slow.txt' && grep -E '^  stage +3 ' '$E2E_TMP/e2e-pipe-slow.txt' | grep -qv SLOW"
curl -sf "$SERVER_URL/api/v1/jobs/e2e-pipe-slow/stragglers?from=-1h&to=now" >"$E2E_TMP/slow-strag.json"
diag "stages: $(json '[(s["stage"], round(s["busy_ms"], 2), round(s["recv_wait_ms"], 2), s["slow"]) for s in d["pipeline"]["stages"]]' <"$E2E_TMP/slow-strag.json")"
check "stragglers API: exactly one slow stage, stage 2, and no slow link" \
	bash -c "json '[s[\"stage\"] for s in d[\"pipeline\"][\"stages\"] if s[\"slow\"]] == [2] and d[\"pipeline\"][\"slow_links\"] == 0' <'$E2E_TMP/slow-strag.json' | is_true"
check "every stage is listed, and sends and receives pair (transfers > 0)" \
	bash -c "json 'sorted(s[\"stage\"] for s in d[\"pipeline\"][\"stages\"]) == [0, 1, 2, 3] and d[\"pipeline\"][\"transfers\"] > 100' <'$E2E_TMP/slow-strag.json' | is_true"
check "stage 3 waits for stage 2 in its receives (> 3 ms per microbatch)" \
	bash -c "json '[s[\"recv_wait_ms\"] > 3 for s in d[\"pipeline\"][\"stages\"] if s[\"stage\"] == 3] == [True]' <'$E2E_TMP/slow-strag.json' | is_true"
ctl stragglers --job e2e-pipe-slow >"$E2E_TMP/ctl-slow.txt"
check "sysomctl stragglers: PIPELINE STRAGGLER stage 2 (rank 2)" \
	grep -qE '^PIPELINE STRAGGLER: stage 2 \(rank 2, [^ ]+ pid [0-9]+\) of [0-9a-f]{16} is slow: \+' "$E2E_TMP/ctl-slow.txt"
check "the incident names the stage's node, and the stragglers API where stage 2 runs" \
	bash -c "json 'd[\"hostname\"] == \"$(hostname)\"' <'$E2E_TMP/e2e-pipe-slow.json' | is_true && json '[s[\"hostname\"] for s in d[\"pipeline\"][\"stages\"] if s[\"stage\"] == 2] == [\"$(hostname)\"]' <'$E2E_TMP/slow-strag.json' | is_true"
check "stage 2's rank was diagnosed (a sleeping stage: no GPU or CPU layer to blame)" \
	bash -c "json '[s[\"diagnosis\"][\"layer\"] not in (\"gpu\", \"cpu\") for s in d[\"pipeline\"][\"stages\"] if s[\"stage\"] == 2] == [True]' <'$E2E_TMP/slow-strag.json' | is_true"
wait "$JOB_PID"
check "slow-stage job exits 0" test $? -eq 0
diag "its incidents: $(curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-pipe-slow&from=-1h&to=now" | json '[x["summary"][:60] for x in d["diagnoses"]]')"
check "no incident names another stage or a link" \
	bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-pipe-slow&from=-1h&to=now' | json 'all(x[\"rank\"] == 2 for x in d[\"diagnoses\"])' | is_true"

# ---- a slow link ----
SIMJOB_LINK_DELAY=1:2:4000 run_job e2e-pipe-link 1500
check "slow link: an incident opens while the job runs" incident e2e-pipe-link
diag "incident: $(json 'd.get("summary")' <"$E2E_TMP/e2e-pipe-link.json")"
check "it names link 1->2 (4 ms per transfer; 3-20 ms under load)" \
	bash -c "json 'd[\"summary\"]' <'$E2E_TMP/e2e-pipe-link.json' | grep -qE '^pipeline link 1->2 \(rank 1 to rank 2\) is slow: ([3-9]|1[0-9])\.[0-9] ms per transfer'"
curl -sf "$SERVER_URL/api/v1/jobs/e2e-pipe-link/stragglers?from=-1h&to=now" >"$E2E_TMP/link-strag.json"
check "stragglers API: link 1->2 slow, no slow stage" \
	bash -c "json '[(l[\"src\"], l[\"dst\"]) for l in d[\"pipeline\"][\"links\"] if l[\"slow\"]] == [(1, 2)] and d[\"pipeline\"][\"slow_stages\"] == 0' <'$E2E_TMP/link-strag.json' | is_true"
check "the slow link carries both ends' nodes" \
	bash -c "json '[(l[\"src_host\"], l[\"dst_host\"]) for l in d[\"pipeline\"][\"links\"] if l[\"slow\"]] == [(\"$(hostname)\", \"$(hostname)\")]' <'$E2E_TMP/link-strag.json' | is_true"
wait "$JOB_PID"
check "slow-link job exits 0" test $? -eq 0

# ---- a stage slow by its own CPU work: the stage's rank gets the layered diagnosis ----
# 1 ms of CPU per microbatch on every stage: the healthy stages need 50 samples for a profile
# to compare with. The incident opens on the first evidence and is updated at every
# evaluation; its layer follows once both sides have enough samples.
run_job e2e-pipe-cpu 2000 --cpu-us 1000 --fault rank=1,kind=cpu,amount=4000
check "CPU-bound stage: an incident naming stage 1's rank opens while the job runs" incident e2e-pipe-cpu 1
layer_is_cpu() {
	local id
	id=$(json 'd["id"]' <"$E2E_TMP/e2e-pipe-cpu.json") || return 1
	curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/e2e-pipe-cpu.json" &&
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/e2e-pipe-cpu.txt" &&
		json 'd["layer"] == "cpu"' <"$E2E_TMP/e2e-pipe-cpu.json" | is_true
}
for _ in $(seq 40); do layer_is_cpu && break; sleep 1; done
diag "incident: $(json 'd.get("summary")' <"$E2E_TMP/e2e-pipe-cpu.json")"
check "it names stage 1, layer cpu, and simjob_fault_extra_cpu in the summary" \
	bash -c "json 'd[\"rank\"] == 1 and d[\"layer\"] == \"cpu\" and d[\"summary\"].startswith(\"pipeline stage 1 (rank 1) is slow\") and \"simjob_fault_extra_cpu\" in d[\"summary\"]' <'$E2E_TMP/e2e-pipe-cpu.json' | is_true"
check "the incident's action is the CPU layer's, and the text report shows the CPU layer" \
	bash -c "json '\"simjob_fault_extra_cpu\" in d[\"action\"]' <'$E2E_TMP/e2e-pipe-cpu.json' | is_true && grep -qE '^ +\+[0-9.]+ pp  simjob_fault_extra_cpu' '$E2E_TMP/e2e-pipe-cpu.txt'"
wait "$JOB_PID"
check "CPU-bound stage job exits 0" test $? -eq 0
diag "its incidents: $(curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-pipe-link&from=-1h&to=now" | json '[x["summary"][:60] for x in d["diagnoses"]]')"

# ---- a stage slow on its GPU alone: the GPU clock (issue 22) ----
# No stage waits for its kernel before its send (--pipeline-async): every stage's host time is
# ~0.3 ms per microbatch, stage 2's kernel takes 2 ms on the (fake) GPU, the others' 0.5 ms.
# Kernel times come from the CUPTI library, Send/Recv counts from the NCCL profiler plugin,
# loaded the way production loads them (as in test_gpu_timing.sh).
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
FAKE_CUPTI=$SIMJOB_DIR/libcupti.so
if [ -e "$PLUGIN" ] && [ -e "$CUPTI_LIB" ] && [ -e "$FAKE_CUPTI" ]; then
	GPU_T0=$SECONDS
	export SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock NCCL_PROFILER_PLUGIN=$PLUGIN \
		CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI \
		SYSOM_NCCL_WINDOW_MS=250 SYSOM_CUPTI_WINDOW_MS=250
	run_job e2e-pipe-gpu 1500 --pipeline-async --kernel-us 1500 --fault rank=2,kind=gpu,amount=4
	unset SYSOM_SOCKET_PATH NCCL_PROFILER_PLUGIN CUDA_INJECTION64_PATH SYSOM_CUPTI_LIBRARY \
		SYSOM_NCCL_WINDOW_MS SYSOM_CUPTI_WINDOW_MS
	check "GPU-slow stage: an incident naming stage 2's rank opens" incident e2e-pipe-gpu 2
	wait "$JOB_PID"
	check "GPU-slow stage job exits 0" test $? -eq 0
	# Kernel rows and plugin counts reach the server in their own windows: until the last
	# ones are in, a stage's kernel count may run ahead of its send count by a few percent.
	# Wait for all of them (1,500 microbatches per stage).
	gpu_rows_in() {
		curl -sf "$SERVER_URL/api/v1/jobs/e2e-pipe-gpu/stragglers?from=-1h&to=now" >"$E2E_TMP/gpu-strag.json" &&
			json 'all(s["gpu_microbatches"] == 1500 for s in d["pipeline"]["stages"])' <"$E2E_TMP/gpu-strag.json" | is_true
	}
	for _ in $(seq 40); do gpu_rows_in && break; sleep 0.5; done
	# The incident is updated at every evaluation: on a loaded machine an early one may have
	# seen host noise on this stage (named on the host clock then); with all the job's rows in
	# it is the GPU clock's.
	gpu_clock_named() {
		local id
		id=$(json 'd["id"]' <"$E2E_TMP/e2e-pipe-gpu.json") || return 1
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/e2e-pipe-gpu.json" &&
			curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/e2e-pipe-gpu.txt" &&
			json '" slow on the GPU" in d["summary"]' <"$E2E_TMP/e2e-pipe-gpu.json" | is_true
	}
	for _ in $(seq 30); do gpu_clock_named && break; sleep 1; done
	diag "incident: $(json 'd.get("summary")' <"$E2E_TMP/e2e-pipe-gpu.json")"
	check "it names stage 2 (rank 2) slow on the GPU, +1-2 ms of GPU compute per microbatch" \
		bash -c "json 'd[\"summary\"]' <'$E2E_TMP/e2e-pipe-gpu.json' | grep -qE '^pipeline stage 2 \(rank 2\) is slow on the GPU: \+(1|2)\.[0-9] ms of GPU compute per microbatch'"
	diag "stages: $(json '[(s["stage"], round(s["busy_ms"], 2), s["gpu_busy_ms"] and round(s["gpu_busy_ms"], 2), s["clock"]) for s in d["pipeline"]["stages"]]' <"$E2E_TMP/gpu-strag.json")"
	check "stragglers API: stage 2 alone slow, clock gpu (its host verdict not slow), no slow link" \
		bash -c "json '[(s[\"stage\"], s[\"clock\"], s[\"host_slow\"]) for s in d[\"pipeline\"][\"stages\"] if s[\"slow\"]] == [(2, \"gpu\", False)] and d[\"pipeline\"][\"slow_links\"] == 0' <'$E2E_TMP/gpu-strag.json' | is_true"
	check "every stage has GPU timing: stage 2 1.8-2.2 ms per microbatch, the others 0.45-0.55 ms" \
		bash -c "json 'all((1.8 <= s[\"gpu_busy_ms\"] <= 2.2) if s[\"stage\"] == 2 else (0.45 <= s[\"gpu_busy_ms\"] <= 0.55) for s in d[\"pipeline\"][\"stages\"]) and d[\"pipeline\"][\"gpu_stages\"] == 4' <'$E2E_TMP/gpu-strag.json' | is_true"
	check "every link has the receiver's GPU Recv time (the plugin's Recv kernels)" \
		bash -c "json 'all(l[\"gpu_transfer_ms\"] is not None for l in d[\"pipeline\"][\"links\"])' <'$E2E_TMP/gpu-strag.json' | is_true"
	check "the text report marks stage 2 SLOW (gpu) with its GPU time" \
		grep -qE '^  stage +2 \(rank 2 on [^)]+\) +busy .*GPU +[0-9.]+ ms/microbatch.* SLOW \(gpu\)$' "$E2E_TMP/e2e-pipe-gpu.txt"
	ctl stragglers --job e2e-pipe-gpu >"$E2E_TMP/ctl-gpu.txt"
	check "sysomctl stragglers: PIPELINE STRAGGLER stage 2 slow on the GPU" \
		grep -qE '^PIPELINE STRAGGLER: stage 2 \(rank 2, [^ ]+ pid [0-9]+\) of [0-9a-f]{16} is slow on the GPU: \+' "$E2E_TMP/ctl-gpu.txt"
	diag "the GPU-clock scenario took $((SECONDS - GPU_T0)) s"
else
	diag "skipping the GPU-clock scenario: the NCCL profiler plugin or the CUPTI libraries are not built"
fi

# ---- a healthy pipeline ----
run_job e2e-pipe-ok 3000
wait "$JOB_PID"
check "healthy pipeline job exits 0" test $? -eq 0
# Every call in: the agent's final drain and flush (a loaded machine delays its batches by
# tens of seconds), then a few evaluations of the monitor.
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
sleep 4
curl -sf "$SERVER_URL/api/v1/jobs/e2e-pipe-ok/stragglers?from=-1h&to=now" >"$E2E_TMP/ok-strag.json"
diag "stages: $(json '[(s["stage"], round(s["busy_ms"], 2), round(s["excess_ms"], 2)) for s in d["pipeline"]["stages"]]' <"$E2E_TMP/ok-strag.json")"
check "healthy: 4 stages judged, 3 links, nothing slow" \
	bash -c "json 'len([s for s in d[\"pipeline\"][\"stages\"] if s[\"judged\"]]) == 4 and len(d[\"pipeline\"][\"links\"]) == 3 and d[\"pipeline\"][\"slow_stages\"] == 0 and d[\"pipeline\"][\"slow_links\"] == 0' <'$E2E_TMP/ok-strag.json' | is_true"
check "healthy: no GPU rows, no GPU clock (gpu_busy_ms null, judged on the host alone)" \
	bash -c "json 'all(s[\"gpu_busy_ms\"] is None and s[\"clock\"] is None for s in d[\"pipeline\"][\"stages\"]) and d[\"pipeline\"][\"gpu_stages\"] == 0' <'$E2E_TMP/ok-strag.json' | is_true"
check "healthy: no unmatched call beyond the window edges (< 1%)" \
	bash -c "json '(d[\"pipeline\"][\"unmatched_sends\"] + d[\"pipeline\"][\"unmatched_recvs\"]) * 100 < d[\"pipeline\"][\"transfers\"] and d[\"pipeline\"][\"duplicates\"] == 0' <'$E2E_TMP/ok-strag.json' | is_true"
# (kind straggler: stopping the agent above may open an agent-lost incident, not the matter here)
check "healthy: no straggler incident (no slow stage or link at any evaluation)" \
	bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-pipe-ok&from=-1h&to=now' | json '[x for x in d[\"diagnoses\"] if x[\"kind\"] == \"straggler\"] == []' | is_true"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "agent counters: Send/Recv calls counted (nccl_p2p_calls > 10000), none with a bad peer" \
	bash -c "awk '/^sysom_agent_nccl_p2p_calls_total/ { n = \$NF } /^sysom_agent_nccl_p2p_bad_peer_total/ { b = \$NF } END { exit !(n > 10000 && b + 0 == 0) }' '$E2E_TMP/metrics.txt'"
finish
