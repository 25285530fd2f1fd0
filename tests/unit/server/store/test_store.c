/* SPDX-License-Identifier: Apache-2.0 */
/* SQLite store: schema and migrations, batch round trips, dedupe, atomicity, disk full, busy. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "common/error.h"
#include "server/store/nccl_chunk.h"
#include "server/store/sqlite_internal.h"
#include "server/store/store.h"
#include "tests/support/batch_fixture.h"
#include "tests/unit/server/job_fixture.h"

#define T0 1700000000000000000ULL /* window start of the fixture batches, ns */

/* What migration 4 added, dropped to fake an older database. */
#define DROP_V4_TABLES                                                                       \
	"DROP TABLE os_cpus; DROP TABLE os_irqs; DROP TABLE os_threads; DROP TABLE diagnoses;"  \
	" DROP TABLE job_settings; DROP TABLE job_baselines;" DROP_V5_COLUMNS
/* What migration 15 added: the NCCL instances kept past the raw calls. */
#define DROP_V15_TABLES                                                                      \
	" DROP TABLE nccl_instances; DROP TABLE nccl_instance_processes;"                      \
	" DROP TABLE nccl_rollup_state;"
/* What migration 14 added: the per-minute rollups, and the above. */
#define DROP_V14_TABLES DROP_V15_TABLES " DROP TABLE sample_minutes; DROP TABLE offcpu_minutes;"
/* What migration 13 changed: NCCL calls back in per-call rows (schema 12's table), and the
 * above. */
#define DROP_V13_CHUNKS DROP_V14_TABLES " DROP TABLE nccl_call_chunks;" NCCL_CALLS_V12
#define NCCL_CALLS_V12                                                                       \
	" CREATE TABLE nccl_calls (id INTEGER PRIMARY KEY,"                                   \
	" node INTEGER NOT NULL REFERENCES nodes(id),"                                        \
	" process INTEGER NOT NULL REFERENCES processes(id), tid INTEGER NOT NULL,"           \
	" comm_key INTEGER NOT NULL, op INTEGER NOT NULL, seq INTEGER NOT NULL,"              \
	" entry_ns INTEGER NOT NULL, exit_ns INTEGER NOT NULL, count INTEGER NOT NULL,"       \
	" bytes INTEGER NOT NULL, peer INTEGER NOT NULL, result INTEGER NOT NULL,"            \
	" rank INTEGER NOT NULL, datatype INTEGER NOT NULL, redop INTEGER NOT NULL,"          \
	" flags INTEGER NOT NULL, stream INTEGER NOT NULL);"                                  \
	" CREATE INDEX nccl_calls_instance ON nccl_calls(comm_key, op, seq);"                 \
	" CREATE INDEX nccl_calls_process_time ON nccl_calls(process, entry_ns);"
/* What migration 12 added: the rank's GPU (wire 1.7), then the above. */
#define DROP_V12_COLUMNS DROP_V13_CHUNKS " ALTER TABLE job_ranks DROP COLUMN gpu_device;"
/* What migration 11 added: the role of a job's process (DataLoader workers) and its rank's pid,
 * then the above. */
#define DROP_V11_COLUMNS                                                                     \
	DROP_V12_COLUMNS                                                                     \
	" ALTER TABLE job_ranks DROP COLUMN role; ALTER TABLE job_ranks DROP COLUMN rank_pid;"
/* What migration 10 added: host signals, then the above. */
#define DROP_V10_TABLES DROP_V11_COLUMNS " DROP TABLE host_signals;"
/* What migration 9 added: GPU health. */
#define DROP_V9_TABLES DROP_V10_TABLES " DROP TABLE gpu_health;"
/* What migration 8 added: process identities, then the above. */
#define DROP_V8_TABLES DROP_V9_TABLES " DROP TABLE process_identities;"
/* What migration 7 added: off-CPU rows, then the above. */
#define DROP_V7_TABLES DROP_V8_TABLES " DROP TABLE offcpu;"
/* What migration 6 added: when each kernel symbol table was last used, then the above. */
#define DROP_V6_COLUMNS                                                                      \
	DROP_V7_TABLES " DROP INDEX kernel_symbol_tables_last_used;"                          \
	" ALTER TABLE kernel_symbol_tables DROP COLUMN last_used_ns;"
/* What migrations 5 and later added: the batches' content hash, then the above. */
#define DROP_V5_COLUMNS DROP_V6_COLUMNS " ALTER TABLE batches DROP COLUMN content_hash;"
/* The content hash put_fixture stores batches with (the store takes it as given). */
#define FIXTURE_HASH 0x5eed5eed5eed5eedULL

struct ctx {
	char dir[128];
	struct store *store;
};

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	char err[256];

	assert_non_null(c);
	assert_int_equal(fixture_tmpdir_make(c->dir, sizeof(c->dir)), 0);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	store_close(c->store);
	fixture_tmpdir_remove(c->dir);
	free(c);
	return 0;
}

/* Opens the database file directly (read-write, as another process would). */
static sqlite3 *raw_open(const char *dir)
{
	char path[256];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/sysom.db", dir);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

static long long raw_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	long long v;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static long long rows(const char *dir, const char *table)
{
	char sql[128];
	sqlite3 *db = raw_open(dir);
	long long n;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
	n = raw_int(db, sql);
	sqlite3_close(db);
	return n;
}

/* The NCCL calls stored (the sum of the chunks' call counts). */
static long long nccl_call_rows(const char *dir)
{
	sqlite3 *db = raw_open(dir);
	long long n = raw_int(db, "SELECT coalesce(sum(calls), 0) FROM nccl_call_chunks");

	sqlite3_close(db);
	return n;
}

/* Every NCCL call chunk decoded: sums over the calls, and the rows' own columns checked. */
struct chunk_sums {
	long long calls, chunks, groups, seq, entry_mod, peer, stream, in_flight, bad_ranges;
	long long unordered; /* calls entered before the previous one of their chunk */
	long long distinct_streams;
	long long max_calls, max_seq_span, max_entry_span; /* over the chunks */
};

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return (a > b) - (a < b);
}

static void nccl_chunk_sums(const char *dir, struct chunk_sums *out)
{
	sqlite3 *db = raw_open(dir);
	sqlite3_stmt *st;
	uint64_t *streams = NULL;
	size_t nstreams = 0;

	memset(out, 0, sizeof(*out));
	out->groups = raw_int(db, "SELECT count(*) FROM (SELECT DISTINCT process, comm_key, op"
				  " FROM nccl_call_chunks)");
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT seq_min, seq_max, entry_min_ns, entry_max_ns,"
						" calls, data FROM nccl_call_chunks", -1, &st, NULL),
			 SQLITE_OK);
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct nccl_chunk_call *k;
		size_t n;
		assert_int_equal(nccl_chunk_decode(sqlite3_column_blob(st, 5),
						   (size_t)sqlite3_column_bytes(st, 5), &k, &n), 0);
		assert_int_equal(n, sqlite3_column_int64(st, 4));
		long long smin = LLONG_MAX, smax = LLONG_MIN, emin = LLONG_MAX, emax = LLONG_MIN;
		streams = realloc(streams, sizeof(*streams) * (nstreams + n));
		assert_non_null(streams);
		for (size_t i = 0; i < n; i++) {
			out->seq += (long long)k[i].seq;
			out->entry_mod += (long long)(k[i].entry_ns % 1000000007);
			out->peer += k[i].peer;
			out->stream += (long long)k[i].stream;
			out->in_flight += (k[i].flags & SYSOM_NCCL_IN_FLIGHT) != 0;
			streams[nstreams++] = k[i].stream;
			smin = (long long)k[i].seq < smin ? (long long)k[i].seq : smin;
			smax = (long long)k[i].seq > smax ? (long long)k[i].seq : smax;
			emin = (long long)k[i].entry_ns < emin ? (long long)k[i].entry_ns : emin;
			emax = (long long)k[i].entry_ns > emax ? (long long)k[i].entry_ns : emax;
			out->unordered += i && k[i].entry_ns < k[i - 1].entry_ns;
		}
		out->bad_ranges += smin != sqlite3_column_int64(st, 0) ||
				   smax != sqlite3_column_int64(st, 1) ||
				   emin != sqlite3_column_int64(st, 2) ||
				   emax != sqlite3_column_int64(st, 3);
		out->calls += (long long)n;
		out->chunks++;
		out->max_calls = (long long)n > out->max_calls ? (long long)n : out->max_calls;
		out->max_seq_span = smax - smin > out->max_seq_span ? smax - smin : out->max_seq_span;
		out->max_entry_span = emax - emin > out->max_entry_span ? emax - emin
									 : out->max_entry_span;
		free(k);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	qsort(streams, nstreams, sizeof(*streams), cmp_u64);
	for (size_t i = 0; i < nstreams; i++)
		out->distinct_streams += !i || streams[i] != streams[i - 1];
	free(streams);
}

static const char *const tables[] = { "nodes", "batches", "objects", "processes", "stacks",
				      "samples", "node_counters", "job_ranks", "communicators",
				      "nccl_call_chunks", "launches" };
#define NTABLES (sizeof(tables) / sizeof(tables[0]))

static void all_rows(const char *dir, long long out[NTABLES])
{
	for (size_t i = 0; i < NTABLES; i++)
		out[i] = rows(dir, tables[i]);
}

static void put_fixture(struct store *s, const struct fixture_spec *spec, int want_rc,
			struct store_put_result *res)
{
	struct sysom_batch b;
	struct store_put_result r = { .samples = 12345 };

	assert_int_equal(fixture_batch_build(&b, spec), 0);
	int rc = store_batch_put(s, &b, FIXTURE_HASH, (int64_t)T0 + 31000000000LL, &r);
	if (rc != want_rc)
		fail_msg("store_batch_put: %d (%s), want %d", rc, sysom_strerror(rc), want_rc);
	if (res)
		*res = r;
	sysom_batch_free(&b);
}

static void test_schema_created_and_reopened(void **state)
{
	struct ctx *c = *state;
	char err[256];
	sqlite3 *db;

	assert_int_equal(store_schema_version(c->store), 15);
	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "PRAGMA user_version"), 15);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
				     " AND name IN ('nodes','batches','objects','processes','stacks',"
				     "'samples','node_counters','kernel_symbol_tables','kernel_symbols',"
				     "'job_ranks','communicators','nccl_call_chunks','launches')"), 13);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
				     " AND name IN ('nccl_call_chunks_instance','nccl_call_chunks_process_time',"
				     "'job_ranks_job','communicators_key','launches_time',"
				     "'launches_process_time')"), 6);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
				     " AND name LIKE 'samples_%'"), 3);
	assert_int_equal(raw_int(db, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
	sqlite3_close(db);
	/* Reopening applies nothing and keeps the data. */
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	put_fixture(c->store, &(struct fixture_spec){ .node = 1, .epoch = 1, .sequence = 1,
						       .window_start_ns = T0 }, 0, NULL);
	store_close(c->store);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(rows(c->dir, "samples"), 4);
}

static int file_mode(const char *dir, const char *name)
{
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) ? -1 : (int)(st.st_mode & 0777);
}

/* The database files are the owner's only (they hold every node's stacks and hostnames),
 * also when an older server left them readable by others. */
static void test_db_files_private(void **state)
{
	struct ctx *c = *state;
	char err[256], path[256];

	put_fixture(c->store, &(struct fixture_spec){ .node = 1, .epoch = 1, .sequence = 1,
						       .window_start_ns = T0 }, 0, NULL);
	assert_int_equal(file_mode(c->dir, "sysom.db"), 0600);
	assert_int_equal(file_mode(c->dir, "sysom.db-wal"), 0600);
	assert_int_equal(file_mode(c->dir, "sysom.db-shm"), 0600);
	store_close(c->store);
	c->store = NULL;
	snprintf(path, sizeof(path), "%s/sysom.db", c->dir);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(file_mode(c->dir, "sysom.db"), 0600);
	assert_int_equal(rows(c->dir, "samples"), 4);
}

static void test_newer_schema_refused(void **state)
{
	struct ctx *c = *state;
	struct store *s = NULL;
	char err[256] = "";
	sqlite3 *db;

	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &s, err, sizeof(err)), -SYSOM_EVERSION);
	assert_null(s);
	assert_non_null(strstr(err, "schema version 99"));
	assert_non_null(strstr(err, "newer"));
	/* The refused database is left as it was. */
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "PRAGMA user_version"), 99);
	sqlite3_close(db);
}

