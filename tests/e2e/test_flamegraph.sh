#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server + agent + workload on loopback: `sysomctl flamegraph` shows the workload's call chain
# (user frames), kernel frames with kernel symbol names, and counts ≈ Hz × CPU seconds.
. "$(dirname "$0")/lib.sh"
require_root

start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 || exit 1
read -r WPID WCPU < <(run_workload 4 --mode mixed --threads 2)
diag "workload pid $WPID used ${WCPU}s of CPU"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM (final drain and flush)" test $? -eq 0
LOGGED=$(agent_logged_samples "$E2E_TMP/agent.log")
check "agent log has no error lines" bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log'"

ctl flamegraph --pid "$WPID" --from -10m --to now --format folded >"$E2E_TMP/pid.folded"
check "sysomctl flamegraph --format folded exits 0" test $? -eq 0
check "folded output has stacks" test -s "$E2E_TMP/pid.folded"
# Frames may contain spaces (C++ signatures, "[truncated: invalid frame pointer]"): the
# count is what follows the last space, as flamegraph.pl reads it.
check "every folded line is 'frames count'" \
	bash -c "awk '{ if (\$NF !~ /^[0-9]+\$/ || NF < 2) bad++ } END { exit bad > 0 }' '$E2E_TMP/pid.folded'"
# The pid's first samples may come from the forked wrapper before its execve (comm
# "python3"): a separate incarnation, correctly named. The workload's own name roots ≥ 99%.
check "≥ 99% of the pid's samples are rooted at the workload's comm" \
	bash -c "awk '{ t += \$NF; if (\$1 ~ /^chain_workload;/) w += \$NF } END { exit !(t > 0 && w >= 0.99 * t) }' '$E2E_TMP/pid.folded'"

read -r MATCHED TOTAL FRACTION < <(python3 "$ROOT/tests/e2e/folded.py" chain "$WORKLOAD_BIN" "$E2E_TMP/pid.folded")
diag "$MATCHED of $TOTAL samples carry run_worker → chain_level_1..6 ($FRACTION)"
EXPECTED=$(python3 -c "print(int(99 * $WCPU))")
diag "expected about $EXPECTED samples (99 Hz × ${WCPU} CPU s)"
check "sample count within ±25% of Hz × CPU seconds" \
	python3 -c "import sys; sys.exit(not (0.75 * $EXPECTED <= $TOTAL <= 1.25 * $EXPECTED))"
check "≥ 90% of the workload's samples show its whole call chain in order" \
	python3 -c "import sys; sys.exit(not ($FRACTION >= 0.90))"

read -r WITHK TOTALK KNAMES < <(python3 "$ROOT/tests/e2e/folded.py" kernel "$E2E_TMP/pid.folded")
diag "kernel frames in $WITHK of $TOTALK samples; top: $KNAMES"
check "kernel frames present (the syscall half of the workload)" test "$WITHK" -gt 0
check "kernel frames are symbolized from the uploaded kallsyms" \
	bash -c "echo '$KNAMES' | grep -Eq 'read|entry_SYSCALL|do_syscall'"

ctl flamegraph --pid "$WPID" --from -10m --to now --format json >"$E2E_TMP/pid.json"
check "json format is valid JSON with stacks and a total equal to the folded total" \
	python3 -c "import json,sys; d=json.load(open('$E2E_TMP/pid.json')); sys.exit(not (d['total'] == $TOTAL and len(d['stacks']) > 0 and all(f['kind'] in ('user','kernel','error') for s in d['stacks'] for f in s['frames'])))"

ctl flamegraph --comm chain_workload --from -10m --to now --format top >"$E2E_TMP/top.txt"
check "the top summary names the workload's hot frames" grep -q "chain_workload" "$E2E_TMP/top.txt"

ctl nodes >"$E2E_TMP/nodes.txt"
check "sysomctl nodes lists this node" grep -q "$(hostname)" "$E2E_TMP/nodes.txt"
ctl processes --from -10m >"$E2E_TMP/processes.txt"
check "sysomctl processes lists the workload" grep -q "$WPID" "$E2E_TMP/processes.txt"

STORED=$(stored_total)
diag "agent logged $LOGGED samples; server holds $STORED"
check "the server holds exactly the samples the agent shipped" test "$STORED" -eq "$LOGGED"

curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics exposes ingest counters" grep -q "^sysom_ingest" "$E2E_TMP/metrics.txt"
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
