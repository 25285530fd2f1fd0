#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Hang detection end to end: a real Alertmanager, the server with its monitor, the agent (NCCL
# uprobes: in-flight collectives reported at each seal) and 4-rank simulated jobs, each with a
# per-job hang threshold of 10 s (the healthy one: the default, 30 s). Nobody asks the server anything until the verdicts:
#   stop  : rank 2 freezes (SIGSTOP) 3 s in     → hang naming rank 2, not entered, process exists;
#           SIGCONT → progress resumes → the incident resolves
#   exit  : rank 1 exits 8 s in (the launcher    → hang naming rank 1, process exited
#           leaves the others waiting)
#   block : rank 3 reads a pipe nobody writes   → hang naming rank 3, not entered
#   lock  : rank 0 locks a mutex it holds       → hang naming rank 0
#   (causes: stop "stopped" (do_signal_stop), block "frozen" in pipe_read, lock "lock wait",
#   exit "exited": the agent delivers blocks still in progress)
#   idle  : rank 1 sleeps 100 ms at a time       → hang naming rank 1, cause "sleeping", its
#           forever (a data loader)                off-CPU stacks with the kernel frames it waits in
#   stall : every rank sleeps so, between         → stall incident (SysomStall, annotation cause)
#           collectives
#   pipeline stop: stage 1 of a Send/Recv        → hang naming rank 1 (not the stages waiting
#           pipeline freezes                       behind it), on a link, cause stopped
#   a healthy job alongside                     → no incident
#   agent killed while a job's ranks run on     → agent-lost for the node, no hang
# The hang alert reaches Alertmanager (SysomHang) and /metrics (sysom_job_hung).
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

am_start am || exit 1
export AM_URL SERVER_URL
start_server srv --alertmanager-url "$AM_URL" --alert-resend-interval 2s --analysis-interval 1s || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	|| exit 1

settings() {
	curl -sf -X PUT --data "$2" "$SERVER_URL/api/v1/jobs/$1/settings" >/dev/null
}

JOB_PGIDS=()
# run_job JOB SIMJOB-ARGS...: a 4-rank job in its own process group, in the background.
run_job() {
	local job=$1
	shift
	local length=(--seconds 300)
	[[ " $* " == *" --iterations "* ]] && length=() # a pipeline counts its microbatches
	[ "$job" = e2e-healthy ] || settings "$job" '{"hang_floor_s": 10, "hang_factor": 5}'
	SIMJOB_NO_TEARDOWN=1 SIMJOB_NCCL_TIMEOUT_S=600 setsid "$SIMJOB" --ranks 4 --job-id "$job" "${length[@]}" \
		--cpu-us 1000 --kernel-us 1000 "$@" >"$E2E_TMP/$job.log" 2>&1 &
	JOB_PGIDS+=("$!")
}

kill_jobs() {
	local p
	for p in "${JOB_PGIDS[@]}"; do
		kill -KILL -- "-$p" 2>/dev/null
	done
	for p in "${JOB_PGIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	JOB_PGIDS=()
}
trap 'kill_jobs; e2e_cleanup' EXIT

# incident JOB KIND: waits (60 s) for the job's open incident of KIND; saves its report as
# $E2E_TMP/JOB.KIND.json and .txt.
incident() {
	local job=$1 kind=$2 id=""
	local deadline=$((SECONDS + 60))
	while [ $SECONDS -lt $deadline ]; do
		id=$(curl -sf "$SERVER_URL/api/v1/diagnoses?job=$job&from=-1h&to=now&status=open" |
			json "next((x['id'] for x in d['diagnoses'] if x['kind'] == '$kind'), '')")
		[ -n "$id" ] && break
		sleep 0.5
	done
	[ -n "$id" ] || return 1
	curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/$job.$kind.json" &&
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id?format=text" >"$E2E_TMP/$job.$kind.txt"
}

report_is() {
	json "$2" <"$E2E_TMP/$1.json" | grep -qx True
}

