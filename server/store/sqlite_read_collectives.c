/* SPDX-License-Identifier: Apache-2.0 */
/* Reading NCCL collective instances of a job from SQLite, with every rank's call in them. */
#include "server/store/sqlite_internal.h"

struct collective_visit {
	store_collective_fn fn;
	void *arg;
};

static int collective_row(void *ctx, sqlite3_stmt *st)
{
	const struct collective_visit *v = ctx;
	struct store_collective_call k = {
		.comm_key = store__u64(sqlite3_column_int64(st, 0)),
		.op = (uint8_t)sqlite3_column_int(st, 1),
		.seq = store__u64(sqlite3_column_int64(st, 2)),
		.first_entry_ns = sqlite3_column_int64(st, 3),
		.nranks = sqlite3_column_int(st, 4),
		.rank = sqlite3_column_int(st, 5),
		.entry_ns = sqlite3_column_int64(st, 6),
		.exit_ns = sqlite3_column_int64(st, 7),
		.count = (uint64_t)sqlite3_column_int64(st, 8),
		.bytes = (uint64_t)sqlite3_column_int64(st, 9),
		.peer = sqlite3_column_int(st, 10),
		.result = sqlite3_column_int(st, 11),
		.pid = (uint32_t)sqlite3_column_int64(st, 12),
		.tid = (uint32_t)sqlite3_column_int64(st, 13),
		.hostname = store__text(st, 15),
		.job_rank = sqlite3_column_type(st, 16) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 16),
	};

	store__text_copy(st, 14, k.node_id, sizeof(k.node_id));
	return v->fn(v->arg, &k);
}

int store__sqlite_collectives_list(struct store *base, const struct store_collective_filter *f,
				   uint32_t max_instances, store_collective_fn fn, void *arg)
{
	struct collective_visit v = { fn, arg };
	struct byte_buf sql = { 0 };
	int rc;

	/* Instances first (bounded), then every call of the job's processes in them. A call
	 * without its rank takes the process's rank in the communicator. */
	byte_buf_printf(&sql, "WITH jp AS MATERIALIZED (SELECT process FROM job_ranks WHERE job = ?1),"
			      " inst AS MATERIALIZED (SELECT c.comm_key AS k, c.op AS op, c.seq AS seq,"
			      " min(c.entry_ns) AS first FROM nccl_calls c WHERE c.process IN jp"
			      " AND c.comm_key != 0 AND c.op BETWEEN %d AND %d"
			      " AND c.entry_ns BETWEEN ?2 AND ?3",
			SYSOM_NCCL_ALL_REDUCE, SYSOM_NCCL_RECV);
	if (f->has_comm)
		byte_buf_printf(&sql, " AND c.comm_key = ?4");
	if (f->op)
		byte_buf_printf(&sql, " AND c.op = ?5");
	byte_buf_printf(&sql, " GROUP BY c.comm_key, c.op, c.seq ORDER BY first %s, k %s, op %s, seq %s"
			      " LIMIT ?6)", f->latest ? "DESC" : "", f->latest ? "DESC" : "",
			f->latest ? "DESC" : "", f->latest ? "DESC" : "");
	/* Communicator sizes once per key, not per call row: per row it is quadratic in the
	 * job's size (every call scanning every rank's communicator record). */
	byte_buf_printf(&sql, ", nr AS MATERIALIZED (SELECT m.key AS k, max(m.nranks) AS nranks FROM communicators m"
			      " WHERE m.process IN jp AND m.key IN (SELECT DISTINCT k FROM inst)"
			      " GROUP BY m.key)");
	byte_buf_printf(&sql, " SELECT i.k, i.op, i.seq,"
			      " min(c.entry_ns) OVER (PARTITION BY i.k, i.op, i.seq),"
			      " coalesce((SELECT nr.nranks FROM nr WHERE nr.k = i.k), -1),"
			      " iif(c.rank >= 0, c.rank, coalesce((SELECT m.rank FROM communicators m"
			      "  WHERE m.process = c.process AND m.key = c.comm_key), -1)) AS r,"
			      " c.entry_ns, c.exit_ns, c.count, c.bytes, c.peer, c.result, p.tgid, c.tid,"
			      " n.node_id, n.hostname,"
			      " (SELECT jr.rank FROM job_ranks jr WHERE jr.process = c.process)"
			      " FROM inst i JOIN nccl_calls c ON c.comm_key = i.k"
			      " AND c.op = i.op AND c.seq = i.seq AND c.process IN jp"
			      " JOIN processes p ON p.id = c.process JOIN nodes n ON n.id = c.node"
			      " ORDER BY i.first, i.k, i.op, i.seq, r < 0, r, c.entry_ns, c.id");
	if ((rc = store__sql_end(&sql)))
		goto cleanup;
	rc = store__read(store__sqlite(base), &(struct store__query){
		.sql = (const char *)sql.data, .once = true,
		.args = STORE__ARGS(STORE__TEXT(f->job), STORE__INT(f->from_ns), STORE__INT(f->to_ns),
				    f->has_comm ? STORE__INT(store__i64(f->comm)) : STORE__SKIP,
				    f->op ? STORE__INT(f->op) : STORE__SKIP,
				    STORE__INT(max_instances)),
		.row = collective_row, .ctx = &v });
cleanup:
	byte_buf_free(&sql);
	return rc;
}
