/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite retention: delete throughput and how long ingest waits, against the naive way.
 *
 * Builds a store of --batches fixture batches (each with --stacks extra stacks, one sample
 * row each: ~1 M sample rows by default) whose windows span an hour, copies it, then deletes
 * the older half two ways while a thread keeps storing new batches:
 *   sysom     store_sqlite_retention (reader finds rows; writer deletes <= 10,000 per
 *             transaction; processes/stacks GC; incremental vacuum)
 *   baseline  one transaction of DELETE ... WHERE time < cutoff per table (another
 *             connection, as an operator's sqlite3 would), then the same stacks left behind
 * and prints rows/s, the longest write-lock hold and the slowest concurrent put.
 *
 *   build/bench/retention_bench [--batches 2000] [--stacks 500] [--dir /var/tmp]
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "common/error.h"
#include "server/store/store.h"
#include "tests/support/batch_fixture.h"

#define T0 1700000000000000000ULL

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int put(struct store *s, uint8_t node, uint64_t seq, uint64_t window_ns, uint32_t stacks)
{
	struct sysom_batch b;
	struct store_put_result r;
	int rc = fixture_batch_build(&b, &(struct fixture_spec){ .node = node, .epoch = 1,
							       .sequence = seq,
							       .window_start_ns = window_ns,
							       .extra_stacks = stacks });

	if (rc)
		return rc;
	rc = store_batch_put(s, &b, seq * 2654435761ULL + node, (int64_t)window_ns, &r);
	sysom_batch_free(&b);
	return rc;
}

struct ingest {
	struct store *s;
	uint32_t stacks;
	atomic_bool stop;
	int64_t max_ns;
	uint64_t puts, failed;
};

/* Stores new batches (node 9, after the cutoff) until told to stop. */
static void *ingest_run(void *arg)
{
	struct ingest *in = arg;

	for (uint64_t seq = 1; !atomic_load(&in->stop); seq++) {
		int64_t t0 = now_ns();
		int rc = put(in->s, 9, seq, T0 + 7200ULL * 1000000000ULL + seq * 1000000ULL,
			     in->stacks / 10);
		int64_t dt = now_ns() - t0;

		if (dt > in->max_ns)
			in->max_ns = dt;
		in->puts++;
		in->failed += rc != 0;
		struct timespec pause = { 0, 20000000 }; /* ~50 batches/s offered */
		nanosleep(&pause, NULL);
	}
	return NULL;
}

static long long one_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	long long v = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static const char *const naive_sql =
	"BEGIN IMMEDIATE;"
	"DELETE FROM batches WHERE window_end_ns < ?;"
	"DELETE FROM samples WHERE time_ms < %1$lld;"
	"DELETE FROM offcpu WHERE time_ms < %1$lld;"
	"DELETE FROM launches WHERE time_ms < %1$lld;"
	"DELETE FROM gpu_kernels WHERE time_ms < %1$lld;"
	"DELETE FROM os_cpus WHERE time_ms < %1$lld;"
	"DELETE FROM os_threads WHERE time_ms < %1$lld;"
	"COMMIT;";

int main(int argc, char **argv)
{
	uint32_t batches = 2000, stacks = 500;
	const char *base = "/var/tmp";
	char dir[2][256], err[256], cmd[600], sql[1024];
	struct store *s = NULL;
	int rc;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--batches"))
			batches = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--stacks"))
			stacks = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--dir"))
			base = argv[i + 1];
	}
	setenv("TMPDIR", base, 1);
	for (int i = 0; i < 2; i++)
		if (fixture_tmpdir_make(dir[i], sizeof(dir[i]))) {
			fprintf(stderr, "cannot make a directory under %s\n", base);
			return 1;
		}
	if ((rc = store_sqlite_open(dir[0], NULL, &s, err, sizeof(err)))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	/* Windows every 3600 s / batches over an hour, node 1..4 in turn. */
	int64_t t0 = now_ns();
	for (uint32_t i = 0; i < batches; i++)
		if ((rc = put(s, (uint8_t)(1 + i % 4), i / 4 + 1,
			      T0 + (uint64_t)i * (3600ULL * 1000000000ULL / batches), stacks))) {
			fprintf(stderr, "put: %s\n", sysom_strerror(rc));
			return 1;
		}
	store_close(s);
	printf("built %u batches in %.1f s\n", batches, (now_ns() - t0) / 1e9);
	snprintf(cmd, sizeof(cmd), "cp %s/sysom.db %s/", dir[0], dir[1]);
	if (system(cmd)) {
		fprintf(stderr, "cannot copy the store\n");
		return 1;
	}
	const int64_t cutoff_ms = (int64_t)((T0 + 1800ULL * 1000000000ULL) / 1000000);

	for (int mode = 0; mode < 2; mode++) {
		struct ingest in = { .stacks = stacks };
		struct store_retention_stats st = { 0 };
		pthread_t th;
		sqlite3 *db;
		char path[300];
		long long rows_before, rows_after, size_before, size_after;

		if ((rc = store_sqlite_open(dir[mode], NULL, &s, err, sizeof(err)))) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
		snprintf(path, sizeof(path), "%s/sysom.db", dir[mode]);
		sqlite3_open(path, &db);
		sqlite3_busy_timeout(db, 60000);
		rows_before = one_int(db, "SELECT count(*) FROM samples");
		size_before = one_int(db, "PRAGMA page_count") * one_int(db, "PRAGMA page_size");
		in.s = s;
		pthread_create(&th, NULL, ingest_run, &in);
		struct timespec warm = { 0, 200000000 };
		nanosleep(&warm, NULL);
		t0 = now_ns();
		if (mode == 0) {
			rc = store_sqlite_retention(s, cutoff_ms, cutoff_ms, &st);
		} else {
			snprintf(sql, sizeof(sql), naive_sql, (long long)cutoff_ms);
			char *q = strstr(sql, "?");
			char ns[32];
			snprintf(ns, sizeof(ns), "%lld", (long long)cutoff_ms * 1000000);
			/* the batches' cutoff is in ns */
			memmove(q + strlen(ns), q + 1, strlen(q + 1) + 1);
			memcpy(q, ns, strlen(ns));
			int64_t h0 = now_ns();
			rc = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
			st.max_hold_ns = now_ns() - h0;
			st.transactions = 1;
		}
		int64_t took = now_ns() - t0;
		nanosleep(&warm, NULL);
		atomic_store(&in.stop, true);
		pthread_join(th, NULL);
		rows_after = one_int(db, "SELECT count(*) FROM samples");
		size_after = one_int(db, "PRAGMA page_count") * one_int(db, "PRAGMA page_size");
		printf("%-8s rc=%d sample rows %lld -> %lld in %.2f s (%.0f rows/s; %" PRIu64
		       " rows all tables, %" PRIu64 " stacks, %" PRIu64 " processes collected)\n"
		       "         %" PRIu64 " write transactions, longest lock hold %.1f ms;"
		       " concurrent puts %" PRIu64 " (%" PRIu64 " failed), slowest %.1f ms;"
		       " db %.1f -> %.1f MB\n",
		       mode ? "baseline" : "sysom", rc, rows_before, rows_after, took / 1e9,
		       (rows_before - rows_after) / (took / 1e9), st.rows, st.stacks, st.processes,
		       st.transactions, st.max_hold_ns / 1e6, in.puts, in.failed, in.max_ns / 1e6,
		       size_before / 1e6, size_after / 1e6);
		sqlite3_close(db);
		store_close(s);
	}
	for (int i = 0; i < 2; i++)
		fixture_tmpdir_remove(dir[i]);
	return 0;
}