static void test_data_dir_errors(void **state)
{
	struct ctx *c = *state;
	struct store *s = NULL;
	char path[256], err[256] = "";
	FILE *f;

	/* A second server on the same directory is refused while the first runs. */
	assert_int_equal(store_sqlite_open(c->dir, NULL, &s, err, sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "in use"));
	/* A data dir that is a file. */
	snprintf(path, sizeof(path), "%s/plainfile", c->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(store_sqlite_open(path, NULL, &s, err, sizeof(err)), -ENOTDIR);
	assert_non_null(strstr(err, "not a directory"));
	/* A data dir whose parent does not exist. */
	snprintf(path, sizeof(path), "%s/missing/deeper", c->dir);
	assert_int_equal(store_sqlite_open(path, NULL, &s, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "cannot create data directory"));
	/* A file that is not a database. */
	snprintf(path, sizeof(path), "%s/notdb", c->dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/notdb/sysom.db", c->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("this is not an SQLite database, not even close; it has enough bytes to look", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/notdb", c->dir);
	assert_int_equal(store_sqlite_open(path, NULL, &s, err, sizeof(err)), -SYSOM_ECORRUPT);
	assert_null(s);
}

struct collected {
	int n;
	char hostname[64];
	uint64_t batches, last_sequence;
	uint64_t samples[8];
	uint32_t pids[8];
	struct store_stack_count rows[8];
};

static int collect_node(void *arg, const struct store_node *n)
{
	struct collected *c = arg;

	snprintf(c->hostname, sizeof(c->hostname), "%s", n->hostname);
	c->batches = n->batches;
	c->last_sequence = n->last_sequence;
	c->n++;
	return 0;
}

static int collect_process(void *arg, const struct store_process *p)
{
	struct collected *c = arg;

	if (c->n < 8) {
		c->pids[c->n] = p->pid;
		c->samples[c->n] = p->samples;
	}
	c->n++;
	return 0;
}

static int collect_row(void *arg, const struct store_stack_count *r)
{
	struct collected *c = arg;

	if (c->n < 8) {
		c->rows[c->n] = *r;
		c->rows[c->n].comm = NULL; /* borrowed: not valid after the callback */
	}
	c->n++;
	return 0;
}

static void test_round_trip(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct collected col = { 0 };
	struct store_sample_filter all = { .from_ms = T0 / 1000000, .to_ms = T0 / 1000000 + 60000 };
	uint64_t total = 0;

	put_fixture(c->store, &(struct fixture_spec){ .node = 7, .epoch = 0xfeedULL << 48,
						       .sequence = 3, .window_start_ns = T0,
						       .hostname = "gpu-7" }, 0, &res);
	assert_false(res.duplicate);
	assert_int_equal(res.samples, FIXTURE_SAMPLES);
	assert_int_equal(res.sample_rows, 4);
	assert_int_equal(res.new_stacks, 3);
	assert_int_equal(res.processes, 2);

	assert_int_equal(store_nodes_list(c->store, collect_node, &col), 0);
	assert_int_equal(col.n, 1);
	assert_string_equal(col.hostname, "gpu-7");
	assert_int_equal(col.batches, 1);
	assert_int_equal(col.last_sequence, 3);

	memset(&col, 0, sizeof(col));
	assert_int_equal(store_processes_list(c->store, &all, 100, collect_process, &col), 0);
	assert_int_equal(col.n, 2);
	assert_int_equal(col.pids[0], FIXTURE_PID_PYTHON);
	assert_int_equal(col.samples[0], 13);
	assert_int_equal(col.pids[1], FIXTURE_PID_NCCL);
	assert_int_equal(col.samples[1], 9);

	memset(&col, 0, sizeof(col));
	assert_int_equal(store_stacks_aggregate(c->store, &all, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, FIXTURE_SAMPLES);
	assert_int_equal(col.n, 4);
	assert_int_equal(col.rows[0].count, 10); /* ordered by count */
	assert_int_equal(col.rows[0].pid, FIXTURE_PID_PYTHON);
	assert_int_not_equal(col.rows[0].user_stack, STORE_STACK_NONE);
	assert_int_not_equal(col.rows[0].kernel_stack, STORE_STACK_NONE);
	assert_int_equal(col.rows[1].count, 5);
	assert_int_equal(col.rows[1].user_stack, STORE_STACK_NONE);
	assert_int_equal(col.rows[1].kernel_stack, col.rows[0].kernel_stack);

	/* The stack reads back with store-wide object ids, leaf first. */
	struct store_stack *stk = NULL;
	struct store_object obj = { 0 };
	assert_int_equal(store_stack_get(c->store, col.rows[0].user_stack, &stk), 0);
	assert_int_equal(stk->kind, SYSOM_STACK_USER);
	assert_int_equal(stk->nframes, 2);
	assert_int_equal(stk->frames[0].offset, 0x29d90);
	assert_int_equal(store_object_get(c->store, stk->frames[0].object, &obj), 0);
	assert_int_equal(obj.id.kind, SYSOM_OBJECT_ELF);
	assert_memory_equal(obj.id.bytes, FIXTURE_LIBC_ID, 20);
	assert_string_equal(obj.name, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	store_object_release(&obj);
	free(stk);
	assert_int_equal(store_stack_get(c->store, 12345, &stk), -ENOENT);

	/* Limit: the total still counts everything. */
	memset(&col, 0, sizeof(col));
	assert_int_equal(store_stacks_aggregate(c->store, &all, 1, collect_row, &col, &total), 0);
	assert_int_equal(col.n, 1);
	assert_int_equal(total, FIXTURE_SAMPLES);

	/* Time filter: only the +10 s samples. */
	struct store_sample_filter late = all;
	late.from_ms = T0 / 1000000 + 7000;
	memset(&col, 0, sizeof(col));
	assert_int_equal(store_stacks_aggregate(c->store, &late, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 9);
	/* Node filter by hostname and by id; an unknown node matches nothing. */
	struct store_sample_filter by_node = all;
	by_node.node = "gpu-7";
	assert_int_equal(store_stacks_aggregate(c->store, &by_node, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, FIXTURE_SAMPLES);
	by_node.node = "07070707070707070707070707070707";
	assert_int_equal(store_stacks_aggregate(c->store, &by_node, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, FIXTURE_SAMPLES);
	by_node.node = "gpu-8";
	assert_int_equal(store_stacks_aggregate(c->store, &by_node, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 0);
	/* comm matches the process comm or the thread comm. */
	struct store_sample_filter by_comm = all;
	by_comm.comm = "nccl-net";
	assert_int_equal(store_stacks_aggregate(c->store, &by_comm, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 9);
	by_comm.comm = "python3";
	assert_int_equal(store_stacks_aggregate(c->store, &by_comm, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 13);
	struct store_sample_filter by_pid = all;
	by_pid.has_pid = true;
	by_pid.pid = FIXTURE_PID_NCCL;
	assert_int_equal(store_stacks_aggregate(c->store, &by_pid, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 9);
}


/* A version 1 database (before jobs) is migrated to the current version and keeps its data. */

/* Off-CPU rows: stored, aggregated in microseconds per stack, and merged with the CPU samples
 * (weighted by the node's sampling period) in the wall-clock view of one process. */
static void test_offcpu_round_trip(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct collected col = { 0 };
	struct store_sample_filter all = { .from_ms = T0 / 1000000, .to_ms = T0 / 1000000 + 60000 };
	struct sysom_batch b;
	uint32_t kstack = SYSOM_WIRE_NONE, ustack = SYSOM_WIRE_NONE, comm;
	uint64_t total = 0;

	assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){ .node = 3, .epoch = 1,
									  .sequence = 1,
									  .window_start_ns = T0 }), 0);
	for (uint32_t i = 0; i < b.stack_count; i++) {
		if (b.stacks[i].kind == SYSOM_STACK_KERNEL && kstack == SYSOM_WIRE_NONE)
			kstack = i;
		if (b.stacks[i].kind == SYSOM_STACK_USER && ustack == SYSOM_WIRE_NONE)
			ustack = i;
	}
	assert_int_not_equal(kstack, SYSOM_WIRE_NONE);
	assert_int_not_equal(ustack, SYSOM_WIRE_NONE);
	assert_int_equal(b.processes[0].tgid, FIXTURE_PID_PYTHON);
	assert_int_equal(sysom_batch_intern_cstring(&b, "dataloader", &comm), 0);
	struct sysom_offcpu o = { .process = 0, .tid = 4250, .time_offset_ms = 1000,
				  .kernel_stack = kstack, .user_stack = ustack, .thread_comm = comm,
				  .state = SYSOM_OFFCPU_SLEEP, .count = 3, .blocked_ns = 30000500,
				  .max_ns = 20000000 };
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), 0);
	o.user_stack = SYSOM_WIRE_NONE;
	o.state = SYSOM_OFFCPU_DISK;
	o.count = 1;
	o.blocked_ns = o.max_ns = 7000000;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), 0);
	assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH, (int64_t)T0, &res), 0);
	sysom_batch_free(&b);
	assert_int_equal(rows(c->dir, "offcpu"), 2);

	assert_int_equal(store_offcpu_aggregate(c->store, &all, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 37000); /* µs, of 37000500 ns */
	assert_int_equal(col.n, 2);
	assert_int_equal(col.rows[0].count, 30000);
	assert_int_equal(col.rows[0].pid, FIXTURE_PID_PYTHON);
	assert_int_not_equal(col.rows[0].user_stack, STORE_STACK_NONE);
	assert_int_equal(col.rows[1].count, 7000);
	assert_int_equal(col.rows[1].user_stack, STORE_STACK_NONE);
	assert_int_equal(col.rows[1].kernel_stack, col.rows[0].kernel_stack);
	/* The thread name filters too; another process has none. */
	struct store_sample_filter f = all;
	f.comm = "dataloader";
	memset(&col, 0, sizeof(col));
	assert_int_equal(store_offcpu_aggregate(c->store, &f, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 37000);
	f = all;
	f.has_pid = true;
	f.pid = FIXTURE_PID_NCCL;
	memset(&col, 0, sizeof(col));
	assert_int_equal(store_offcpu_aggregate(c->store, &f, 100, collect_row, &col, &total), 0);
	assert_int_equal(total, 0);
	assert_int_equal(col.n, 0);

	/* Wall clock of the python process: its 13 samples at 99 Hz x 10% (101010.1 µs each)
	 * plus its off-CPU time. */
	f.pid = FIXTURE_PID_PYTHON;
	memset(&col, 0, sizeof(col));
	assert_int_equal(store_wall_aggregate(c->store, &f, 100, collect_row, &col, &total), 0);
	double want = (13 * 1e15 / (99.0 * 100000.0) + 37000500.0) / 1000.0;
	if ((double)total > want + 1 || (double)total + col.n + 1 < want) /* rounded per group */
		fail_msg("wall total %llu us, want %.0f", (unsigned long long)total, want);
	uint64_t sum = 0;
	for (int i = 0; i < col.n && i < 8; i++)
		sum += col.rows[i].count;
	assert_true(col.n <= 8);
	assert_int_equal(sum, total); /* the total is the groups' sum */
}

static int collect_launch_noop(void *arg, const struct store_launch_count *l)
{
	(void)arg;
	(void)l;
	return 0;
}

static int collect_identity(void *arg, const struct store_process *p)
{
	struct collected *c = arg;

	if (c->n < 8) {
		c->pids[c->n] = p->pid;
		c->samples[c->n] = p->identity.known;
		if (p->identity.known)
			snprintf(c->hostname, sizeof(c->hostname), "%s/%s/%s/%s", p->identity.runtime,
				 p->identity.pod_namespace, p->identity.pod_name, p->identity.unit);
	}
	c->n++;
	return 0;
}

/* Identities (wire 1.5) are stored per process, shown in the process list and filter every
 * sample query; a newer batch without the pod name keeps the name learnt before. */
static void test_identity_round_trip(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct collected col = { 0 };
	struct store_sample_filter all = { .from_ms = T0 / 1000000, .to_ms = T0 / 1000000 + 60000 };
	struct store_sample_filter f;
	struct sysom_batch b;
	uint64_t total = 0;
	const char *cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	const char *uid = "6f9d1c2e-1b2a-4c3d-8e4f-0a1b2c3d4e5f";

	for (int round = 0; round < 2; round++) {
		assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
						 .node = 3, .epoch = 1, .sequence = 1 + round,
						 .window_start_ns = T0 + round * 1000000000ULL }), 0);
		assert_int_equal(b.processes[0].tgid, FIXTURE_PID_PYTHON);
		struct sysom_identity id = { .process = 0, .runtime = SYSOM_RUNTIME_CONTAINERD };
		assert_int_equal(sysom_batch_intern_cstring(&b, cid, &id.container_id), 0);
		assert_int_equal(sysom_batch_intern_cstring(&b, uid, &id.pod_uid), 0);
		assert_int_equal(sysom_batch_intern_cstring(&b, round ? "" : "training",
							    &id.pod_namespace), 0);
		assert_int_equal(sysom_batch_intern_cstring(&b, round ? "" : "llama-0",
							    &id.pod_name), 0);
		assert_int_equal(sysom_batch_intern_cstring(&b, "cri-containerd-x.scope", &id.unit), 0);
		assert_int_equal(sysom_batch_set_identity(&b, &id), 0);
		assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH + (uint64_t)round,
						 (int64_t)T0, &res), 0);
		sysom_batch_free(&b);
	}
	assert_int_equal(rows(c->dir, "process_identities"), 1);

	assert_int_equal(store_processes_list(c->store, &all, 100, collect_identity, &col), 0);
	assert_int_equal(col.n, 2);
	assert_int_equal(col.pids[0], FIXTURE_PID_PYTHON);
	assert_int_equal(col.samples[0], 1); /* known */
	assert_string_equal(col.hostname, "containerd/training/llama-0/cri-containerd-x.scope");
	assert_int_equal(col.pids[1], FIXTURE_PID_NCCL);
	assert_int_equal(col.samples[1], 0); /* no identity: unknown, not an empty one */

	uint64_t want = 0;
	assert_int_equal(store_stacks_aggregate(c->store, &all, 100, collect_row, &col, &want), 0);
	const struct {
		const char *ns, *pod, *container, *unit;
		uint64_t slurm;
		bool match;
	} cases[] = {
		{ "training", NULL, NULL, NULL, 0, true },
		{ NULL, "llama-0", NULL, NULL, 0, true },
		{ NULL, "6F9D1C2E-1B2A-4C3D-8E4F-0A1B2C3D4E5F", NULL, NULL, 0, true },
		{ "training", "llama-0", "0123456789ab", NULL, 0, true },
		{ NULL, NULL, cid, "cri-containerd-x.scope", 0, true },
		{ NULL, NULL, "0123456789a", NULL, 0, false }, /* too short for a prefix */
		{ "other", NULL, NULL, NULL, 0, false },
		{ NULL, "llama-1", NULL, NULL, 0, false },
		{ NULL, NULL, NULL, NULL, 42, false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		f = all;
		f.pod_namespace = cases[i].ns;
		f.pod = cases[i].pod;
		f.container = cases[i].container;
		f.unit = cases[i].unit;
		f.has_slurm_job = cases[i].slurm != 0;
		f.slurm_job = cases[i].slurm;
		memset(&col, 0, sizeof(col));
		assert_int_equal(store_processes_list(c->store, &f, 100, collect_identity, &col), 0);
		if (col.n != (cases[i].match ? 1 : 0))
			fail_msg("case %zu: %d processes", i, col.n);
		if (cases[i].match)
			assert_int_equal(col.pids[0], FIXTURE_PID_PYTHON);
		assert_int_equal(store_stacks_aggregate(c->store, &f, 100, collect_row, &col, &total),
				 0);
		assert_true(cases[i].match ? total > 0 && total < want : total == 0);
		assert_int_equal(store_launches_aggregate(c->store, &f, 100, collect_launch_noop, NULL,
							  &total), 0);
	}
}

