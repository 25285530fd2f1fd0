/* SPDX-License-Identifier: Apache-2.0 */
/* Reading profiles from SQLite: objects, stacks, and sample/launch/GPU-time aggregates. */
#include <errno.h>
#include <stdlib.h>

#include "common/error.h"
#include "server/store/sqlite_internal.h"

static const char object_get_sql[] = "SELECT kind, build_id, name FROM objects WHERE id = ?1";
static const char stack_get_sql[] =
	"SELECT kind, stop_reason, nframes, frames FROM stacks WHERE id = ?1";

static int object_row(void *ctx, sqlite3_stmt *st)
{
	struct store_object *o = ctx;
	int len = sqlite3_column_bytes(st, 1);

	o->id.kind = (uint8_t)sqlite3_column_int(st, 0);
	if (len > SYSOM_BUILD_ID_MAX)
		return -SYSOM_ECORRUPT;
	if (len)
		memcpy(o->id.bytes, sqlite3_column_blob(st, 1), (size_t)len);
	o->id.len = (uint8_t)len;
	o->name = strdup(store__text(st, 2));
	return o->name ? 0 : -ENOMEM;
}

int store__sqlite_object_get(struct store *base, int64_t id, struct store_object *out)
{
	struct store_object o = { 0 };
	uint64_t rows = 0;
	int rc = store__read(store__sqlite(base),
			     &(struct store__query){ .sql = object_get_sql,
						     .args = STORE__ARGS(STORE__INT(id)),
						     .row = object_row, .ctx = &o, .max_rows = 1,
						     .rows = &rows });

	if (!rc && !rows)
		rc = -ENOENT;
	if (!rc)
		*out = o;
	return rc;
}

struct stack_get {
	int64_t id;
	struct store_stack *stk;
};

static int stack_row(void *ctx, sqlite3_stmt *st)
{
	struct stack_get *g = ctx;
	int nframes = sqlite3_column_int(st, 2);
	const uint8_t *blob = sqlite3_column_blob(st, 3);
	int bytes = sqlite3_column_bytes(st, 3);
	struct store_stack *stk;

	if (nframes < 1 || nframes > UINT16_MAX || bytes != nframes * 16)
		return -SYSOM_ECORRUPT;
	stk = malloc(sizeof(*stk) + (size_t)nframes * sizeof(stk->frames[0]));
	if (!stk)
		return -ENOMEM;
	stk->id = g->id;
	stk->kind = (uint8_t)sqlite3_column_int(st, 0);
	stk->stop_reason = (uint8_t)sqlite3_column_int(st, 1);
	stk->nframes = (uint16_t)nframes;
	for (int i = 0; i < nframes; i++) {
		stk->frames[i].object = (int64_t)load_le64(blob + 16 * i);
		stk->frames[i].offset = load_le64(blob + 16 * i + 8);
	}
	g->stk = stk;
	return 0;
}

int store__sqlite_stack_get(struct store *base, int64_t id, struct store_stack **out)
{
	struct stack_get g = { .id = id };
	uint64_t rows = 0;
	int rc = store__read(store__sqlite(base),
			     &(struct store__query){ .sql = stack_get_sql,
						     .args = STORE__ARGS(STORE__INT(id)),
						     .row = stack_row, .ctx = &g, .max_rows = 1,
						     .rows = &rows });

	if (!rc && !rows)
		rc = -ENOENT;
	if (rc) {
		free(g.stk);
		return rc;
	}
	*out = g.stk;
	return 0;
}

/* Which rows of a range a query part reads (struct split). */
enum part {
	PART_ALL,    /* every raw row in [from, to] */
	PART_RAW,    /* the raw rows at or after the rollup cutoff (?14) */
	PART_ROLLUP, /* the rollup rows (alias r) of the minutes in [?15, to] before the cutoff */
};

/*
 * Appends the WHERE conditions of a sample filter over table alias `t` (samples `s` and
 * off-CPU rows `o`, which have thread comms, launches `l`, or a per-minute rollup `r`, which
 * has neither thread comms nor ms times) for query part `part`; parameters ?1 .. ?5, ?7 .. ?13
 * and, split, ?14 and ?15 (see filter_run).
 */
