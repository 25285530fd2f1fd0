/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-minute rollups of CPU samples and off-CPU time in ClickHouse (schema 11): the batch's
 * rows summed per (minute, process, user stack, kernel stack) in the writer, stored under the
 * batch's attempt like every other row, and read with the same committed-attempt rule
 * (CH_COMMITTED) where the raw rows are gone (store_rollup_raw_keep_set).
 *
 * Plain MergeTree read with sum(), not SummingMergeTree: a summing merge would add rows of
 * different attempts together (retries, replicas) before the reader could tell which attempt
 * is the committed one. The writer already sums a batch's rows, so a minute has about one row
 * per (process, stacks) per batch that touched it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

#define MINUTE_MS 60000LL

/* Migration 11 (own array, so that renumbering against other migrations is one line). The
 * fill runs only into empty tables: a migration cut short after it is run again without
 * counting twice (an INSERT ... SELECT cut short in the middle leaves a partial fill: see
 * docs/operations.md). Uncommitted attempts are copied too; readers skip them as before. */
const char *const ch__migration_rollup[] = {
	"CREATE TABLE IF NOT EXISTS sample_minutes (day Date, node_id String, minute_ms Int64,"
	" process UInt64, tgid UInt32, user_stack Int64, kernel_stack Int64, count UInt64,"
	" attempt UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, minute_ms)",
	"CREATE TABLE IF NOT EXISTS offcpu_minutes (day Date, node_id String, minute_ms Int64,"
	" process UInt64, tgid UInt32, user_stack Int64, kernel_stack Int64, blocked_ns UInt64,"
	" attempt UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, minute_ms)",
	"INSERT INTO sample_minutes (day, node_id, minute_ms, process, tgid, user_stack,"
	" kernel_stack, count, attempt)"
	" SELECT day, node_id, intDiv(time_ms, 60000) * 60000 AS m, process, tgid, user_stack,"
	" kernel_stack, sum(count), attempt FROM samples"
	" WHERE (SELECT count() FROM sample_minutes) = 0"
	" GROUP BY day, node_id, m, process, tgid, user_stack, kernel_stack, attempt",
	"INSERT INTO offcpu_minutes (day, node_id, minute_ms, process, tgid, user_stack,"
	" kernel_stack, blocked_ns, attempt)"
	" SELECT day, node_id, intDiv(time_ms, 60000) * 60000 AS m, process, tgid, user_stack,"
	" kernel_stack, sum(blocked_ns), attempt FROM offcpu"
	" WHERE (SELECT count() FROM offcpu_minutes) = 0"
	" GROUP BY day, node_id, m, process, tgid, user_stack, kernel_stack, attempt",
	NULL,
};

/* ---- writing -------------------------------------------------------------------------------- */

/* One rollup row being summed. */
struct minute_row {
	int64_t minute_ms;
	uint32_t process;     /* the batch's process index */
	int64_t user, kernel; /* stack ids, 0 none */
	uint64_t value;
};

static int minute_cmp(const void *a, const void *b)
{
	const struct minute_row *x = a, *y = b;

	if (x->minute_ms != y->minute_ms)
		return x->minute_ms < y->minute_ms ? -1 : 1;
	if (x->process != y->process)
		return x->process < y->process ? -1 : 1;
	if (x->user != y->user)
		return x->user < y->user ? -1 : 1;
	return (x->kernel > y->kernel) - (x->kernel < y->kernel);
}

static int64_t stack_of(const struct ch_gpu_os_put *p, uint32_t idx)
{
	return idx != SYSOM_WIRE_NONE ? p->stacks[idx] : 0;
}

/* What SQLite keeps of an unsigned value (its integers are signed 64-bit), as the raw rows. */
static uint64_t c63(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : v;
}

/* Sorts and sums rows[0..n-1] with equal keys, then encodes them as RowBinary of a rollup
 * table into `out`. */
static void minutes_encode(const struct ch_gpu_os_put *p, struct minute_row *rows, size_t n,
			   struct byte_buf *out)
{
	qsort(rows, n, sizeof(*rows), minute_cmp);
	for (size_t i = 0; i < n;) {
		struct minute_row m = rows[i];

		/* Sums saturate at what a raw row can hold, as the raw rows' sum would not. */
		for (i++; i < n && !minute_cmp(&m, &rows[i]); i++)
			m.value = m.value > UINT64_MAX - rows[i].value ? UINT64_MAX
								      : m.value + rows[i].value;
		ch__rb_date_ns(out, m.minute_ms * 1000000);
		ch__rb_str(out, p->node_hex);
		byte_buf_put_u64(out, (uint64_t)m.minute_ms);
		byte_buf_put_u64(out, p->processes[m.process]);
		byte_buf_put_u32(out, p->b->processes[m.process].tgid);
		byte_buf_put_u64(out, (uint64_t)m.user);
		byte_buf_put_u64(out, (uint64_t)m.kernel);
		byte_buf_put_u64(out, m.value);
		byte_buf_put_u64(out, p->attempt);
	}
}

