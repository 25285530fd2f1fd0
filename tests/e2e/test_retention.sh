#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SQLite retention end to end: a real agent's samples (today) plus a month-old copy of them
# written straight into the store, raw rows and their per-minute rollup as the batch writer
# stores them (with a stack and a process only the old rows name, and an incident). Restarted
# with --retention-days 1 (rollups kept 90 days): the old raw rows go, and the month-old flame
# graph, now drawn from the rollup, is the one the raw rows gave. Then with
# --rollup-retention-days 20: the rollup, the stack and the process go, today's samples and the
# incident stay, and the file shrinks (a new database uses incremental auto-vacuum).
. "$(dirname "$0")/lib.sh"
require_root
command -v sqlite3 >/dev/null || skip_all "no sqlite3 command-line tool"

DB=$E2E_TMP/srv.data/sysom.db
MONTH_MS=$((30 * 86400000))
MONTH_NS=$((MONTH_MS * 1000000))
sq() { sqlite3 -batch "$DB" "$@"; }

start_server srv || exit 1
start_agent agent "$SERVER_URL" --sample-rate 1 || exit 1
run_workload 3 --mode cpu --threads 1 >/dev/null
sleep 3 # a batch interval
stop_pid "$AGENT_PID"
check "agent exits 0" test $? -eq 0
NEW=$(stored_total)
check "today's samples are stored ($NEW)" test "${NEW:-0}" -gt 0
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0

# A month-old copy: 20 x today's sample rows (more pages than a rounding error), batches,
# a stack and a process nobody else names, and an incident of that time.
sq "PRAGMA foreign_keys = ON;
BEGIN;
INSERT INTO stacks (id, kind, stop_reason, nframes, frames)
  SELECT 4242424242, kind, stop_reason, nframes, frames FROM stacks LIMIT 1;
INSERT INTO processes (node, tgid, start_time_ns, generation, ppid, comm, exe, cmdline,
  first_seen_ns, last_seen_ns)
  SELECT node, 999999, 1, 0, 1, 'oldproc', '/old', 'old', first_seen_ns - $MONTH_NS,
    last_seen_ns - $MONTH_NS FROM processes LIMIT 1;
WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 20)
INSERT INTO samples (time_ms, node, process, tid, cpu, thread_comm, kernel_stack, user_stack, count)
  SELECT time_ms - $MONTH_MS - k.i, node, (SELECT id FROM processes WHERE tgid = 999999), tid,
    cpu, thread_comm, kernel_stack, 4242424242, count FROM samples, k;
INSERT INTO sample_minutes (minute_ms, node, process, user_stack, kernel_stack, count)
  SELECT time_ms - time_ms % 60000 AS m, node, process, coalesce(user_stack, 0) AS u,
    coalesce(kernel_stack, 0) AS k, sum(count) FROM samples
  WHERE process = (SELECT id FROM processes WHERE tgid = 999999) GROUP BY process, m, u, k;
INSERT INTO batches (node, epoch, sequence, received_ns, window_start_ns, window_end_ns,
  samples, sample_rows, counters, content_hash)
  SELECT node, epoch + 1, sequence, received_ns - $MONTH_NS, window_start_ns - $MONTH_NS,
    window_end_ns - $MONTH_NS, samples, sample_rows, counters, content_hash FROM batches;
INSERT INTO diagnoses (job, identity, kind, rank, hostname, communicators, layer, severity,
  summary, action, report, opened_ms, updated_ms, resolved_ms)
  VALUES ('old-job', 'straggler rank=1', 'straggler', 1, 'h', '', 'cpu', 'warning',
    'kept by retention', 'a', '{}', (SELECT min(time_ms) FROM samples),
    (SELECT min(time_ms) FROM samples), (SELECT min(time_ms) FROM samples) + 1);
COMMIT; PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null 2>"$E2E_TMP/sq.err"
check "a month-old copy written into the store" test $? -eq 0
check "the database uses incremental auto-vacuum" test "$(sq 'PRAGMA auto_vacuum')" = 2
PAGES0=$(sq 'PRAGMA page_count')
OLD_ROWS=$(sq "SELECT count(*) FROM samples WHERE process = (SELECT id FROM processes WHERE tgid = 999999)")
OLD_MINUTES=$(sq "SELECT count(*) FROM sample_minutes WHERE process = (SELECT id FROM processes WHERE tgid = 999999)")
diag "old sample rows $OLD_ROWS (rollup rows $OLD_MINUTES), $PAGES0 pages"

