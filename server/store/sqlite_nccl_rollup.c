/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL instances kept past the raw calls, on SQLite (schema 15; store_nccl_rollup.c computes
 * and merges them): nccl_instances (one row per instance, the calls in nccl_instance.h's
 * blob), nccl_instance_processes (the processes they name, kept from process collection) and
 * nccl_rollup_state (watermark, longest instance).
 */
#include <errno.h>
#include <stdlib.h>

#include "server/store/nccl_instance.h"
#include "server/store/sqlite_internal.h"

struct state {
	int64_t wm, span;
};

static int state_row(void *ctx, sqlite3_stmt *st)
{
	struct state *x = ctx;

	x->wm = sqlite3_column_int64(st, 0);
	x->span = sqlite3_column_int64(st, 1);
	return 0;
}

int store__sqlite_nccl_rollup_state(struct store *base, int64_t *watermark_ns,
				    int64_t *max_span_ns)
{
	struct state x = { 0 };
	int rc = store__read(store__sqlite(base), &(struct store__query){
		.sql = "SELECT watermark_ns, max_span_ns FROM nccl_rollup_state WHERE id = 1",
		.row = state_row, .ctx = &x, .max_rows = 1 });

	if (rc)
		return rc;
	*watermark_ns = x.wm;
	*max_span_ns = x.span;
	return 0;
}

/* The blob's processes into nccl_instance_processes (newest first entry naming them). */
static int processes_put(struct conn *c, const struct store__nccl_instances *r)
{
	struct nccl_instance *inst = NULL;
	struct nccl_instance_call *calls = NULL;
	size_t ninst = 0, n = 0;
	int64_t *seen = NULL;
	size_t nseen = 0;
	int rc = nccl_instance_decode(r->data, r->len, &inst, &ninst, &calls, &n);

	if (!rc && !(seen = malloc(n * sizeof(*seen))))
		rc = -ENOMEM;
	for (size_t i = 0; i < n && !rc; i++) {
		bool dup = false;
		for (size_t j = 0; j < nseen && !dup; j++)
			dup = seen[j] == calls[i].process;
		if (dup || calls[i].process <= 0)
			continue;
		seen[nseen++] = calls[i].process;
		rc = store__query(c, &(struct store__query){
			.sql = "INSERT INTO nccl_instance_processes (process, last_ns) VALUES (?1, ?2)"
			       " ON CONFLICT (process) DO UPDATE SET last_ns = max(last_ns, ?2)",
			.args = STORE__ARGS(STORE__INT(calls[i].process),
					    STORE__INT(r->first_max_ns)) });
	}
	free(seen);
	free(inst);
	free(calls);
	return rc;
}

int store__sqlite_nccl_rollup_put(struct store *base,
				  const struct store__nccl_instances *rows, size_t n)
{
	struct sqlite_store *s = store__sqlite(base);
	struct conn *c;
	int64_t span = 0;
	int inserted = 0;
	int rc;

	if ((rc = store__write_begin(s, &c)))
		return rc;
	for (size_t i = 0; i < n && !rc; i++) {
		const struct store__nccl_instances *r = &rows[i];
		uint64_t changed = 0;
		int64_t d = (int64_t)((uint64_t)r->last_max_ns - (uint64_t)r->first_min_ns);

		if (d > span)
			span = d;
		/* Written once: a run again (after a failure) writes the same minute whole, which
		 * changes nothing. */
		rc = store__query(c, &(struct store__query){
			.sql = "INSERT INTO nccl_instances (job, comm_key, op, minute_ns, part,"
			       " first_min_ns, first_max_ns, last_max_ns, instances, calls, data)"
			       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
			       " ON CONFLICT (job, comm_key, op, minute_ns, part) DO NOTHING"
			       " RETURNING 1",
			.args = STORE__ARGS(STORE__TEXT(r->job), STORE__INT(store__i64(r->comm_key)),
					    STORE__INT(r->op), STORE__INT(r->minute_ns),
					    STORE__INT(r->part), STORE__INT(r->first_min_ns),
					    STORE__INT(r->first_max_ns), STORE__INT(r->last_max_ns),
					    STORE__INT(r->instances), STORE__INT(r->calls),
					    STORE__BLOB(r->data, r->len)),
			.row = store__row_i64, .ctx = &(sqlite3_int64){ 0 }, .rows = &changed });
		if (!rc && changed) {
			rc = processes_put(c, r);
			inserted += (int)r->instances;
		}
	}
	if (!rc)
		rc = store__query(c, &(struct store__query){
			.sql = "UPDATE nccl_rollup_state SET max_span_ns = max(max_span_ns, ?1)"
			       " WHERE id = 1",
			.args = STORE__ARGS(STORE__INT(span)) });
	rc = store__write_end(s, c, rc, true);
	return rc ? rc : inserted;
}

