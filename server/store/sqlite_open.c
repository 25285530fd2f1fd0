/* SPDX-License-Identifier: Apache-2.0 */
/* The SQLite backend's entry: opening the data directory, its vtable, health and size. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "server/store/sqlite_internal.h"

/*
 * Durability: journal_mode=WAL with synchronous=FULL (sqlite_pool.c). The agent deletes its
 * spool file as soon as ingest answers 2xx, so a batch we acknowledged must survive a power
 * loss, not only a process crash; NORMAL would let the last commits vanish on power loss. FULL
 * costs one fsync of the WAL per batch (one commit per node every 30 s), which a single disk
 * sustains for thousands of nodes.
 */
#define DEFAULT_READERS 4
#define MAX_READERS 64
#define DEFAULT_BUSY_TIMEOUT_MS 5000

#define JOURNAL_MODE_LEN 16

static const char ping_sql[] = "SELECT count(*) FROM kernel_symbol_tables WHERE id = 0";

static void sqlite_close(struct store *base)
{
	struct sqlite_store *s = store__sqlite(base);

	for (uint32_t i = 0; i < s->reader_count; i++)
		store__conn_close(&s->readers[i]);
	free(s->readers);
	/* The writer closes last: the last connection checkpoints the WAL into the database. */
	store__conn_close(&s->writer);
	pthread_mutex_destroy(&s->write_lock);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_cond_destroy(&s->pool_cond);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s->db_path);
	free(s->wal_path);
	free(s);
}

static int sqlite_schema_version(struct store *base)
{
	(void)base;
	return store__schema_version();
}

static int ignore_row(void *ctx, sqlite3_stmt *st)
{
	(void)ctx;
	(void)st;
	return 0;
}

static int sqlite_ping(struct store *base)
{
	uint64_t rows = 0;
	int rc = store__read(store__sqlite(base),
			     &(struct store__query){ .sql = ping_sql, .row = ignore_row,
						     .max_rows = 1, .rows = &rows });

	return !rc && !rows ? -EPROTO : rc; /* count(*) always returns a row */
}

static int sqlite_size_get(struct store *base, uint64_t *bytes)
{
	struct sqlite_store *s = store__sqlite(base);
	struct stat st;
	uint64_t total;

	if (stat(s->db_path, &st))
		return -errno;
	total = (uint64_t)st.st_size;
	if (stat(s->wal_path, &st) == 0)
		total += (uint64_t)st.st_size;
	else if (errno != ENOENT)
		return -errno;
	*bytes = total;
	return 0;
}

