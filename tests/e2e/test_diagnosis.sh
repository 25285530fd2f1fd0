#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Automatic diagnosis end to end: a real Alertmanager, the server with its monitor, the agent
# (CPU sampling, NCCL/CUDA uprobes, OS signals), and the simulated 8-rank job with the NCCL
# profiler plugin and the CUPTI library. Nobody asks the server anything until the verdicts
# are checked: each scenario's incident is opened by the monitor as batches arrive.
#   1. extra CPU work in a named function on rank 2  → rank 2, CPU layer, that function first
#   2. rank 3's kernels uniformly 2x slower          → GPU layer, uniform (hardware suspected)
#   3. one kernel type 3x slower on rank 4           → GPU layer, kernel-specific, kernel named
#  3b. one kernel 4x slower on rank 6, in bursts      → the same, the kernel reported as slow on
#      (half of every 2 s, as under load)               about half its runs only (intermittent)
#   4. a neighbour pinned to rank 1's CPU spending 60 % of its time in the kernel (UDP sends
#      over loopback), rank 1's own profile unchanged → OS layer, the signal named
#   5. every rank gains the same new hot function    → no straggler; the temporal baseline
#      names the function
# The straggler alert reaches Alertmanager with its labels and generatorURL, and resolves.
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

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

am_start am || exit 1
export AM_URL
start_server srv --alertmanager-url "$AM_URL" --alert-resend-interval 2s --analysis-interval 1s \
	--public-url http://sysom.test:8080 || exit 1
export SERVER_URL E2E_TMP
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 || exit 1

# settings JOB JSON: the job's thresholds, before it runs.
settings() {
	curl -sf -X PUT --data "$2" "$SERVER_URL/api/v1/jobs/$1/settings" >/dev/null
}

# run_job JOB SIMJOB-ARGS...: the 8-rank job with both in-process components.
run_job() {
	local job=$1
	shift
	SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock NCCL_PROFILER_PLUGIN=$PLUGIN \
		CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI \
		SYSOM_NCCL_WINDOW_MS=250 SYSOM_CUPTI_WINDOW_MS=250 \
		timeout 180 "$SIMJOB" --ranks "${RANKS:-8}" --job-id "$job" "$@" >"$E2E_TMP/$job.log" 2>&1
}

# incident JOB KIND: waits for the job's first incident of KIND, saves its report as
# $E2E_TMP/JOB.json and $E2E_TMP/JOB.txt; fails after 30 s.
# incident JOB KIND [RANK]: the job's incident of that kind (and rank: under CPU contention a
# neighbouring rank may be named briefly too, and the list is newest first), saved.
incident() {
	local job=$1 kind=$2 rank=${3:-} id=""
	local deadline=$((SECONDS + 30))
	while [ $SECONDS -lt $deadline ]; do
		id=$(curl -sf "$SERVER_URL/api/v1/diagnoses?job=$job&from=-1h&to=now" |
			json "next((x['id'] for x in d['diagnoses'] if x['kind'] == '$kind' and ('$rank' == '' or str(x.get('rank')) == '$rank')), '')")
		[ -n "$id" ] && break
		sleep 0.5
	done
	[ -n "$id" ] || return 1
	curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/$job.json" &&
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/$job.txt"
}

# jq-like check on a saved report: ok when the Python expression over d is True.
report_is() {
	json "$2" <"$E2E_TMP/$1.json" | grep -qx True
}

# Evaluations look 20 s back; an incident not seen for 2 s resolves.
for job in e2e-cpu e2e-gpu e2e-kernel e2e-noise; do
	settings "$job" '{"lookback_s": 20, "resolve_after_s": 2}'
done
settings e2e-base '{"lookback_s": 20, "baseline_after_s": 10, "resolve_after_s": 2, "regression_hold_s": 3}'

# simjob's symbols first: scenario 1's report names the function, and its alert is checked, only
# while the incident is open (a loaded agent uploaded the symbols after a 10-s job had ended).
timeout 30 "$SIMJOB" --ranks 1 --seconds 2 >"$E2E_TMP/warm-up.log" 2>&1
check "the agent uploaded simjob's symbols" \
	wait_until 60 grep -q "uploaded symbols of $SIMJOB " "$E2E_TMP/agent.log"

