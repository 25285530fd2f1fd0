/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's write path under fault injection, as SQLite tests itself: every allocation
 * (ours, SQLite's through its allocator hook, jansson's) and every file operation (SQLite's
 * through a VFS shim) of store_batch_put failed in turn, once and from then on (a dead or full
 * disk). Each time: a clear error, the batch wholly absent (every table's content as before,
 * also after a crash), an intact database, and a retry without faults stores it exactly once.
 */
// test-ldflags: -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=asprintf,--wrap=open,--wrap=openat,--wrap=mkdir,--wrap=mkdirat,--wrap=dup,--wrap=read,--wrap=pread,--wrap=write,--wrap=pwrite,--wrap=fsync,--wrap=fdatasync,--wrap=rename,--wrap=renameat,--wrap=unlink,--wrap=unlinkat,--wrap=ftruncate,--wrap=close
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "common/error.h"
#include "common/hash.h"
#include "server/store/sqlite_internal.h"
#include "server/store/store.h"
#include "tests/support/batch_fixture.h"
#include "tests/support/fault_inject.h"
#include "tests/support/fault_sqlite.h"
#include "tests/unit/server/job_fixture.h"

#define T0 1700000000000000000ULL
#define RECEIVED_NS ((int64_t)T0 + 61000000000LL)
#define MAX_STEPS 200000 /* far above the calls of one put: a loop that never ends */
#define MAX_TABLES 48
#define BATCH_HASH 0x5eed5eed5eed5eedULL /* the batches' content hash (ingest's XXH3) */
#define LEAK_CHECK_EVERY 128 /* a LeakSanitizer scan of the whole heap: ~1 ms per step at 32 */

#if defined(__SANITIZE_ADDRESS__)
/* Some 7,000 steps each free SQLite's page cache (store_reset): with the default 256 MiB
 * quarantine, a quarter of the run went to recycling it. 16 MiB still holds every block a step
 * frees, so a use after free within a step is still caught. ASAN_OPTIONS comes after this. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=16";
}
#endif

/* Every table's row count and a hash of its rows (in key order). */
struct digest {
	int tables;
	char name[MAX_TABLES][64];
	long long rows[MAX_TABLES];
	uint64_t hash[MAX_TABLES];
};

struct ctx {
	char template_dir[128]; /* the store before the batch: the seed batch stored */
	char dir[128];          /* the store under test */
	char crash_dir[160];    /* a copy of its files, opened as after a crash */
	struct store *store;
	sqlite3 *template_db;   /* source of the reset */
	char reset_sql[8192];   /* back to the template */
	char after_dir[128];    /* the store after the batch under test (retention's start) */
	char after_sql[8192];   /* back to that */
	bool schema_change;     /* store_reset also changes the schema */
	sqlite3 *check_db;      /* a second connection to the store under test */
	struct sysom_batch batch; /* the batch under test */
	struct digest before, after;
	struct store_put_result want; /* what a put without faults reports */
};

