#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU-side timing end to end: server + agent on loopback and the simulated 8-rank job with the
# real in-process components loaded the way production loads them — the NCCL profiler plugin
# through NCCL_PROFILER_PLUGIN (the fake NCCL drives it as NCCL 2.28 does) and the CUPTI
# activity library through CUDA_INJECTION64_PATH (the fake driver injects it; the fake CUPTI
# feeds it the simulated kernel executions). Rank 3's kernels run twice as long: the job's GPU
# view must show it, per kernel, against the other ranks. Then the same job with no agent
# listening: nothing breaks.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
FAKE_CUPTI=$SIMJOB_DIR/libcupti.so
for f in "$SIMJOB" "$PLUGIN" "$CUPTI_LIB" "$FAKE_CUPTI"; do
	[ -e "$f" ] || skip_all "$f not built (needs the CUDA/NCCL/CUPTI headers)"
done
# 100 iterations (a full analysis window): with 40 on a loaded machine the healthy ranks' own
# lateness scattered so that rank 3's 2.5 ms excess was 2.8 robust scales, under k = 3.5
# (this stop's second fresh-clone CI); more instances steady the ranks' trimmed means.
ITER=100

api() { curl -sf "$SERVER_URL$1"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

start_server srv || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--gpu-launch-duty 1 || exit 1
SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock NCCL_PROFILER_PLUGIN=$PLUGIN \
	CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI \
	SYSOM_NCCL_WINDOW_MS=250 SYSOM_CUPTI_WINDOW_MS=250 \
	timeout 120 "$SIMJOB" --ranks 8 --iterations $ITER --cpu-us 1000 --kernel-us 3000 \
	--fault rank=3,kind=gpu,amount=2 --print-env >"$E2E_TMP/job.log" 2>&1
check "simjob (8 ranks, $ITER iterations, plugin and CUPTI library loaded) exits 0" test $? -eq 0
RUN_ID=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/job.log" | head -1)
check "the CUPTI library did not step aside (no other subscriber)" \
	bash -c "! grep -qi 'another CUPTI subscriber\|stepping aside' '$E2E_TMP/job.log'"
check "both components of all 8 ranks said hello to the agent" \
	wait_until 10 bash -c "test \$(grep -c 'component connected: lib' '$E2E_TMP/agent.log') -ge 16"
# The launching stacks are symbolized from the files the agent uploads.
check "the agent uploads simjob's symbols" \
	wait_until 60 grep -q "uploaded symbols of $SIMJOB " "$E2E_TMP/agent.log"
sleep 3 # a batch interval: the last windows' rows reach a batch
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

api "/api/v1/jobs/$RUN_ID/gpu" >"$E2E_TMP/gpu.json"
check "GET /api/v1/jobs/$RUN_ID/gpu: ranks 0..7 all have GPU kernel time" \
	bash -c "json 'sorted(p[\"rank\"] for p in d[\"processes\"] if p[\"gpu_kernel_ns\"] > 0) == list(range(8))' <'$E2E_TMP/gpu.json' | grep -qx True"
check "every rank ran sim_gemm_fwd and sim_gemm_bwd $ITER times each (CUPTI records, none lost)" \
	bash -c "json 'all(sum(k[\"count\"] for k in p[\"kernels\"] if k[\"name\"] == n) == $ITER for p in d[\"processes\"] for n in (\"sim_gemm_fwd\", \"sim_gemm_bwd\"))' <'$E2E_TMP/gpu.json' | grep -qx True"
RATIO=$(json 'round(sum(p["gpu_kernel_ns"] for p in d["processes"] if p["rank"] == 3) / sorted(p["gpu_kernel_ns"] for p in d["processes"] if p["rank"] != 3)[3], 3)' <"$E2E_TMP/gpu.json")
diag "rank 3 GPU kernel time / the other ranks' median: $RATIO"
check "rank 3's kernels take about twice as long as the others' (1.8 .. 2.2)" \
	python3 -c "import sys; sys.exit(not 1.8 <= $RATIO <= 2.2)"
BWD=$(json '[k["mean_ns"] for p in d["processes"] if p["rank"] == 5 for k in p["kernels"] if k["name"] == "sim_gemm_bwd"][0]' <"$E2E_TMP/gpu.json")
check "sim_gemm_bwd takes 2 ms on the GPU of a healthy rank (got $BWD ns)" \
	test "$BWD" -ge 1900000 -a "$BWD" -le 2100000
check "the NCCL profiler plugin timed $ITER AllReduce per rank on the GPU (KernelCh)" \
	bash -c "json 'all(sum(c[\"count\"] for c in p[\"collectives\"] if c[\"func\"] == \"AllReduce\") == $ITER and sum((c[\"gpu\"] or {}).get(\"timed\", 0) for c in p[\"collectives\"] if c[\"func\"] == \"AllReduce\") == $ITER for p in d[\"processes\"])' <'$E2E_TMP/gpu.json' | grep -qx True"
check "AllReduce rows carry algo Ring, proto Simple, 8 bytes per operation, seq 0..$((ITER - 1))" \
	bash -c "json 'all(c[\"algo\"] == \"Ring\" and c[\"proto\"] == \"Simple\" and c[\"bytes\"] == 8 * c[\"count\"] and c[\"seq\"] == [0, $((ITER - 1))] for p in d[\"processes\"] for c in p[\"collectives\"] if c[\"func\"] == \"AllReduce\")' <'$E2E_TMP/gpu.json' | grep -qx True"
check "AllGather on the CommSplit children: $((ITER / 4)) per rank" \
	bash -c "json 'all(sum(c[\"count\"] for c in p[\"collectives\"] if c[\"func\"] == \"AllGather\") == $((ITER / 4)) for p in d[\"processes\"])' <'$E2E_TMP/gpu.json' | grep -qx True"
check "links to the next rank with transfers and a bandwidth fit" \
	bash -c "json 'all(any(l[\"transfers\"] > 0 and l[\"peer\"] == (p[\"rank\"] + 1) % 8 for l in p[\"links\"]) for p in d[\"processes\"]) and any(l[\"fit\"] for p in d[\"processes\"] for l in p[\"links\"])' <'$E2E_TMP/gpu.json' | grep -qx True"

api "/api/v1/flamegraph?kind=gpu-time&from=-1h&to=now&format=folded" >"$E2E_TMP/gputime.folded"
check "the gpu-time flame graph puts sim_gemm_bwd's GPU time under the training loop" \
	grep -q 'rank_main;.*\[gpu\] sim_gemm_bwd [0-9]*$' "$E2E_TMP/gputime.folded"
BWD_NS=$(awk '/\[gpu\] sim_gemm_bwd [0-9]+$/ { s += $NF } END { print s + 0 }' "$E2E_TMP/gputime.folded")
check "all of sim_gemm_bwd's GPU time is drawn: 7 ranks x $ITER x 2 ms + rank 3 x $ITER x 4 ms (got $BWD_NS)" \
	test "$BWD_NS" = $(((7 * ITER * 2 + ITER * 4) * 1000000))
ctl gpu --job "$RUN_ID" >"$E2E_TMP/ctl-gpu.txt"
check "sysomctl gpu shows rank 3 at about 2x the median" \
	grep -qE '^3 +[^ ]+ +[0-9]+ +[0-9.]+ +[0-9]+ +(1\.[6-9]|2\.[0-4])[0-9]*x' "$E2E_TMP/ctl-gpu.txt"
api "/api/v1/jobs/$RUN_ID/stragglers" >"$E2E_TMP/stragglers.json"
check "rank 3 is the straggler; the diagnosis: GPU layer, uniform slowdown of about 2x" \
	bash -c "json '[s for s in d[\"stragglers\"] if s[\"rank\"] == 3 and s[\"diagnosis\"][\"layer\"] == \"gpu\" and s[\"diagnosis\"][\"gpu\"][\"verdict\"] == \"uniform\" and 1.8 <= s[\"diagnosis\"][\"gpu\"][\"slowdown\"] <= 2.2]' <'$E2E_TMP/stragglers.json' | grep -q rank"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics counts the components' records" \
	grep -qE '^sysom_agent_channel_records_total\{[^}]*\} [1-9]' "$E2E_TMP/metrics.txt"

# No agent listening: the components stay silent and the job is unaffected.
SYSOM_SOCKET_PATH=$E2E_TMP/nobody.sock NCCL_PROFILER_PLUGIN=$PLUGIN \
	CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI \
	timeout 60 "$SIMJOB" --ranks 4 --iterations 20 --cpu-us 500 --kernel-us 1000 \
	>"$E2E_TMP/noagent.log" 2>&1
check "with no agent listening the job still exits 0" test $? -eq 0
finish