static void filter_sql_part(struct byte_buf *sql, const struct store_sample_filter *f, char t,
			    enum part part)
{
	if (part == PART_ROLLUP)
		byte_buf_printf(sql, " WHERE r.minute_ms BETWEEN ?15 AND ?2 AND r.minute_ms < ?14");
	else
		byte_buf_printf(sql, " WHERE %c.time_ms BETWEEN ?1 AND ?2", t);
	if (part == PART_RAW)
		byte_buf_printf(sql, " AND %c.time_ms >= ?14", t);
	if (f->node)
		byte_buf_printf(sql, " AND %c.node IN (SELECT id FROM nodes"
				     " WHERE node_id = lower(?3) OR hostname = ?3)", t);
	if (f->has_pid)
		byte_buf_printf(sql, " AND p.tgid = ?4");
	/* A rollup keeps no thread comms: there the process comm alone matches. */
	if (f->comm)
		byte_buf_printf(sql, t == 's' || t == 'o' ? " AND (p.comm = ?5 OR %c.thread_comm = ?5)"
							  : " AND p.comm = ?5", t);
	if (f->job)
		byte_buf_printf(sql, " AND %c.process IN (SELECT process FROM job_ranks"
				     " WHERE job = ?7%s)", t, f->has_rank ? " AND rank = ?8" : "");
	if (store_filter_has_identity(f)) {
		byte_buf_printf(sql, " AND %c.process IN (SELECT process FROM process_identities"
				     " WHERE 1", t);
		if (f->pod_namespace)
			byte_buf_printf(sql, " AND namespace = ?9");
		if (f->pod)
			byte_buf_printf(sql, " AND (pod_name = ?10 OR pod_uid = lower(?10))");
		/* A container: its name, its id, or the short id Docker and crictl print. */
		if (f->container)
			byte_buf_printf(sql, " AND (container_name = ?11 OR (length(?11) >= 12 AND"
					     " substr(container_id, 1, length(?11)) = lower(?11)))");
		if (f->unit)
			byte_buf_printf(sql, " AND unit = ?12");
		if (f->has_slurm_job)
			byte_buf_printf(sql, " AND slurm_job = ?13");
		byte_buf_printf(sql, ")");
	}
}

static void filter_sql_on(struct byte_buf *sql, const struct store_sample_filter *f, char t)
{
	filter_sql_part(sql, f, t, PART_ALL);
}

/* Where a range splits between the per-minute rollups and the raw rows. */
struct split {
	bool on;           /* part of the range is older than the cutoff */
	int64_t cutoff_ms; /* a minute start: raw rows from here, rollup minutes before */
	int64_t from_min;  /* the first minute the range touches */
};

/* The split of f's range at the store's rollup cutoff (store__rollup_cutoff_ms). */
static struct split split_get(struct store *base, const struct store_sample_filter *f)
{
	int64_t cutoff = store__rollup_cutoff_ms(base);
	int64_t from_min = store__minute_floor(f->from_ms);

	return (struct split){ .on = cutoff > from_min && f->from_ms <= f->to_ms,
			       .cutoff_ms = cutoff, .from_min = from_min };
}

/*
 * Runs a query built in `sql` (filters change its shape, so the planner sees only live terms)
 * with the filter's parameters and ?6 = `limit`, calling `row` per row.
 */
static int filter_run_split(struct sqlite_store *s, struct byte_buf *sql,
			    const struct store_sample_filter *f, uint32_t limit,
			    const struct split *sp, store__row_fn row, void *ctx);

static int filter_run(struct sqlite_store *s, struct byte_buf *sql,
		      const struct store_sample_filter *f, uint32_t limit, store__row_fn row,
		      void *ctx)
{
	return filter_run_split(s, sql, f, limit, NULL, row, ctx);
}

