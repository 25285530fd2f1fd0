/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL instances kept past the raw calls, on ClickHouse (schema 12; store_nccl_rollup.c
 * computes and merges them, SQLite's twin is sqlite_nccl_rollup.c): nccl_instances, one row
 * per (job, communicator, op, minute of first entries, part) with nccl_instance.h's blob,
 * partitioned by the day of its newest first entry and dropped with the rollups (at
 * --rollup-retention-days, clickhouse_state.c); nccl_rollup_state, appended rows whose
 * maxima are the watermark and the longest row span. The processes the blobs name are the
 * store's process ids, whose rows (and batches, for hostnames) retention keeps as long.
 *
 * No upsert: a row is written only when its key is not there yet (retention runs one at a
 * time per server; two replicas racing may both write a minute, so readers keep one row per
 * key: LIMIT 1 BY).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store/clickhouse_internal.h"
#include "server/store/nccl_instance.h"

/* Rows one listing query reads (each a minute of one communicator and op: its blob in hex). */
#define ROLLUP_PAGE 32

const char *const ch__migration_nccl_rollup[] = {
	"CREATE TABLE IF NOT EXISTS nccl_instances (day Date, job String, comm_key UInt64,"
	" op UInt8, minute_ns Int64, part UInt32, first_min_ns Int64, first_max_ns Int64,"
	" last_max_ns Int64, instances UInt32, calls UInt32, data String)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (job, first_min_ns)",
	"CREATE TABLE IF NOT EXISTS nccl_rollup_state (at_ns Int64, watermark_ns Int64,"
	" max_span_ns Int64) ENGINE = MergeTree ORDER BY at_ns",
	NULL,
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct state {
	int64_t wm, span;
};

static int state_row(void *ctx, char **f)
{
	struct state *x = ctx;

	return ch_tsv_i64(f[0], &x->wm) || ch_tsv_i64(f[1], &x->span) ? -EPROTO : 0;
}

int ch__nccl_rollup_state(struct store *base, int64_t *watermark_ns, int64_t *max_span_ns)
{
	struct byte_buf q = { 0 };
	struct state x = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT max(watermark_ns), max(max_span_ns) FROM nccl_rollup_state");
	rc = ch__select_run(ch__store(base), &q, 2, state_row, &x, NULL);
	byte_buf_free(&q);
	if (rc)
		return rc;
	*watermark_ns = x.wm;
	*max_span_ns = x.span;
	return 0;
}

static int state_put(struct ch_store *s, int64_t watermark_ns, int64_t span_ns)
{
	return ch__execf(s, NULL,
			 "INSERT INTO nccl_rollup_state (at_ns, watermark_ns, max_span_ns)"
			 " VALUES (%" PRId64 ", %" PRId64 ", %" PRId64 ")",
			 now_ns(), watermark_ns, span_ns);
}

int ch__nccl_rollup_watermark_set(struct store *base, int64_t watermark_ns)
{
	return state_put(ch__store(base), watermark_ns, 0);
}

/* The keys written already among the rows' minutes. */
struct have {
	uint64_t *comm;
	uint8_t *op;
	int64_t *minute;
	uint32_t *part;
	size_t n, cap;
};

static int have_row(void *ctx, char **f)
{
	struct have *h = ctx;
	uint64_t comm, op;
	int64_t minute;
	uint32_t part;

	if (ch_tsv_u64(f[0], &comm) || ch_tsv_u64(f[1], &op) || ch_tsv_i64(f[2], &minute) ||
	    ch_tsv_u32(f[3], &part))
		return -EPROTO;
	if (h->n == h->cap)
		return -EPROTO; /* at most one per row asked about */
	h->comm[h->n] = comm;
	h->op[h->n] = (uint8_t)op;
	h->minute[h->n] = minute;
	h->part[h->n++] = part;
	return 0;
}

static bool have_key(const struct have *h, const struct store__nccl_instances *r)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->comm[i] == r->comm_key && h->op[i] == r->op && h->minute[i] == r->minute_ns &&
		    h->part[i] == r->part)
			return true;
	return false;
}