static sqlite3 *raw_open(const char *dir)
{
	char path[256];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/sysom.db", dir);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

static void digest_take(sqlite3 *db, struct digest *d)
{
	sqlite3_stmt *list, *rows;

	memset(d, 0, sizeof(*d));
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema WHERE type = 'table'"
						" ORDER BY name", -1, &list, NULL), SQLITE_OK);
	while (sqlite3_step(list) == SQLITE_ROW) {
		char sql[128];
		int t = d->tables++;

		assert_true(t < MAX_TABLES);
		snprintf(d->name[t], sizeof(d->name[t]), "%s", sqlite3_column_text(list, 0));
		snprintf(sql, sizeof(sql), "SELECT * FROM \"%s\"", d->name[t]);
		assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &rows, NULL), SQLITE_OK);
		while (sqlite3_step(rows) == SQLITE_ROW) {
			d->rows[t]++;
			for (int c = 0; c < sqlite3_column_count(rows); c++) {
				uint8_t type = (uint8_t)sqlite3_column_type(rows, c);
				const void *p = sqlite3_column_blob(rows, c);
				int n = sqlite3_column_bytes(rows, c);

				d->hash[t] = sysom_hash64(&type, 1, d->hash[t]);
				if (type == SQLITE_INTEGER || type == SQLITE_FLOAT) {
					double v = sqlite3_column_double(rows, c);
					int64_t i = sqlite3_column_int64(rows, c);

					d->hash[t] = sysom_hash64(type == SQLITE_FLOAT ? (void *)&v : (void *)&i,
								  8, d->hash[t]);
				} else if (n) {
					d->hash[t] = sysom_hash64(p, (size_t)n, d->hash[t]);
				}
			}
		}
		assert_int_equal(sqlite3_finalize(rows), SQLITE_OK);
	}
	assert_int_equal(sqlite3_finalize(list), SQLITE_OK);
	assert_true(d->tables > 10);
}

/* Names the first table whose content differs, or NULL. */
static const char *digest_diff(const struct digest *a, const struct digest *b, long long *ra,
			       long long *rb)
{
	if (a->tables != b->tables)
		return "(the list of tables)";
	for (int t = 0; t < a->tables; t++)
		if (strcmp(a->name[t], b->name[t]) || a->rows[t] != b->rows[t] ||
		    a->hash[t] != b->hash[t]) {
			*ra = a->rows[t];
			*rb = b->rows[t];
			return a->name[t];
		}
	return NULL;
}

