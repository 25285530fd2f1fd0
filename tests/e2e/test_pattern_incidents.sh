#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Behaviour patterns fed into incidents (issue 22, EROICA §4): the server's monitor, the agent
# and two simulated 4-rank jobs at once, with the CUPTI library (kernel timing).
#   a. one kernel on one rank: sim_gemm_bwd 1.5x slower on rank 2 (+0.5 ms per iteration, under
#      the straggler test's 1 ms minimum lateness) → an incident of kind pattern naming
#      (rank 2, sim_gemm_bwd), alert SysomPattern; resolved once the job is gone
#   b. every rank slow in the data loader: from 24 s on (after the kernel job), 0.5 ms of CPU
#      per iteration (more than the rest of its CPU work) in
#      simjob_data_loader on all ranks → no straggler incident, but a pattern incident against
#      the job's own history (its baseline stretch) names simjob_data_loader
# (c, a stall, all ranks waiting between collectives: the stall incident of e2e/test_hang; the
# monitor does not check patterns while a job hangs or stalls.)
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
FAKE_CUPTI=$SIMJOB_DIR/libcupti.so
for f in "$SIMJOB" "$CUPTI_LIB" "$FAKE_CUPTI"; do
	[ -e "$f" ] || skip_all "$f not built (needs the CUDA/NCCL/CUPTI headers)"
done

am_start am || exit 1
start_server srv --alertmanager-url "$AM_URL" --analysis-interval 1s || exit 1
# Checks every 4 s over the last 12 s, held for 2 checks (the defaults: 10 s, 30 s, 2).
curl -sf -X PUT --data '{"pattern_period_s": 4, "pattern_window_s": 12, "resolve_after_s": 8}' \
	"$SERVER_URL/api/v1/jobs/e2e-pinc-kernel/settings" >/dev/null
check "settings of the kernel job stored" test $? -eq 0
curl -sf -X PUT --data '{"pattern_period_s": 4, "pattern_window_s": 10, "baseline_after_s": 10}' \
	"$SERVER_URL/api/v1/jobs/e2e-pinc-loader/settings" >/dev/null
check "settings of the data-loader job stored" test $? -eq 0
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 --symbol-upload-rate 0 --symbol-max-file-size 1M || exit 1

run_job() {
	local job=$1
	shift
	SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock CUDA_INJECTION64_PATH=$CUPTI_LIB \
		SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI SYSOM_CUPTI_WINDOW_MS=250 \
		timeout 180 "$SIMJOB" --ranks 4 --job-id "$job" "$@" >"$E2E_TMP/$job.log" 2>&1
}
pyjson() { python3 -c "import json,sys; d=json.load(open('$1')); $2"; }
incidents() { curl -sf "$SERVER_URL/api/v1/diagnoses?job=$1&from=-1h" >"$E2E_TMP/$1.diag.json"; }
# has_incident JOB PYTHON-CONDITION-ON-x: an incident of JOB for which the condition holds.
has_incident() {
	incidents "$1" && pyjson "$E2E_TMP/$1.diag.json" "sys.exit(0 if [x for x in d['diagnoses'] if $2] else 1)"
}

run_job e2e-pinc-kernel --seconds 22 --cpu-us 300 --kernel-us 1500 \
	--fault rank=2,kind=kernel,amount=1.5 &
kernel_job=$!
run_job e2e-pinc-loader --seconds 56 --cpu-us 300 --kernel-us 600 \
	--fault rank=all,kind=loader,amount=500,after=24 &
loader_job=$!

# The loader is named by its symbols: uploaded before its onset (small files only, no rate limit).
check "the agent uploads simjob's symbols (before the loader's onset)" \
	wait_until 24 grep -q "uploaded symbols of $SIMJOB " "$E2E_TMP/agent.log"
check "a: pattern incident names (rank 2, sim_gemm_bwd) while the job runs" \
	wait_until 40 has_incident e2e-pinc-kernel \
	"x['kind'] == 'pattern' and x['rank'] == 2 and 'sim_gemm_bwd' in x['summary'] and x['resolved'] is None"
diag "$(pyjson "$E2E_TMP/e2e-pinc-kernel.diag.json" "print([(x['kind'], x['rank'], x['summary'][:150]) for x in d['diagnoses']])")"
check "a: Alertmanager received SysomPattern for rank 2" \
	wait_until 30 bash -c "curl -sf '$AM_URL/api/v2/alerts' | python3 -c \"import json,sys; sys.exit(0 if [a for a in json.load(sys.stdin) if a['labels'].get('alertname') == 'SysomPattern' and a['labels'].get('job') == 'e2e-pinc-kernel' and a['labels'].get('rank') == '2'] else 1)\""
id=$(pyjson "$E2E_TMP/e2e-pinc-kernel.diag.json" "print([x['id'] for x in d['diagnoses'] if x['kind'] == 'pattern' and x['rank'] == 2][0])")
curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/kernel-incident.json"
check "a: its report: the deviation against the peers, layer gpu, held 2 checks" \
	pyjson "$E2E_TMP/kernel-incident.json" "r = d['report']; sys.exit(0 if r['type'] == 'pattern' and r['scope'] == 'peers' and r['deviation']['function'] == 'sim_gemm_bwd' and r['deviation']['kind'] == 'kernel' and abs(r['deviation']['z']) >= 6 and r['periods'] >= 2 and d['layer'] == 'gpu' else 1)"
curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/kernel-incident.txt"
check "a: its text report shows the deviation against the peers" \
	grep -qE '^  kernel sim_gemm_bwd, (beta|mu): .* vs median ' "$E2E_TMP/kernel-incident.txt"
ctl diagnose --job e2e-pinc-kernel --from -1h >"$E2E_TMP/ctl-kernel.txt" 2>&1
check "a: sysomctl diagnose lists the pattern incident" grep -q "sim_gemm_bwd" "$E2E_TMP/ctl-kernel.txt"
wait "$kernel_job"
check "kernel job exits 0" test $? -eq 0
check "a: the pattern incident resolves once the job is gone" \
	wait_until 40 has_incident e2e-pinc-kernel "x['kind'] == 'pattern' and x['rank'] == 2 and x['resolved'] is not None"

check "b: pattern incident against the job's history names simjob_data_loader (CPU samples enough on 4 ranks)" \
	wait_until 45 has_incident e2e-pinc-loader \
	"x['kind'] == 'pattern' and x['rank'] is None and 'simjob_data_loader' in x['summary']"
diag "$(pyjson "$E2E_TMP/e2e-pinc-loader.diag.json" "print([(x['kind'], x['rank'], x['summary'][:160]) for x in d['diagnoses']])")"
wait "$loader_job"
check "loader job exits 0" test $? -eq 0
incidents e2e-pinc-loader
check "b: no straggler incident (every rank slowed alike)" \
	pyjson "$E2E_TMP/e2e-pinc-loader.diag.json" "sys.exit(0 if not [x for x in d['diagnoses'] if x['kind'] == 'straggler'] else 1)"
check "b: job-wide pattern incidents report rises only (what fell is the consequence)" \
	pyjson "$E2E_TMP/e2e-pinc-loader.diag.json" "sys.exit(0 if not [x for x in d['diagnoses'] if x['kind'] == 'pattern' and '(-' in x['summary']] else 1)"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics: sysom_patterns_opened_total counts them" \
	metric_at_least "$E2E_TMP/metrics.txt" sysom_patterns_opened_total 1
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
finish
