/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite bytes of NCCL calls as raw chunks against the instances retention keeps past them
 * (server/store/store_nccl_rollup.c): stores captured batches (bench/capture_batches.sh: the
 * simulated 8-rank job) in a fresh store, measures nccl_call_chunks and its indexes (dbstat),
 * runs retention past every call, and measures nccl_instances, its indexes and
 * nccl_instance_processes.
 *
 *   build/bench/nccl_rollup_bench DIR_OF_CAPTURED_BATCHES [--dir /var/tmp]
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"
#include "server/store/store.h"

#define SPOOL_HEADER_BYTES 64 /* docs/spool-format.md */
#define MAX_PLAIN (512u << 20)

static long long sql_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	long long v = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	else
		fprintf(stderr, "nccl_rollup_bench: %s: %s\n", sql, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return v;
}

static int read_all(const char *path, struct byte_buf *out)
{
	FILE *f = fopen(path, "rb");
	uint8_t buf[65536];
	size_t n;

	if (!f)
		return -errno;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		byte_buf_append(out, buf, n);
	fclose(f);
	return byte_buf_error(out);
}

static int put_file(struct store *s, const char *path, uint64_t n)
{
	struct byte_buf file = { 0 }, plain = { 0 };
	struct sysom_batch b;
	struct sysom_wire_error werr = { 0 };
	struct store_put_result r;
	int rc = read_all(path, &file);

	memset(&b, 0, sizeof(b));
	if (rc)
		goto cleanup;
	const uint8_t *body = file.data;
	size_t len = file.len;
	if (len > SPOOL_HEADER_BYTES && !memcmp(body, "SYSP", 4)) {
		body += SPOOL_HEADER_BYTES;
		len -= SPOOL_HEADER_BYTES;
	}
	if ((rc = sysom_zstd_decompress(body, len, MAX_PLAIN, &plain)) ||
	    (rc = sysom_batch_decode(plain.data, plain.len, &sysom_wire_default_limits, &b, &werr)))
		goto cleanup;
	rc = store_batch_put(s, &b, 0x9e3779b97f4a7c15ULL * (n + 1), (int64_t)b.window_end_ns, &r);
cleanup:
	if (rc)
		fprintf(stderr, "nccl_rollup_bench: %s: %s\n", path, sysom_strerror(rc));
	sysom_batch_free(&b);
	byte_buf_free(&plain);
	byte_buf_free(&file);
	return rc;
}

int main(int argc, char **argv)
{
	const char *base = "/var/tmp";
	char dir[256], path[512], err[256];
	struct store *s = NULL;
	struct store_retention_stats st;
	sqlite3 *db = NULL;
	uint64_t files = 0;
	int rc = 1;

	if (argc < 2) {
		fprintf(stderr, "usage: nccl_rollup_bench DIR_OF_CAPTURED_BATCHES [--dir BASE]\n");
		return 2;
	}
	if (argc == 4 && !strcmp(argv[2], "--dir"))
		base = argv[3];
	snprintf(dir, sizeof(dir), "%s/nccl-rollup-bench.XXXXXX", base);
	if (!mkdtemp(dir) || store_sqlite_open(dir, NULL, &s, err, sizeof(err))) {
		fprintf(stderr, "nccl_rollup_bench: cannot open a store in %s\n", dir);
		return 1;
	}
	DIR *d = opendir(argv[1]);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		if (put_file(s, path, files) == 0)
			files++;
	}
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "%s/sysom.db", dir);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		goto cleanup;
	long long calls = sql_int(db, "SELECT coalesce(sum(calls), 0) FROM nccl_call_chunks"
				      " WHERE comm_key != 0");
	long long all_calls = sql_int(db, "SELECT coalesce(sum(calls), 0) FROM nccl_call_chunks");
	long long chunk_bytes = sql_int(db, "SELECT sum(pgsize) FROM dbstat WHERE name LIKE"
					    " 'nccl_call_chunks%'");
	/* Past every call: all raw rows go, the instances stay (rollup cutoff 0: kept). */
	int64_t now_ms = (int64_t)time(NULL) * 1000 + 86400000LL;
	if (store_sqlite_retention(s, now_ms, 0, &st))
		goto cleanup;
	long long inst = sql_int(db, "SELECT sum(instances) FROM nccl_instances");
	long long rows = sql_int(db, "SELECT count(*) FROM nccl_instances");
	long long kept_calls = sql_int(db, "SELECT sum(calls) FROM nccl_instances");
	long long inst_bytes = sql_int(db, "SELECT sum(pgsize) FROM dbstat WHERE name LIKE"
					   " 'nccl_instance%'");
	long long blob_bytes = sql_int(db, "SELECT sum(length(data)) FROM nccl_instances");
	printf("batches %" PRIu64 ": %lld NCCL calls (%lld of collectives), chunks %lld bytes"
	       " (%.1f per call)\n", files, all_calls, calls, chunk_bytes,
	       calls > 0 ? (double)chunk_bytes / (double)all_calls : 0.0);
	printf("instances %lld in %lld rows (%lld calls, %.1f per instance): %lld bytes with indexes"
	       " (%.1f per instance, %.1f per call; blobs %.1f per instance)\n", inst, rows, kept_calls,
	       inst > 0 ? (double)kept_calls / (double)inst : 0.0, inst_bytes,
	       inst > 0 ? (double)inst_bytes / (double)inst : 0.0,
	       kept_calls > 0 ? (double)inst_bytes / (double)kept_calls : 0.0,
	       inst > 0 ? (double)blob_bytes / (double)inst : 0.0);
	printf("ratio raw chunks / instances: %.1fx\n",
	       inst_bytes > 0 ? (double)chunk_bytes / (double)inst_bytes : 0.0);
	rc = 0;
cleanup:
	sqlite3_close(db);
	store_close(s);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path))
		rc = 1;
	return rc;
}