static int sqlite_size_limit_set(struct store *base, uint64_t max_bytes)
{
	struct sqlite_store *s = store__sqlite(base);
	int rc;

	pthread_mutex_lock(&s->write_lock);
	rc = store__size_limit_apply(s, max_bytes);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static const struct store_ops sqlite_ops = {
	.identities = true,
	.close = sqlite_close,
	.schema_version = sqlite_schema_version,
	.batch_put = store__sqlite_batch_put,
	.batch_find = store__sqlite_batch_find,
	.ksyms_put = store__sqlite_ksyms_put,
	.ksyms_count = store__sqlite_ksyms_count,
	.ksym_range_get = store__sqlite_ksym_range_get,
	.object_get = store__sqlite_object_get,
	.stack_get = store__sqlite_stack_get,
	.nodes_list = store__sqlite_nodes_list,
	.processes_list = store__sqlite_processes_list,
	.stacks_aggregate = store__sqlite_stacks_aggregate,
	.counters_list = store__sqlite_counters_list,
	.launches_aggregate = store__sqlite_launches_aggregate,
	.jobs_list = store__sqlite_jobs_list,
	.jobs_list_identity = store__sqlite_jobs_list_identity,
	.job_ranks_list = store__sqlite_job_ranks_list,
	.gpu_health_list = store__sqlite_gpu_health_list,
	.job_communicators_list = store__sqlite_job_communicators_list,
	.collectives_list = store__sqlite_collectives_list,
	.job_gpu = store__sqlite_job_gpu,
	.gpu_time_aggregate = store__sqlite_gpu_time_aggregate,
	.offcpu_aggregate = store__sqlite_offcpu_aggregate,
	.wall_aggregate = store__sqlite_wall_aggregate,
	.job_os = store__sqlite_job_os,
	.host_signals_list = store__sqlite_host_signals,
	.diagnosis_upsert = store__sqlite_diagnosis_upsert,
	.diagnosis_resolve = store__sqlite_diagnosis_resolve,
	.diagnoses_list = store__sqlite_diagnoses_list,
	.job_settings_get = store__sqlite_job_settings_get,
	.job_settings_put = store__sqlite_job_settings_put,
	.baseline_put = store__sqlite_baseline_put,
	.baseline_get = store__sqlite_baseline_get,
	.ping = sqlite_ping,
	.size_get = sqlite_size_get,
	.size_limit_set = sqlite_size_limit_set,
	.ksyms_usage_get = store__sqlite_ksyms_usage_get,
	.retention_apply = store__sqlite_retention_apply,
	.nccl_rollup_state = store__sqlite_nccl_rollup_state,
	.nccl_rollup_put = store__sqlite_nccl_rollup_put,
	.nccl_rollup_watermark_set = store__sqlite_nccl_rollup_watermark_set,
	.nccl_rollup_list = store__sqlite_nccl_rollup_list,
	.nccl_rollup_process = store__sqlite_nccl_rollup_process,
};

/* Makes sure `dir` is a directory (creating it) and locks it for this process. */
static int data_dir_lock(const char *dir, int *lock_fd, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, rc;

	if (mkdir(dir, 0750) && errno != EEXIST) {
		rc = -errno;
		snprintf(err, errlen, "cannot create data directory %s: %s", dir, sysom_strerror(rc));
		return rc;
	}
	if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "data directory %s is not a directory", dir);
		return -ENOTDIR;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/sysom.lock", dir) >= sizeof(path)) {
		snprintf(err, errlen, "data directory path too long");
		return -ENAMETOOLONG;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot use data directory %s: %s: %s", dir, path,
			 sysom_strerror(rc));
		return rc;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, errlen, "data directory %s is in use by another sysom-server (%s)", dir,
			 path);
		close(fd);
		return rc;
	}
	*lock_fd = fd;
	return 0;
}

/*
 * The database holds every node's stacks and hostnames: its files are the owner's only. A new
 * sysom.db is created 0600 before SQLite opens it (SQLite gives its -wal and -shm files the
 * database file's mode); files an older server created group- or world-readable are tightened.
 */
static int db_files_private(const struct sqlite_store *s, char *err, size_t errlen)
{
	const char *suffixes[] = { "", "-wal", "-shm" };
	char path[PATH_MAX];
	struct stat st;
	int fd, rc;

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s%s", s->db_path, suffixes[i]) >=
		    sizeof(path)) {
			snprintf(err, errlen, "data directory path too long");
			return -ENAMETOOLONG;
		}
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (i == 0 ? O_CREAT : 0), 0600);
		if (fd < 0) {
			if (i > 0 && errno == ENOENT)
				continue;
			rc = -errno;
			snprintf(err, errlen, "cannot open %s: %s", path, sysom_strerror(rc));
			return rc;
		}
		rc = fstat(fd, &st) ? -errno : 0;
		if (!rc && (st.st_mode & 077) && fchmod(fd, st.st_mode & 0700))
			rc = -errno;
		close(fd);
		if (rc) {
			snprintf(err, errlen, "cannot make %s private: %s", path, sysom_strerror(rc));
			return rc;
		}
	}
	return 0;
}

static int text_row(void *ctx, sqlite3_stmt *st)
{
	store__text_copy(st, 0, ctx, JOURNAL_MODE_LEN);
	return 0;
}