# 1. CPU layer.
run_job e2e-cpu --seconds 10 --cpu-us 2000 --kernel-us 1000 --fault rank=2,kind=cpu,amount=3000
check "scenario 1 job exits 0" test $? -eq 0
check "scenario 1: the monitor opened a straggler incident" incident e2e-cpu straggler
diag "$(sed -n 1,12p "$E2E_TMP/e2e-cpu.txt")"
check "scenario 1: rank 2, CPU layer" report_is e2e-cpu "d['rank'] == 2 and d['layer'] == 'cpu'"
# The incident is re-evaluated while it holds: once the agent has uploaded simjob's symbols,
# its report names the function.
top_cpu_function() {
	curl -sf "$SERVER_URL/api/v1/diagnoses/$(json 'd["id"]' <"$E2E_TMP/e2e-cpu.json")" |
		json "d['report']['straggler']['diagnosis']['cpu']['functions'][0]['function']"
}
check "scenario 1: simjob_fault_extra_cpu at the top of the CPU diff" \
	wait_until 20 bash -c "$(declare -f top_cpu_function json); top_cpu_function | grep -qx simjob_fault_extra_cpu"

curl -sf "$SERVER_URL/api/v1/jobs/e2e-cpu/waterline?from=-1h&to=now" >"$E2E_TMP/waterline.json"
check "scenario 1: the CPU waterline flags rank 2 first, for simjob_fault_extra_cpu" \
	bash -c "json \"[f for c in d['communicators'] if c['ranks'] == 8 for f in c['flags']][0]\" <'$E2E_TMP/waterline.json' | grep -q \"'rank': 2, 'function': 'simjob_fault_extra_cpu'\""

# The straggler alert reached Alertmanager with its labels and a link to the report.
am_alert() {
	curl -sf "$AM_URL/api/v2/alerts?active=true&silenced=false&inhibited=false" |
		json "[a for a in d if a['labels'].get('alertname') == 'SysomStraggler' and a['labels'].get('job') == '$1']"
}
check "Alertmanager received the straggler alert of e2e-cpu" \
	wait_until 20 bash -c "$(declare -f am_alert json); am_alert e2e-cpu | grep -q rank"
am_alert e2e-cpu >"$E2E_TMP/am-alert.txt"
diag "$(cat "$E2E_TMP/am-alert.txt")"
check "the alert carries rank, node, communicator, layer, severity and the report's URL" \
	python3 -c "
import ast, sys
a = ast.literal_eval(open('$E2E_TMP/am-alert.txt').read())[0]
l = a['labels']
assert l['rank'] == '2' and l['layer'] == 'cpu' and l['severity'] == 'critical', l
assert l['node'] and len(l['communicator']) >= 16, l
assert a['generatorURL'].startswith('http://sysom.test:8080/ui/#view=diagnosis&id='), a
assert 'simjob_fault_extra_cpu' in a['annotations']['summary'], a
"
check "the alert resolves in Alertmanager once the job's data are older than its lookback" \
	wait_until 60 bash -c "$(declare -f am_alert json); ! am_alert e2e-cpu | grep -q rank"
check "and the incident is resolved" \
	bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-cpu&from=-1h' | json \"all(x['status'] == 'resolved' for x in d['diagnoses'])\" | grep -qx True"

# 2. GPU layer, uniform.
run_job e2e-gpu --seconds 8 --cpu-us 1000 --kernel-us 3000 --fault rank=3,kind=gpu,amount=2
check "scenario 2 job exits 0" test $? -eq 0
check "scenario 2: the monitor opened a straggler incident" incident e2e-gpu straggler
diag "$(sed -n 1,12p "$E2E_TMP/e2e-gpu.txt")"
check "scenario 2: rank 3, GPU layer, uniform slowdown about 2x" \
	report_is e2e-gpu "d['rank'] == 3 and d['layer'] == 'gpu' and d['report']['straggler']['diagnosis']['gpu']['verdict'] == 'uniform' and 1.7 < d['report']['straggler']['diagnosis']['gpu']['slowdown'] < 2.3"
check "scenario 2: the summary suspects the hardware" grep -q "hardware suspected" "$E2E_TMP/e2e-gpu.txt"

