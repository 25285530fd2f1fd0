#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The server dies (SIGKILL) while the agent ships batches and comes back on the same port and
# data directory: nothing the agent sampled is lost and nothing is counted twice. Then the
# agent is stopped while the server is down and restarted after it is back: its spool is
# replayed.
. "$(dirname "$0")/lib.sh"
require_root

start_server srv || exit 1
PORT=$SERVER_PORT
start_agent agent "$SERVER_URL" --sample-rate 1 || exit 1
run_workload 12 --mode mixed --threads 2 >"$E2E_TMP/workload.out" &
WL=$!
wait_until 30 grep -q "batch [0-9]*: [1-9][0-9]* samples" "$E2E_TMP/agent.log"
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
diag "server killed; agent keeps sampling and spooling"
sleep 5
check "the agent retried while the server was down" grep -q "not delivered" "$E2E_TMP/agent.log"
SPOOLED=$(ls "$E2E_TMP/agent.spool"/*.batch 2>/dev/null | wc -l)
diag "$SPOOLED batches in the spool during the outage"
check "batches were spooled during the outage" test "$SPOOLED" -gt 0
start_server srv --listen "127.0.0.1:$PORT" || exit 1
wait "$WL"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "the spool is empty after the server came back" \
	bash -c "! ls '$E2E_TMP/agent.spool'/*.batch >/dev/null 2>&1"
LOGGED=$(agent_logged_samples "$E2E_TMP/agent.log")
STORED=$(stored_total)
diag "agent shipped $LOGGED samples; server holds $STORED"
check "no sample lost or double-counted across the outage" test "$STORED" -eq "$LOGGED"
check "the agent sampled something" test "$LOGGED" -gt 100

# Phase 2: agent stopped while the server is down, restarted once it is back.
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
start_agent agent2 "http://127.0.0.1:$PORT" --sample-rate 1 || exit 1
run_workload 3 --threads 2 >/dev/null
stop_pid "$AGENT_PID"
check "agent stopped during the outage exits 0" test $? -eq 0
LEFT=$(ls "$E2E_TMP/agent2.spool"/*.batch 2>/dev/null | wc -l)
check "its batches stay in the spool ($LEFT)" test "$LEFT" -gt 0
check "it says they remain for the next start" grep -q "remain in the spool" "$E2E_TMP/agent2.log"
start_server srv --listen "127.0.0.1:$PORT" || exit 1
start_agent agent2 "$SERVER_URL" || exit 1
wait_until 30 bash -c "! ls '$E2E_TMP/agent2.spool'/*.batch >/dev/null 2>&1"
check "the restarted agent replays its spool" test $? -eq 0
stop_pid "$AGENT_PID"
LOGGED2=$(agent_logged_samples "$E2E_TMP/agent2.log")
STORED2=$(stored_total)
diag "both runs shipped $((LOGGED + LOGGED2)) samples; server holds $STORED2"
check "everything from both agent runs arrived exactly once" test "$STORED2" -eq $((LOGGED + LOGGED2))
stop_pid "$SERVER_PID"
finish