int ch__nccl_rollup_put(struct store *base, const struct store__nccl_instances *rows, size_t n)
{
	struct ch_store *s = ch__store(base);
	struct have h = { .cap = n };
	struct byte_buf q = { 0 }, out = { 0 };
	int64_t span = 0;
	int inserted = 0;
	int rc = 0;

	if (!n)
		return 0;
	h.comm = calloc(n, sizeof(*h.comm));
	h.op = calloc(n, sizeof(*h.op));
	h.minute = calloc(n, sizeof(*h.minute));
	h.part = calloc(n, sizeof(*h.part));
	if (!h.comm || !h.op || !h.minute || !h.part) {
		rc = -ENOMEM;
		goto cleanup;
	}
	/* The rows of one call are one job's (store_nccl_rollup.c): what is there already. */
	byte_buf_printf(&q, "SELECT DISTINCT comm_key, op, minute_ns, part FROM nccl_instances"
			    " WHERE job = ");
	ch__quote(&q, rows[0].job);
	byte_buf_printf(&q, " AND minute_ns IN (");
	for (size_t i = 0; i < n; i++)
		byte_buf_printf(&q, "%s%" PRId64, i ? "," : "", rows[i].minute_ns);
	byte_buf_printf(&q, ")");
	if ((rc = ch__select_run(s, &q, 4, have_row, &h, NULL)))
		goto cleanup;
	for (size_t i = 0; i < n; i++) {
		const struct store__nccl_instances *r = &rows[i];
		int64_t d = (int64_t)((uint64_t)r->last_max_ns - (uint64_t)r->first_min_ns);

		if (d > span)
			span = d;
		if (have_key(&h, r))
			continue;
		ch__rb_date_ns(&out, r->first_max_ns);
		ch__rb_str(&out, r->job);
		byte_buf_put_u64(&out, r->comm_key);
		byte_buf_put_u8(&out, r->op);
		byte_buf_put_u64(&out, (uint64_t)r->minute_ns);
		byte_buf_put_u32(&out, r->part);
		byte_buf_put_u64(&out, (uint64_t)r->first_min_ns);
		byte_buf_put_u64(&out, (uint64_t)r->first_max_ns);
		byte_buf_put_u64(&out, (uint64_t)r->last_max_ns);
		byte_buf_put_u32(&out, r->instances);
		byte_buf_put_u32(&out, r->calls);
		ch__rb_string(&out, r->data, r->len);
		inserted += (int)r->instances;
	}
	/* The span first: a reader never sees a row longer than the bound it reads with. */
	if ((rc = byte_buf_error(&out)) || (rc = state_put(s, 0, span)))
		goto cleanup;
	if (out.len)
		rc = ch__exec(s, "INSERT INTO nccl_instances FORMAT RowBinary", out.data, out.len,
			      NULL);
cleanup:
	free(h.comm);
	free(h.op);
	free(h.minute);
	free(h.part);
	byte_buf_free(&q);
	byte_buf_free(&out);
	return rc ? rc : inserted;
}

struct list_ctx {
	const struct store__nccl_rollup_query *q;
	store__nccl_instances_fn fn;
	void *arg;
	uint8_t *blob;
	size_t rows;
	bool stop;
};

static int list_row(void *ctx, char **f)
{
	struct list_ctx *l = ctx;
	struct store__nccl_instances r = { .job = l->q->job };
	uint64_t op;
	size_t len;
	int rc;

	l->rows++;
	if (ch_tsv_u64(f[0], &r.comm_key) || ch_tsv_u64(f[1], &op) || op > UINT8_MAX ||
	    ch_tsv_i64(f[2], &r.minute_ns) || ch_tsv_u32(f[3], &r.part) ||
	    ch_tsv_i64(f[4], &r.first_min_ns) || ch_tsv_i64(f[5], &r.first_max_ns) ||
	    ch_tsv_i64(f[6], &r.last_max_ns) || ch_tsv_u32(f[7], &r.instances) ||
	    ch_tsv_u32(f[8], &r.calls) || !f[9])
		return -EPROTO;
	r.op = (uint8_t)op;
	len = strlen(f[9]) / 2;
	free(l->blob);
	if (!(l->blob = malloc(len ? len : 1)))
		return -ENOMEM;
	if (ch_tsv_hex(f[9], l->blob, len, &len))
		return -EPROTO;
	r.data = l->blob;
	r.len = len;
	if ((rc = l->fn(l->arg, &r)) > 0)
		l->stop = true;
	return rc;
}