# 3. GPU layer, one kernel.
run_job e2e-kernel --seconds 8 --cpu-us 1000 --kernel-us 3000 --fault rank=4,kind=kernel,amount=3
check "scenario 3 job exits 0" test $? -eq 0
check "scenario 3: the monitor opened a straggler incident" incident e2e-kernel straggler
diag "$(sed -n 1,14p "$E2E_TMP/e2e-kernel.txt")"
check "scenario 3: rank 4, GPU layer, kernel-specific, sim_gemm_bwd named first (about 3x)" \
	report_is e2e-kernel "d['rank'] == 4 and d['layer'] == 'gpu' and d['report']['straggler']['diagnosis']['gpu']['verdict'] == 'kernel-specific' and d['report']['straggler']['diagnosis']['gpu']['kernels'][0]['name'] == 'sim_gemm_bwd' and 2.5 < d['report']['straggler']['diagnosis']['gpu']['kernels'][0]['ratio'] < 3.5"

check "scenario 3: with the stack that launched sim_gemm_bwd on rank 4 (the training loop)" \
	report_is e2e-kernel "any('rank_main' in s['stack'] for s in d['report']['straggler']['diagnosis']['gpu']['kernels'][0]['launch_stacks'])"
check "scenario 3: the text report shows where the kernel was launched from" \
	grep -q "launched from (.*sim_gemm_bwd" "$E2E_TMP/e2e-kernel.txt"

# 3b. GPU layer, one kernel slow only in bursts (as under load from something sharing the
# GPU): rank 6's sim_gemm_bwd takes 4x in the first 70% of every 300 ms. The verdict is still
# kernel-specific, and the kernel is reported as slow on part of its runs only. Short bursts:
# the analysis reads the last 100 instances (~0.7 s here), and with 1 s bursts every 2 s a
# window could fall between them (CI twice found no straggler at all); most of each period
# slow keeps rank 6's median late, i.e. a persistent straggler.
run_job e2e-burst --seconds 12 --cpu-us 1000 --kernel-us 3000 \
	--fault rank=6,kind=kernel,amount=4,period=0.3,duty=0.7
check "scenario 3b job exits 0" test $? -eq 0
check "scenario 3b: the monitor opened a straggler incident on rank 6" incident e2e-burst straggler 6
diag "scenario 3b, every incident: $(curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-burst&from=-1h&to=now" | json "[(x['rank'], x['kind'], x['status'], x['summary'][:160]) for x in d['diagnoses']]")"
# The incident opens as soon as rank 6 is late, maybe before its GPU windows arrived (its
# report then says no-data); the layers are checked on the whole run, asked for after the job.
# Asked again while it fails or rank 6 has no GPU data yet (the agents' last batches may still
# be on their way when the job exits); every answer is kept for the log.
burst_fetch() {
	curl -sS -f --max-time 20 "$SERVER_URL/api/v1/jobs/e2e-burst/stragglers?from=-3m&to=now" >"$E2E_TMP/e2e-burst-stragglers.json" 2>>"$E2E_TMP/e2e-burst-fetch.log" &&
		burst_is "d['layer'] == 'gpu'" 2>>"$E2E_TMP/e2e-burst-fetch.log"
}
burst_is() {
	python3 -c "import json,sys; d=next(x['diagnosis'] for x in json.load(open(sys.argv[1]))['stragglers'] if x['rank'] == 6); sys.exit(0 if ($1) else 1)" "$E2E_TMP/e2e-burst-stragglers.json"
}
wait_until 30 burst_fetch ||
	diag "scenario 3b, the stragglers asked for 30 s: $(tail -c 300 "$E2E_TMP/e2e-burst-fetch.log" | tr '\n' ' ') last answer: $(head -c 600 "$E2E_TMP/e2e-burst-stragglers.json")"
diag "scenario 3b, rank 6 over the run: $(burst_is "print(d['layer'], d['summary'][:300], d['gpu']['kernels'][:1] and {k: d['gpu']['kernels'][0][k] for k in ('name', 'ratio', 'slow_share', 'intermittent')}) or True" 2>&1)"
check "scenario 3b: over the run, rank 6 is a straggler in the GPU layer, sim_gemm_bwd named first" \
	burst_is "d['layer'] == 'gpu' and d['gpu']['kernels'][0]['name'] == 'sim_gemm_bwd'"
check "scenario 3b: sim_gemm_bwd is intermittent, slow on 25-80% of its runs" \
	burst_is "d['gpu']['kernels'][0]['intermittent'] and 0.25 < d['gpu']['kernels'][0]['slow_share'] < 0.8"
check "scenario 3b: the summary says it is slow on part of its runs only" \
	burst_is "'intermittent' in d['summary'] and 'sim_gemm_bwd' in d['summary']"