static void test_migration_from_v1(void **state)
{
	struct ctx *c = *state;
	char err[256];
	sqlite3 *db;

	put_fixture(c->store, &(struct fixture_spec){ .node = 1, .epoch = 1, .sequence = 1,
						       .window_start_ns = T0 }, 0, NULL);
	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, DROP_V4_TABLES " DROP TABLE job_ranks; DROP TABLE communicators;"
					  " DROP TABLE nccl_calls; DROP TABLE launches;"
					  " DROP TABLE gpu_kernels; DROP TABLE nccl_profiles;"
					  " DROP TABLE nccl_links; PRAGMA user_version = 1;", NULL, NULL,
				      NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "PRAGMA user_version"), 15);
	sqlite3_close(db);
	assert_int_equal(rows(c->dir, "samples"), 4);
	assert_int_equal(rows(c->dir, "launches"), 0);
	assert_int_equal(rows(c->dir, "gpu_kernels"), 0);
}

/* A version 2 database (before GPU-side timing) gains the three tables and stores them. */
struct gpu_counts {
	size_t kernels, links;
};

static int count_kernel(void *arg, const struct store_gpu_kernel_row *r)
{
	(void)r;
	((struct gpu_counts *)arg)->kernels++;
	return 0;
}

static int count_link(void *arg, const struct store_nccl_link_row *r)
{
	(void)r;
	((struct gpu_counts *)arg)->links++;
	return 0;
}

static void test_migration_from_v2(void **state)
{
	struct ctx *c = *state;
	char err[256];
	sqlite3 *db;
	struct store_put_result res;

	put_fixture(c->store, &(struct fixture_spec){ .node = 1, .epoch = 1, .sequence = 1,
						       .window_start_ns = T0 }, 0, NULL);
	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, DROP_V4_TABLES " DROP TABLE gpu_kernels;"
					  " DROP TABLE nccl_profiles; DROP TABLE nccl_links;"
					  " PRAGMA user_version = 2;", NULL,
				      NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(store_schema_version(c->store), 15);
	struct job_spec js = { .base = { .node = 2, .epoch = 1, .sequence = 1,
					 .window_start_ns = T0 },
			       .job = "job-42", .first_rank = 0, .local_ranks = 2, .instances = 1,
			       .skip_rank = -1, .gpu_timing = true, .slow_rank = -1 };
	struct sysom_batch b;
	assert_int_equal(job_batch_build(&b, &js), 0);
	assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH, (int64_t)T0, &res), 0);
	sysom_batch_free(&b);
	assert_int_equal(res.gpu_kernel_rows, 6);
	assert_int_equal(res.nccl_profile_rows, 2);
	assert_int_equal(res.nccl_link_rows, 2);
	assert_int_equal(rows(c->dir, "gpu_kernels"), 6);
	assert_int_equal(rows(c->dir, "nccl_links"), 2);

	/* A kind without a callback is not read, nor counted as truncated. */
	struct gpu_counts n = { 0 };
	struct store_gpu_visitor kernels_only = { .kernel = count_kernel, .arg = &n };
	struct store_gpu_visitor links_only = { .link = count_link, .arg = &n };
	struct store_gpu_filter gf = { .job = "job-42", .from_ms = 0, .to_ms = INT64_MAX / 2 };
	bool truncated = true;
	assert_int_equal(store_job_gpu(c->store, &gf, 100, &kernels_only, &truncated), 0);
	assert_int_equal(n.kernels, 6);
	assert_int_equal(n.links, 0);
	assert_false(truncated);
	n.kernels = 0;
	assert_int_equal(store_job_gpu(c->store, &gf, 2, &links_only, &truncated), 0);
	assert_int_equal(n.kernels + n.links, 2);
	assert_false(truncated); /* 6 kernel rows over 2, but not read */
	assert_int_equal(store_job_gpu(c->store, &gf, 2, &kernels_only, &truncated), 0);
	assert_true(truncated);
}

static void put_job(struct store *s, const struct job_spec *js, struct store_put_result *res)
{
	struct sysom_batch b;

	assert_int_equal(job_batch_build(&b, js), 0);
	assert_int_equal(store_batch_put(s, &b, FIXTURE_HASH, (int64_t)T0 + 31000000000LL, res), 0);
	sysom_batch_free(&b);
}

static struct job_spec job_node(uint8_t node, int skip_rank)
{
	return (struct job_spec){ .base = { .node = node, .epoch = 1, .sequence = 1,
					    .window_start_ns = T0 },
				  .job = "job-42", .first_rank = 4 * (node - 1), .local_ranks = 4,
				  .instances = 3, .skip_rank = skip_rank, .launches = true };
}

struct job_rows {
	int n;
	struct store_job jobs[4];
	char job[4][32];
	int32_t ranks[16];
	int32_t gpus[16];
	uint32_t pids[16];
	uint64_t keys[16];
	int32_t comm_ranks[16];
	struct store_collective_call calls[32];
	struct store_launch_count launches[8];
	char kernels[8][64];
};

static int collect_job(void *arg, const struct store_job *j)
{
	struct job_rows *r = arg;

	if (r->n < 4) {
		r->jobs[r->n] = *j;
		snprintf(r->job[r->n], sizeof(r->job[0]), "%s", j->job);
	}
	r->n++;
	return 0;
}

static int collect_rank(void *arg, const struct store_job_rank *j)
{
	struct job_rows *r = arg;

	if (r->n < 16) {
		r->ranks[r->n] = j->rank;
		r->gpus[r->n] = j->gpu_device;
		r->pids[r->n] = j->pid;
		assert_string_equal(j->groups[0] ? "ok" : "empty", "ok");
		assert_string_equal(j->master, "10.0.0.1:29500");
	}
	r->n++;
	return 0;
}

static int collect_comm(void *arg, const struct store_job_communicator *m)
{
	struct job_rows *r = arg;

	if (r->n < 16) {
		r->keys[r->n] = m->key;
		r->comm_ranks[r->n] = m->rank;
	}
	r->n++;
	return 0;
}

static int collect_call(void *arg, const struct store_collective_call *k)
{
	struct job_rows *r = arg;

	if (r->n < 32) {
		r->calls[r->n] = *k;
		r->calls[r->n].hostname = NULL;
	}
	r->n++;
	return 0;
}

static int collect_launch(void *arg, const struct store_launch_count *l)
{
	struct job_rows *r = arg;

	if (r->n < 8) {
		r->launches[r->n] = *l;
		snprintf(r->kernels[r->n], sizeof(r->kernels[0]), "%s", l->kernel);
		r->launches[r->n].comm = r->launches[r->n].kernel = NULL;
	}
	r->n++;
	return 0;
}

struct host_rows {
	int n;
	char node[4][33];
	int64_t time_ms[8];
	uint16_t signal[8];
	double value[8];
};

static int collect_host(void *arg, const struct store_host_signal_row *h)
{
	struct host_rows *r = arg;

	if (r->n < 8) {
		snprintf(r->node[r->n % 4], sizeof(r->node[0]), "%s", h->node_id);
		r->time_ms[r->n] = h->time_ms;
		r->signal[r->n] = h->signal;
		r->value[r->n] = h->value;
	}
	r->n++;
	return 0;
}

/* HOST_SIGNALS rows are stored per (batch, signal) and listed for the job's nodes only. */
static void test_host_signals_round_trip(void **state)
{
	struct ctx *c = *state;
	struct sysom_batch b;
	struct store_put_result res;
	struct host_rows r = { 0 };
	struct store_host_filter f = { .job = "job-42", .from_ms = 0, .to_ms = INT64_MAX };
	bool truncated;

	for (uint8_t node = 1; node <= 2; node++) {
		struct job_spec js = job_node(node, -1);
		assert_int_equal(job_batch_build(&b, &js), 0);
		assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_TCP_RETRANS_SEGS,
							     node * 10.5), 0);
		assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_CPU_MHZ, 2400), 0);
		assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH,
						 (int64_t)T0 + 31000000000LL, &res), 0);
		sysom_batch_free(&b);
	}
	/* A node with no rank of the job: not listed. */
	struct fixture_spec other = { .node = 9, .epoch = 1, .sequence = 1, .window_start_ns = T0 };
	assert_int_equal(fixture_batch_build(&b, &other), 0);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_CPU_MHZ, 1), 0);
	assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH, (int64_t)T0, &res), 0);
	sysom_batch_free(&b);
	assert_int_equal(rows(c->dir, "host_signals"), 5);

	assert_int_equal(store_host_signals_list(c->store, &f, 100, collect_host, &r, &truncated), 0);
	assert_false(truncated);
	assert_int_equal(r.n, 4);
	assert_string_equal(r.node[0], "01010101010101010101010101010101");
	assert_int_equal(r.signal[0], SYSOM_HOST_CPU_MHZ); /* by node, time, signal */
	assert_true(r.value[0] == 2400);
	assert_int_equal(r.signal[1], SYSOM_HOST_TCP_RETRANS_SEGS);
	assert_true(r.value[1] == 10.5);
	assert_string_equal(r.node[2], "02020202020202020202020202020202");
	assert_true(r.value[3] == 21);
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_host_signals_list(c->store, &f, 3, collect_host, &r, &truncated), 0);
	assert_true(truncated);
	assert_int_equal(r.n, 3);
	f.job = "job-43";
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_host_signals_list(c->store, &f, 100, collect_host, &r, &truncated), 0);
	assert_int_equal(r.n, 0);
}

/* Every call of a collectives answer as one line of text. */
static int call_line(void *arg, const struct store_collective_call *k)
{
	fprintf(arg, "%llx %u %llu first=%lld n=%d r=%d %lld-%lld %llu %llu %d %d %u/%u %s %s %d\n",
		(unsigned long long)k->comm_key, k->op, (unsigned long long)k->seq,
		(long long)k->first_entry_ns, k->nranks, k->rank, (long long)k->entry_ns,
		(long long)k->exit_ns, (unsigned long long)k->count, (unsigned long long)k->bytes,
		k->peer, k->result, k->pid, k->tid, k->node_id, k->hostname, k->job_rank);
	return 0;
}