int ch__nccl_rollup_list(struct store *base, const struct store__nccl_rollup_query *q,
			 store__nccl_instances_fn fn, void *arg)
{
	struct list_ctx l = { .q = q, .fn = fn, .arg = arg };
	struct byte_buf sql = { 0 };
	int rc = 0;

	/* A page at a time: each row holds a minute's calls, so the answer stays small. */
	for (uint64_t offset = 0; !rc && !l.stop; offset += ROLLUP_PAGE) {
		sql.len = 0;
		l.rows = 0;
		byte_buf_printf(&sql, "SELECT comm_key, op, minute_ns, part, first_min_ns,"
				      " first_max_ns, last_max_ns, instances, calls, hex(data)"
				      " FROM nccl_instances WHERE job = ");
		ch__quote(&sql, q->job);
		byte_buf_printf(&sql, " AND first_min_ns BETWEEN %" PRId64 " AND %" PRId64
				      " AND last_max_ns >= %" PRId64, q->first_lo_ns, q->first_hi_ns,
				q->last_from_ns);
		if (q->has_comm)
			byte_buf_printf(&sql, " AND comm_key = %" PRIu64, q->comm);
		if (q->op)
			byte_buf_printf(&sql, " AND op = %u", q->op);
		byte_buf_printf(&sql, q->descending
					      ? " ORDER BY first_min_ns DESC, comm_key DESC, op DESC,"
						" minute_ns DESC, part DESC"
					      : " ORDER BY first_min_ns, comm_key, op, minute_ns, part");
		byte_buf_printf(&sql, " LIMIT 1 BY comm_key, op, minute_ns, part LIMIT %" PRIu64
				      ", %d", offset, ROLLUP_PAGE);
		rc = ch__select_run(ch__store(base), &sql, 10, list_row, &l, NULL);
		if (l.rows < ROLLUP_PAGE)
			break;
	}
	free(l.blob);
	byte_buf_free(&sql);
	return rc > 0 ? 0 : rc;
}

struct proc_ctx {
	struct store__nccl_process *p;
	bool found;
};

static int proc_row(void *ctx, char **f)
{
	struct proc_ctx *x = ctx;

	if (ch_tsv_u32(f[0], &x->p->pid) || !f[1])
		return -EPROTO;
	snprintf(x->p->node_id, sizeof(x->p->node_id), "%s", f[1]);
	x->found = true;
	return 0;
}

static int host_row(void *ctx, char **f)
{
	struct store__nccl_process *p = ctx;

	if (!f[0])
		return -EPROTO;
	snprintf(p->hostname, sizeof(p->hostname), "%s", f[0]);
	return 0;
}

int ch__nccl_rollup_process(struct store *base, int64_t process,
			    struct store__nccl_process *out)
{
	struct ch_store *s = ch__store(base);
	struct store__nccl_process p = { 0 };
	struct proc_ctx x = { .p = &p };
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT tgid, node_id FROM processes WHERE process = %" PRIu64
			    " LIMIT 1", (uint64_t)process);
	if ((rc = ch__select_run(s, &q, 2, proc_row, &x, NULL)))
		goto cleanup;
	if (!x.found) {
		rc = -ENOENT;
		goto cleanup;
	}
	/* The node's hostname as the raw reader names it (its latest committed batch's). */
	q.len = 0;
	byte_buf_printf(&q, "SELECT argMax(hostname, received_ns) FROM batches WHERE node_id = ");
	ch__quote(&q, p.node_id);
	byte_buf_printf(&q, " AND ");
	ch__committed_nodes_begin(&q); /* that node's batches only */
	byte_buf_printf(&q, "(");
	ch__quote(&q, p.node_id);
	byte_buf_printf(&q, ")");
	ch__committed_nodes_end(&q, CH_ALL_TIME);
	if ((rc = ch__select_run(s, &q, 1, host_row, &p, NULL)))
		goto cleanup;
	*out = p;
cleanup:
	byte_buf_free(&q);
	return rc;
}