check "scenario 3: the uniformly slow kernel is not intermittent (slow on > 80% of its runs)" \
	report_is e2e-kernel "(lambda k: not k['intermittent'] and k['slow_share'] > 0.8)(d['report']['straggler']['diagnosis']['gpu']['kernels'][0])"

# 4. OS layer: kernel-side noise from a pinned neighbour. Four ranks: the noisy one shares the
# last CPU with its neighbour and the healthy ones share the others; with eight on two CPUs the
# seven healthy ones queue behind each other almost as long as the noisy one behind its
# neighbour, and a loaded machine (CI) closed the gap below the OS layer's factor of 2.
RANKS=4 run_job e2e-noise --seconds 10 --cpu-us 300 --kernel-us 3000 --fault rank=1,kind=noise,amount=60
check "scenario 4 job exits 0" test $? -eq 0
check "scenario 4: the monitor opened a straggler incident on rank 1" incident e2e-noise straggler 1
diag "scenario 4, every incident: $(curl -sf "$SERVER_URL/api/v1/diagnoses?job=e2e-noise&from=-1h&to=now" | json "[(x['rank'], x['kind'], x['status']) for x in d['diagnoses']]")"
diag "$(sed -n 1,30p "$E2E_TMP/e2e-noise.txt")"
check "scenario 4: rank 1, OS layer" report_is e2e-noise "d['rank'] == 1 and d['layer'] == 'os'"
check "scenario 4: an OS signal is implicated and named in the summary" \
	report_is e2e-noise "any(s['implicated'] and s['signal'] in d['summary'] for s in d['report']['straggler']['diagnosis']['os']['signals'])"
# The ranks mostly wait for their simulated GPU, so each has ~50 samples in the window and one
# function can be 8 pp apart by chance (53 vs 59 samples in one CI run): the CPU layer must not
# *blame* it, i.e. the top difference is small or not significant in share or in CPU time.
check "scenario 4: the CPU layer blamed no function (identical user-space profiles)" \
	report_is e2e-noise "(lambda f: not f or f[0]['delta_pp'] < 5 or (f[0]['z'] or 0) < 3 or (f[0]['time_z'] or 0) < 3)(d['report']['straggler']['diagnosis']['cpu']['functions']) and 'CPU profiles are normal' in d['summary']"

# 5. Every rank slower by the same new function: no straggler, the baseline names it.
run_job e2e-base --seconds 30 --cpu-us 1000 --kernel-us 1000 \
	--fault rank=all,kind=cpu,amount=2000,after=16
check "scenario 5 job exits 0" test $? -eq 0
check "scenario 5: a baseline was taken from the healthy start" \
	curl -sf "$SERVER_URL/api/v1/jobs/e2e-base/baseline"
check "scenario 5: the monitor opened a regression incident" incident e2e-base regression
diag "$(sed -n 1,20p "$E2E_TMP/e2e-base.txt")"
check "scenario 5: simjob_fault_extra_cpu named first, rising by more than 0.5 pp" \
	report_is e2e-base "d['report']['functions'][0]['function'] == 'simjob_fault_extra_cpu' and d['report']['functions'][0]['delta_pp'] > 0.5 and d['layer'] == 'cpu'"
check "scenario 5: no straggler incident" \
	bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-base&from=-1h' | json \"[x for x in d['diagnoses'] if x['kind'] == 'straggler'] == []\" | grep -qx True"

ctl diagnose --from -1h >"$E2E_TMP/ctl-diagnose.txt"
check "sysomctl diagnose lists the incidents of every scenario" \
	bash -c "for j in e2e-cpu e2e-gpu e2e-kernel e2e-noise e2e-base; do grep -q \" \$j\$\" '$E2E_TMP/ctl-diagnose.txt' || exit 1; done"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics: the monitor read the instances from memory, as batches arrived" \
	metric_at_least "$E2E_TMP/metrics.txt" sysom_analysis_live_calls_total 1
check "/metrics: incidents opened, alerts fired and delivered to Alertmanager" \
	bash -c "$(declare -f metric_at_least); m='$E2E_TMP/metrics.txt'
		metric_at_least \$m sysom_diagnoses_opened_total 5 && metric_at_least \$m sysom_alerts_fired_total 1 &&
		metric_at_least \$m 'sysom_alert_notifications_total{receiver=\"alertmanager\",result=\"ok\"}' 1"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
finish
