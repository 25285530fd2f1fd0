/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse migration 16: stacks partitioned by day, so that retention collects them.
 *
 * Schema 1's `stacks` (ReplacingMergeTree ORDER BY id, no partition) was never collected:
 * retention drops whole day partitions, and it had none. `stack_days` holds the same rows
 * with a `day` such that every row naming a stack (samples, offcpu, launches, sample_minutes,
 * offcpu_minutes: the tables with user_stack/kernel_stack, as SQLite's retention lists them)
 * lies in a day partition at or before some `day` of that stack. The writer keeps it so
 * (clickhouse_write.c: a stack is written again into the batch's stack day when it is not
 * stored for that day or later), and retention drops stack_days partitions with the rollups
 * (clickhouse_state.c, rollup_kept): a day's stacks go once every row that could name them
 * is gone. A stack has one row per day it was written on until those days go; readers take
 * one row per id (LIMIT 1 BY id).
 *
 * Every statement is idempotent, so that a migration cut short goes on when run again:
 *   1. the new table (IF NOT EXISTS);
 *   2. the old table renamed out of the way (clickhouse_open.c skips a RENAME whose source
 *      is gone): from this instant a replica of an older version can neither read nor write
 *      `stacks` and answers its agents 503 (they spool and retry), so no stack it writes is
 *      lost between the copy and the drop;
 *   3. an empty old table when there is none (a fresh database, or a run cut short after 5),
 *      so that 4 has a source;
 *   4. the copy of every old stack the new table lacks (a copy cut short is completed),
 *      dated the newest day partition of any table naming stacks: no later than that day
 *      can a row naming it be, and retention keeps them until that day goes;
 *   5. the old table dropped.
 */
#include "server/store/clickhouse_internal.h"

const char *const ch__migration_stack_days[] = {
	/* ident: kind byte, stop reason byte, then per frame object id and offset (LE u64). */
	"CREATE TABLE IF NOT EXISTS stack_days (day Date, id Int64, ident String)"
	" ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY id",
	"RENAME TABLE stacks TO stacks_v13",
	"CREATE TABLE IF NOT EXISTS stacks_v13 (id Int64, ident String)"
	" ENGINE = ReplacingMergeTree ORDER BY id",
	"INSERT INTO stack_days (day, id, ident)"
	" SELECT (SELECT max(max_date) FROM system.parts WHERE active"
	" AND database = currentDatabase() AND table IN ('samples', 'offcpu', 'launches',"
	" 'sample_minutes', 'offcpu_minutes')), id, ident FROM stacks_v13"
	" WHERE id NOT IN (SELECT id FROM stack_days) LIMIT 1 BY id",
	"DROP TABLE IF EXISTS stacks_v13",
	NULL,
};