static void integrity_assert(sqlite3 *db, const char *when)
{
	sqlite3_stmt *st;

	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	if (strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
		fail_msg("%s: integrity_check: %s", when, sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
}

/*
 * Puts the store under test back to the template's content (the seed batch only): in one
 * transaction of another connection, every table emptied and refilled from the template (an
 * attached database). Plain DML: the schema stays as it is, so the store's prepared statements
 * stay valid, as on a running server (a schema change would expire them all).
 */
static void store_reset_with(struct ctx *c, const char *reset_sql)
{
	sqlite3 *writer = store__sqlite(c->store)->writer.db;
	char *errmsg = NULL;

	if (sqlite3_exec(c->check_db, reset_sql, NULL, NULL, &errmsg) != SQLITE_OK)
		fail_msg("reset: %s", errmsg);
	/* Another process changing the schema (an operator's CREATE INDEX or ANALYZE): the
	 * store's statements are re-prepared at their next step, inside its transaction. */
	if (c->schema_change &&
	    sqlite3_exec(c->check_db, "CREATE INDEX fault_probe ON nodes(machine);"
				      " DROP INDEX fault_probe;", NULL, NULL, &errmsg) != SQLITE_OK)
		fail_msg("schema change: %s", errmsg);
	/* An empty WAL each time: every step starts from the same files. */
	assert_int_equal(sqlite3_wal_checkpoint_v2(c->check_db, "main", SQLITE_CHECKPOINT_TRUNCATE,
						   NULL, NULL), SQLITE_OK);
	/* And a cold page cache, as on a busy server: the put reads pages too. */
	assert_int_equal(sqlite3_db_release_memory(writer), SQLITE_OK);
}

static void store_reset(struct ctx *c)
{
	store_reset_with(c, c->reset_sql);
}

/* The reset's SQL (see store_reset) for the tables of the template, from the database in
 * `dir` (`sql` of 8192 bytes). */
static void reset_sql_build(struct ctx *c, const char *dir, char *sql)
{
	const size_t size = sizeof(c->reset_sql);
	sqlite3_stmt *list;
	size_t len = 0;

	len += (size_t)snprintf(sql + len, size - len,
				"ATTACH DATABASE '%s/sysom.db' AS tmpl; BEGIN IMMEDIATE;", dir);
	assert_int_equal(sqlite3_prepare_v2(c->template_db, "SELECT name FROM sqlite_schema"
						" WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
					    -1, &list, NULL), SQLITE_OK);
	while (sqlite3_step(list) == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(list, 0);

		len += (size_t)snprintf(sql + len, size - len,
					" DELETE FROM main.\"%s\"; INSERT INTO main.\"%s\""
					" SELECT * FROM tmpl.\"%s\";", t, t, t);
		assert_true(len < size);
	}
	sqlite3_finalize(list);
	len += (size_t)snprintf(sql + len, size - len, " COMMIT; DETACH DATABASE tmpl;");
	assert_true(len < size);
}

static void file_copy(const char *from, const char *to, bool may_be_missing)
{
	char buf[1 << 16];
	FILE *in = fopen(from, "rb"), *out;
	size_t n;

	if (!in && may_be_missing)
		return;
	assert_non_null(in);
	out = fopen(to, "wb");
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
}

/*
 * The database as a crash right now would leave it: its file and WAL (not the shared-memory
 * index, which SQLite rebuilds from the WAL) copied and opened afresh.
 */
static void crash_copy_digest(struct ctx *c, struct digest *d, const char *when)
{
	char from[256], to[256];
	sqlite3 *db;

	assert_int_equal(fixture_tmpdir_make(c->crash_dir, sizeof(c->crash_dir)), 0);
	snprintf(from, sizeof(from), "%s/sysom.db", c->dir);
	snprintf(to, sizeof(to), "%s/sysom.db", c->crash_dir);
	file_copy(from, to, false);
	snprintf(from, sizeof(from), "%s/sysom.db-wal", c->dir);
	snprintf(to, sizeof(to), "%s/sysom.db-wal", c->crash_dir);
	file_copy(from, to, true);
	db = raw_open(c->crash_dir);
	integrity_assert(db, when);
	digest_take(db, d);
	sqlite3_close(db);
	fixture_tmpdir_remove(c->crash_dir);
}

static void build_batch(struct sysom_batch *b, uint64_t sequence, bool extra)
{
	struct job_spec js = {
		.base = { .node = 1, .epoch = 7, .sequence = sequence,
			  .window_start_ns = T0 + (sequence - 1) * 30000000000ULL,
			  .python_comm = extra ? "python3-eval" : NULL,
			  .extra_stacks = extra ? 3 : 0 },
		.job = "train-42", .first_rank = 0, .local_ranks = 2, .instances = 2,
		.skip_rank = -1, .launches = true, .gpu_timing = extra, .slow_rank = -1,
		.late_rank = -1, .samples = true, .hot_rank = extra ? 1 : -1,
	};
	uint32_t nic, comm;

	assert_int_equal(job_batch_build(b, &js), 0);
	if (!extra)
		return;
	/* OS signals too, so the loops reach every table the batch writes. */
	assert_int_equal(sysom_batch_intern_cstring(b, "mlx5_comp3@pci:0000:3b:00.0", &nic), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "pt_main_thread", &comm), 0);
	struct sysom_os_cpu cpu = { .cpu = 3, .busy_ns = 29000000000ULL, .hardirq_count = 5000,
				    .hardirq_ns = 9000000, .context_switches = 12000 };
	assert_int_equal(sysom_batch_add_os_cpu(b, &cpu), 0);
	struct sysom_os_irq irq = { .cpu = 3, .irq = 211, .name = nic, .count = 4800,
				    .ns = 8500000 };
	assert_int_equal(sysom_batch_add_os_irq(b, &irq), 0);
	struct sysom_os_thread th = { .process = 0, .tid = 4243, .comm = comm,
				      .oncpu_ns = 25000000000ULL, .runq_wait_ns = 30000000,
				      .runq_waits = 900, .voluntary_switches = 700 };
	th.cpus[0] = 1ull << 3;
	assert_int_equal(sysom_batch_add_os_thread(b, &th), 0);
}

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	struct store_sqlite_options o = { .read_connections = 1 };
	struct sysom_batch seed;
	struct store_put_result r;
	struct store *s;
	char err[256], from[256], to[256];

	assert_non_null(c);
	/* The template: a store holding the seed batch (same node and job as the batch under
	 * test, so its upserts meet existing rows), closed (checkpointed into sysom.db). */
	assert_int_equal(fixture_tmpdir_make(c->template_dir, sizeof(c->template_dir)), 0);
	assert_int_equal(store_sqlite_open(c->template_dir, &o, &s, err, sizeof(err)), 0);
	build_batch(&seed, 1, false);
	assert_int_equal(store_batch_put(s, &seed, BATCH_HASH, RECEIVED_NS - 30000000000LL, &r), 0);
	sysom_batch_free(&seed);
	store_close(s);
	c->template_db = raw_open(c->template_dir);

	assert_int_equal(fixture_tmpdir_make(c->dir, sizeof(c->dir)), 0);
	snprintf(from, sizeof(from), "%s/sysom.db", c->template_dir);
	snprintf(to, sizeof(to), "%s/sysom.db", c->dir);
	file_copy(from, to, false);
	assert_int_equal(store_sqlite_open(c->dir, &o, &c->store, err, sizeof(err)), 0);
	c->check_db = raw_open(c->dir);
	reset_sql_build(c, c->template_dir, c->reset_sql);
	build_batch(&c->batch, 2, true);

	/* The two states a put may leave: before, and after a put without faults. */
	store_reset(c);
	digest_take(c->check_db, &c->before);
	assert_int_equal(store_batch_put(c->store, &c->batch, BATCH_HASH, RECEIVED_NS, &c->want), 0);
	assert_false(c->want.duplicate);
	assert_true(c->want.os_thread_rows && c->want.nccl_link_rows && c->want.new_stacks);
	digest_take(c->check_db, &c->after);
	long long ra, rb;
	assert_non_null(digest_diff(&c->before, &c->after, &ra, &rb));
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	sqlite3_close(c->check_db);
	sqlite3_close(c->template_db);
	store_close(c->store);
	sysom_batch_free(&c->batch);
	fixture_tmpdir_remove(c->dir);
	fixture_tmpdir_remove(c->template_dir);
	if (c->after_dir[0])
		fixture_tmpdir_remove(c->after_dir);
	free(c);
	return 0;
}