int store__sqlite_nccl_rollup_watermark_set(struct store *base, int64_t watermark_ns)
{
	return store__write(store__sqlite(base), &(struct store__query){
		.sql = "UPDATE nccl_rollup_state SET watermark_ns = max(watermark_ns, ?1) WHERE id = 1",
		.args = STORE__ARGS(STORE__INT(watermark_ns)) });
}

struct list_ctx {
	const struct store__nccl_rollup_query *q;
	store__nccl_instances_fn fn;
	void *arg;
};

static int list_row(void *ctx, sqlite3_stmt *st)
{
	struct list_ctx *l = ctx;
	struct store__nccl_instances r = {
		.job = l->q->job,
		.comm_key = store__u64(sqlite3_column_int64(st, 0)),
		.op = (uint8_t)sqlite3_column_int(st, 1),
		.minute_ns = sqlite3_column_int64(st, 2),
		.part = (uint32_t)sqlite3_column_int64(st, 3),
		.first_min_ns = sqlite3_column_int64(st, 4),
		.first_max_ns = sqlite3_column_int64(st, 5),
		.last_max_ns = sqlite3_column_int64(st, 6),
		.instances = (uint32_t)sqlite3_column_int64(st, 7),
		.calls = (uint32_t)sqlite3_column_int64(st, 8),
	};
	r.data = sqlite3_column_blob(st, 9);
	int len = sqlite3_column_bytes(st, 9);
	r.len = len > 0 ? (size_t)len : 0;
	return l->fn(l->arg, &r);
}

int store__sqlite_nccl_rollup_list(struct store *base, const struct store__nccl_rollup_query *q,
				   store__nccl_instances_fn fn, void *arg)
{
	static const char *const sql[2][2][2] = {
#define ROLLUP_SELECT                                                                          \
	"SELECT comm_key, op, minute_ns, part, first_min_ns, first_max_ns, last_max_ns,"       \
	" instances, calls, data FROM nccl_instances WHERE job = ?1"                          \
	" AND first_min_ns BETWEEN ?2 AND ?3 AND last_max_ns >= ?4"
#define ROLLUP_COMM " AND comm_key = ?5"
#define ROLLUP_OP " AND op = ?6"
#define ROLLUP_ASC " ORDER BY first_min_ns, comm_key, op, part"
#define ROLLUP_DESC " ORDER BY first_min_ns DESC, comm_key DESC, op DESC, part DESC"
		{ { ROLLUP_SELECT ROLLUP_ASC, ROLLUP_SELECT ROLLUP_DESC },
		  { ROLLUP_SELECT ROLLUP_OP ROLLUP_ASC, ROLLUP_SELECT ROLLUP_OP ROLLUP_DESC } },
		{ { ROLLUP_SELECT ROLLUP_COMM ROLLUP_ASC, ROLLUP_SELECT ROLLUP_COMM ROLLUP_DESC },
		  { ROLLUP_SELECT ROLLUP_COMM ROLLUP_OP ROLLUP_ASC,
		    ROLLUP_SELECT ROLLUP_COMM ROLLUP_OP ROLLUP_DESC } },
#undef ROLLUP_SELECT
#undef ROLLUP_COMM
#undef ROLLUP_OP
#undef ROLLUP_ASC
#undef ROLLUP_DESC
	};
	struct list_ctx l = { q, fn, arg };
	int rc = store__read(store__sqlite(base), &(struct store__query){
		.sql = sql[q->has_comm][q->op != 0][q->descending],
		.args = STORE__ARGS(STORE__TEXT(q->job), STORE__INT(q->first_lo_ns),
				    STORE__INT(q->first_hi_ns), STORE__INT(q->last_from_ns),
				    q->has_comm ? STORE__INT(store__i64(q->comm)) : STORE__SKIP,
				    q->op ? STORE__INT(q->op) : STORE__SKIP),
		.row = list_row, .ctx = &l });

	return rc > 0 ? 0 : rc;
}

static int process_row(void *ctx, sqlite3_stmt *st)
{
	struct store__nccl_process *p = ctx;

	p->pid = (uint32_t)sqlite3_column_int64(st, 0);
	store__text_copy(st, 1, p->node_id, sizeof(p->node_id));
	store__text_copy(st, 2, p->hostname, sizeof(p->hostname));
	return 0;
}

int store__sqlite_nccl_rollup_process(struct store *base, int64_t process,
				      struct store__nccl_process *out)
{
	struct store__nccl_process p = { 0 };
	uint64_t rows = 0;
	int rc = store__read(store__sqlite(base), &(struct store__query){
		.sql = "SELECT p.tgid, n.node_id, n.hostname FROM processes p"
		       " JOIN nodes n ON n.id = p.node WHERE p.id = ?1",
		.args = STORE__ARGS(STORE__INT(process)), .row = process_row, .ctx = &p,
		.max_rows = 1, .rows = &rows });

	if (rc)
		return rc;
	if (!rows)
		return -ENOENT;
	*out = p;
	return 0;
}
