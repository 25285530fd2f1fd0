#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Slow-rank detection end to end: server + agent on loopback, the simulated 8-rank job traced
# with uprobes. A healthy run has no straggler; with rank 5 sleeping 4 ms before every
# all-reduce (--fault kind=delay), the server names rank 5 — persistent, about 4 ms later than
# the other ranks — in the world communicator, through the API and sysomctl. Then rank 2 doing
# 5 ms of extra CPU work per iteration in a named function: named the straggler, and the CPU
# diff against a healthy rank puts that function first.
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
[ -x "$SIMJOB" ] || skip_all "$SIMJOB not built (needs nccl.h and cuda.h to build)"
ITER=60

api() { curl -sf "$SERVER_URL$1"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
export -f json

start_server srv || exit 1
start_agent agent "$SERVER_URL" --gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 || exit 1
# The agent must see a rank's process (its environment names the job) before it exits: a 60-
# iteration job lasts ~0.5 s, less than a sanitizer agent's start-up burst (a fresh-clone run lost
# the whole healthy job that way). Start after its first batch, and run the healthy job longer.
wait_until 30 grep -q "batch 1:" "$E2E_TMP/agent.log"
timeout 120 "$SIMJOB" --ranks 8 --iterations $((ITER * 5)) --cpu-us 1000 --kernel-us 1000 --print-env \
	>"$E2E_TMP/healthy.log" 2>&1
check "healthy job exits 0" test $? -eq 0
# Long enough (~2 s) that a loaded agent, attaching a second after the ranks start, still sees
# a full analysis window (a 60-iteration job once ended before the agent had traced a rank).
timeout 120 "$SIMJOB" --ranks 8 --iterations $((ITER * 4)) --cpu-us 1000 --kernel-us 1000 --print-env \
	--fault rank=5,kind=delay,amount=4000 >"$E2E_TMP/slow.log" 2>&1
check "job with a 4 ms delay on rank 5 exits 0" test $? -eq 0
# 5 ms, not 3: eight ranks share two CPUs, and with 3 ms a loaded CI machine once left rank 2 under
# the detection threshold (its preemptions make the healthy ranks late too).
timeout 120 "$SIMJOB" --ranks 8 --seconds 8 --cpu-us 2000 --kernel-us 1000 --print-env \
	--fault rank=2,kind=cpu,amount=5000 >"$E2E_TMP/cpu.log" 2>&1
check "job with 5 ms of extra CPU work on rank 2 exits 0" test $? -eq 0
check "the agent uploads simjob's symbols" \
	wait_until 60 grep -q "uploaded symbols of $SIMJOB " "$E2E_TMP/agent.log"
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
HEALTHY=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/healthy.log" | head -1)
SLOW=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/slow.log" | head -1)
CPU=$(sed -n 's/.*TORCHELASTIC_RUN_ID=\([^ ]*\).*/\1/p' "$E2E_TMP/cpu.log" | head -1)

api "/api/v1/jobs/$HEALTHY/stragglers" >"$E2E_TMP/healthy.json"
check "healthy run: no straggler in any communicator" \
	bash -c "json 'len(d[\"stragglers\"]) == 0 and len(d[\"communicators\"]) >= 1' <'$E2E_TMP/healthy.json' | grep -qx True"
api "/api/v1/jobs/$SLOW/stragglers" >"$E2E_TMP/slow.json"
WORLD=$(json '[c["comm"] for c in d["communicators"] if c["nranks"] == 8][0]' <"$E2E_TMP/slow.json")
diag "world communicator $WORLD: $(json '[(r["rank"], round(r["excess_ms"], 2), r["persistence"], r["last_to_enter_fraction"]) for c in d["communicators"] if c["nranks"] == 8 for r in c["ranks"][:3]]' <"$E2E_TMP/slow.json")"
check "the world communicator analysed a full window (100) of all-reduce instances of 8 ranks" \
	bash -c "json '[c[\"instances\"] for c in d[\"communicators\"] if c[\"comm\"] == \"$WORLD\"][0] == d[\"params\"][\"window\"] == 100' <'$E2E_TMP/slow.json' | grep -qx True"
check "rank 5 is the straggler of the world communicator, and the only one" \
	bash -c "json '[c[\"stragglers\"] for c in d[\"communicators\"] if c[\"comm\"] == \"$WORLD\"][0] == [5]' <'$E2E_TMP/slow.json' | grep -qx True"
# Last to enter: 1/8 of the instances by chance; on a quiet machine rank 5 is last in ~90%, but
# with both CPUs busy the other ranks' own preemptions make them last often (0.5 failed once).
check "rank 5: persistent, 3-6 ms later than the others, last to enter in over 3x chance (> 0.375)" \
	bash -c "json '[r for c in d[\"communicators\"] if c[\"comm\"] == \"$WORLD\" for r in c[\"ranks\"] if r[\"rank\"] == 5 and r[\"persistence\"] == \"persistent\" and 3 <= r[\"excess_ms\"] <= 6 and r[\"last_to_enter_fraction\"] > 0.375]' <'$E2E_TMP/slow.json' | grep -q rank"
check "the job-level list names rank 5 with its pid" \
	bash -c "json '[s for s in d[\"stragglers\"] if s[\"rank\"] == 5 and s[\"pid\"] > 0]' <'$E2E_TMP/slow.json' | grep -q rank"
ctl stragglers --job "$SLOW" >"$E2E_TMP/ctl-stragglers.txt"
check "sysomctl stragglers names rank 5, persistent" \
	grep -qE '^STRAGGLER: rank 5 \(.* pid [0-9]+\), persistent' "$E2E_TMP/ctl-stragglers.txt"
ctl stragglers --job "$HEALTHY" >"$E2E_TMP/ctl-healthy.txt"
check "sysomctl stragglers on the healthy run: none" grep -qx "No straggler." "$E2E_TMP/ctl-healthy.txt"

# CPU layer: which rank, then which function.
ctl stragglers --job "$CPU" >"$E2E_TMP/ctl-cpu.txt"
api "/api/v1/jobs/$CPU/stragglers" >"$E2E_TMP/cpu.json"
diag "CPU job, world communicator: $(json '[(c["instances"], [(r["rank"], round(r["excess_ms"], 2), round(r.get("z", 0), 1), r["persistence"]) for r in c["ranks"][:3]]) for c in d["communicators"] if c["nranks"] == 8]' <"$E2E_TMP/cpu.json")"
diag "$(head -3 "$E2E_TMP/ctl-cpu.txt")"
check "extra CPU work: rank 2 is named the straggler" \
	grep -qE '^STRAGGLER: rank 2 \(' "$E2E_TMP/ctl-cpu.txt"
check "the diagnosis names the CPU layer and simjob_fault_extra_cpu" \
	grep -qE '^  layer: cpu: simjob_fault_extra_cpu is on [0-9.]+ percentage points more of rank 2' \
	"$E2E_TMP/ctl-cpu.txt"
check "the delayed rank 5 (sleeping, not computing) is not blamed on GPU or CPU" \
	bash -c "grep -qE '^  layer: ' '$E2E_TMP/ctl-stragglers.txt' && ! grep -qE '^  layer: (gpu|cpu): ' '$E2E_TMP/ctl-stragglers.txt'"
ctl diff --job "$CPU" --a 0 --b 2 --top 5 >"$E2E_TMP/diff.txt"
diag "$(head -4 "$E2E_TMP/diff.txt")"
check "the CPU diff of rank 2 against rank 0 puts simjob_fault_extra_cpu first, > 10 pp" \
	bash -c "awk 'NR == 3' '$E2E_TMP/diff.txt' | grep -qE '^ +\+[1-9][0-9]\.[0-9]+ .*simjob_fault_extra_cpu'"
curl -sf "$SERVER_URL/api/v1/flamegraph/diff?job=$CPU&a=0&b=2&from=-1h&to=now" >"$E2E_TMP/diff.folded"
check "the folded diff has the function's stacks with samples on rank 2's side only" \
	awk '/simjob_fault_extra_cpu/ && $(NF-1) == 0 && $NF > 0 { found = 1 } END { exit !found }' "$E2E_TMP/diff.folded"
finish