static void digest_assert(const struct digest *got, const struct digest *want, const char *when,
			  const char *state_name)
{
	long long rg = 0, rw = 0;
	const char *table = digest_diff(got, want, &rg, &rw);

	if (table)
		fail_msg("%s: table %s differs from %s (%lld rows, want %lld)", when, table,
			 state_name, rg, rw);
}

/* What a loop saw: steps whose fault was reached, and how they ended. */
struct tally {
	uint64_t failed_puts, absorbed; /* the put failed / succeeded despite the fault */
	uint64_t errors[3];             /* -ENOMEM, -EIO, -ENOSPC */
	uint64_t durable_anyway;        /* failed puts a crash would have kept (see put_step) */
};

static bool put_step(struct ctx *c, const struct fault_plan *plan, const int *allowed,
		     struct tally *t)
{
	struct store_put_result r = { 0 };
	struct fault_stats st;
	struct digest d;
	char when[160];
	int rc;

	store_reset(c);
	fault_arm(plan);
	rc = store_batch_put(c->store, &c->batch, BATCH_HASH, RECEIVED_NS, &r);
	fault_disarm();
	fault_stats_get(&st);
	snprintf(when, sizeof(when), "call %" PRIu64 "%s failed (%s), put returned %d (%s)",
		 plan->nth, plan->persistent ? " and later" : "", st.failed ? st.first_failed : "none",
		 rc, sysom_strerror(rc));
	if (!st.failed && rc)
		fail_msg("no fault reached, yet %s", when);
	if (rc) {
		bool ok = false;

		for (const int *a = allowed; *a; a++)
			ok |= rc == *a;
		if (!ok)
			fail_msg("%s: not an error of the store's table for this fault", when);
		t->failed_puts++;
		t->errors[rc == -ENOMEM ? 0 : rc == -EIO ? 1 : 2]++;
		/* Wholly absent for this process: every table as before. */
		integrity_assert(c->check_db, when);
		digest_take(c->check_db, &d);
		digest_assert(&d, &c->before, when, "the state before the put");
		/*
		 * After a crash: wholly absent, or wholly present when what failed was the fsync
		 * of a commit already written to the WAL (whether it is durable is unknown, as
		 * with any failed fsync; the agent's retry then finds a duplicate). Never a part.
		 * Only file I/O can leave the files other than the live connections see them.
		 */
		long long ra, rb;
		if (plan->classes & FAULT_IO)
			crash_copy_digest(c, &d, when);
		if ((plan->classes & FAULT_IO) && digest_diff(&d, &c->before, &ra, &rb)) {
			if (st.first_failed_class != FAULT_SYNC)
				digest_assert(&d, &c->before, when,
					      "the state before the put (after a crash)");
			digest_assert(&d, &c->after, when,
				      "the state before or after the put (after a crash)");
			t->durable_anyway++;
		}
		/* The store still works: the retry stores the batch, once. */
		memset(&r, 0, sizeof(r));
		rc = store_batch_put(c->store, &c->batch, BATCH_HASH, RECEIVED_NS, &r);
		if (rc || r.duplicate)
			fail_msg("%s; the retry without faults returned %d%s", when, rc,
				 r.duplicate ? " (duplicate)" : "");
	} else if (st.failed) {
		t->absorbed++; /* SQLite tolerated it (a benign allocation, a retried lock) */
	}
	if (memcmp(&r, &c->want, sizeof(r)) != 0)
		fail_msg("%s: the stored put reports other counts than a put without faults", when);
	digest_take(c->check_db, &d);
	digest_assert(&d, &c->after, when, "the state after a put without faults");
	/* Exactly once: a second put is a duplicate and changes nothing. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_batch_put(c->store, &c->batch, BATCH_HASH, RECEIVED_NS, &r), 0);
	if (!r.duplicate || r.conflict)
		fail_msg("%s: a second put was not reported duplicate", when);
	digest_take(c->check_db, &d);
	digest_assert(&d, &c->after, when, "the state after a put without faults (second put)");
	return st.failed != 0;
}

static void put_loop(struct ctx *c, const char *name, unsigned classes, int error,
		     bool persistent, const int *allowed)
{
	struct tally t = { 0 };
	uint64_t n = fault_first_step(), checked = n - 1;
	bool more;

	do {
		more = put_step(c, &(struct fault_plan){ .classes = classes, .nth = n,
							  .persistent = persistent, .error = error },
				allowed, &t);
		/* LeakSanitizer scans the whole heap (SQLite's caches too): every few steps. */
		if ((!more || n % LEAK_CHECK_EVERY == 0) && fault_leaks_found())
			fail_msg("%s: memory leaked in the steps that failed call %" PRIu64 " to %" PRIu64
				 "%s", name, checked + 1, n, persistent ? " (and later)" : "");
		if (n % LEAK_CHECK_EVERY == 0)
			checked = n;
		if (more && ++n > MAX_STEPS)
			fail_msg("%s: the fault loop does not end", name);
	} while (more);
	print_message("# %-10s %-10s %5" PRIu64 " fault points: %" PRIu64 " puts failed (%" PRIu64
		      " ENOMEM, %" PRIu64 " EIO, %" PRIu64 " ENOSPC; %" PRIu64
		      " kept by a crash), %" PRIu64 " absorbed\n",
		      name, persistent ? "persistent" : "once", n - 1, t.failed_puts, t.errors[0],
		      t.errors[1], t.errors[2], t.durable_anyway, t.absorbed);
}

