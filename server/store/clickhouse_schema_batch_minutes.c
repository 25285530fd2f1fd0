/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse migration 17: the batch rows by the minutes their window touches, so that a
 * read of a time range finds the committed attempts of the batches that can hold its rows
 * with a key range instead of grouping every batch row received since the day before.
 *
 * `batches` is ordered by batch identity (node, epoch, sequence): the committed-attempt
 * condition of a range (ch__committed_range_sql) used to scan every batch row of its days and
 * keep those whose window overlaps the range. At 1,000 nodes and 30-s batches that is 2.9 M
 * rows a day read for each raw interval of a flame graph (each edge of a range the fleet slots
 * do not cover), and at 10,000 nodes ten times that: the read grew with the fleet and the age
 * of the range, not with the range.
 *
 * batch_minutes holds one row per batch row and minute its window touches
 * [CH_WINDOW_LO_MS, CH_WINDOW_HI_MS] (a 30-s window: one or two; the decoder bounds a window by
 * 24 h: at most 1,441), written by a view on `batches` (the committing table, written last:
 * an attempt is in it exactly when its batch row is), with the batch row's receive day as its
 * partition (retention drops both together, clickhouse_state.c). Ordered by minute first, the
 * rows of a range are one key range of each day partition. A read groups them by batch
 * identity: a batch's rows all carry the same attempts, so the minimum per identity is the
 * one `batches` gives, and every batch that can hold a row of the range touches one of its
 * minutes.
 *
 * The view is created before the backfill, so that no batch row stored while the migration
 * runs is missed; such a row (and every row of a backfill cut short and run again) is
 * indexed twice, which changes no answer (readers take the minimum attempt per identity).
 */
#include "server/store/clickhouse_internal.h"

#define BATCH_MINUTES_SELECT                                                                   \
	" SELECT day, slot.2 AS minute_ms, node_id, epoch, sequence, attempt FROM batches"      \
	" ARRAY JOIN " CH_WINDOW_SLOTS("60000") " AS slot"

const char *const ch__migration_batch_minutes[] = {
	"CREATE TABLE IF NOT EXISTS batch_minutes (day Date, minute_ms Int64, node_id String,"
	" epoch UInt64, sequence UInt64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (minute_ms, node_id, epoch, sequence)",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS batch_minutes_mv TO batch_minutes AS"
	BATCH_MINUTES_SELECT,
	"INSERT INTO batch_minutes (day, minute_ms, node_id, epoch, sequence, attempt)"
	BATCH_MINUTES_SELECT,
	NULL,
};