# cause_is JOB KIND PYTHON-CONDITION: the open incident's report (fetched again: its evidence
# is refreshed while it holds, and a block in progress is delivered at the agent's next drain)
# meets the condition over d; saved again as $E2E_TMP/JOB.KIND.json.
cause_is() {
	local id
	id=$(json 'd["id"]' <"$E2E_TMP/$1.$2.json") &&
		curl -sf "$SERVER_URL/api/v1/diagnoses/$id" >"$E2E_TMP/$1.$2.json" &&
		report_is "$1.$2" "$3"
}
export -f cause_is report_is
export E2E_TMP

run_job e2e-stop --fault rank=2,kind=stop,amount=0,after=3
run_job e2e-exit --fault rank=1,kind=exit,amount=0,after=8
run_job e2e-block --fault rank=3,kind=block,amount=0,after=3
run_job e2e-lock --fault rank=0,kind=lock,amount=0,after=3
run_job e2e-idle --fault rank=1,kind=idle,amount=0,after=3
run_job e2e-stall --fault rank=all,kind=idle,amount=0,after=3
run_job e2e-pipe-stop --pipeline --iterations 1000000 --fault rank=1,kind=stop,amount=0,after=3
run_job e2e-healthy
START=$SECONDS

check "frozen rank: a hang incident opens" incident e2e-stop hang
diag "detected $((SECONDS - START)) s after the start (fault at 3 s, threshold 10 s)"
diag "$(sed -n 1,30p "$E2E_TMP/e2e-stop.hang.txt")"
check "frozen rank: rank 2 named, never entered, its process exists" \
	report_is e2e-stop.hang "d['rank'] == 2 and [(r['rank'], r['state'], r['process_exists']) for r in d['report']['ranks']] == [(2, 'not entered', True)]"
check "frozen rank: 3 of 4 ranks entered the AllReduce, waiting past the 10 s threshold" \
	report_is e2e-stop.hang "d['report']['instance']['entered'] == 3 and d['report']['instance']['op'] == 'AllReduce' and d['report']['instance']['waited_ms'] >= 10000 and d['report']['instance']['threshold_ms'] == 10000"
check "frozen rank: its threads are reported (none ran)" \
	report_is e2e-stop.hang "d['report']['ranks'][0]['threads'] is not None and all(t['oncpu_ms'] == 0 for t in d['report']['ranks'][0]['threads'])"
check "frozen rank: the text report names rank 2 and its pid" \
	grep -qE '^rank 2 \(communicator rank 2, .*, pid [0-9]+\): not entered; process exists' "$E2E_TMP/e2e-stop.hang.txt"
check "frozen rank: severity critical" report_is e2e-stop.hang "d['severity'] == 'critical'"
check "frozen rank: cause stopped (its block in progress in do_signal_stop), in the report and the summary" \
	wait_until 20 cause_is e2e-stop hang "d['report']['cause']['class'] == 'stopped' and 'do_signal_stop' in d['report']['ranks'][0]['cause']['detail'] and 'cause: stopped' in d['summary']"
diag "$(json "d['summary']" <"$E2E_TMP/e2e-stop.hang.json")"

check "exited rank: a hang incident opens" incident e2e-exit hang
check "exited rank: rank 1 named, its process exited" \
	report_is e2e-exit.hang "[(r['rank'], r['state'], r['process_exists']) for r in d['report']['ranks']] == [(1, 'exited', False)] and d['report']['cause']['class'] == 'exited'"
check "blocked syscall: a hang incident opens" incident e2e-block hang
check "blocked syscall: rank 3 named, never entered" \
	report_is e2e-block.hang "[(r['rank'], r['state']) for r in d['report']['ranks']] == [(3, 'not entered')]"
check "blocked syscall: cause frozen in pipe_read, its kernel off-CPU stack in the report" \
	wait_until 20 cause_is e2e-block hang "d['report']['cause']['class'] == 'frozen' and 'pipe_read' in d['report']['cause']['detail'] and any('pipe_read_[k]' in s['stack'] for s in d['report']['ranks'][0]['offcpu_stacks'])"