/* -EIO too: SQLite may abandon the transaction on a failed allocation without reporting it to
 * the statement; the store then answers -EIO (sqlite_query.c, transaction_lost). */
static const int alloc_errors[] = { -ENOMEM, -EIO, 0 };
static const int io_errors[] = { -EIO, 0 };
static const int full_errors[] = { -ENOSPC, -EIO, 0 }; /* a failed fsync is EIO even then */

static void test_put_allocation_faults(void **state)
{
	put_loop(*state, "allocation", FAULT_ALLOC, 0, false, alloc_errors);
	put_loop(*state, "allocation", FAULT_ALLOC, 0, true, alloc_errors);
}

/*
 * A schema change by another process between puts: SQLite re-prepares each statement inside
 * the put's transaction, and a failed allocation there made SQLite 3.40 abandon the
 * transaction while reporting success, then run the statement again on its own (committed)
 * and the following ones too: half a batch stored, reported failed (the commit guard and the
 * transaction check of sqlite_pool.c and sqlite_query.c).
 */
static void test_put_allocation_faults_after_schema_change(void **state)
{
	struct ctx *c = *state;

	/* Some 4000 steps (each re-parses the schema): minutes under ASan. */
	if (!getenv("SYSOM_FAULT_SLOW")) {
		print_message("# set SYSOM_FAULT_SLOW=1 to run the loop after a schema change\n");
		skip();
	}
	c->schema_change = true;
	put_loop(c, "schema chg", FAULT_ALLOC, 0, false, alloc_errors);
}

