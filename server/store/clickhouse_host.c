/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host signals (wire 1.6 HOST_SIGNALS) in ClickHouse: one row per (batch, signal), as SQLite's
 * host_signals table, and the job's nodes' rows for the host anomaly analysis
 * (store_host_signals_list). Schema: ch__migration_host (migration 5).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

const char *const ch__migration_host[] = {
	"CREATE TABLE IF NOT EXISTS host_signals (day Date, node_id String, time_ms Int64,"
	" window_ms Int64, signal UInt16, value Float64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	NULL,
};

int ch__batch_write_host(const struct ch_gpu_os_put *p)
{
	const struct sysom_batch *b = p->b;
	uint64_t end_ms = b->window_end_ns / 1000000, window_ms;
	struct byte_buf rows = { 0 };
	int rc;

	if (!b->host_signal_count)
		return 0;
	end_ms = end_ms > INT64_MAX ? INT64_MAX : end_ms;
	window_ms = (b->window_end_ns - b->window_start_ns) / 1000000;
	for (uint32_t i = 0; i < b->host_signal_count; i++) {
		uint64_t bits;
		ch__rb_date_ns(&rows, (int64_t)end_ms * 1000000);
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, end_ms);
		byte_buf_put_u64(&rows, window_ms > INT64_MAX ? INT64_MAX : window_ms);
		byte_buf_put_u16(&rows, b->host_signals[i].signal);
		memcpy(&bits, &b->host_signals[i].value, sizeof(bits));
		byte_buf_put_u64(&rows, bits);
		byte_buf_put_u64(&rows, p->attempt);
	}
	rc = ch__rows_take(p->out, "host_signals", &rows);
	byte_buf_free(&rows);
	return rc;
}

struct host_rows {
	store_host_signal_fn fn;
	void *arg;
	uint32_t max, n;
	bool *truncated;
};

static int host_row(void *ctx, char **f)
{
	struct host_rows *h = ctx;
	struct store_host_signal_row r = { .hostname = f[1] ? f[1] : "" };
	uint64_t signal;
	char *end;

	if (h->n++ >= h->max) {
		*h->truncated = true;
		return 0;
	}
	if (!f[0] || strlen(f[0]) != 2 * SYSOM_NODE_ID_SIZE || ch_tsv_i64(f[2], &r.time_ms) ||
	    ch_tsv_i64(f[3], &r.window_ms) || ch_tsv_u64(f[4], &signal) || signal > UINT16_MAX ||
	    !f[5])
		return -EPROTO;
	r.value = strtod(f[5], &end);
	if (end == f[5] || *end || !isfinite(r.value))
		return -EPROTO;
	r.signal = (uint16_t)signal;
	snprintf(r.node_id, sizeof(r.node_id), "%s", f[0]);
	return h->fn(h->arg, &r);
}

int ch__host_signals(struct store *base, const struct store_host_filter *f, uint32_t max_rows,
		     store_host_signal_fn fn, void *arg, bool *truncated)
{
	struct ch_store *s = ch__store(base);
	struct host_rows h = { .fn = fn, .arg = arg, .max = max_rows, .truncated = truncated };
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT node, hostname, time_ms, window_ms, signal, value FROM"
			    " (SELECT node_id AS node, time_ms, window_ms, signal, value"
			    " FROM host_signals WHERE node_id IN (SELECT node FROM ");
	ch__job_ranks_sql(&q, f->job);
	byte_buf_printf(&q, ") AND time_ms BETWEEN %" PRId64 " AND %" PRId64, f->from_ms,
			f->to_ms);
	ch__own_days_sql(&q, f->from_ms, f->to_ms);
	byte_buf_printf(&q, " AND ");
	ch__committed_since_sql(&q, f->from_ms);
	byte_buf_printf(&q, ") ANY LEFT JOIN (SELECT node_id AS node, argMax(hostname, received_ns)"
			    " AS hostname FROM batches WHERE ");
	ch__received_since_sql(&q, f->from_ms);
	byte_buf_printf(&q, " GROUP BY node_id) USING node ORDER BY node, time_ms, signal"
			    " LIMIT %" PRIu64, (uint64_t)max_rows + 1);
	rc = ch__select_run(s, &q, 6, host_row, &h, NULL);
	byte_buf_free(&q);
	return rc;
}