static char *collectives_text(struct store *s, const struct store_collective_filter *f,
			      uint32_t max)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	assert_non_null(out);
	assert_int_equal(store_collectives_list(s, f, max, call_line, out), 0);
	fclose(out);
	return text;
}

/*
 * A schema-12 database kept one row per NCCL call: it opens with its calls moved into chunks
 * (in the migration's transaction), the per-call table gone, and every collectives answer
 * (whole range, a bounded one, the latest instances) the same as before the move.
 */
static void test_migration_nccl_calls_to_chunks(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct job_spec n1 = job_node(1, -1), n2 = job_node(2, 5);
	struct store_collective_filter all = { .job = "job-42", .from_ns = 0, .to_ns = INT64_MAX };
	struct store_collective_filter part = { .job = "job-42", .from_ns = (int64_t)T0 + 1500000000LL,
						.to_ns = INT64_MAX };
	struct store_collective_filter latest = { .job = "job-42", .from_ns = 0,
						  .to_ns = INT64_MAX, .latest = true };
	char err[256];
	sqlite3_stmt *st, *ins;
	sqlite3 *db;

	put_job(c->store, &n1, &res);
	put_job(c->store, &n2, &res);
	char *want_all = collectives_text(c->store, &all, 100);
	char *want_part = collectives_text(c->store, &part, 100);
	char *want_latest = collectives_text(c->store, &latest, 2);
	assert_true(strlen(want_all) > 0 && strlen(want_part) < strlen(want_all));
	store_close(c->store);
	c->store = NULL;

	/* Back to schema 12: each chunk's calls as rows, the chunks gone. */
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, "BEGIN;" NCCL_CALLS_V12, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT node, process, comm_key, op, data FROM"
						" nccl_call_chunks ORDER BY id", -1, &st, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO nccl_calls (node, process, tid,"
						" comm_key, op, seq, entry_ns, exit_ns, count, bytes,"
						" peer, result, rank, datatype, redop, flags, stream)"
						" VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", -1, &ins,
					    NULL), SQLITE_OK);
	long long moved = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct nccl_chunk_call *k;
		size_t n;
		assert_int_equal(nccl_chunk_decode(sqlite3_column_blob(st, 4),
						   (size_t)sqlite3_column_bytes(st, 4), &k, &n), 0);
		for (size_t i = 0; i < n; i++) {
			const sqlite3_int64 v[] = {
				sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), k[i].tid,
				sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
				(sqlite3_int64)k[i].seq, (sqlite3_int64)k[i].entry_ns,
				(sqlite3_int64)k[i].exit_ns, (sqlite3_int64)k[i].count,
				(sqlite3_int64)k[i].bytes, k[i].peer, k[i].result, k[i].rank,
				k[i].datatype, k[i].redop, k[i].flags, (sqlite3_int64)k[i].stream,
			};
			for (int col = 0; col < 17; col++)
				sqlite3_bind_int64(ins, col + 1, v[col]);
			assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
			sqlite3_reset(ins);
			moved++;
		}
		free(k);
	}
	sqlite3_finalize(st);
	sqlite3_finalize(ins);
	assert_int_equal(sqlite3_exec(db, "DROP TABLE nccl_call_chunks;" DROP_V14_TABLES
					  " PRAGMA user_version = 12; COMMIT;", NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(moved, 8 * 5 - 1);
	sqlite3_close(db);

	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(store_schema_version(c->store), 15);
	assert_int_equal(nccl_call_rows(c->dir), moved);
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'nccl_calls%'"), 0);
	sqlite3_close(db);
	char *got_all = collectives_text(c->store, &all, 100);
	char *got_part = collectives_text(c->store, &part, 100);
	char *got_latest = collectives_text(c->store, &latest, 2);
	assert_string_equal(got_all, want_all);
	assert_string_equal(got_part, want_part);
	assert_string_equal(got_latest, want_latest);
	/* Read one instance at a time (as a job of a million ranks would be): the same answers. */
	store__sqlite_collectives_slice_set(1);
	char *sliced_all = collectives_text(c->store, &all, 100);
	char *sliced_latest = collectives_text(c->store, &latest, 2);
	store__sqlite_collectives_slice_set(0);
	assert_string_equal(sliced_all, want_all);
	assert_string_equal(sliced_latest, want_latest);
	free(sliced_all);
	free(sliced_latest);
	free(got_all);
	free(got_part);
	free(got_latest);
	free(want_all);
	free(want_part);
	free(want_latest);
}

/* Many NCCL calls in one batch (they go in multi-row statements, the tail row by row) with
 * in-flight ones among them: every returned call is stored once, field for field, and none of
 * the in-flight ones. */
static void test_many_nccl_calls(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct sysom_batch b;
	struct job_spec js = job_node(1, -1);
	long long want_rows = 0, want_seq = 0, want_entry = 0, want_peer = 0, want_stream = 0;

	js.instances = 40; /* 4 ranks x (40 + 2) = 168 calls: 5 groups of 32 and 8 */
	assert_int_equal(job_batch_build(&b, &js), 0);
	assert_int_equal(b.nccl_call_count, 168);
	for (uint32_t i = 0; i < b.nccl_call_count; i++) {
		struct sysom_nccl_call *k = &b.nccl_calls[i];
		if (i % 7 == 3) {
			k->flags |= SYSOM_NCCL_IN_FLIGHT;
			continue;
		}
		k->stream = 0x1000 + i; /* a distinct value per call, to see each one arrive */
		want_rows++;
		want_seq += (long long)k->seq;
		want_entry += (long long)(k->entry_ns % 1000000007);
		want_peer += k->peer;
		want_stream += (long long)k->stream;
	}
	/* Backwards: every group's calls out of entry order, which the store puts back. */
	for (uint32_t i = 0, j = b.nccl_call_count - 1; i < j; i++, j--) {
		struct sysom_nccl_call t = b.nccl_calls[i];
		b.nccl_calls[i] = b.nccl_calls[j];
		b.nccl_calls[j] = t;
	}
	assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH, (int64_t)T0 + 31000000000LL,
					 &res), 0);
	sysom_batch_free(&b);
	struct chunk_sums got = { 0 };
	nccl_chunk_sums(c->dir, &got);
	assert_int_equal(got.calls, want_rows);
	assert_int_equal(got.distinct_streams, want_rows);
	assert_int_equal(got.seq, want_seq);
	assert_int_equal(got.entry_mod, want_entry);
	assert_int_equal(got.peer, want_peer);
	assert_int_equal(got.stream, want_stream);
	assert_int_equal(got.in_flight, 0);
	/* One chunk per (process, communicator, op), its ranges those of its calls. */
	assert_int_equal(got.chunks, got.groups);
	assert_int_equal(got.bad_ranges, 0);
	assert_int_equal(got.unordered, 0);
}

/*
 * A group past a chunk's bounds is cut into chunks that keep them: 4 ranks x 22,000 AllReduce
 * calls whose seq jumps by 70,000 after 2,000 calls (past NCCL_CHUNK_MAX_SEQ_SPAN) and whose
 * entry times jump by 61 s after 4,000 (past NCCL_CHUNK_MAX_ENTRY_SPAN_NS), the last 18,000
 * then past NCCL_CHUNK_MAX_CALLS: four chunks per rank's AllReduce group, every call kept.
 */
static void test_nccl_calls_cut_at_chunk_bounds(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct sysom_batch b;
	struct job_spec js = job_node(1, -1);
	long long want_rows = 0, want_seq = 0, want_entry = 0, all_reduce_groups = 4;

	js.instances = 22000;
	assert_int_equal(job_batch_build(&b, &js), 0);
	for (uint32_t i = 0; i < b.nccl_call_count; i++) {
		struct sysom_nccl_call *k = &b.nccl_calls[i];
		if (k->op == SYSOM_NCCL_ALL_REDUCE) {
			uint64_t n = k->seq;
			k->entry_ns = T0 + n * 1000000ULL + (n >= 4000 ? 61000000000ULL : 0);
			k->exit_ns = k->entry_ns + 500000;
			k->seq = n + (n >= 2000 ? 70000 : 0);
		}
		want_rows++;
		want_seq += (long long)k->seq;
		want_entry += (long long)(k->entry_ns % 1000000007);
	}
	assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH, (int64_t)T0 + 31000000000LL,
					 &res), 0);
	sysom_batch_free(&b);
	struct chunk_sums got = { 0 };
	nccl_chunk_sums(c->dir, &got);
	assert_int_equal(got.calls, want_rows);
	assert_int_equal(got.seq, want_seq);
	assert_int_equal(got.entry_mod, want_entry);
	assert_int_equal(got.bad_ranges, 0);
	assert_int_equal(got.unordered, 0);
	assert_int_equal(got.chunks, got.groups + 3 * all_reduce_groups);
	assert_int_equal(got.max_calls, NCCL_CHUNK_MAX_CALLS);
	assert_true(got.max_seq_span <= NCCL_CHUNK_MAX_SEQ_SPAN);
	assert_true(got.max_entry_span <= NCCL_CHUNK_MAX_ENTRY_SPAN_NS);
}

/* The rank's GPU (wire 1.7): a later window of node 2 that does not know the GPUs keeps the
 * known ones; a later known one replaces them. */
static void test_job_rank_gpu_device(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct job_rows r;
	struct job_spec n2 = job_node(2, -1);

	put_job(c->store, &n2, &res);
	/* A later window of node 2 that does not know the GPUs keeps the known ones; a later
	 * known one replaces them. */
	for (uint64_t seq = 2; seq <= 3; seq++) {
		struct job_spec later = job_node(2, -1);
		struct sysom_batch b;
		later.base.sequence = seq;
		later.base.window_start_ns = T0 + (seq - 1) * 30000000000ULL;
		assert_int_equal(job_batch_build(&b, &later), 0);
		for (uint32_t i = 0; i < b.job_rank_count; i++)
			b.job_ranks[i].gpu_device = seq == 2 ? 0 : 1;
		assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH + seq,
						 (int64_t)T0 + 91000000000LL, &res), 0);
		sysom_batch_free(&b);
		memset(&r, 0, sizeof(r));
		assert_int_equal(store_job_ranks_list(c->store, "job-42", 100, collect_rank, &r), 0);
		assert_int_equal(r.n, 4); /* ranks 4..7, local ranks 0..3 */
		for (int i = 0; i < 4; i++)
			assert_int_equal(r.gpus[i], seq == 2 ? 3 - i : 0);
	}
}