static int open_connections(struct sqlite_store *s, const struct store_sqlite_options *o,
			    char *err, size_t errlen)
{
	sqlite3_int64 page_size = 0;
	char mode[JOURNAL_MODE_LEN] = "";
	uint64_t rows = 0;
	int rc;

	if ((rc = store__conn_open(&s->writer, s->db_path, o->busy_timeout_ms, false, err, errlen)))
		return rc;
	/* Retention frees pages; a new database gives them back to the file system. SQLite
	 * takes this only before the first table exists: an older database keeps its mode and
	 * reuses its free pages instead (docs/operations.md: converting one). */
	if ((rc = store__conn_exec(&s->writer, "PRAGMA auto_vacuum = INCREMENTAL"))) {
		snprintf(err, errlen, "cannot use %s: %s", s->db_path, sqlite3_errmsg(s->writer.db));
		return rc;
	}
	rc = store__query(&s->writer, &(struct store__query){ .sql = "PRAGMA journal_mode = WAL",
							       .once = true, .row = text_row,
							       .ctx = mode, .max_rows = 1 });
	if (rc || strcmp(mode, "wal") != 0) {
		snprintf(err, errlen, "cannot use %s: %s", s->db_path,
			 rc ? sqlite3_errmsg(s->writer.db) : "WAL journal mode refused");
		return rc ? rc : -EPROTO;
	}
	if ((rc = store__schema_migrate(&s->writer, s->db_path, err, errlen)))
		return rc;
	rc = store__query(&s->writer, &(struct store__query){ .sql = "PRAGMA page_size", .once = true,
							       .row = store__row_i64, .ctx = &page_size,
							       .max_rows = 1, .rows = &rows });
	if (rc || !rows || page_size <= 0) {
		snprintf(err, errlen, "cannot read the page size of %s", s->db_path);
		return rc ? rc : -EPROTO;
	}
	s->page_size = (uint32_t)page_size;
	s->ksyms_max_rows = o->max_kernel_symbols;
	s->ksyms_in_use_ns = o->kernel_symbols_in_use_ns > 0 ? o->kernel_symbols_in_use_ns
							     : STORE_KSYMS_IN_USE_NS;
	if (o->max_size && (rc = store__size_limit_apply(s, o->max_size))) {
		snprintf(err, errlen, "cannot limit the size of %s: %s", s->db_path,
			 sqlite3_errmsg(s->writer.db));
		return rc;
	}
	s->readers = calloc(o->read_connections, sizeof(*s->readers));
	if (!s->readers)
		return -ENOMEM;
	for (uint32_t i = 0; i < o->read_connections; i++) {
		if ((rc = store__conn_open(&s->readers[i], s->db_path, o->busy_timeout_ms, true, err,
					   errlen)))
			return rc;
		s->reader_count++;
		s->readers[i].next_free = s->free_readers;
		s->free_readers = &s->readers[i];
	}
	return 0;
}

int store_sqlite_retention(struct store *s, int64_t before_ms, int64_t rollup_before_ms,
			   struct store_retention_stats *st)
{
	if (s->ops != &sqlite_ops)
		return -ENOTSUP;
	uint64_t instances = 0, lost = 0;
	int rc;

	*st = (struct store_retention_stats){ 0 };
	if (rollup_before_ms > before_ms)
		return -EINVAL;
	/* The NCCL instances first: the raw calls they are read from go next. */
	if ((rc = store__nccl_rollup_run(s, before_ms, &instances, &lost)))
		return rc;
	rc = store__sqlite_retention(s, before_ms, rollup_before_ms, st);
	st->nccl_instances = instances;
	st->nccl_lost = lost;
	return rc;
}

int store_sqlite_open(const char *data_dir, const struct store_sqlite_options *opts,
		      struct store **out, char *err, size_t errlen)
{
	struct store_sqlite_options o = opts ? *opts : (struct store_sqlite_options){ 0 };
	struct sqlite_store *s = NULL;
	int rc;

	if (!o.read_connections)
		o.read_connections = DEFAULT_READERS;
	if (o.read_connections > MAX_READERS)
		o.read_connections = MAX_READERS;
	if (!o.busy_timeout_ms)
		o.busy_timeout_ms = DEFAULT_BUSY_TIMEOUT_MS;
	if (!sqlite3_threadsafe()) {
		snprintf(err, errlen, "the SQLite library was built without thread support");
		return -ENOTSUP;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &sqlite_ops;
	s->lock_fd = -1;
	pthread_mutex_init(&s->write_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_cond, NULL);
	if (asprintf(&s->db_path, "%s/sysom.db", data_dir) < 0)
		s->db_path = NULL;
	if (asprintf(&s->wal_path, "%s/sysom.db-wal", data_dir) < 0)
		s->wal_path = NULL;
	if (!s->db_path || !s->wal_path) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = data_dir_lock(data_dir, &s->lock_fd, err, errlen)) ||
	    (rc = db_files_private(s, err, errlen)))
		goto cleanup;
	rc = open_connections(s, &o, err, errlen);
cleanup:
	if (rc) {
		if (rc == -ENOMEM)
			snprintf(err, errlen, "out of memory opening the store");
		sqlite_close(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}