diag "$(json "d['report']['cause']" <"$E2E_TMP/e2e-block.hang.json")"
check "deadlock: a hang incident opens" incident e2e-lock hang
check "deadlock: rank 0 named, never entered" \
	report_is e2e-lock.hang "[(r['rank'], r['state']) for r in d['report']['ranks']] == [(0, 'not entered')]"
check "deadlock: cause lock wait (never woke, futex)" \
	wait_until 20 cause_is e2e-lock hang "d['report']['cause']['class'] == 'lock wait' and 'never woke' in d['report']['cause']['detail']"
diag "$(json "d['report']['cause']" <"$E2E_TMP/e2e-lock.hang.json")"
check "sleeping rank: a hang incident opens" incident e2e-idle hang
diag "$(sed -n 1,40p "$E2E_TMP/e2e-idle.hang.txt")"
check "sleeping rank: rank 1 named, cause sleeping" \
	report_is e2e-idle.hang "[(r['rank'], r['state'], r['cause']['class']) for r in d['report']['ranks']] == [(1, 'not entered', 'sleeping')]"
check "sleeping rank: its off-CPU stacks hold the kernel frames it sleeps in (nanosleep), seconds of it" \
	report_is e2e-idle.hang "any('nanosleep_[k]' in s['stack'] and s['us'] > 5000000 for s in d['report']['ranks'][0]['offcpu_stacks']) and 'nanosleep' in d['report']['cause']['detail']"
check "sleeping rank: the text report shows the cause and an off-CPU stack" \
	bash -c "grep -q '^  cause: sleeping' '$E2E_TMP/e2e-idle.hang.txt' && grep -q '^  off-CPU stack ([0-9]* us blocked):' '$E2E_TMP/e2e-idle.hang.txt'"
# A pipeline (Send/Recv only) whose stage 1 freezes: stage 0 waits in its send to it, stage 2
# in its receive from it, stage 3 in its receive from stage 2 (which waits itself): rank 1 is
# the one named.
check "frozen pipeline stage: a hang incident opens" incident e2e-pipe-stop hang
diag "$(sed -n 1,16p "$E2E_TMP/e2e-pipe-stop.hang.txt")"
check "frozen pipeline stage: rank 1 named (not the stage 2 waiting behind it), on a link, process exists" \
	report_is e2e-pipe-stop.hang "d['rank'] == 1 and [(r['rank'], r['state'], r['process_exists']) for r in d['report']['ranks']] == [(1, 'not entered', True)] and d['report']['instance']['link'] is not None and 1 in (d['report']['instance']['link']['src'], d['report']['instance']['link']['dst'])"
check "frozen pipeline stage: the summary says rank 1 never sent or never posted its receive" \
	report_is e2e-pipe-stop.hang "'communicator rank 1 never' in d['summary']"
check "frozen pipeline stage: cause stopped" \
	wait_until 20 cause_is e2e-pipe-stop hang "d['report']['cause']['class'] == 'stopped'"
check "all ranks between collectives: a stall incident opens" incident e2e-stall stall
diag "$(sed -n 1,24p "$E2E_TMP/e2e-stall.stall.txt")"
check "stall: every rank named between collectives, cause sleeping, process alive" \
	report_is e2e-stall.stall "d['report']['verdict'] == 'stall' and sorted(r['rank'] for r in d['report']['ranks']) == [0, 1, 2, 3] and all(r['state'] == 'between collectives' and r['process_exists'] for r in d['report']['ranks']) and d['report']['cause']['class'] == 'sleeping' and d['severity'] == 'critical'"
check "stall: the text report says so" grep -q '^stall: no collective began on any communicator' "$E2E_TMP/e2e-stall.stall.txt"
# Behaviour patterns while every rank waits say nothing the hang and stall incidents do not
# (the monitor skips the pattern check of a hung job): no pattern incident on these jobs.
check "hangs and the stall open no pattern incident" \
	bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?from=-1h&to=now' | python3 -c \"import json,sys; sys.exit(0 if not [x for x in json.load(sys.stdin)['diagnoses'] if x['kind'] == 'pattern' and x['job'] in ('e2e-stop', 'e2e-exit', 'e2e-block', 'e2e-lock', 'e2e-idle', 'e2e-stall', 'e2e-pipe-stop')] else 1)\""