static void test_jobs_round_trip(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct job_rows r;
	long long before[NTABLES], after[NTABLES];
	struct store_collective_filter f = { .job = "job-42", .from_ns = (int64_t)T0,
					     .to_ns = (int64_t)T0 + 60000000000LL };
	struct store_sample_filter all = { .from_ms = T0 / 1000000, .to_ms = T0 / 1000000 + 60000 };
	struct job_spec n1 = job_node(1, -1);
	uint64_t total = 0;

	put_job(c->store, &n1, &res);
	assert_false(res.duplicate);
	assert_int_equal(res.job_ranks, 4);
	assert_int_equal(res.communicators, 8);
	assert_int_equal(res.nccl_calls, 4 * (3 + 2));
	assert_int_equal(res.launch_rows, 12);
	assert_int_equal(res.launches, 4 * 13);
	struct job_spec n2 = job_node(2, 5);
	put_job(c->store, &n2, &res);
	assert_int_equal(rows(c->dir, "job_ranks"), 8);
	assert_int_equal(rows(c->dir, "communicators"), 16);
	assert_int_equal(nccl_call_rows(c->dir), 8 * 5 - 1);
	assert_int_equal(rows(c->dir, "launches"), 24);

	/* A duplicate changes nothing. */
	all_rows(c->dir, before);
	put_job(c->store, &n1, &res);
	assert_true(res.duplicate);
	assert_int_equal(res.nccl_calls, 0);
	all_rows(c->dir, after);
	assert_memory_equal(before, after, sizeof(before));

	memset(&r, 0, sizeof(r));
	assert_int_equal(store_jobs_list(c->store, 10, collect_job, &r), 0);
	assert_int_equal(r.n, 1);
	assert_string_equal(r.job[0], "job-42");
	assert_int_equal(r.jobs[0].world_size, 8);
	assert_int_equal(r.jobs[0].ranks, 8);
	assert_int_equal(r.jobs[0].nodes, 2);
	assert_int_equal(r.jobs[0].processes, 8);
	assert_int_equal(r.jobs[0].first_seen_ns, (int64_t)T0);

	memset(&r, 0, sizeof(r));
	assert_int_equal(store_job_ranks_list(c->store, "job-42", 100, collect_rank, &r), 0);
	assert_int_equal(r.n, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(r.ranks[i], i);
		assert_int_equal(r.pids[i], JOB_PID(i));
		/* node 1's agent did not know the GPUs; node 2's (wire 1.7) did: reversed */
		assert_int_equal(r.gpus[i], i < 4 ? -1 : 3 - i % 4);
	}
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_job_ranks_list(c->store, "job-43", 100, collect_rank, &r), 0);
	assert_int_equal(r.n, 0);

	memset(&r, 0, sizeof(r));
	assert_int_equal(store_job_communicators_list(c->store, "job-42", 100, collect_comm, &r), 0);
	assert_int_equal(r.n, 16); /* 8 ranks of the world comm, 4 x 2 of the split children */
	for (int i = 0; i < 8; i++) {
		assert_int_equal(r.keys[i], JOB_COMM);
		assert_int_equal(r.comm_ranks[i], i);
	}
	assert_int_equal(r.keys[8], JOB_TP_COMM(0));
	assert_int_equal(r.comm_ranks[9], 1);

	/* Instances: (comm, AllReduce, seq) across both nodes; rank 5 missed seq 1. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_collectives_list(c->store, &f, 100, collect_call, &r), 0);
	assert_int_equal(r.n, 8 + 7 + 8);
	assert_int_equal(r.calls[0].seq, 0);
	assert_int_equal(r.calls[0].nranks, 8);
	assert_int_equal(r.calls[0].op, SYSOM_NCCL_ALL_REDUCE);
	assert_int_equal(r.calls[0].first_entry_ns, (int64_t)T0 + 1000000000LL);
	assert_int_equal(r.calls[7].rank, 7);
	assert_int_equal(r.calls[7].entry_ns, (int64_t)T0 + 1007000000LL);
	assert_int_equal(r.calls[8].seq, 1);
	assert_int_equal(r.calls[8 + 5].rank, 6);
	assert_int_equal(r.calls[15].seq, 2);
	/* Limits and filters. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_collectives_list(c->store, &f, 1, collect_call, &r), 0);
	assert_int_equal(r.n, 8);
	f.from_ns = (int64_t)T0 + 1500000000LL;
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_collectives_list(c->store, &f, 100, collect_call, &r), 0);
	assert_int_equal(r.n, 7 + 8);
	f.has_comm = true;
	f.comm = JOB_TP_COMM(0);
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_collectives_list(c->store, &f, 100, collect_call, &r), 0);
	assert_int_equal(r.n, 0);
	f.comm = JOB_COMM;
	f.op = SYSOM_NCCL_BROADCAST;
	assert_int_equal(store_collectives_list(c->store, &f, 100, collect_call, &r), 0);
	assert_int_equal(r.n, 0);
	f.job = "job-43";
	f.op = 0;
	assert_int_equal(store_collectives_list(c->store, &f, 100, collect_call, &r), 0);
	assert_int_equal(r.n, 0);

	/* Launches: summed per (comm, user stack, kernel); the unnamed kernel by its handle. */
	memset(&r, 0, sizeof(r));
	assert_int_equal(store_launches_aggregate(c->store, &all, 100, collect_launch, &r, &total), 0);
	assert_int_equal(total, 8 * 13);
	assert_int_equal(r.n, 3);
	assert_string_equal(r.kernels[0], JOB_KERNEL);
	assert_true(r.launches[0].named);
	assert_int_equal(r.launches[0].count, 80);
	assert_int_equal(r.launches[0].processes, 8);
	assert_int_equal(r.launches[0].pid, -1);
	assert_int_not_equal(r.launches[0].user_stack, STORE_STACK_NONE);
	assert_string_equal(r.kernels[1], "0xdead");
	assert_false(r.launches[1].named);
	assert_int_equal(r.launches[1].count, 16);
	assert_string_equal(r.kernels[2], "memcpyKernel");
	assert_int_equal(r.launches[2].user_stack, STORE_STACK_NONE);
	struct store_sample_filter by = all;
	by.node = "02020202020202020202020202020202";
	by.has_pid = true;
	by.pid = JOB_PID(6);
	assert_int_equal(store_launches_aggregate(c->store, &by, 100, collect_launch, &r, &total), 0);
	assert_int_equal(total, 13);
	by = all;
	by.job = "job-43";
	assert_int_equal(store_launches_aggregate(c->store, &by, 100, collect_launch, &r, &total), 0);
	assert_int_equal(total, 0);
	by.job = "job-42";
	assert_int_equal(store_launches_aggregate(c->store, &by, 100, collect_launch, &r, &total), 0);
	assert_int_equal(total, 8 * 13);
	/* Launch rows are stamped with the window end. */
	by = all;
	by.to_ms = T0 / 1000000 + 29999;
	assert_int_equal(store_launches_aggregate(c->store, &by, 100, collect_launch, &r, &total), 0);
	assert_int_equal(total, 0);
	/* The sample filter's job applies to CPU samples too: the fixture's processes are in none. */
	by = all;
	by.job = "job-42";
	assert_int_equal(store_stacks_aggregate(c->store, &by, 100, collect_row, &r, &total), 0);
	assert_int_equal(total, 0);
}

/* A later window updates a job rank and communicator; an earlier one does not undo it. */
static void test_job_rank_updates(void **state)
{
	struct ctx *c = *state;
	struct store_put_result res;
	struct job_spec js = job_node(1, -1);
	sqlite3 *db;

	js.local_ranks = 1;
	js.base.sequence = 2;
	js.base.window_start_ns = T0 + 30000000000ULL;
	put_job(c->store, &js, &res);
	js.base.sequence = 1;
	js.base.window_start_ns = T0;
	js.job = "job-old";
	put_job(c->store, &js, &res);
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM job_ranks WHERE job = 'job-42'"), 1);
	assert_int_equal(raw_int(db, "SELECT first_seen_ns FROM job_ranks"), (long long)T0);
	assert_int_equal(raw_int(db, "SELECT last_seen_ns FROM job_ranks"),
			 (long long)T0 + 60000000000LL);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM communicators"), 2);
	sqlite3_close(db);
}

struct diag_seen {
	int n;
	int64_t ids[8];
	char layers[8][16];
	int64_t resolved[8], opened[8];
};

static int diag_collect(void *arg, const struct store_diagnosis *d)
{
	struct diag_seen *s = arg;

	if (s->n < 8) {
		s->ids[s->n] = d->id;
		snprintf(s->layers[s->n], sizeof(s->layers[0]), "%s", d->layer);
		s->resolved[s->n] = d->resolved_ms;
		s->opened[s->n] = d->opened_ms;
	}
	s->n++;
	return 0;
}

static int baseline_check(void *arg, const struct store_baseline *b)
{
	(void)arg;
	assert_string_equal(b->profile, "a;b 3\n");
	assert_int_equal(b->iteration_ns, 5000000);
	assert_int_equal(b->from_ms, 1000);
	assert_string_equal(b->source, "api");
	return 0;
}

/* Incidents: one open row per (job, identity), updated in place, resolved, then a new one;
 * listing by job, time and openness; settings and baselines replace. */
static void test_diagnoses_settings_baselines(void **state)
{
	struct ctx *c = *state;
	struct store_diagnosis d = { .job = "j1", .identity = "straggler rank=3",
				     .kind = "straggler", .rank = 3, .hostname = "h",
				     .communicators = "00000000000000aa", .layer = "unknown",
				     .severity = "warning", .summary = "s", .action = "a",
				     .report = "{}", .updated_ms = 1000 };
	struct store_diagnosis_filter all = { .job = "j1", .from_ms = 0, .to_ms = INT64_MAX };
	struct diag_seen seen = { 0 };
	int64_t id1, id2, id3;
	bool opened;
	char *json;

	assert_int_equal(store_diagnosis_upsert(c->store, &d, &id1, &opened), 0);
	assert_true(opened);
	d.layer = "os";
	d.updated_ms = 2000;
	assert_int_equal(store_diagnosis_upsert(c->store, &d, &id2, &opened), 0);
	assert_false(opened);
	assert_int_equal(id1, id2);
	d.job = "j2";
	assert_int_equal(store_diagnosis_upsert(c->store, &d, &id3, &opened), 0);
	assert_true(opened);
	assert_int_not_equal(id3, id1);
	assert_int_equal(store_diagnoses_list(c->store, &all, 100, diag_collect, &seen), 0);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.layers[0], "os");
	assert_int_equal(seen.opened[0], 1000);
	assert_int_equal(store_diagnosis_resolve(c->store, id1, 3000), 0);
	assert_int_equal(store_diagnosis_resolve(c->store, id1, 3500), -ENOENT);
	d.job = "j1";
	d.updated_ms = 4000;
	assert_int_equal(store_diagnosis_upsert(c->store, &d, &id2, &opened), 0);
	assert_true(opened);
	assert_int_not_equal(id2, id1);
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(store_diagnoses_list(c->store, &all, 100, diag_collect, &seen), 0);
	assert_int_equal(seen.n, 2);
	assert_int_equal(seen.ids[0], id2); /* newest first */
	assert_int_equal(seen.resolved[1], 3000);
	/* Open only; a range that ends before the second opened; one id. */
	memset(&seen, 0, sizeof(seen));
	all.open_only = true;
	assert_int_equal(store_diagnoses_list(c->store, &all, 100, diag_collect, &seen), 0);
	assert_int_equal(seen.n, 1);
	memset(&seen, 0, sizeof(seen));
	all.open_only = false;
	all.to_ms = 3500;
	assert_int_equal(store_diagnoses_list(c->store, &all, 100, diag_collect, &seen), 0);
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.ids[0], id1);
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(store_diagnoses_list(c->store, &(struct store_diagnosis_filter){ .id = id3 },
					      100, diag_collect, &seen), 0);
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.ids[0], id3);

	assert_int_equal(store_job_settings_get(c->store, "j1", &json), 0);
	assert_null(json);
	assert_int_equal(store_job_settings_put(c->store, "j1", "{\"k\":3}", 10), 0);
	assert_int_equal(store_job_settings_put(c->store, "j1", "{\"k\":4}", 11), 0);
	assert_int_equal(store_job_settings_get(c->store, "j1", &json), 0);
	assert_string_equal(json, "{\"k\":4}");
	free(json);
	assert_int_equal(store_job_settings_put(c->store, "j1", NULL, 12), 0);
	assert_int_equal(store_job_settings_get(c->store, "j1", &json), 0);
	assert_null(json);

	assert_int_equal(store_baseline_get(c->store, "j1", baseline_check, NULL), -ENOENT);
	struct store_baseline b = { .job = "j1", .from_ms = 1, .to_ms = 2, .iteration_ns = 1,
				    .profile = "x 1\n", .created_ms = 3, .source = "auto" };
	assert_int_equal(store_baseline_put(c->store, &b), 0);
	b.from_ms = 1000;
	b.iteration_ns = 5000000;
	b.profile = "a;b 3\n";
	b.source = "api";
	assert_int_equal(store_baseline_put(c->store, &b), 0);
	assert_int_equal(store_baseline_get(c->store, "j1", baseline_check, NULL), 0);
}

static void test_duplicate_and_stack_dedupe(void **state)
{
	struct ctx *c = *state;
	struct fixture_spec spec = { .node = 1, .epoch = 42, .sequence = 1, .window_start_ns = T0 };
	struct store_put_result res;
	struct store_batch_record rec = { .exists = true };
	long long before[NTABLES], after[NTABLES];
	uint8_t node[16];

	memset(node, 1, sizeof(node));
	assert_int_equal(store_batch_find(c->store, node, 42, 1, &rec), 0);
	assert_false(rec.exists);
	put_fixture(c->store, &spec, 0, &res);
	assert_false(res.duplicate);
	assert_false(res.conflict);
	assert_int_equal(store_batch_find(c->store, node, 42, 1, &rec), 0);
	assert_true(rec.exists);
	assert_true(rec.hash_known);
	assert_true(rec.content_hash == FIXTURE_HASH);
	all_rows(c->dir, before);
	/* The same batch again: nothing changes. */
	put_fixture(c->store, &spec, 0, &res);
	assert_true(res.duplicate);
	assert_false(res.conflict);
	assert_true(res.existing.exists && res.existing.content_hash == FIXTURE_HASH);
	assert_int_equal(res.samples, 0);
	all_rows(c->dir, after);
	assert_memory_equal(before, after, sizeof(before));

	/* Another batch of the same node and one of another node share all three stacks. */
	spec.sequence = 2;
	spec.window_start_ns = T0 + 30000000000ULL;
	put_fixture(c->store, &spec, 0, &res);
	assert_false(res.duplicate);
	assert_int_equal(res.new_stacks, 0);
	spec.node = 2;
	put_fixture(c->store, &spec, 0, &res);
	assert_int_equal(res.new_stacks, 0);
	assert_int_equal(rows(c->dir, "stacks"), 3);
	assert_int_equal(rows(c->dir, "objects"), 4);
	assert_int_equal(rows(c->dir, "samples"), 12);
	assert_int_equal(rows(c->dir, "batches"), 3);
	assert_int_equal(rows(c->dir, "nodes"), 2);
	assert_int_equal(rows(c->dir, "processes"), 4); /* per node */
	sqlite3 *db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "SELECT batches FROM nodes WHERE node_id = '01010101010101010101010101010101'"), 2);
	assert_int_equal(raw_int(db, "SELECT total FROM node_counters c JOIN nodes n ON n.id = c.node"
				     " WHERE n.node_id = '01010101010101010101010101010101' AND c.counter = 1"), 1980);
	sqlite3_close(db);
}

