/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention in SQLite: deletes the time-series rows older than a cutoff in short write
 * transactions of at most RET_CHUNK rows, then the processes and stacks nothing refers to any
 * more, then gives the free pages back to the file system (incremental vacuum).
 *
 * Which rows: those whose own time is before the cutoff (time_ms, batches.window_end_ns, an
 * NCCL call chunk's newest entry), in every time-series table; what ClickHouse drops with its
 * day partitions. The per-minute rollups (sample_minutes, offcpu_minutes) and the NCCL
 * instances kept past the raw calls (nccl_instances, written by store__nccl_rollup_run before
 * this runs) have a cutoff of their own, earlier (--rollup-retention-days); the processes and
 * stacks they name stay with them. Nodes, their counter totals, objects, incidents, settings, baselines and kernel
 * symbols stay.
 *
 * Locking: the rows to delete are found on a reader connection (no write lock); the writer
 * then deletes them by rowid, RET_CHUNK per transaction, so ingest waits at most one chunk.
 * Only retention deletes these rows, and retention runs one at a time (server/main.c), so
 * the rowids a reader found still name the same rows when the writer deletes them.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "common/error.h"
#include "server/store/sqlite_internal.h"

/* Rows (or processes, stacks) deleted per write transaction. */
#define RET_CHUNK 10000
/* Unreferenced stacks collected per run (8 bytes each); the rest go in the next run. */
#define RET_MAX_STACKS 4000000
/* Pages the incremental vacuum frees per write transaction. */
#define RET_VACUUM_PAGES_TEXT "2048"

struct ret_table {
	const char *name;
	const char *select_sql; /* ?1 cutoff (the column's unit), ?2 rowid after which */
	const char *delete_sql; /* ?1 rowid */
	bool ns;                /* the cutoff is in ns, not ms */
	bool rollup;            /* a per-minute rollup: the rollup cutoff applies */
};

#define RET_TABLE(t, col, ns)                                                              \
	{ t, "SELECT rowid FROM " t " WHERE rowid > ?2 AND " col " < ?1 ORDER BY rowid"      \
	     " LIMIT 10000",                                                                \
	  "DELETE FROM " t " WHERE rowid = ?1", ns, false }
#define RET_ROLLUP_NS(t, col)                                                              \
	{ t, "SELECT rowid FROM " t " WHERE rowid > ?2 AND " col " < ?1 ORDER BY rowid"      \
	     " LIMIT 10000",                                                                \
	  "DELETE FROM " t " WHERE rowid = ?1", true, true }
#define RET_ROLLUP(t)                                                                      \
	{ t, "SELECT rowid FROM " t " WHERE rowid > ?2 AND minute_ms < ?1 ORDER BY rowid"    \
	     " LIMIT 10000",                                                                \
	  "DELETE FROM " t " WHERE rowid = ?1", false, true }

/* Batches first, as on ClickHouse. Every table with a process column is also listed in
 * process_delete_sql. */
static const struct ret_table ret_tables[] = {
	RET_TABLE("batches", "window_end_ns", true),
	RET_TABLE("samples", "time_ms", false),
	RET_TABLE("offcpu", "time_ms", false),
	RET_TABLE("launches", "time_ms", false),
	RET_TABLE("nccl_call_chunks", "entry_max_ns", true), /* every call older */
	RET_TABLE("gpu_kernels", "time_ms", false),
	RET_TABLE("nccl_profiles", "time_ms", false),
	RET_TABLE("nccl_links", "time_ms", false),
	RET_TABLE("os_cpus", "time_ms", false),
	RET_TABLE("os_irqs", "time_ms", false),
	RET_TABLE("os_threads", "time_ms", false),
	RET_TABLE("gpu_health", "window_end_ns", true),
	RET_TABLE("host_signals", "time_ms", false),
	RET_ROLLUP("sample_minutes"),
	RET_ROLLUP("offcpu_minutes"),
	RET_ROLLUP_NS("nccl_instances", "first_max_ns"), /* every instance older */
	RET_ROLLUP_NS("nccl_instance_processes", "last_ns"),
};

static const char process_candidates_sql[] =
	"SELECT id FROM processes WHERE id > ?2 AND last_seen_ns < ?1 ORDER BY id LIMIT 10000";
/* Checked in the write transaction: a batch stored since the candidates were read may have
 * seen the process again or given it rows (each table has a (process, ...) index). Its job
 * rank, communicators and identity go first (foreign keys), then the process. */
static const char process_unused_sql[] =
	"SELECT 1 FROM processes WHERE id = ?1 AND last_seen_ns < ?2"
	" AND NOT EXISTS (SELECT 1 FROM samples WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM offcpu WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM launches WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM nccl_call_chunks WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM gpu_kernels WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM nccl_profiles WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM nccl_links WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM os_threads WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM sample_minutes WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM offcpu_minutes WHERE process = ?1)"
	" AND NOT EXISTS (SELECT 1 FROM nccl_instance_processes WHERE process = ?1)";
static const char *const process_delete_sql[] = {
	"DELETE FROM job_ranks WHERE process = ?1",
	"DELETE FROM communicators WHERE process = ?1",
	"DELETE FROM process_identities WHERE process = ?1",
	"DELETE FROM processes WHERE id = ?1",
};

/* The tables whose rows name stacks, their newest rowid in the snapshot, and their stacks
 * stored since (rows with a larger rowid). */
static const char *const stack_max_sql[] = {
	"SELECT COALESCE(MAX(rowid), 0) FROM samples",
	"SELECT COALESCE(MAX(rowid), 0) FROM offcpu",
	"SELECT COALESCE(MAX(rowid), 0) FROM launches",
	"SELECT COALESCE(MAX(rowid), 0) FROM sample_minutes",
	"SELECT COALESCE(MAX(rowid), 0) FROM offcpu_minutes",
};
/* A rollup row updated in place keeps its stacks: only new rows can name a candidate. */
static const char *const stack_since_sql[] = {
	"SELECT kernel_stack, user_stack FROM samples WHERE rowid > ?1",
	"SELECT kernel_stack, user_stack FROM offcpu WHERE rowid > ?1",
	"SELECT kernel_stack, user_stack FROM launches WHERE rowid > ?1",
	"SELECT kernel_stack, user_stack FROM sample_minutes WHERE rowid > ?1",
	"SELECT kernel_stack, user_stack FROM offcpu_minutes WHERE rowid > ?1",
};
#define STACK_TABLES (sizeof(stack_max_sql) / sizeof(stack_max_sql[0]))
static const char stack_candidates_sql[] =
	"SELECT id FROM stacks WHERE id NOT IN ("
	"SELECT kernel_stack FROM samples WHERE kernel_stack IS NOT NULL"
	" UNION SELECT user_stack FROM samples WHERE user_stack IS NOT NULL"
	" UNION SELECT kernel_stack FROM offcpu WHERE kernel_stack IS NOT NULL"
	" UNION SELECT user_stack FROM offcpu WHERE user_stack IS NOT NULL"
	" UNION SELECT kernel_stack FROM launches WHERE kernel_stack IS NOT NULL"
	" UNION SELECT user_stack FROM launches WHERE user_stack IS NOT NULL"
	" UNION SELECT kernel_stack FROM sample_minutes"
	" UNION SELECT user_stack FROM sample_minutes"
	" UNION SELECT kernel_stack FROM offcpu_minutes"
	" UNION SELECT user_stack FROM offcpu_minutes) ORDER BY id";
static const char stack_delete_sql[] = "DELETE FROM stacks WHERE id = ?1";

struct ids {
	sqlite3_int64 *v;
	size_t n, cap, max;
};

static int ids_row(void *ctx, sqlite3_stmt *st)
{
	struct ids *ids = ctx;

	if (ids->n == ids->max)
		return 1; /* enough for this run */
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? 2 * ids->cap : 1024;
		sqlite3_int64 *v = realloc(ids->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = sqlite3_column_int64(st, 0);
	return 0;
}

static int ignore_row(void *ctx, sqlite3_stmt *st)
{
	(void)ctx;
	(void)st;
	return 0;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* store__write_begin, noting when the write lock was taken. */
static int chunk_begin(struct sqlite_store *s, struct conn **c, int64_t *t0)
{
	int rc = store__write_begin(s, c);

	*t0 = now_ns();
	return rc;
}

/* store__write_end, folding the lock's hold time into the stats. */
static int chunk_end(struct sqlite_store *s, struct conn *c, int rc, int64_t t0,
		     struct store_retention_stats *st)
{
	int64_t held;

	rc = store__write_end(s, c, rc, true);
	held = now_ns() - t0;
	if (held > st->max_hold_ns)
		st->max_hold_ns = held;
	st->transactions++;
	return rc;
}

/* Deletes the rows of one table before the cutoff, RET_CHUNK per transaction. */
static int table_trim(struct sqlite_store *s, const struct ret_table *t, int64_t before_ms,
		      struct store_retention_stats *st)
{
	sqlite3_int64 cutoff = t->ns ? (sqlite3_int64)before_ms * 1000000 : before_ms;
	struct ids ids = { .max = RET_CHUNK };
	sqlite3_int64 after = 0;
	int rc = 0;

	for (;;) {
		struct conn *c;
		int64_t t0;

		ids.n = 0;
		rc = store__read(s, &(struct store__query){ .sql = t->select_sql, .row = ids_row,
							     .ctx = &ids,
							     .args = STORE__ARGS(STORE__INT(cutoff),
										 STORE__INT(after)) });
		if (rc < 0 || !ids.n)
			break;
		if ((rc = chunk_begin(s, &c, &t0)))
			break;
		for (size_t i = 0; i < ids.n && !rc; i++)
			rc = store__query(c, &(struct store__query){ .sql = t->delete_sql,
								      .args = STORE__ARGS(STORE__INT(ids.v[i])) });
		if ((rc = chunk_end(s, c, rc, t0, st)))
			break;
		st->rows += ids.n;
		after = ids.v[ids.n - 1];
		if (ids.n < RET_CHUNK)
			break;
	}
	free(ids.v);
	return rc < 0 ? rc : 0;
}

/* Deletes the processes last seen before the cutoff that no row names any more, with their
 * job ranks, communicators and identities. */
static int processes_gc(struct sqlite_store *s, int64_t before_ms, struct store_retention_stats *st)
{
	sqlite3_int64 cutoff = (sqlite3_int64)before_ms * 1000000;
	struct ids ids = { .max = RET_CHUNK };
	sqlite3_int64 after = 0;
	int rc = 0;

	for (;;) {
		struct conn *c;
		int64_t t0;

		ids.n = 0;
		rc = store__read(s, &(struct store__query){ .sql = process_candidates_sql,
							     .row = ids_row, .ctx = &ids,
							     .args = STORE__ARGS(STORE__INT(cutoff),
										 STORE__INT(after)) });
		if (rc < 0 || !ids.n)
			break;
		if ((rc = chunk_begin(s, &c, &t0)))
			break;
		size_t deleted = 0;

		for (size_t i = 0; i < ids.n && !rc; i++) {
			uint64_t unused = 0;

			rc = store__query(c, &(struct store__query){
				.sql = process_unused_sql, .row = ignore_row, .max_rows = 1,
				.rows = &unused,
				.args = STORE__ARGS(STORE__INT(ids.v[i]), STORE__INT(cutoff)) });
			if (rc || !unused)
				continue;
			for (size_t j = 0; j < sizeof(process_delete_sql) /
						       sizeof(process_delete_sql[0]) && !rc; j++)
				rc = store__query(c, &(struct store__query){
					.sql = process_delete_sql[j],
					.args = STORE__ARGS(STORE__INT(ids.v[i])) });
			deleted += !rc;
		}
		if ((rc = chunk_end(s, c, rc, t0, st)))
			break;
		st->processes += deleted;
		after = ids.v[ids.n - 1];
		if (ids.n < RET_CHUNK)
			break;
	}
	free(ids.v);
	return rc < 0 ? rc : 0;
}

static int cmp_i64(const void *a, const void *b)
{
	sqlite3_int64 x = *(const sqlite3_int64 *)a, y = *(const sqlite3_int64 *)b;

	return (x > y) - (x < y);
}

/* A chunk of candidate stacks; `keep` marks those a row stored since the snapshot names. */
struct stack_chunk {
	const sqlite3_int64 *v;
	bool *keep;
	size_t n;
};

static void stack_mark(struct stack_chunk *k, sqlite3_stmt *st, int col)
{
	sqlite3_int64 id;
	const sqlite3_int64 *hit;

	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return;
	id = sqlite3_column_int64(st, col);
	hit = bsearch(&id, k->v, k->n, sizeof(id), cmp_i64);
	if (hit)
		k->keep[hit - k->v] = true;
}

static int stack_since_row(void *ctx, sqlite3_stmt *st)
{
	stack_mark(ctx, st, 0);
	stack_mark(ctx, st, 1);
	return 0;
}

/* Reads the unreferenced stacks and the newest rowids of the referencing tables in one
 * snapshot. */
static int stacks_unreferenced(struct sqlite_store *s, struct ids *ids,
			       sqlite3_int64 max[STACK_TABLES])
{
	struct conn *c;
	uint64_t n;
	int rc = store__read_begin(s, &c);

	if (rc)
		return rc; /* the reader went back already */
	for (size_t i = 0; i < STACK_TABLES && !rc; i++) {
		n = 0;
		rc = store__query(c, &(struct store__query){ .sql = stack_max_sql[i],
							      .row = store__row_i64, .ctx = &max[i],
							      .max_rows = 1, .rows = &n });
		if (!rc && !n)
			rc = -EPROTO;
	}
	if (!rc)
		rc = store__query(c, &(struct store__query){ .sql = stack_candidates_sql,
							      .row = ids_row, .ctx = ids });
	return store__read_end(s, c, rc < 0 ? rc : 0);
}

/* Deletes the stacks no sample, off-CPU or launch row (raw or rollup) names. */
static int stacks_gc(struct sqlite_store *s, struct store_retention_stats *st)
{
	struct ids ids = { .max = RET_MAX_STACKS };
	sqlite3_int64 max[STACK_TABLES] = { 0 };
	bool *keep = calloc(RET_CHUNK, sizeof(*keep));
	int rc = keep ? stacks_unreferenced(s, &ids, max) : -ENOMEM;

	for (size_t off = 0; !rc && off < ids.n; off += RET_CHUNK) {
		struct stack_chunk k = { .v = ids.v + off, .keep = keep,
					 .n = ids.n - off < RET_CHUNK ? ids.n - off : RET_CHUNK };
		struct conn *c;
		int64_t t0;

		memset(keep, 0, RET_CHUNK * sizeof(*keep));
		/* Without foreign-key checks: SQLite would scan samples per stack (no index on
		 * its stack columns); this transaction checks the references itself. */
		rc = store__write_begin_unchecked(s, &c);
		t0 = now_ns();
		if (rc)
			break;
		/* Rows stored since the snapshot may name a candidate again (stacks are shared
		 * by content): those stay. */
		for (size_t i = 0; i < STACK_TABLES && !rc; i++)
			rc = store__query(c, &(struct store__query){ .sql = stack_since_sql[i],
								      .row = stack_since_row, .ctx = &k,
								      .args = STORE__ARGS(STORE__INT(max[i])) });
		size_t deleted = 0;

		for (size_t i = 0; i < k.n && !rc; i++) {
			if (keep[i])
				continue;
			rc = store__query(c, &(struct store__query){ .sql = stack_delete_sql,
								      .args = STORE__ARGS(STORE__INT(k.v[i])) });
			deleted += !rc;
		}
		if (!(rc = chunk_end(s, c, rc, t0, st)))
			st->stacks += deleted;
	}
	free(keep);
	free(ids.v);
	return rc;
}

/* Gives free pages back to the file system when the database was created with incremental
 * auto-vacuum (databases created before that keep reusing their free pages instead). */
static int pages_release(struct sqlite_store *s, struct store_retention_stats *st)
{
	sqlite3_int64 mode = 0, freelist = 0;
	int rc = store__read(s, &(struct store__query){ .sql = "PRAGMA auto_vacuum",
							  .row = store__row_i64, .ctx = &mode,
							  .max_rows = 1 });

	if (rc || mode != 2)
		return rc;
	for (sqlite3_int64 last = -1;; last = freelist) {
		struct conn *c;
		int64_t t0;

		if ((rc = store__read(s, &(struct store__query){ .sql = "PRAGMA freelist_count",
								  .row = store__row_i64,
								  .ctx = &freelist, .max_rows = 1 })))
			return rc;
		if (last < 0)
			st->pages_freed = (uint64_t)(freelist > 0 ? freelist : 0);
		else if (freelist >= last)
			break; /* no progress: leave the rest to the next run */
		if (freelist <= 0)
			break;
		if ((rc = chunk_begin(s, &c, &t0)))
			return rc;
		rc = store__conn_exec(c, "PRAGMA incremental_vacuum(" RET_VACUUM_PAGES_TEXT ")");
		if ((rc = chunk_end(s, c, rc, t0, st)))
			return rc;
	}
	/* Write the shrunk database back from the WAL now (the file shrinks); readers still on
	 * older frames only make it partial, which the next checkpoint completes. */
	pthread_mutex_lock(&s->write_lock);
	rc = sqlite3_wal_checkpoint_v2(s->writer.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	pthread_mutex_unlock(&s->write_lock);
	return rc == SQLITE_OK || rc == SQLITE_BUSY ? 0 : store__errno(rc);
}

int store__sqlite_retention(struct store *base, int64_t before_ms, int64_t rollup_before_ms,
			    struct store_retention_stats *st)
{
	struct sqlite_store *s = store__sqlite(base);
	int rc = 0;

	*st = (struct store_retention_stats){ 0 };
	for (size_t i = 0; i < sizeof(ret_tables) / sizeof(ret_tables[0]) && !rc; i++) {
		uint64_t rows = st->rows;

		if (!ret_tables[i].rollup)
			rc = table_trim(s, &ret_tables[i], before_ms, st);
		else if (rollup_before_ms > 0)
			rc = table_trim(s, &ret_tables[i], rollup_before_ms, st);
		if (ret_tables[i].rollup)
			st->rollup_rows += st->rows - rows;
	}
	if (!rc)
		rc = processes_gc(s, before_ms, st);
	if (!rc)
		rc = stacks_gc(s, st);
	if (!rc)
		rc = pages_release(s, st);
	return rc;
}

int store__sqlite_retention_apply(struct store *base, int64_t before_ms,
				  int64_t rollup_before_ms, uint32_t *dropped)
{
	struct store_retention_stats st;
	int rc = store__sqlite_retention(base, before_ms, rollup_before_ms, &st);

	*dropped = st.rows > UINT32_MAX ? UINT32_MAX : (uint32_t)st.rows;
	return rc;
}