id=$(json 'd["id"]' <"$E2E_TMP/e2e-stop.hang.json")
ctl diagnose --id "$id" --format text >"$E2E_TMP/ctl-hang.txt"
check "sysomctl diagnose shows the hang report" grep -q "AllReduce #[0-9]* on communicator [0-9a-f]*: 3 of 4 ranks entered" "$E2E_TMP/ctl-hang.txt"

am_hang() {
	curl -sf "$AM_URL/api/v2/alerts?active=true&silenced=false&inhibited=false" |
		json "[a['labels'] for a in d if a['labels'].get('alertname') == 'SysomHang' and a['labels'].get('job') == '$1']"
}
check "Alertmanager received SysomHang for e2e-stop, rank 2" \
	wait_until 20 bash -c "$(declare -f am_hang json); am_hang e2e-stop | grep -q \"'rank': '2'\""
am_stall() {
	curl -sf "$AM_URL/api/v2/alerts?active=true&silenced=false&inhibited=false" |
		json "[a['annotations'].get('cause', '') for a in d if a['labels'].get('alertname') == 'SysomStall' and a['labels'].get('job') == '$1']"
}
check "Alertmanager received SysomStall for e2e-stall, its cause annotated" \
	wait_until 20 bash -c "$(declare -f am_stall json); am_stall e2e-stall | grep -q \"'sleeping: \""
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics: sysom_job_hung of e2e-stop is 1, of the healthy job 0" \
	bash -c "grep -q '^sysom_job_hung{job=\"e2e-stop\"} 1' '$E2E_TMP/metrics.txt' && grep -q '^sysom_job_hung{job=\"e2e-healthy\"} 0' '$E2E_TMP/metrics.txt'"
check "/metrics: hang and stall incidents opened" metric_at_least "$E2E_TMP/metrics.txt" sysom_hangs_opened_total 6
check "/metrics: the agent delivered off-CPU blocks still in progress (counter offcpu_open_blocks)" \
	grep -qE '^sysom_agent_offcpu_open_blocks_total(\{[^}]*\})? [1-9]' "$E2E_TMP/metrics.txt"

# Resume the frozen rank: progress resumes, the incident resolves.
pid=$(json "d['report']['ranks'][0]['pid']" <"$E2E_TMP/e2e-stop.hang.json")
kill -CONT "$pid"
resolved() {
	curl -sf "$SERVER_URL/api/v1/diagnoses/$id" | json "d['status']" | grep -qx resolved
}
check "frozen rank continued: the hang resolves" wait_until 30 resolved

check "healthy job alongside: no incident" bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-healthy&from=-1h&to=now' | json 'len(d[\"diagnoses\"]) == 0' | grep -qx True"
kill_jobs

# The agent killed while a job's ranks run on: agent lost, not a hang.
run_job e2e-lost
sleep 6
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
check "agent killed: an agent-lost incident opens" incident e2e-lost agent-lost
diag "$(sed -n 1,14p "$E2E_TMP/e2e-lost.agent-lost.txt")"
check "agent killed: it names the node and the job's 4 ranks" \
	report_is e2e-lost.agent-lost "d['report']['agent_lost']['processes'] == 4 and sorted(d['report']['agent_lost']['ranks']) == [0, 1, 2, 3] and d['hostname'] != ''"
sleep 8 # more evaluations past the hang threshold
check "agent killed: no hang incident" bash -c "curl -sf '$SERVER_URL/api/v1/diagnoses?job=e2e-lost&from=-1h&to=now' | json 'all(x[\"kind\"] != \"hang\" for x in d[\"diagnoses\"])' | grep -qx True"
kill_jobs
finish