/* The same identity with another content hash is a conflict: nothing changes, and the stored
 * hash is reported; the store keeps the first batch. */
static void test_conflicting_duplicate(void **state)
{
	struct ctx *c = *state;
	struct fixture_spec spec = { .node = 1, .epoch = 42, .sequence = 7, .window_start_ns = T0 };
	struct store_put_result res;
	struct store_batch_record rec;
	long long before[NTABLES], after[NTABLES];
	struct sysom_batch b;
	uint8_t node[16];

	memset(node, 1, sizeof(node));
	put_fixture(c->store, &spec, 0, &res);
	all_rows(c->dir, before);
	assert_int_equal(fixture_batch_build(&b, &spec), 0);
	assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH + 1, (int64_t)T0, &res), 0);
	sysom_batch_free(&b);
	assert_true(res.conflict);
	assert_false(res.duplicate);
	assert_true(res.existing.exists && res.existing.hash_known);
	assert_true(res.existing.content_hash == FIXTURE_HASH);
	assert_int_equal(res.samples, 0);
	all_rows(c->dir, after);
	assert_memory_equal(before, after, sizeof(before));
	assert_int_equal(store_batch_find(c->store, node, 42, 7, &rec), 0);
	assert_true(rec.content_hash == FIXTURE_HASH);
}

/* A version 4 database: its batches have no content hash, so a re-sent batch with any content
 * is a duplicate (it cannot be compared); batches stored after the migration have one. */
static void test_migration_from_v4(void **state)
{
	struct ctx *c = *state;
	struct fixture_spec spec = { .node = 1, .epoch = 1, .sequence = 1, .window_start_ns = T0 };
	struct store_put_result res;
	struct store_batch_record rec;
	struct sysom_batch b;
	char err[256];
	uint8_t node[16];
	sqlite3 *db;

	memset(node, 1, sizeof(node));
	put_fixture(c->store, &spec, 0, NULL);
	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, DROP_V5_COLUMNS " PRAGMA user_version = 4;", NULL, NULL,
				      NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(store_schema_version(c->store), 15);
	assert_int_equal(store_batch_find(c->store, node, 1, 1, &rec), 0);
	assert_true(rec.exists);
	assert_false(rec.hash_known);
	assert_int_equal(fixture_batch_build(&b, &spec), 0);
	assert_int_equal(store_batch_put(c->store, &b, 0xabcdefULL, (int64_t)T0, &res), 0);
	assert_true(res.duplicate);
	assert_false(res.conflict);
	assert_false(res.existing.hash_known);
	sysom_batch_free(&b);
	spec.sequence = 2;
	put_fixture(c->store, &spec, 0, &res);
	assert_false(res.duplicate);
	assert_int_equal(store_batch_find(c->store, node, 1, 2, &rec), 0);
	assert_true(rec.hash_known && rec.content_hash == FIXTURE_HASH);
}

/* Disk full in the middle of a batch: -ENOSPC, nothing of it stored, the store still works. */
static void test_disk_full_is_atomic(void **state)
{
	struct ctx *c = *state;
	struct fixture_spec spec = { .node = 3, .epoch = 1, .sequence = 1, .window_start_ns = T0 };
	struct fixture_spec big = { .node = 3, .epoch = 1, .sequence = 2,
				    .window_start_ns = T0 + 30000000000ULL, .extra_stacks = 20000 };
	long long before[NTABLES], after[NTABLES];
	uint64_t size;
	sqlite3 *db;

	put_fixture(c->store, &spec, 0, NULL);
	all_rows(c->dir, before);
	assert_int_equal(store_size_get(c->store, &size), 0);
	assert_true(size > 0);
	/* Cap the database at its current size: the next batch's pages cannot be allocated. */
	db = raw_open(c->dir);
	long long pages = raw_int(db, "PRAGMA page_count"), page_size = raw_int(db, "PRAGMA page_size");
	sqlite3_close(db);
	assert_int_equal(store_size_limit_set(c->store, (uint64_t)(pages + 2) * (uint64_t)page_size), 0);
	put_fixture(c->store, &big, -ENOSPC, NULL);
	all_rows(c->dir, after);
	assert_memory_equal(before, after, sizeof(before));
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check != 'ok'"), 0);
	sqlite3_close(db);
	/* Reads still work while full. */
	assert_int_equal(store_ping(c->store), 0);
	/* Space freed: the same batch goes in whole. */
	assert_int_equal(store_size_limit_set(c->store, 0), 0);
	put_fixture(c->store, &big, 0, NULL);
	assert_int_equal(rows(c->dir, "samples"), before[5] + 4 + 20000);
	assert_int_equal(rows(c->dir, "batches"), 2);
}

/* Another process holding the write lock: -EBUSY after the busy timeout, nothing stored. */
static void test_busy(void **state)
{
	struct ctx *c = *state;
	struct store *s = NULL;
	struct store_sqlite_options o = { .busy_timeout_ms = 50, .read_connections = 1 };
	char err[256];
	sqlite3 *db;

	store_close(c->store);
	c->store = NULL;
	assert_int_equal(store_sqlite_open(c->dir, &o, &s, err, sizeof(err)), 0);
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	put_fixture(s, &(struct fixture_spec){ .node = 4, .epoch = 1, .sequence = 1,
						.window_start_ns = T0 }, -EBUSY, NULL);
	assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM batches"), 0);
	sqlite3_close(db);
	put_fixture(s, &(struct fixture_spec){ .node = 4, .epoch = 1, .sequence = 1,
						.window_start_ns = T0 }, 0, NULL);
	assert_int_equal(rows(c->dir, "batches"), 1);
	store_close(s);
}

static void test_kernel_symbols(void **state)
{
	struct ctx *c = *state;
	const struct store_ksym syms[] = { { 0x1000, 'T', "_stext" }, { 0x1100, 't', "do_one" },
					   { 0x2200, 'T', "do_syscall_64" }, { 0x3000, 'T', "_etext" } };
	const struct store_ksym unsorted[] = { { 0x2000, 'T', "b" }, { 0x1000, 'T', "a" } };
	struct store_ksym_range r;
	uint64_t count = 0;
	bool created = false;

	assert_int_equal(store_ksyms_count(c->store, FIXTURE_KERNEL_ID, 20, &count), -ENOENT);
	assert_int_equal(store_ksym_range_get(c->store, FIXTURE_KERNEL_ID, 20, 0x1200, &r), -ENOENT);
	assert_int_equal(store_ksyms_put(c->store, FIXTURE_KERNEL_ID, 20, syms, 4, 1, &created), 0);
	assert_true(created);
	assert_int_equal(store_ksyms_count(c->store, FIXTURE_KERNEL_ID, 20, &count), 0);
	assert_int_equal(count, 4);
	/* Idempotent: a second upload changes nothing. */
	assert_int_equal(store_ksyms_put(c->store, FIXTURE_KERNEL_ID, 20, syms, 2, 2, &created), 0);
	assert_false(created);
	assert_int_equal(store_ksyms_count(c->store, FIXTURE_KERNEL_ID, 20, &count), 0);
	assert_int_equal(count, 4);
	assert_int_equal(store_ksyms_put(c->store, FIXTURE_LIBC_ID, 20, unsorted, 2, 1, &created),
			 -EINVAL);

	assert_int_equal(store_ksym_range_get(c->store, FIXTURE_KERNEL_ID, 20, 0x2234, &r), 0);
	assert_true(r.has_floor);
	assert_int_equal(r.floor, 0x2200);
	assert_string_equal(r.floor_name, "do_syscall_64");
	assert_true(r.has_next);
	assert_int_equal(r.next, 0x3000);
	store_ksym_range_release(&r);
	assert_int_equal(store_ksym_range_get(c->store, FIXTURE_KERNEL_ID, 20, 0x10, &r), 0);
	assert_false(r.has_floor);
	assert_true(r.has_next);
	store_ksym_range_release(&r);
	assert_int_equal(store_ksym_range_get(c->store, FIXTURE_KERNEL_ID, 20, 0x5000, &r), 0);
	assert_true(r.has_floor);
	assert_false(r.has_next);
	store_ksym_range_release(&r);
	assert_int_equal(store_ksym_range_get(c->store, FIXTURE_KERNEL_ID, 20, UINT64_MAX, &r), 0);
	assert_false(r.has_floor);
	assert_false(r.has_next);
	store_ksym_range_release(&r);
}

/* ---- the bound on kernel symbols ----------------------------------------------------------- */

#define S_NS 1000000000LL

/* Stores a table of `n` symbols for build ID 20 x `id` at T0 + at_s; returns the store's code. */
static int ksyms_put_at(struct store *s, uint8_t id, size_t n, int64_t at_s, bool *created)
{
	struct store_ksym syms[16];
	uint8_t bid[20];

	assert_true(n <= 16);
	memset(bid, id, sizeof(bid));
	for (size_t i = 0; i < n; i++)
		syms[i] = (struct store_ksym){ 0x1000 * (i + 1), 'T', "f" };
	return store_ksyms_put(s, bid, sizeof(bid), syms, n, (int64_t)T0 + at_s * S_NS, created);
}

static bool ksyms_present(struct store *s, uint8_t id)
{
	uint8_t bid[20];
	uint64_t count;

	memset(bid, id, sizeof(bid));
	int rc = store_ksyms_count(s, bid, sizeof(bid), &count);
	assert_true(rc == 0 || rc == -ENOENT);
	return rc == 0;
}

/* Stores a batch, received at T0 + at_s, whose kernel object is build ID 20 x `id`. */
static void ksyms_use_at(struct store *s, uint8_t id, uint64_t sequence, int64_t at_s)
{
	struct sysom_batch b;
	struct store_put_result r;
	bool found = false;

	assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
				 .node = 7, .epoch = 1, .sequence = sequence,
				 .window_start_ns = T0 }), 0);
	for (uint32_t i = 0; i < b.object_count; i++)
		if (b.objects[i].kind == SYSOM_OBJECT_KERNEL) {
			memset(b.objects[i].build_id, id, 20);
			b.objects[i].build_id_len = 20;
			found = true;
		}
	assert_true(found);
	assert_int_equal(store_batch_put(s, &b, FIXTURE_HASH + sequence,
					 (int64_t)T0 + at_s * S_NS, &r), 0);
	sysom_batch_free(&b);
}

/* Under max_kernel_symbols, a new table evicts the least recently used tables that no batch
 * named within the in-use window (uploads count as a use); when only tables in use would have
 * to go, nothing is evicted or stored. */
