#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Behaviour patterns end to end (issue 22, EROICA §4): the server, the agent and the simulated
# 8-rank job with the CUPTI library (kernel timing).
#   1. one kernel type 3x slower on rank 4 → GET .../patterns names (rank 4, sim_gemm_bwd) and
#      rank 4's AllReduce (it enters late) as the costliest findings; sysomctl prints them
#   2. every rank gains 2 ms of CPU per iteration in its data loader after 12 s → against the
#      job's own history (its first 10 s) the change shows for all ranks, and the new CPU
#      function is named (simjob_data_loader: it burns the CPU itself, so its self time names
#      it; the earlier cpu fault's time was all in the shared simjob_burn_cpu leaf, which is why
#      no new function could be named there). simjob's symbols are uploaded first (small
#      files only, no rate limit).
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
FAKE_CUPTI=$SIMJOB_DIR/libcupti.so
for f in "$SIMJOB" "$CUPTI_LIB" "$FAKE_CUPTI"; do
	[ -e "$f" ] || skip_all "$f not built (needs the CUDA/NCCL/CUPTI headers)"
done

start_server srv || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 --symbol-upload-rate 0 --symbol-max-file-size 1M || exit 1

run_job() {
	local job=$1
	shift
	SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock CUDA_INJECTION64_PATH=$CUPTI_LIB \
		SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI SYSOM_CUPTI_WINDOW_MS=250 \
		timeout 180 "$SIMJOB" --ranks 8 --job-id "$job" "$@" >"$E2E_TMP/$job.log" 2>&1
}
pyjson() { python3 -c "import json,sys; d=json.load(open('$1')); $2"; }

run_job e2e-pkernel --seconds 8 --cpu-us 1000 --kernel-us 3000 --fault rank=4,kind=kernel,amount=3
check "job with one slow kernel on rank 4 exits 0" test $? -eq 0
start=$(date +%s)
run_job e2e-pall --seconds 24 --cpu-us 1000 --kernel-us 1000 \
	--fault rank=all,kind=loader,amount=2000,after=12
check "job with a new hot function on every rank exits 0" test $? -eq 0
check "the agent uploads simjob's symbols (CPU functions by name)" \
	wait_until 60 grep -q "uploaded symbols of $SIMJOB " "$E2E_TMP/agent.log"
sleep 4 # the last batch
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0

curl -sf "$SERVER_URL/api/v1/jobs/e2e-pkernel/patterns?from=-1h" >"$E2E_TMP/pkernel.json"
diag "$(pyjson "$E2E_TMP/pkernel.json" "print([(f['rank'], f['function'], f['dimension'], round(f['z'], 1), round(f['cost'], 3)) for f in d['findings'][:5]])")"
check "patterns: 8 ranks, NCCL calls and kernel executions read" \
	pyjson "$E2E_TMP/pkernel.json" "sys.exit(0 if d['workers'] == 8 and d['calls'] > 0 and d['kernel_executions'] > 0 else 1)"
check "slow kernel: (rank 4, sim_gemm_bwd) is found, far out (z > 10)" \
	pyjson "$E2E_TMP/pkernel.json" "sys.exit(0 if [f for f in d['findings'] if f['rank'] == 4 and f['function'] == 'sim_gemm_bwd' and f['kind'] == 'kernel' and abs(f['z']) > 10] else 1)"
check "slow kernel: the two costliest findings are rank 4's (its kernel, and the collective it is late into)" \
	pyjson "$E2E_TMP/pkernel.json" "sys.exit(0 if len(d['findings']) >= 2 and all(f['rank'] == 4 for f in d['findings'][:2]) else 1)"
ctl patterns --job e2e-pkernel >"$E2E_TMP/ctl-pkernel.txt"
diag "$(head -4 "$E2E_TMP/ctl-pkernel.txt")"
check "sysomctl patterns prints rank 4's sim_gemm_bwd" \
	grep -qE '^4 +kernel +sim_gemm_bwd ' "$E2E_TMP/ctl-pkernel.txt"

hf=$start hto=$((start + 10)) from=$((start + 15)) to=$((start + 26))
curl -sf "$SERVER_URL/api/v1/jobs/e2e-pall/patterns?from=$from&to=$to&history_from=$hf&history_to=$hto" \
	>"$E2E_TMP/pall.json"
diag "$(pyjson "$E2E_TMP/pall.json" "print(d['history']['changes'][:4]); print([(f['rank'], f['function']) for f in d['findings'][:5]])")"
check "every rank: the slowdown shows against the job's own history (its first 10 s)" \
	pyjson "$E2E_TMP/pall.json" "sys.exit(0 if d['history']['from'] and any(c['kind'] == 'collective' and abs(c['change']) > 0.2 for c in d['history']['changes']) else 1)"
check "every rank: the new CPU function simjob_data_loader is named against the history" \
	pyjson "$E2E_TMP/pall.json" "sys.exit(0 if [c for c in d['history']['changes'] if c['kind'] == 'cpu' and c['function'] == 'simjob_data_loader' and c['dimension'] == 'beta' and c['now'] > 0.2] else 1)"
ctl patterns --job e2e-pall --from "$from" --to "$to" --history-from "$hf" --history-to "$hto" \
	>"$E2E_TMP/ctl-pall.txt"
check "sysomctl patterns prints the job-wide changes" grep -qE '^  ALL RANKS: ' "$E2E_TMP/ctl-pall.txt"
check "unknown job: 404" test "$(curl -s -o /dev/null -w '%{http_code}' "$SERVER_URL/api/v1/jobs/nope/patterns")" = 404
check "history_from without history_to: 400" \
	test "$(curl -s -o /dev/null -w '%{http_code}' "$SERVER_URL/api/v1/jobs/e2e-pall/patterns?history_from=-1h")" = 400
finish