/* filter_run with the split's ?14 (cutoff) and ?15 (first minute) when `sp` is on. */
static int filter_run_split(struct sqlite_store *s, struct byte_buf *sql,
			    const struct store_sample_filter *f, uint32_t limit,
			    const struct split *sp, store__row_fn row, void *ctx)
{
	bool on = sp && sp->on;
	int rc = store__sql_end(sql);

	if (rc)
		return rc;
	return store__read(s, &(struct store__query){
		.sql = (const char *)sql->data, .once = true,
		.args = STORE__ARGS(STORE__INT(f->from_ms), STORE__INT(f->to_ms),
				    f->node ? STORE__TEXT(f->node) : STORE__SKIP,
				    f->has_pid ? STORE__INT(f->pid) : STORE__SKIP,
				    f->comm ? STORE__TEXT(f->comm) : STORE__SKIP, STORE__INT(limit),
				    f->job ? STORE__TEXT(f->job) : STORE__SKIP,
				    f->job && f->has_rank ? STORE__INT(f->rank) : STORE__SKIP,
				    f->pod_namespace ? STORE__TEXT(f->pod_namespace) : STORE__SKIP,
				    f->pod ? STORE__TEXT(f->pod) : STORE__SKIP,
				    f->container ? STORE__TEXT(f->container) : STORE__SKIP,
				    f->unit ? STORE__TEXT(f->unit) : STORE__SKIP,
				    f->has_slurm_job ? STORE__INT(store__clamp(f->slurm_job))
						     : STORE__SKIP,
				    on ? STORE__INT(sp->cutoff_ms) : STORE__SKIP,
				    on ? STORE__INT(sp->from_min) : STORE__SKIP),
		.row = row, .ctx = ctx });
}

struct process_visit {
	store_process_fn fn;
	void *arg;
};

static int process_row(void *ctx, sqlite3_stmt *st)
{
	const struct process_visit *v = ctx;
	struct store_process p = {
		.hostname = store__text(st, 1),
		.pid = (uint32_t)sqlite3_column_int64(st, 2),
		.ppid = (uint32_t)sqlite3_column_int64(st, 3),
		.generation = (uint32_t)sqlite3_column_int64(st, 4),
		.start_time_ns = store__u64(sqlite3_column_int64(st, 5)),
		.comm = store__text(st, 6),
		.exe = store__text(st, 7),
		.cmdline = store__text(st, 8),
		.first_seen_ns = sqlite3_column_int64(st, 9),
		.last_seen_ns = sqlite3_column_int64(st, 10),
		.samples = (uint64_t)sqlite3_column_int64(st, 11),
	};

	store__text_copy(st, 0, p.node_id, sizeof(p.node_id));
	store__identity_read(st, 12, &p.identity);
	return v->fn(v->arg, &p);
}

int store__sqlite_processes_list(struct store *base, const struct store_sample_filter *f,
				 uint32_t limit, store_process_fn fn, void *arg)
{
	struct process_visit v = { fn, arg };
	struct byte_buf sql = { 0 };
	int rc;

	byte_buf_printf(&sql, "SELECT n.node_id, n.hostname, p.tgid, p.ppid, p.generation,"
			      " p.start_time_ns, p.comm, p.exe, p.cmdline, p.first_seen_ns,"
			      " p.last_seen_ns, sum(s.count) AS c, " STORE__IDENTITY_COLUMNS
			      " FROM samples s JOIN processes p ON p.id = s.process"
			      " JOIN nodes n ON n.id = p.node"
			      " LEFT JOIN process_identities i ON i.process = s.process");
	filter_sql_on(&sql, f, 's');
	byte_buf_printf(&sql, " GROUP BY s.process ORDER BY c DESC, s.process LIMIT ?6");
	rc = filter_run(store__sqlite(base), &sql, f, limit, process_row, &v);
	byte_buf_free(&sql);
	return rc;
}

/* An aggregate's visitor and the window total of its last row. */
struct aggregate_visit {
	union {
		store_stack_count_fn stacks;
		store_launch_count_fn launches;
		store_gpu_time_fn gpu_time;
	} fn;
	void *arg;
	uint64_t total;
};

/* Runs one aggregate: `select` (the columns and FROM), the sample filter on table `alias`,
 * then `tail` (GROUP BY, ORDER BY, LIMIT ?6); each row to `row`, the window total to *total. */
static int aggregate_run(struct store *base, const struct store_sample_filter *f, uint32_t limit,
			 const char *select, char alias, const char *tail, store__row_fn row,
			 struct aggregate_visit *v, uint64_t *total)
{
	struct byte_buf sql = { 0 };
	int rc;