static void test_kernel_symbols_bounded(void **state)
{
	struct ctx *c = *state;
	struct store_sqlite_options o = { .max_kernel_symbols = 10,
					  .kernel_symbols_in_use_ns = 1000 * S_NS };
	struct store_ksyms_usage u;
	bool created;
	char err[256];

	store_close(c->store);
	assert_int_equal(store_sqlite_open(c->dir, &o, &c->store, err, sizeof(err)), 0);
	struct store *s = c->store;
	assert_int_equal(ksyms_put_at(s, 0xa, 4, 0, &created), 0);
	assert_int_equal(ksyms_put_at(s, 0xb, 4, 1, &created), 0);
	/* Much later a node reports kernel A: A is in use, B is not. */
	ksyms_use_at(s, 0xa, 1, 2000);
	assert_int_equal(ksyms_put_at(s, 0xc, 4, 2001, &created), 0);
	assert_true(created);
	assert_true(ksyms_present(s, 0xa));
	assert_false(ksyms_present(s, 0xb));
	assert_true(ksyms_present(s, 0xc));
	assert_int_equal(store_ksyms_usage_get(s, &u), 0);
	assert_int_equal(u.tables, 2);
	assert_int_equal(u.rows, 8);
	assert_int_equal(u.evicted_tables, 1);
	assert_int_equal(u.evicted_rows, 4);
	assert_int_equal(u.max_rows, 10);
	assert_int_equal(u.oldest_use_ns, (int64_t)T0 + 2000 * S_NS);

	/* Room only by evicting tables in use (A named 2 s ago, C stored 1 s ago): refused,
	 * nothing evicted. A table larger than the whole limit is refused too. */
	assert_int_equal(ksyms_put_at(s, 0xd, 3, 2002, &created), -SYSOM_ELIMIT);
	assert_int_equal(ksyms_put_at(s, 0xe, 11, 2002, &created), -SYSOM_ELIMIT);
	assert_false(ksyms_present(s, 0xd));
	assert_true(ksyms_present(s, 0xa));
	assert_true(ksyms_present(s, 0xc));
	assert_int_equal(store_ksyms_usage_get(s, &u), 0);
	assert_int_equal(u.rows, 8);
	assert_int_equal(u.evicted_tables, 1);
	/* A table already stored is still answered (unchanged), full or not. */
	assert_int_equal(ksyms_put_at(s, 0xa, 4, 2002, &created), 0);
	assert_false(created);

	/* A is named again later; a batch within the same minute records nothing new. */
	ksyms_use_at(s, 0xa, 2, 2900);
	ksyms_use_at(s, 0xa, 3, 2930);
	/* Past the window of C's upload, but not of A's use: C goes, A stays. */
	assert_int_equal(ksyms_put_at(s, 0xd, 3, 3002, &created), 0);
	assert_true(created);
	assert_true(ksyms_present(s, 0xa));
	assert_false(ksyms_present(s, 0xc));
	assert_true(ksyms_present(s, 0xd));
	assert_int_equal(store_ksyms_usage_get(s, &u), 0);
	assert_int_equal(u.oldest_use_ns, (int64_t)T0 + 2900 * S_NS);
	assert_int_equal(u.evicted_tables, 2);
	assert_int_equal(u.evicted_rows, 8);
	assert_int_equal(rows(c->dir, "kernel_symbols"), 7);

	/* The last uses survive a restart; no limit: nothing is evicted. */
	store_close(s);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	s = c->store;
	assert_int_equal(store_ksyms_usage_get(s, &u), 0);
	assert_int_equal(u.oldest_use_ns, (int64_t)T0 + 2900 * S_NS);
	assert_int_equal(u.max_rows, 0);
	assert_int_equal(u.evicted_tables, 0);
	assert_int_equal(ksyms_put_at(s, 0xe, 11, 9000, &created), 0);
	assert_int_equal(store_ksyms_usage_get(s, &u), 0);
	assert_int_equal(u.tables, 3);
	assert_int_equal(u.rows, 18);
}

/* Migration 5 starts every table's last use at its upload. */
static void test_migration_kernel_symbols_last_use(void **state)
{
	struct ctx *c = *state;
	bool created;
	char err[256];
	sqlite3 *db;

	assert_int_equal(ksyms_put_at(c->store, 0xa, 2, 5, &created), 0);
	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, DROP_V5_COLUMNS " PRAGMA user_version = 4;", NULL, NULL,
				      NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "SELECT last_used_ns FROM kernel_symbol_tables"),
			 (long long)(T0 + 5 * S_NS));
	sqlite3_close(db);
}

/* ---- retention ------------------------------------------------------------------------------- */

#define DAY_NS (86400ULL * 1000000000ULL)

static void put_job_at(struct store *s, uint8_t node, uint64_t seq, uint64_t window_ns,
		       const char *job, uint32_t extra)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = seq,
					 .window_start_ns = window_ns, .extra_stacks = extra },
			       .job = job, .first_rank = 2 * (node - 1), .local_ranks = 2,
			       .instances = 3, .skip_rank = -1, .launches = true,
			       .gpu_timing = true, .slow_rank = -1, .late_rank = -1,
			       .samples = true, .hot_rank = -1 };
	struct sysom_batch b;
	struct store_put_result r;

	assert_int_equal(job_batch_build(&b, &js), 0);
	assert_int_equal(store_batch_put(s, &b, FIXTURE_HASH + seq, (int64_t)window_ns + 31000000000LL,
					 &r), 0);
	assert_false(r.duplicate);
	sysom_batch_free(&b);
}

/* Rows naming a stack or process that is gone: none may exist. */
static long long dangling(sqlite3 *db)
{
	return raw_int(db,
		"SELECT (SELECT count(*) FROM samples WHERE user_stack NOT IN (SELECT id FROM stacks)"
		"  OR kernel_stack NOT IN (SELECT id FROM stacks)"
		"  OR process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM launches WHERE user_stack NOT IN (SELECT id FROM stacks)"
		"  OR kernel_stack NOT IN (SELECT id FROM stacks)"
		"  OR process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM offcpu WHERE user_stack NOT IN (SELECT id FROM stacks)"
		"  OR kernel_stack NOT IN (SELECT id FROM stacks))"
		" + (SELECT count(*) FROM nccl_call_chunks WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM gpu_kernels WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM job_ranks WHERE process NOT IN (SELECT id FROM processes))"
		" + (SELECT count(*) FROM communicators WHERE process NOT IN (SELECT id FROM processes))");
}

static int sum_row(void *arg, const struct store_stack_count *r)
{
	*(uint64_t *)arg += r->count;
	return 0;
}

/*
 * Rows before the cutoff go, newer ones stay; processes and stacks only old rows named are
 * collected, shared ones stay; incidents, settings, baselines and nodes stay; the freed pages
 * go back to the file system; a query across the cutoff answers what it answered for the
 * newer side before.
 */
static void test_retention_by_age(void **state)
{
	struct ctx *c = *state;
	const uint64_t old_ns = T0, new_ns = T0 + 10 * DAY_NS;
	const int64_t cutoff_ms = (int64_t)((T0 + 5 * DAY_NS) / 1000000);
	struct store_diagnosis d = { .job = "job-old", .identity = "straggler rank=1",
				     .kind = "straggler", .rank = 1, .hostname = "h",
				     .communicators = "", .layer = "gpu", .severity = "warning",
				     .summary = "s", .action = "a", .report = "{}",
				     .updated_ms = (int64_t)(old_ns / 1000000) };
	struct store_baseline bl = { .job = "job-old", .from_ms = 1, .to_ms = 2, .created_ms = 3,
				     .samples = 4, .profile = "a;b 4", .source = "api" };
	struct store_sample_filter newer = { .from_ms = cutoff_ms, .to_ms = INT64_MAX };
	struct store_sample_filter all = { .from_ms = 0, .to_ms = INT64_MAX };
	struct store_retention_stats st;
	uint64_t want_total = 0, total = 0, want_sum = 0, sum = 0;
	long long new_samples, new_launches, new_calls, old_stacks, node2_procs, pages;
	uint32_t dropped = 0;
	int64_t id;
	bool opened;
	sqlite3 *db;

	/* Node 1 before and after the cutoff (its processes go on), node 2 only before, with
	 * 200 stacks of its own. */
	put_job_at(c->store, 1, 1, old_ns, "job-a", 0);
	put_job_at(c->store, 1, 2, new_ns, "job-a", 0);
	put_job_at(c->store, 2, 1, old_ns, "job-old", 200);
	assert_int_equal(store_diagnosis_upsert(c->store, &d, &id, &opened), 0);
	assert_int_equal(store_job_settings_put(c->store, "job-old", "{\"k\":1}", 5), 0);
	assert_int_equal(store_baseline_put(c->store, &bl), 0);
	assert_int_equal(store_stacks_aggregate(c->store, &newer, 1000, sum_row, &want_sum,
						&want_total), 0);
	assert_true(want_total > 0);

	db = raw_open(c->dir);
	new_samples = raw_int(db, "SELECT count(*) FROM samples WHERE time_ms >= 1700432000000");
	new_launches = raw_int(db, "SELECT count(*) FROM launches WHERE time_ms >= 1700432000000");
	/* A chunk spans at most a minute of entries: the fixture's are all on one side. */
	new_calls = raw_int(db, "SELECT coalesce(sum(calls), 0) FROM nccl_call_chunks"
				" WHERE entry_min_ns >= 1700432000000000000");
	old_stacks = raw_int(db, "SELECT count(*) FROM stacks");
	node2_procs = raw_int(db, "SELECT count(*) FROM processes WHERE node = (SELECT id FROM nodes"
				  " WHERE hostname = 'node-2')");
	assert_true(node2_procs >= 3); /* 2 ranks and the fixture's processes */
	assert_true(new_samples > 0 && new_launches > 0 && new_calls > 0);
	assert_int_equal(raw_int(db, "PRAGMA auto_vacuum"), 2); /* INCREMENTAL: a new database */
	sqlite3_close(db);
	assert_int_equal(cutoff_ms, 1700432000000LL);

	assert_int_equal(store_sqlite_retention(c->store, cutoff_ms, cutoff_ms, &st), 0);
	assert_true(st.rows > 0 && st.transactions > 0 && st.max_hold_ns > 0);
	assert_int_equal(st.processes, node2_procs); /* node 2's: seen only before the cutoff */
	assert_true(st.stacks >= 200);

	db = raw_open(c->dir);
	static const char *const timed[] = {
		"SELECT count(*) FROM samples WHERE time_ms < 1700432000000",
		"SELECT count(*) FROM launches WHERE time_ms < 1700432000000",
		"SELECT count(*) FROM gpu_kernels WHERE time_ms < 1700432000000",
		"SELECT count(*) FROM nccl_profiles WHERE time_ms < 1700432000000",
		"SELECT count(*) FROM nccl_links WHERE time_ms < 1700432000000",
		"SELECT count(*) FROM nccl_call_chunks WHERE entry_min_ns < 1700432000000000000",
		"SELECT count(*) FROM batches WHERE window_end_ns < 1700432000000000000",
		"SELECT count(*) FROM processes WHERE node = (SELECT id FROM nodes WHERE hostname = 'node-2')",
		"SELECT count(*) FROM job_ranks WHERE job = 'job-old'",
		"SELECT count(*) FROM communicators WHERE node = (SELECT id FROM nodes WHERE hostname = 'node-2')",
	};
	for (size_t i = 0; i < sizeof(timed) / sizeof(timed[0]); i++)
		if (raw_int(db, timed[i]))
			fail_msg("left after retention: %s", timed[i]);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM samples"), new_samples);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM launches"), new_launches);
	assert_int_equal(raw_int(db, "SELECT coalesce(sum(calls), 0) FROM nccl_call_chunks"), new_calls);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM batches"), 1);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM job_ranks WHERE job = 'job-a'"), 2);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM nodes"), 2);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM diagnoses"), 1);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM job_settings"), 1);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM job_baselines"), 1);
	/* Stacks: the old-only ones went, every one still named stayed. */
	assert_int_equal(dangling(db), 0);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM stacks"), old_stacks - (long long)st.stacks);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM stacks WHERE id NOT IN (SELECT user_stack"
				     " FROM samples WHERE user_stack IS NOT NULL UNION SELECT kernel_stack"
				     " FROM samples WHERE kernel_stack IS NOT NULL UNION SELECT user_stack"
				     " FROM launches WHERE user_stack IS NOT NULL UNION SELECT kernel_stack"
				     " FROM launches WHERE kernel_stack IS NOT NULL)"), 0);
	/* The pages went back to the file system. */
	assert_true(st.pages_freed > 0);
	assert_int_equal(raw_int(db, "PRAGMA freelist_count"), 0);
	pages = raw_int(db, "PRAGMA page_count");
	sqlite3_close(db);

	/* A query across the cutoff answers what the newer side answered before. */
	assert_int_equal(store_stacks_aggregate(c->store, &all, 1000, sum_row, &sum, &total), 0);
	assert_int_equal(total, want_total);
	assert_int_equal(sum, want_sum);

	/* Again: nothing left; the file does not grow. */
	assert_int_equal(store_retention_apply(c->store, cutoff_ms, cutoff_ms, &dropped), 0);
	assert_int_equal(dropped, 0);
	db = raw_open(c->dir);
	assert_true(raw_int(db, "PRAGMA page_count") <= pages);
	sqlite3_close(db);
}

/* Many rows: deleted in more than one transaction of at most 10,000 rows each; new data
 * stored after the cutoff while old stacks are shared stay intact. */
static void test_retention_chunks(void **state)
{
	struct ctx *c = *state;
	struct store_retention_stats st;
	sqlite3 *db;

	for (uint64_t seq = 1; seq <= 60; seq++) {
		struct sysom_batch b;
		struct store_put_result r;

		assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
			.node = 1, .epoch = 1, .sequence = seq,
			.window_start_ns = T0 + seq * 30000000000ULL, .extra_stacks = 400 }), 0);
		assert_int_equal(store_batch_put(c->store, &b, FIXTURE_HASH + seq,
						 (int64_t)T0 + (int64_t)seq * 30000000000LL, &r), 0);
		sysom_batch_free(&b);
	}
	db = raw_open(c->dir);
	long long before = raw_int(db, "SELECT count(*) FROM samples");
	long long keep = raw_int(db, "SELECT count(*) FROM samples WHERE time_ms >= 1700000900000");
	sqlite3_close(db);
	assert_true(before - keep > 10000);
	assert_int_equal(store_sqlite_retention(c->store, 1700000900000LL,
					1700000900000LL, &st), 0);
	assert_true(st.rows >= (uint64_t)(before - keep));
	assert_true(st.transactions >= 3);
	db = raw_open(c->dir);
	assert_int_equal(raw_int(db, "SELECT count(*) FROM samples"), keep);
	assert_int_equal(dangling(db), 0);
	sqlite3_close(db);
}

