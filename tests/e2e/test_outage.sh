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

# Phase 3: SIGKILL during an outage, each time as the agent opens a new spool file, so that
# the kill lands inside the write: a batch file first, then the state file (a sequence being
# reserved). The agent restarts on the same spool each time.
SPOOL3=$E2E_TMP/agent3.spool
KILLER=$ROOT/tests/e2e/spool_kill.py
# spool_holds N: whether the spool holds at least N batch files.
spool_holds() {
	[ "$(find "$SPOOL3" -maxdepth 1 -name '*.batch' | wc -l)" -ge "$1" ]
}
# kill_agent_in SUFFIX SNAPSHOT: SIGKILL as the agent opens a new file ending in SUFFIX; the
# batch files left are listed in SNAPSHOT. Sets KILLED (the file's name) and HOW: "held" when
# fanotify held the open until the agent was dead (the file is left, empty), "raced" when
# inotify saw the file created and the write may have completed before the kill.
kill_agent_in() {
	read -r KILLED HOW < <(timeout 60 python3 "$KILLER" kill-on-open "$SPOOL3" "$1" "$AGENT_PID")
	[ -n "$KILLED" ] || kill -KILL "$AGENT_PID" # no such write within a minute: fails below
	wait "$AGENT_PID" 2>/dev/null
	(cd "$SPOOL3" && ls -- *.batch 2>/dev/null) >"$2"
}
# check_restart SNAPSHOT KILLED: the restarted agent found the batches, removed the write
# the kill interrupted, if one was left.
check_restart() {
	check "the restarted agent reports the $(wc -l <"$1") batches it found" grep -q \
		"spool: $(wc -l <"$1") batches (.*) left by an earlier run" "$E2E_TMP/agent3.log"
	if [ "$HOW" = held ]; then
		check "it removed $2, the write the kill interrupted" \
			grep -q "removed $2 left by an interrupted write" "$E2E_TMP/agent3.log"
		check "which is gone" test ! -e "$SPOOL3/$2"
	fi
}
AGENT3_OPTS=(--sample-rate 1 --batch-interval 1s)
start_agent agent3 "$SERVER_URL" "${AGENT3_OPTS[@]}" || exit 1
run_workload 45 --threads 2 >/dev/null &
WL3=$!
wait_until 30 log_count_above "$E2E_TMP/agent3.log" "batch [0-9]*: [1-9][0-9]* samples" 1
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
wait_until 30 spool_holds 3
check "batches were spooled before the first kill" test $? -eq 0
kill_agent_in .batch.tmp "$E2E_TMP/spooled1"
check "SIGKILL as the agent opened ${KILLED:-nothing} (${HOW:-})" test -n "$KILLED"
if [ "$HOW" = held ]; then
	check "the interrupted batch file is left, empty" test -f "$SPOOL3/$KILLED" -a ! -s "$SPOOL3/$KILLED"
fi
# Held, the kill lost exactly this batch's sequence (reserved, never committed).
INTERRUPTED=${KILLED#*-}
INTERRUPTED=$([ "$HOW" = held ] && echo "$((10#${INTERRUPTED%%.*}))")
diag "$(wc -l <"$E2E_TMP/spooled1") batches spooled at the first kill"
start_agent agent3 "http://127.0.0.1:$PORT" "${AGENT3_OPTS[@]}" || exit 1
check_restart "$E2E_TMP/spooled1" "$KILLED"
wait_until 30 spool_holds $(($(wc -l <"$E2E_TMP/spooled1") + 2))
kill_agent_in state.tmp "$E2E_TMP/spooled2"
check "SIGKILL as the agent reserved a sequence (${KILLED:-nothing}, ${HOW:-})" test "$KILLED" = state.tmp
diag "$(wc -l <"$E2E_TMP/spooled2") batches spooled at the second kill"
start_agent agent3 "http://127.0.0.1:$PORT" "${AGENT3_OPTS[@]}" || exit 1
check_restart "$E2E_TMP/spooled2" "$KILLED"
# Held, it lost nothing: the sequence it was reserving was not durable yet, so it is used now.
ACCOUNT_OPTS=()
[ -n "$INTERRUPTED" ] && [ "$HOW" = held ] && ACCOUNT_OPTS=(--interrupted "$INTERRUPTED")
start_server srv --listen "127.0.0.1:$PORT" || exit 1
wait_until 60 bash -c "! ls '$SPOOL3'/*.batch >/dev/null 2>&1"
check "the spool drains once the server is back" test $? -eq 0
wait "$WL3"
stop_pid "$AGENT_PID"
check "the agent killed twice exits 0 after SIGTERM" test $? -eq 0
check "it kept its epoch across the kills" test "$(grep -c "new agent epoch" "$E2E_TMP/agent3.log")" -eq 1
DUPLICATES=$(curl -sf "$SERVER_URL/metrics" | sed -n 's/^sysom_ingest_batches_total{result="duplicate"} //p')
check "the server saw no duplicate since it came back (${DUPLICATES:-no metric})" test "${DUPLICATES:-x}" = 0
stop_pid "$SERVER_PID"
python3 "$KILLER" account "${ACCOUNT_OPTS[@]}" "$E2E_TMP/srv.data/sysom.db" "$E2E_TMP/agent3.log" \
	"$E2E_TMP/spooled1" "$E2E_TMP/spooled2" >"$E2E_TMP/accounting.txt" 2>&1
while read -r verdict rest; do
	case $verdict in
	ok) ok "$rest" ;;
	not) not_ok "${rest#ok }" ;;
	'#') diag "$rest" ;;
	*) not_ok "accounting: $verdict $rest" ;;
	esac
done <"$E2E_TMP/accounting.txt"
check "the accounting made its 8 checks" test "$(grep -c '^ok\|^not ok' "$E2E_TMP/accounting.txt")" -eq 8
finish