	byte_buf_printf(&sql, "%s", select);
	filter_sql_on(&sql, f, alias);
	byte_buf_printf(&sql, "%s", tail);
	rc = filter_run(store__sqlite(base), &sql, f, limit, row, v);
	byte_buf_free(&sql);
	if (!rc)
		*total = v->total;
	return rc;
}

static int stack_count_row(void *ctx, sqlite3_stmt *st)
{
	struct aggregate_visit *v = ctx;
	sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
	struct store_stack_count row = {
		.comm = store__text(st, 0),
		.pid = lo == hi ? lo : -1,
		.processes = (uint64_t)sqlite3_column_int64(st, 3),
		.user_stack = sqlite3_column_int64(st, 4),
		.kernel_stack = sqlite3_column_int64(st, 5),
		.count = (uint64_t)sqlite3_column_int64(st, 6),
	};

	v->total = (uint64_t)sqlite3_column_int64(st, 7);
	return v->fn.stacks(v->arg, &row);
}

/* A stack aggregate answered from a raw table and its per-minute rollup (schema 14). */
struct minutes_source {
	const char *raw;       /* the raw rows' table, alias `alias` */
	char alias;
	const char *raw_value; /* the summed value of a raw row */
	const char *rollup;    /* the rollup table (alias r) */
	const char *value;     /* the summed value of a rollup row */
	const char *sum;       /* a group's count from sum(n) */
};

static const struct minutes_source minutes_samples = {
	"samples", 's', "s.count", "sample_minutes", "r.count", "sum(n)",
};
/* Microseconds rounded down per group, as the raw answer. */
static const struct minutes_source minutes_offcpu = {
	"offcpu", 'o', "o.blocked_ns", "offcpu_minutes", "r.blocked_ns", "sum(n) / 1000",
};

/*
 * The raw rows at or after the split's cutoff and the rollup rows of the minutes before it,
 * grouped together exactly as the raw-only query groups (comm, user stack, kernel stack; the
 * processes and pids they came from), so that a range answers the same either way.
 */
static int minutes_aggregate(struct store *base, const struct store_sample_filter *f,
			     uint32_t limit, const struct split *sp,
			     const struct minutes_source *src, struct aggregate_visit *v,
			     uint64_t *total)
{
	struct byte_buf sql = { 0 };
	int rc;

	byte_buf_printf(&sql, "SELECT comm, min(tgid), max(tgid), count(DISTINCT process), u, k,"
			      " %s AS c, sum(%s) OVER ()"
			      " FROM (SELECT p.comm AS comm, p.tgid AS tgid, %c.process AS process,"
			      " coalesce(%c.user_stack, 0) AS u, coalesce(%c.kernel_stack, 0) AS k,"
			      " %s AS n FROM %s %c JOIN processes p ON p.id = %c.process",
			src->sum, src->sum, src->alias, src->alias, src->alias, src->raw_value,
			src->raw, src->alias, src->alias);
	filter_sql_part(&sql, f, src->alias, PART_RAW);
	byte_buf_printf(&sql, " UNION ALL SELECT p.comm, p.tgid, r.process, r.user_stack,"
			      " r.kernel_stack, %s FROM %s r JOIN processes p ON p.id = r.process",
			src->value, src->rollup);
	filter_sql_part(&sql, f, 'r', PART_ROLLUP);
	byte_buf_printf(&sql, ") GROUP BY comm, u, k ORDER BY c DESC, comm, u, k LIMIT ?6");
	rc = filter_run_split(store__sqlite(base), &sql, f, limit, sp, stack_count_row, v);
	byte_buf_free(&sql);
	if (!rc)
		*total = v->total;
	return rc;
}