/* ---- per-minute rollups ---------------------------------------------------------------------- */

#define MINUTE_MS 60000LL
/* The minute holding the fixture's first samples (T0 + 5 s), and the next two. */
#define M0_MS (((int64_t)(T0 / 1000000) + 5000) / MINUTE_MS * MINUTE_MS)

/* Makes readers switch to the rollups at `cutoff_ms` (a minute start): raw rows are "kept"
 * from there on. */
static void rollup_cutoff_set(struct store *s, int64_t cutoff_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	store_rollup_raw_keep_set(s, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - cutoff_ms);
}

/* Six batches of nodes 1 and 2, 30 s apart from `start_ns` (so several share a minute), with
 * k extra stacks in batch k and one off-CPU row of two blocks per batch. */
static void put_rollup_batches(struct store *s, uint8_t node, uint64_t start_ns)
{
	for (uint64_t k = 0; k < 6; k++) {
		struct sysom_batch b;
		struct store_put_result res;
		uint32_t kstack = SYSOM_WIRE_NONE, ustack = SYSOM_WIRE_NONE, comm;

		assert_int_equal(fixture_batch_build(&b, &(struct fixture_spec){
			.node = (uint8_t)(node + k / 3), .epoch = 1, .sequence = k + 1,
			.window_start_ns = start_ns + k * 30000000000ULL,
			.extra_stacks = (uint32_t)k }), 0);
		for (uint32_t i = 0; i < b.stack_count; i++) {
			if (b.stacks[i].kind == SYSOM_STACK_KERNEL && kstack == SYSOM_WIRE_NONE)
				kstack = i;
			if (b.stacks[i].kind == SYSOM_STACK_USER && ustack == SYSOM_WIRE_NONE)
				ustack = i;
		}
		assert_int_equal(sysom_batch_intern_cstring(&b, "dataloader", &comm), 0);
		struct sysom_offcpu o = { .process = 0, .tid = 4250, .time_offset_ms = 1000,
					  .kernel_stack = kstack, .user_stack = ustack,
					  .thread_comm = comm, .state = SYSOM_OFFCPU_SLEEP,
					  .count = 2,
					  .blocked_ns = 1000700 + k * 333, .max_ns = 900000 };
		assert_int_equal(sysom_batch_add_offcpu(&b, &o), 0);
		o.state = SYSOM_OFFCPU_DISK; /* same stacks, another state: one rollup group */
		o.time_offset_ms = 20000;
		assert_int_equal(sysom_batch_add_offcpu(&b, &o), 0);
		assert_int_equal(store_batch_put(s, &b, FIXTURE_HASH, (int64_t)T0, &res), 0);
		sysom_batch_free(&b);
	}
}

struct answer {
	char text[8192];
	size_t len;
};

static int answer_row(void *arg, const struct store_stack_count *r)
{
	struct answer *a = arg;
	int n = snprintf(a->text + a->len, sizeof(a->text) - a->len,
			 "%s pid=%lld procs=%llu u=%lld k=%lld n=%llu\n", r->comm,
			 (long long)r->pid, (unsigned long long)r->processes,
			 (long long)r->user_stack, (long long)r->kernel_stack,
			 (unsigned long long)r->count);

	assert_true(n > 0 && (size_t)n < sizeof(a->text) - a->len);
	a->len += (size_t)n;
	return 0;
}

/* A CPU (or off-CPU) aggregate as text: every group, then the total. */
static void answer_get(struct store *s, const struct store_sample_filter *f, bool offcpu,
		       uint32_t limit, struct answer *a)
{
	uint64_t total = 0;

	a->len = 0;
	a->text[0] = '\0';
	if (offcpu)
		assert_int_equal(store_offcpu_aggregate(s, f, limit, answer_row, a, &total), 0);
	else
		assert_int_equal(store_stacks_aggregate(s, f, limit, answer_row, a, &total), 0);
	snprintf(a->text + a->len, sizeof(a->text) - a->len, "total %llu\n",
		 (unsigned long long)total);
}

/* The filters a rollup answers like raw rows (whole minutes). */
static int rollup_filters(struct store_sample_filter *out, int64_t from_ms, int64_t to_ms)
{
	struct store_sample_filter all = { .from_ms = from_ms, .to_ms = to_ms };
	int n = 0;

	out[n++] = all;
	out[n] = all;
	out[n].from_ms = M0_MS + MINUTE_MS; /* from the second minute on */
	n++;
	out[n] = all;
	out[n++].node = "node-2";
	out[n] = all;
	out[n].has_pid = true;
	out[n++].pid = FIXTURE_PID_PYTHON;
	out[n] = all;
	out[n++].comm = "python3";
	return n;
}

/* The raw answers of `filters` (CPU, off-CPU, CPU limited to 2 groups) equal those read with
 * the cutoff at each of `cutoffs` (rollups before it). */
static void rollup_answers_equal(struct store *s, const struct answer *raw, int nfilters,
				 const struct store_sample_filter *filters, const int64_t *cutoffs,
				 int ncutoffs)
{
	struct answer *a = malloc(sizeof(*a));

	assert_non_null(a);
	for (int c = 0; c < ncutoffs; c++) {
		rollup_cutoff_set(s, cutoffs[c]);
		for (int i = 0; i < nfilters; i++)
			for (int kind = 0; kind < 3; kind++) {
				answer_get(s, &filters[i], kind == 1, kind == 2 ? 2 : 100, a);
				if (strcmp(a->text, raw[3 * i + kind].text))
					fail_msg("cutoff %lld, filter %d, kind %d:\n%s\nraw:\n%s",
						 (long long)cutoffs[c], i, kind, a->text,
						 raw[3 * i + kind].text);
			}
	}
	store_rollup_raw_keep_set(s, 0);
	free(a);
}

static void raw_answers(struct store *s, int nfilters, const struct store_sample_filter *filters,
			struct answer *raw)
{
	store_rollup_raw_keep_set(s, 0);
	for (int i = 0; i < nfilters; i++)
		for (int kind = 0; kind < 3; kind++)
			answer_get(s, &filters[i], kind == 1, kind == 2 ? 2 : 100,
				   &raw[3 * i + kind]);
}

/*
 * The batch writer fills the per-minute rollups in its transaction; a range read from the
 * rollups (all of it, or the part before a cutoff in the middle) answers exactly what the raw
 * rows answer: the same groups, pids, process counts, counts, order, limit and total.
 */
static void test_rollup_matches_raw(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter filters[8];
	int n = rollup_filters(filters, M0_MS - MINUTE_MS, M0_MS + 10 * MINUTE_MS - 1);
	struct answer *raw = calloc((size_t)n * 3, sizeof(*raw));
	const int64_t cutoffs[] = { M0_MS + 10 * MINUTE_MS, M0_MS + MINUTE_MS,
				    M0_MS + 2 * MINUTE_MS, M0_MS };

	assert_non_null(raw);
	put_rollup_batches(c->store, 1, T0);
	/* Fewer rows: a minute's samples of one process and stacks are one row. */
	assert_true(rows(c->dir, "sample_minutes") < rows(c->dir, "samples"));
	assert_true(rows(c->dir, "offcpu_minutes") < rows(c->dir, "offcpu"));
	raw_answers(c->store, n, filters, raw);
	assert_non_null(strstr(raw[0].text, "total 147\n")); /* 6 x 22 + 0 + 1 + ... + 5 */
	rollup_answers_equal(c->store, raw, n, filters, cutoffs, 4);

	/* The rollups keep no thread comms: there a comm filter matches process comms only. */
	struct store_sample_filter thread = filters[0];
	struct answer *a = malloc(sizeof(*a));
	assert_non_null(a);
	thread.comm = "nccl-net";
	answer_get(c->store, &thread, false, 100, a);
	assert_non_null(strstr(a->text, "total 54\n")); /* 6 x 9 */
	rollup_cutoff_set(c->store, cutoffs[0]);
	answer_get(c->store, &thread, false, 100, a);
	assert_string_equal(a->text, "total 0\n");
	store_rollup_raw_keep_set(c->store, 0);
	free(a);
	free(raw);
}

/*
 * Retention deletes raw rows at one cutoff and rollup rows at an earlier one: in between, the
 * rollups answer as the raw rows did, through the processes and stacks they keep alive; past
 * the rollup cutoff everything of those days goes.
 */
static void test_rollup_retention(void **state)
{
	struct ctx *c = *state;
	const int64_t cutoff_ms = M0_MS + 5 * 86400000LL;
	struct store_sample_filter filters[8];
	int n = rollup_filters(filters, M0_MS - MINUTE_MS, M0_MS + 11 * 86400000LL);
	struct answer *raw = calloc((size_t)n * 3, sizeof(*raw));
	struct store_retention_stats st;
	long long new_samples, old_minutes;

	assert_non_null(raw);
	put_rollup_batches(c->store, 1, T0);
	put_rollup_batches(c->store, 3, T0 + 10 * DAY_NS);
	new_samples = rows(c->dir, "samples") / 2;
	old_minutes = rows(c->dir, "sample_minutes") / 2;
	raw_answers(c->store, n, filters, raw);

	assert_int_equal(store_sqlite_retention(c->store, cutoff_ms, 0, &st), 0);
	assert_int_equal(st.rollup_rows, 0);
	assert_int_equal(st.processes, 0);
	assert_int_equal(st.stacks, 0);
	assert_int_equal(rows(c->dir, "samples"), new_samples);
	assert_int_equal(rows(c->dir, "sample_minutes"), 2 * old_minutes);
	rollup_answers_equal(c->store, raw, n, filters, &cutoff_ms, 1);
	/* A rollup cutoff after the raw one is refused. */
	assert_int_equal(store_sqlite_retention(c->store, cutoff_ms, cutoff_ms + 1, &st), -EINVAL);

	long long rollup_rows = rows(c->dir, "sample_minutes") + rows(c->dir, "offcpu_minutes");
	assert_int_equal(store_sqlite_retention(c->store, cutoff_ms, cutoff_ms, &st), 0);
	assert_int_equal(rows(c->dir, "sample_minutes"), old_minutes);
	assert_int_equal(st.rollup_rows, rollup_rows - rows(c->dir, "sample_minutes") -
					 rows(c->dir, "offcpu_minutes"));
	assert_int_equal(st.processes, 4); /* nodes 1 and 2's, named by rollup rows until now */
	rollup_cutoff_set(c->store, cutoff_ms);
	struct answer *a = malloc(sizeof(*a));
	struct store_sample_filter old = filters[0];
	assert_non_null(a);
	old.to_ms = cutoff_ms - 1;
	answer_get(c->store, &old, false, 100, a);
	assert_string_equal(a->text, "total 0\n");
	store_rollup_raw_keep_set(c->store, 0);
	free(a);
	free(raw);
}

/* Migration 14 fills the rollups from the raw rows stored before it. */
static void test_rollup_migration(void **state)
{
	struct ctx *c = *state;
	struct store_sample_filter filters[8];
	int n = rollup_filters(filters, M0_MS - MINUTE_MS, M0_MS + 10 * MINUTE_MS - 1);
	struct answer *raw = calloc((size_t)n * 3, sizeof(*raw));
	const int64_t cutoff = M0_MS + 10 * MINUTE_MS;
	long long minutes;
	char err[256];
	sqlite3 *db;

	assert_non_null(raw);
	put_rollup_batches(c->store, 1, T0);
	minutes = rows(c->dir, "sample_minutes");
	raw_answers(c->store, n, filters, raw);
	store_close(c->store);
	c->store = NULL;
	db = raw_open(c->dir);
	assert_int_equal(sqlite3_exec(db, DROP_V14_TABLES " PRAGMA user_version = 13;", NULL, NULL,
				      NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(store_schema_version(c->store), 15);
	assert_int_equal(rows(c->dir, "sample_minutes"), minutes);
	rollup_answers_equal(c->store, raw, n, filters, &cutoff, 1);
	free(raw);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_schema_created_and_reopened, setup, teardown),
		cmocka_unit_test_setup_teardown(test_db_files_private, setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_data_dir_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_offcpu_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_and_stack_dedupe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conflicting_duplicate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migration_from_v4, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_full_is_atomic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_symbols, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retention_by_age, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retention_chunks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_symbols_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migration_kernel_symbols_last_use, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migration_from_v1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migration_from_v2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_rank_gpu_device, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_nccl_calls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nccl_calls_cut_at_chunk_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_migration_nccl_calls_to_chunks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_signals_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_rank_updates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diagnoses_settings_baselines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollup_matches_raw, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollup_retention, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollup_migration, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