int ch__batch_write_rollup(const struct ch_gpu_os_put *p)
{
	const struct sysom_batch *b = p->b;
	int64_t start_ms = (int64_t)(b->window_start_ns / 1000000);
	size_t cap = b->sample_count > b->offcpu_count ? b->sample_count : b->offcpu_count;
	struct minute_row *rows = calloc(cap + 1, sizeof(*rows));
	struct byte_buf out = { 0 };
	int rc;

	if (!rows)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->sample_count; i++) {
		const struct sysom_sample *smp = &b->samples[i];

		rows[i] = (struct minute_row){
			.minute_ms = store__minute_floor(start_ms + smp->time_offset_ms),
			.process = smp->process, .user = stack_of(p, smp->user_stack),
			.kernel = stack_of(p, smp->kernel_stack), .value = c63(smp->count) };
	}
	minutes_encode(p, rows, b->sample_count, &out);
	if ((rc = ch__rows_take(p->out, "sample_minutes", &out)))
		goto cleanup;
	for (uint32_t i = 0; i < b->offcpu_count; i++) {
		const struct sysom_offcpu *o = &b->offcpu[i];

		rows[i] = (struct minute_row){
			.minute_ms = store__minute_floor(start_ms + o->time_offset_ms),
			.process = o->process, .user = stack_of(p, o->user_stack),
			.kernel = stack_of(p, o->kernel_stack), .value = c63(o->blocked_ns) };
	}
	minutes_encode(p, rows, b->offcpu_count, &out);
	rc = ch__rows_take(p->out, "offcpu_minutes", &out);
cleanup:
	byte_buf_free(&out);
	free(rows);
	return rc;
}

/* ---- reading -------------------------------------------------------------------------------- */

/* ch__range_rows_from's FROM when part of the range is before the rollup cutoff: 1; else
 * nothing appended and 0. */
static int rollup_from(struct byte_buf *q, struct store *base, const struct store_sample_filter *f,
		       bool offcpu)
{
	int64_t cutoff = store__rollup_cutoff_ms(base);
	int64_t from_min = store__minute_floor(f->from_ms);
	const char *value = offcpu ? "blocked_ns" : "count";

	if (cutoff <= from_min || f->from_ms > f->to_ms)
		return 0;
	/* Raw rows from the cutoff on, rollup minutes before it (whole minutes from the one
	 * holding `from`); rollup rows have no thread comm ('' never names a thread). */
	byte_buf_printf(q, " FROM (SELECT node_id, process, tgid, thread_comm, user_stack,"
			   " kernel_stack, %s, time_ms FROM %s WHERE time_ms BETWEEN %" PRId64
			   " AND %" PRId64 " AND time_ms >= %" PRId64,
			value, offcpu ? "offcpu" : "samples", f->from_ms, f->to_ms, cutoff);
	ch__own_days_sql(q, cutoff > f->from_ms ? cutoff : f->from_ms, f->to_ms);
	byte_buf_printf(q, " AND ");
	ch__committed_range_sql(q, cutoff > f->from_ms ? cutoff : from_min, f->to_ms);
	byte_buf_printf(q, " UNION ALL SELECT node_id, process, tgid, '' AS thread_comm,"
			   " user_stack, kernel_stack, %s, minute_ms AS time_ms FROM %s"
			   " WHERE minute_ms BETWEEN %" PRId64
			   " AND %" PRId64 " AND minute_ms < %" PRId64,
			value, offcpu ? "offcpu_minutes" : "sample_minutes", from_min, f->to_ms,
			cutoff);
	ch__own_days_sql(q, from_min, f->to_ms);
	byte_buf_printf(q, " AND ");
	/* A minute's rows came from batches touching any of its 60 s. */
	ch__committed_range_sql(q, from_min, f->to_ms > INT64_MAX - MINUTE_MS ? INT64_MAX
								 : f->to_ms + MINUTE_MS);
	byte_buf_printf(q, ") ANY LEFT JOIN ");
	ch__process_comms_since_sql(q, from_min);
	byte_buf_printf(q, " USING process WHERE 1");
	return 1;
}

void ch__range_rows_from(struct byte_buf *q, struct store *base,
			 const struct store_sample_filter *f, bool offcpu)
{
	if (!rollup_from(q, base, f, offcpu))
		ch__raw_rows_from(q, f, offcpu);
}

void ch__raw_rows_from(struct byte_buf *q, const struct store_sample_filter *f, bool offcpu)
{
	byte_buf_printf(q, " FROM %s ANY LEFT JOIN ", offcpu ? "offcpu" : "samples");
	ch__process_comms_since_sql(q, f->from_ms);
	byte_buf_printf(q, " USING process WHERE time_ms BETWEEN %" PRId64 " AND %" PRId64,
			f->from_ms, f->to_ms);
	ch__own_days_sql(q, f->from_ms, f->to_ms);
	byte_buf_printf(q, " AND ");
	ch__committed_range_sql(q, f->from_ms, f->to_ms);
}