old_total() {
	ctl flamegraph --from -31d --to -29d --format json |
		python3 -c "import json,sys; print(json.load(sys.stdin)['total'])"
}
# The month-old flame graph from the raw rows (no retention: nothing is read from rollups).
start_server srv || exit 1
RAW_OLD=$(old_total)
ctl flamegraph --from -31d --to -29d --format folded | sort >"$E2E_TMP/old.raw.folded"
stop_pid "$SERVER_PID"
check "the month-old copy answers from raw rows ($RAW_OLD)" test "${RAW_OLD:-0}" -gt 0

start_server srv --retention-days 1 || exit 1
check "retention runs at start and logs it" \
	wait_until 30 grep -q 'retention: dropped [0-9]* row(s) older than 1 days' "$E2E_TMP/srv.log"
check "the month-old raw rows are deleted" \
	test "$(sq "SELECT count(*) FROM samples WHERE process = (SELECT id FROM processes WHERE tgid = 999999)")" = 0
check "their rollup rows stay (90 days)" \
	test "$(sq "SELECT count(*) FROM sample_minutes WHERE process = (SELECT id FROM processes WHERE tgid = 999999)")" = "$OLD_MINUTES"
ROLLUP_OLD=$(old_total)
check "the month-old flame graph total from the rollup is the raw one ($ROLLUP_OLD)" \
	test "$ROLLUP_OLD" = "$RAW_OLD"
ctl flamegraph --from -31d --to -29d --format folded | sort >"$E2E_TMP/old.rollup.folded"
check "and so is the folded flame graph ($(wc -l <"$E2E_TMP/old.rollup.folded") stacks)" \
	diff -q "$E2E_TMP/old.raw.folded" "$E2E_TMP/old.rollup.folded"
check "the stack and process the rollup names stay" \
	test "$(sq 'SELECT count(*) FROM stacks WHERE id = 4242424242') $(sq 'SELECT count(*) FROM processes WHERE tgid = 999999')" = "1 1"
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0

start_server srv --retention-days 1 --rollup-retention-days 20 || exit 1
check "rollup retention runs at start and logs it" \
	wait_until 30 log_count_above "$E2E_TMP/srv.log" 'retention: dropped [0-9]* row(s) older than 1 days' 1
OLD=$(old_total)
check "the month-old samples are gone from the API (total $OLD)" test "$OLD" = 0
AFTER=$(stored_total)
check "today's samples stay ($AFTER of $NEW)" test "$AFTER" = "$NEW"
check "no month-old row is left" \
	test "$(sq "SELECT (SELECT count(*) FROM samples WHERE time_ms < strftime('%s','now','-2 days') * 1000)
	  + (SELECT count(*) FROM batches WHERE window_end_ns < strftime('%s','now','-2 days') * 1000000000)
	  + (SELECT count(*) FROM sample_minutes WHERE minute_ms < strftime('%s','now','-2 days') * 1000)")" = 0
check "the stack only old rows named is collected" \
	test "$(sq 'SELECT count(*) FROM stacks WHERE id = 4242424242')" = 0
check "the process only old rows named is collected" \
	test "$(sq 'SELECT count(*) FROM processes WHERE tgid = 999999')" = 0
check "every remaining sample names a stored stack" \
	test "$(sq 'SELECT count(*) FROM samples WHERE user_stack NOT IN (SELECT id FROM stacks)')" = 0
check "the incident stays" \
	test "$(sq "SELECT count(*) FROM diagnoses WHERE summary = 'kept by retention'")" = 1
PAGES1=$(sq 'PRAGMA page_count')
diag "pages $PAGES0 -> $PAGES1, free $(sq 'PRAGMA freelist_count')"
check "the database shrank ($PAGES0 -> $PAGES1 pages)" test "$PAGES1" -lt "$PAGES0"
check "no free pages are left" test "$(sq 'PRAGMA freelist_count')" = 0
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0
finish