int store__sqlite_stacks_aggregate(struct store *base, const struct store_sample_filter *f,
				   uint32_t limit, store_stack_count_fn fn, void *arg,
				   uint64_t *total)
{
	struct aggregate_visit v = { .fn.stacks = fn, .arg = arg };
	struct split sp = split_get(base, f);

	if (sp.on)
		return minutes_aggregate(base, f, limit, &sp, &minutes_samples, &v, total);
	/* The window sum runs over every group before LIMIT: the total counts everything. */
	return aggregate_run(base, f, limit,
			     "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT s.process),"
			     " coalesce(s.user_stack, 0) AS u, coalesce(s.kernel_stack, 0) AS k,"
			     " sum(s.count) AS c, sum(sum(s.count)) OVER () AS total"
			     " FROM samples s JOIN processes p ON p.id = s.process",
			     's', " GROUP BY p.comm, u, k ORDER BY c DESC, p.comm, u, k LIMIT ?6",
			     stack_count_row, &v, total);
}

static int launch_count_row(void *ctx, sqlite3_stmt *st)
{
	struct aggregate_visit *v = ctx;
	sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
	struct store_launch_count row = {
		.comm = store__text(st, 0),
		.pid = lo == hi ? lo : -1,
		.processes = (uint64_t)sqlite3_column_int64(st, 3),
		.user_stack = sqlite3_column_int64(st, 4),
		.named = sqlite3_column_int(st, 5) != 0,
		.kernel = store__text(st, 6),
		.count = (uint64_t)sqlite3_column_int64(st, 7),
	};

	v->total = (uint64_t)sqlite3_column_int64(st, 8);
	return v->fn.launches(v->arg, &row);
}

int store__sqlite_launches_aggregate(struct store *base, const struct store_sample_filter *f,
				     uint32_t limit, store_launch_count_fn fn, void *arg,
				     uint64_t *total)
{
	struct aggregate_visit v = { .fn.launches = fn, .arg = arg };

	/* Rows repeating a key (the decoder allows it) are summed like any other rows. */
	return aggregate_run(base, f, limit,
			     "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT l.process),"
			     " coalesce(l.user_stack, 0) AS u, l.kernel_name != '' AS named,"
			     " iif(l.kernel_name != '', l.kernel_name, printf('0x%x', l.function)) AS kn,"
			     " sum(l.count) AS c, sum(sum(l.count)) OVER () AS total"
			     " FROM launches l JOIN processes p ON p.id = l.process",
			     'l', " GROUP BY p.comm, u, named, kn ORDER BY c DESC, p.comm, u, kn LIMIT ?6",
			     launch_count_row, &v, total);
}

static int gpu_time_row(void *ctx, sqlite3_stmt *st)
{
	struct aggregate_visit *v = ctx;
	sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
	struct store_gpu_time row = {
		.comm = store__text(st, 0),
		.pid = lo == hi ? lo : -1,
		.processes = (uint64_t)sqlite3_column_int64(st, 3),
		.user_stack = sqlite3_column_int64(st, 4),
		.launch_seen = sqlite3_column_int(st, 5) != 0,
		.kernel = store__text(st, 6),
		.ns = (uint64_t)sqlite3_column_int64(st, 7),
	};

	v->total = (uint64_t)sqlite3_column_int64(st, 8);
	return v->fn.gpu_time(v->arg, &row);
}

int store__sqlite_gpu_time_aggregate(struct store *base, const struct store_sample_filter *f,
				     uint32_t limit, store_gpu_time_fn fn, void *arg,
				     uint64_t *total)
{
	struct aggregate_visit v = { .fn.gpu_time = fn, .arg = arg };

	/* Per (process, kernel): its GPU time in the range, its launches per user stack and in
	 * all; each stack gets the share of the time its launches had. */
	return aggregate_run(base, f, limit,
			     "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT g.process),"
			     " coalesce(l.u, 0) AS u, l.c IS NOT NULL AS seen, g.name AS kn,"
			     " CAST(sum(iif(l.c IS NULL, g.ns, g.ns * 1.0 * l.c / lt.c)) AS INTEGER) AS t,"
			     " CAST(sum(sum(iif(l.c IS NULL, g.ns, g.ns * 1.0 * l.c / lt.c))) OVER ()"
			     "  AS INTEGER)"
			     " FROM (SELECT process, node, name, min(time_ms) AS time_ms,"
			     "   sum(total_ns) AS ns FROM gpu_kernels WHERE time_ms BETWEEN ?1 AND ?2"
			     "   GROUP BY process, name) g"
			     " JOIN processes p ON p.id = g.process"
			     " LEFT JOIN (SELECT process, kernel_name AS name, coalesce(user_stack, 0) AS u,"
			     "   sum(count) AS c FROM launches WHERE time_ms BETWEEN ?1 AND ?2"
			     "   GROUP BY process, kernel_name, u) l ON l.process = g.process AND l.name = g.name"
			     " LEFT JOIN (SELECT process, kernel_name AS name, sum(count) AS c FROM launches"
			     "   WHERE time_ms BETWEEN ?1 AND ?2 GROUP BY process, kernel_name) lt"
			     "   ON lt.process = g.process AND lt.name = g.name",
			     'g', " GROUP BY p.comm, u, seen, kn ORDER BY t DESC, p.comm, u, kn LIMIT ?6",
			     gpu_time_row, &v, total);
}