/*
 * The store's side of that, without depending on how SQLite gets there: a write transaction
 * SQLite abandoned (here: a ROLLBACK behind the store's back) must fail the statement that
 * follows, commit nothing of it, and leave the store working.
 */
static void test_abandoned_transaction_commits_nothing(void **state)
{
	struct ctx *c = *state;
	struct sqlite_store *s = store__sqlite(c->store);
	struct store_put_result r;
	struct digest d;
	struct conn *w;
	int rc;

	store_reset(c);
	assert_int_equal(store__write_begin(s, &w), 0);
	assert_int_equal(store__query(w, &(struct store__query){
					 .sql = "UPDATE nodes SET batches = batches + 100", .once = true }),
			 0);
	assert_int_equal(sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	rc = store__query(w, &(struct store__query){
				 .sql = "UPDATE nodes SET batches = batches + 1000", .once = true });
	assert_int_equal(rc, -EIO);
	assert_int_equal(store__write_end(s, w, rc, true), -EIO);
	digest_take(c->check_db, &d);
	digest_assert(&d, &c->before, "after an abandoned transaction", "the state before it");
	assert_int_equal(store_batch_put(c->store, &c->batch, BATCH_HASH, RECEIVED_NS, &r), 0);
	assert_false(r.duplicate);
	digest_take(c->check_db, &d);
	digest_assert(&d, &c->after, "a put after an abandoned transaction", "a put without faults");
}

static void test_put_io_faults(void **state)
{
	put_loop(*state, "I/O error", FAULT_IO, EIO, false, io_errors);
	put_loop(*state, "I/O error", FAULT_IO, EIO, true, io_errors);
}

static void test_put_disk_full(void **state)
{
	put_loop(*state, "disk full", FAULT_IO, ENOSPC, false, full_errors);
	put_loop(*state, "disk full", FAULT_IO, ENOSPC, true, full_errors);
}

/* ---- retention under faults ------------------------------------------------------------------ */

/* After the put under test, a cutoff a day later: every time-series row, process and stack
 * goes, so that each part of retention meets the faults. */
#define RETENTION_CUTOFF_MS ((int64_t)((T0 + 86400ULL * 1000000000ULL) / 1000000))

static long long check_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	long long v;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* Rows naming a stack or process that is gone. */
static long long dangling(sqlite3 *db)
{
	return check_int(db,
		"SELECT (SELECT count(*) FROM samples WHERE user_stack NOT IN (SELECT id FROM stacks)"
		"  OR kernel_stack NOT IN (SELECT id FROM stacks)"
		"  OR process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM launches WHERE user_stack NOT IN (SELECT id FROM stacks)"
		"  OR kernel_stack NOT IN (SELECT id FROM stacks)"
		"  OR process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM nccl_call_chunks WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM gpu_kernels WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM os_threads WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM job_ranks WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM communicators WHERE process NOT IN (SELECT id FROM processes))");
}

/* The store as after the put of the batch under test: the first time by that put, which is
 * then kept (VACUUM INTO a second template), and later steps restore it from there as
 * store_reset does, which is much cheaper than putting the batch again at each of some 5,000
 * steps (the put's own faults are the put loops' business). */
static void retention_prepare(struct ctx *c)
{
	struct store_put_result r;
	char sql[256];

	if (c->after_dir[0]) {
		store_reset_with(c, c->after_sql);
		return;
	}
	store_reset(c);
	assert_int_equal(store_batch_put(c->store, &c->batch, BATCH_HASH, RECEIVED_NS, &r), 0);
	assert_int_equal(fixture_tmpdir_make(c->after_dir, sizeof(c->after_dir)), 0);
	snprintf(sql, sizeof(sql), "VACUUM INTO '%s/sysom.db'", c->after_dir);
	assert_int_equal(sqlite3_exec(c->check_db, sql, NULL, NULL, NULL), SQLITE_OK);
	reset_sql_build(c, c->after_dir, c->after_sql);
}

/*
 * One retention run with call `plan->nth` failing: it either succeeds, or fails with an error
 * of the fault's kind leaving a sound database (no row naming a deleted stack or process), and
 * a run without faults then ends where one without any fault ends.
 */
static bool retention_step(struct ctx *c, const struct digest *clean,
			   const struct fault_plan *plan, const int *allowed, uint64_t *failed)
{
	struct store_retention_stats st;
	struct fault_stats fs;
	struct digest d;
	char when[160];
	int rc;

	if (getenv("SYSOM_FAULT_TRACE"))
		print_message("# step %" PRIu64 "\n", plan->nth);
	retention_prepare(c);
	fault_arm(plan);
	rc = store_sqlite_retention(c->store, RETENTION_CUTOFF_MS, RETENTION_CUTOFF_MS, &st);
	fault_disarm();
	fault_stats_get(&fs);
	snprintf(when, sizeof(when), "retention: call %" PRIu64 "%s failed (%s), returned %d (%s)",
		 plan->nth, plan->persistent ? " and later" : "", fs.failed ? fs.first_failed : "none",
		 rc, sysom_strerror(rc));
	if (!fs.failed && rc)
		fail_msg("no fault reached, yet %s", when);
	if (rc) {
		bool ok = false;

		for (const int *a = allowed; *a; a++)
			ok |= rc == *a;
		if (!ok)
			fail_msg("%s: not an error of the store's table for this fault", when);
		(*failed)++;
		integrity_assert(c->check_db, when);
		if (dangling(c->check_db))
			fail_msg("%s: rows name a deleted stack or process", when);
		rc = store_sqlite_retention(c->store, RETENTION_CUTOFF_MS, RETENTION_CUTOFF_MS,
						    &st);
		if (rc)
			fail_msg("%s; the run without faults after it returned %d", when, rc);
	}
	digest_take(c->check_db, &d);
	digest_assert(&d, clean, when, "the state after retention without faults");
	return fs.failed != 0;
}

static void retention_loop(struct ctx *c, const char *name, unsigned classes, int error,
			   bool persistent, const int *allowed)
{
	struct store_retention_stats st;
	struct digest clean;
	uint64_t n = fault_first_step(), failed = 0;
	bool more;

	retention_prepare(c);
	assert_int_equal(store_sqlite_retention(c->store, RETENTION_CUTOFF_MS,
					RETENTION_CUTOFF_MS, &st), 0);
	assert_true(st.rows > 0 && st.processes > 0 && st.stacks > 0);
	digest_take(c->check_db, &clean);
	assert_int_equal(check_int(c->check_db, "SELECT count(*) FROM samples"), 0);
	do {
		more = retention_step(c, &clean, &(struct fault_plan){ .classes = classes, .nth = n,
								       .persistent = persistent,
								       .error = error },
				      allowed, &failed);
		if ((!more || n % LEAK_CHECK_EVERY == 0) && fault_leaks_found())
			fail_msg("%s: memory leaked by step %" PRIu64, name, n);
		if (more && ++n > MAX_STEPS)
			fail_msg("%s: the fault loop does not end", name);
	} while (more);
	print_message("# retention %-10s %-10s %5" PRIu64 " fault points: %" PRIu64 " runs failed\n",
		      name, persistent ? "persistent" : "once", n - 1, failed);
}

static void test_retention_faults(void **state)
{
	retention_loop(*state, "allocation", FAULT_ALLOC, 0, false, alloc_errors);
	retention_loop(*state, "I/O error", FAULT_IO, EIO, false, io_errors);
	retention_loop(*state, "disk full", FAULT_IO, ENOSPC, false, full_errors);
}

/* The batch's counters JSON, as jansson's json_dumps wrote it before (when it did not fail). */
static void test_counters_json_as_jansson_wrote_it(void **state)
{
	struct sysom_counter counters[SYSOM_COUNTER_MAX + 2];
	struct sysom_batch b;
	json_t *obj = json_object();
	char *want, *got;
	uint32_t n = 0;

	(void)state;
	memset(&b, 0, sizeof(b));
	for (uint16_t id = SYSOM_COUNTER_MAX; id >= 1; id--) /* unsorted; the last has no name */
		counters[n++] = (struct sysom_counter){ .id = id, .value = 1000003ULL * id };
	counters[0].value = UINT64_MAX; /* clamped to INT64_MAX */
	counters[n++] = (struct sysom_counter){ .id = 2, .value = 42 }; /* repeated: the last wins */
	b.counters = counters;
	b.counter_count = n;
	assert_non_null(obj);
	for (uint32_t i = 0; i < n; i++) {
		const char *name = sysom_counter_name(counters[i].id);
		char fallback[32];
		uint64_t v = counters[i].value;

		snprintf(fallback, sizeof(fallback), "counter_%u", counters[i].id);
		assert_int_equal(json_object_set_new(obj, name ? name : fallback,
						     json_integer(v > INT64_MAX ? INT64_MAX
									: (json_int_t)v)), 0);
	}
	want = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	got = store__counters_json(&b);
	assert_non_null(want);
	assert_non_null(got);
	assert_string_equal(got, want);
	free(want);
	free(got);
	json_decref(obj);
	b.counter_count = 0;
	got = store__counters_json(&b);
	assert_string_equal(got, "{}");
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_json_as_jansson_wrote_it),
		cmocka_unit_test_setup_teardown(test_put_allocation_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abandoned_transaction_commits_nothing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_put_allocation_faults_after_schema_change, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_put_io_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_put_disk_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retention_faults, setup, teardown),
	};

	/* The loops count calls and compare states; durability is not what they test, and an
	 * fsync on tmpfs is free (the crash copies stand for a crash). */
	if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
		setenv("TMPDIR", "/dev/shm", 1);
	/* SQLite's hooks go in before anything initializes it. */
	if (fault_sqlite_install()) {
		fprintf(stderr, "cannot install the SQLite fault hooks\n");
		return 1;
	}
	fault_jansson_install();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