int store__sqlite_offcpu_aggregate(struct store *base, const struct store_sample_filter *f,
				   uint32_t limit, store_stack_count_fn fn, void *arg,
				   uint64_t *total)
{
	struct aggregate_visit v = { .fn.stacks = fn, .arg = arg };
	struct split sp = split_get(base, f);

	if (sp.on)
		return minutes_aggregate(base, f, limit, &sp, &minutes_offcpu, &v, total);
	/* Microseconds rounded down per group; the total is the groups' sum. */
	return aggregate_run(base, f, limit,
			     "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT o.process),"
			     " coalesce(o.user_stack, 0) AS u, coalesce(o.kernel_stack, 0) AS k,"
			     " sum(o.blocked_ns) / 1000 AS c, sum(sum(o.blocked_ns) / 1000) OVER ()"
			     " FROM offcpu o JOIN processes p ON p.id = o.process",
			     'o', " GROUP BY p.comm, u, k ORDER BY c DESC, p.comm, u, k LIMIT ?6",
			     stack_count_row, &v, total);
}

int store__sqlite_wall_aggregate(struct store *base, const struct store_sample_filter *f,
				 uint32_t limit, store_stack_count_fn fn, void *arg,
				 uint64_t *total)
{
	struct aggregate_visit v = { .fn.stacks = fn, .arg = arg };
	struct byte_buf sql = { 0 };
	int rc;

	/* Both halves in nanoseconds (a CPU sample stands for 1e15 / (Hz x rate ppm) ns of its
	 * node), grouped together, then microseconds (rounded down per group; the total is the
	 * groups' sum, so it equals what a folded answer adds up to). Nodes without a known rate
	 * add no CPU time. Each half carries the filter's conditions over its own alias. */
	byte_buf_printf(&sql, "SELECT comm, min(tgid), max(tgid), count(DISTINCT process), u, k,"
			      " CAST(sum(ns) / 1000 AS INTEGER) AS c,"
			      " sum(CAST(sum(ns) / 1000 AS INTEGER)) OVER ()"
			      " FROM (SELECT p.comm AS comm, p.tgid AS tgid, s.process AS process,"
			      " coalesce(s.user_stack, 0) AS u, coalesce(s.kernel_stack, 0) AS k,"
			      " s.count * 1e15 / (n.sample_hz * n.sample_rate_ppm) AS ns"
			      " FROM samples s JOIN processes p ON p.id = s.process"
			      " JOIN nodes n ON n.id = s.node");
	filter_sql_on(&sql, f, 's');
	byte_buf_printf(&sql, " AND n.sample_hz > 0 AND n.sample_rate_ppm > 0"
			      " UNION ALL SELECT p.comm, p.tgid, o.process,"
			      " coalesce(o.user_stack, 0), coalesce(o.kernel_stack, 0),"
			      " o.blocked_ns * 1.0"
			      " FROM offcpu o JOIN processes p ON p.id = o.process");
	filter_sql_on(&sql, f, 'o');
	byte_buf_printf(&sql, ") GROUP BY comm, u, k ORDER BY c DESC, comm, u, k LIMIT ?6");
	rc = filter_run(store__sqlite(base), &sql, f, limit, stack_count_row, &v);
	byte_buf_free(&sql);
	if (!rc)
		*total = v.total;
	return rc;
}
