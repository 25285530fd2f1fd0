/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ClickHouse backend: opening (URL, credentials, schema migrations) and the vtable. A call
 * a backend does not implement answers -ENOTSUP (the API: 501, never wrong data); ClickHouse
 * implements every one.
 */
#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/error.h"
#include "server/store/clickhouse_internal.h"

/*
 * Schema migrations, applied in order; every statement is idempotent (IF NOT EXISTS; an ALTER
 * ... ADD COLUMN is skipped when its column exists, a RENAME TABLE when its source is gone:
 * statement_done) so that a migration cut short, or run again, simply goes on. The version row is written after its statements. 18.16 has neither TTL nor LowCardinality (without an
 * experimental setting): retention drops whole day partitions instead (docs/operations.md).
 *
 * A batch's rows are written first, each carrying the batch's `attempt` (a random id drawn per
 * store_batch_put), and its `batches` row last: rows count only when their attempt is the lowest
 * attempt stored for their batch identity (CH_COMMITTED), so a write cut short leaves nothing
 * visible and two replicas storing the same batch at once agree on one copy.
 */
static const char *const migration_1[] = {
	"CREATE TABLE IF NOT EXISTS batches (day Date, node_id String, epoch UInt64,"
	" sequence UInt64, attempt UInt64, content_hash UInt64, received_ns Int64,"
	" window_start_ns Int64, window_end_ns Int64, samples UInt64, sample_rows UInt32,"
	" hostname String, kernel_release String, machine String, agent_version String,"
	" boot_id String, kernel_object Int64, sample_hz UInt32, sample_rate_ppm UInt32,"
	" online_cpus UInt32, counter_ids Array(UInt16), counter_values Array(UInt64))"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, epoch, sequence)",
	/* ident: what makes the object the same object (kind byte, then build ID or name). */
	"CREATE TABLE IF NOT EXISTS objects (id Int64, ident String, kind UInt8,"
	" build_id String, name String, seen_ns Int64)"
	" ENGINE = ReplacingMergeTree ORDER BY id",
	/* ident: kind byte, stop reason byte, then per frame object id and offset (LE u64). */
	"CREATE TABLE IF NOT EXISTS stacks (id Int64, ident String)"
	" ENGINE = ReplacingMergeTree ORDER BY id",
	"CREATE TABLE IF NOT EXISTS processes (day Date, node_id String, process UInt64,"
	" tgid UInt32, start_time_ns UInt64, generation UInt32, ppid UInt32, comm String,"
	" exe String, cmdline String, first_seen_ns Int64, last_seen_ns Int64, received_ns Int64,"
	" attempt UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, process)",
	"CREATE TABLE IF NOT EXISTS samples (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, tid UInt32, cpu UInt32, thread_comm String,"
	" kernel_stack Int64, user_stack Int64, count UInt64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS ksyms (build_id String, offset UInt64, type UInt8,"
	" name String, uploaded_ns Int64) ENGINE = MergeTree ORDER BY (build_id, offset)",
	NULL,
};

static const char *const *const migrations[CH_SCHEMA_VERSION] = {
	migration_1,
	ch__migration_collectives,
	ch__migration_gpu_os,
	ch__migration_state, /* incidents, job settings, baselines (clickhouse_state.c) */
	ch__migration_host,  /* host signals (clickhouse_host.c) */
	ch__migration_workers, /* job_ranks role, rank_pid (clickhouse_schema_workers.c) */
	ch__migration_gpu_health, /* GPU health per window (clickhouse_gpu_health.c) */
	ch__migration_identity, /* process identities (clickhouse_schema_identity.c) */
	ch__migration_gpu_device, /* job_ranks gpu_device (clickhouse_schema_workers.c) */
	ch__migration_replicas, /* replica heartbeats (clickhouse_replicas.c) */
	ch__migration_rollup, /* per-minute sample and off-CPU rollups (clickhouse_rollup.c) */
	ch__migration_nccl_rollup, /* NCCL instances past the raw calls (clickhouse_nccl_rollup.c) */
	ch__migration_summaries, /* node, counter and job summaries (clickhouse_schema_summaries.c) */
	ch__migration_fleet_slots, /* fleet-wide minute and hour summaries (clickhouse_fleet_slots.c) */
	ch__migration_process_names, /* process comms per day (clickhouse_schema_summaries.c) */
	ch__migration_stack_days, /* stacks by day, collected (clickhouse_schema_stacks.c) */
	ch__migration_batch_minutes, /* batches by window minute (clickhouse_schema_batch_minutes.c) */
};

static int read_version(struct ch_store *s, int *out)
{
	struct byte_buf ans = { 0 };
	struct ch_tsv t;
	char *f[1];
	uint64_t v;
	int rc = ch__exec(s, "SELECT max(version) FROM schema_migrations FORMAT TabSeparated",
			  NULL, 0, &ans);

	if (rc)
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	if ((rc = ch_tsv_row(&t, f, 1)) != 1 || ch_tsv_u64(f[0], &v) || v > 1000000) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	*out = (int)v;
	rc = 0;
cleanup:
	byte_buf_free(&ans);
	return rc;
}

/*
 * True when `st` is "ALTER TABLE t ADD COLUMN c ..." and t already has a column c: this
 * ClickHouse has no ADD COLUMN IF NOT EXISTS, and a migration's ALTER (one statement, all its
 * columns or none) is skipped when its first column is there, so that a migration cut short
 * after it, or run again, goes on.
 */
static bool column_added(struct ch_store *s, const char *st)
{
	char table[64], column[64];
	struct byte_buf q = { 0 }, ans = { 0 };
	bool added = false;

	if (sscanf(st, "ALTER TABLE %63[A-Za-z0-9_] ADD COLUMN %63[A-Za-z0-9_]", table, column) != 2)
		return false;
	byte_buf_printf(&q, "SELECT count() FROM system.columns WHERE database = ");
	ch__quote(&q, s->database);
	byte_buf_printf(&q, " AND table = ");
	ch__quote(&q, table);
	byte_buf_printf(&q, " AND name = ");
	ch__quote(&q, column);
	byte_buf_printf(&q, " FORMAT TabSeparated");
	byte_buf_append(&q, "", 1);
	if (!byte_buf_error(&q) && !ch__exec(s, (const char *)q.data, NULL, 0, &ans))
		added = ans.len > 0 && ((const char *)ans.data)[0] == '1';
	byte_buf_free(&q);
	byte_buf_free(&ans);
	return added;
}

/* True when `st` is "RENAME TABLE a TO b" and this database has no table a: renamed already,
 * by a run of its migration cut short after it (this ClickHouse has no RENAME IF EXISTS). */
static bool table_renamed(struct ch_store *s, const char *st)
{
	char table[64];
	struct byte_buf q = { 0 }, ans = { 0 };
	bool renamed = false;

	if (sscanf(st, "RENAME TABLE %63[A-Za-z0-9_] TO ", table) != 1)
		return false;
	byte_buf_printf(&q, "SELECT count() FROM system.tables WHERE database = ");
	ch__quote(&q, s->database);
	byte_buf_printf(&q, " AND name = ");
	ch__quote(&q, table);
	byte_buf_printf(&q, " FORMAT TabSeparated");
	byte_buf_append(&q, "", 1);
	if (!byte_buf_error(&q) && !ch__exec(s, (const char *)q.data, NULL, 0, &ans))
		renamed = ans.len > 0 && ((const char *)ans.data)[0] == '0';
	byte_buf_free(&q);
	byte_buf_free(&ans);
	return renamed;
}

/* True when a migration statement's effect is there already (see migrations[]). */
static bool statement_done(struct ch_store *s, const char *st)
{
	return column_added(s, st) || table_renamed(s, st);
}

int ch__schema_apply(struct ch_store *s, char *err, size_t errlen)
{
	char *db = s->database;
	struct byte_buf sql = { 0 };
	int version = 0, rc;

	/* The database may not exist yet: this one statement runs in the server's default. */
	byte_buf_printf(&sql, "CREATE DATABASE IF NOT EXISTS %s", db);
	byte_buf_append(&sql, "", 1);
	if ((rc = byte_buf_error(&sql)))
		goto cleanup;
	s->database = "default";
	rc = ch__exec(s, (const char *)sql.data, NULL, 0, NULL);
	s->database = db;
	if (rc) {
		snprintf(err, errlen, "cannot create the ClickHouse database %s at %s: %s", db,
			 s->url, sysom_strerror(rc));
		goto cleanup;
	}
	rc = ch__exec(s, "CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32,"
			 " applied_ns Int64) ENGINE = MergeTree ORDER BY version", NULL, 0, NULL);
	if (!rc)
		rc = read_version(s, &version);
	if (rc) {
		snprintf(err, errlen, "cannot read the schema version of ClickHouse database %s: %s",
			 db, sysom_strerror(rc));
		goto cleanup;
	}
	if (version > CH_SCHEMA_VERSION) {
		snprintf(err, errlen, "ClickHouse database %s has schema version %d; this server"
			 " knows up to %d: upgrade the server", db, version, CH_SCHEMA_VERSION);
		rc = -SYSOM_EVERSION;
		goto cleanup;
	}
	/* A migration may backfill from every stored row (13's summaries): minutes on a large
	 * store, not the timeout of a read. */
	long timeout_ms = s->timeout_ms;

	if (version < CH_SCHEMA_VERSION && s->timeout_ms < CH_MIGRATION_TIMEOUT_MS)
		s->timeout_ms = CH_MIGRATION_TIMEOUT_MS;
	for (int v = version + 1; !rc && v <= CH_SCHEMA_VERSION; v++) {
		for (const char *const *st = migrations[v - 1]; *st; st++)
			if (!statement_done(s, *st) && (rc = ch__exec(s, *st, NULL, 0, NULL)))
				break;
		if (!rc)
			rc = ch__execf(s, NULL, "INSERT INTO schema_migrations VALUES (%d, %lld)", v,
				       (long long)0);
		if (rc) {
			snprintf(err, errlen, "ClickHouse schema migration %d failed: %s", v,
				 sysom_strerror(rc));
		}
	}
	s->timeout_ms = timeout_ms;
	if (rc)
		goto cleanup;
	s->schema_version = CH_SCHEMA_VERSION;
cleanup:
	byte_buf_free(&sql);
	return rc;
}

static void ch_close(struct store *base)
{
	struct ch_store *s = ch__store(base);

	for (unsigned i = 0; i < s->nhandles; i++)
		curl_easy_cleanup(s->handles[i]);
	if (s->stacks)
		for (unsigned i = 0; i < CH_STACK_CACHE; i++)
			free(s->stacks[i].stk);
	free(s->stacks);
	free(s->ids);
	for (unsigned i = 0; i < CH_STRIPES; i++)
		pthread_mutex_destroy(&s->stripes[i]);
	ch__group_destroy(&s->inserts);
	ch__group_destroy(&s->finds);
	pthread_mutex_destroy(&s->lock);
	free(s->url);
	free(s->database);
	free(s->user);
	free(s->password);
	free(s);
	curl_global_cleanup();
}

static int ch_schema_version(struct store *base)
{
	return ch__store(base)->schema_version;
}

static int ch_ping(struct store *base)
{
	return ch__exec(ch__store(base), "SELECT 1", NULL, 0, NULL);
}

static int ch_size_get(struct store *base, uint64_t *bytes)
{
	struct ch_store *s = ch__store(base);
	struct byte_buf ans = { 0 };
	struct ch_tsv t;
	char *f[1];
	int rc = ch__execf(s, &ans, "SELECT sum(bytes_on_disk) FROM system.parts WHERE active"
			   " AND database = '%s' FORMAT TabSeparated", s->database);

	if (rc)
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	rc = ch_tsv_row(&t, f, 1) == 1 && !ch_tsv_u64(f[0], bytes) ? 0 : -EPROTO;
cleanup:
	byte_buf_free(&ans);
	return rc;
}

static const struct store_ops ch_ops = {
	.identities = true,
	.close = ch_close,
	.schema_version = ch_schema_version,
	.batch_put = ch__batch_put,
	.batch_find = ch__batch_find,
	.ksyms_put = ch__ksyms_put,
	.ksyms_count = ch__ksyms_count,
	.ksym_range_get = ch__ksym_range_get,
	.object_get = ch__object_get,
	.stack_get = ch__stack_get,
	.nodes_list = ch__nodes_list,
	.processes_list = ch__processes_list,
	.stacks_aggregate = ch__stacks_aggregate,
	.counters_list = ch__counters_list,
	.launches_aggregate = ch__launches_aggregate,
	.jobs_list = ch__jobs_list,
	.jobs_list_identity = ch__jobs_list_identity,
	.job_ranks_list = ch__job_ranks_list,
	.job_communicators_list = ch__job_communicators_list,
	.collectives_list = ch__collectives_list,
	.job_gpu = ch__job_gpu,
	.gpu_time_aggregate = ch__gpu_time_aggregate,
	.offcpu_aggregate = ch__offcpu_aggregate,
	.wall_aggregate = ch__wall_aggregate,
	.job_os = ch__job_os,
	.host_signals_list = ch__host_signals,
	.gpu_health_list = ch__gpu_health_list,
	.diagnosis_upsert = ch__diagnosis_upsert,
	.diagnosis_resolve = ch__diagnosis_resolve,
	.diagnoses_list = ch__diagnoses_list,
	.job_settings_get = ch__job_settings_get,
	.job_settings_put = ch__job_settings_put,
	.baseline_put = ch__baseline_put,
	.baseline_get = ch__baseline_get,
	.ping = ch_ping,
	.size_get = ch_size_get,
	.size_limit_set = NULL,
	.ksyms_usage_get = ch__ksyms_usage_get,
	.retention_apply = ch__retention_apply,
	.fleet_slots_run = ch__fleet_slots_run,
	.insert_groups_get = ch__insert_groups_get,
	.nccl_rollup_state = ch__nccl_rollup_state,
	.nccl_rollup_put = ch__nccl_rollup_put,
	.nccl_rollup_watermark_set = ch__nccl_rollup_watermark_set,
	.nccl_rollup_list = ch__nccl_rollup_list,
	.nccl_rollup_process = ch__nccl_rollup_process,
	.replica_beat = ch__replica_beat,
	.replicas_list = ch__replicas_list,
};

/* Splits "http[s]://HOST[:PORT][/]?database=NAME" into the base URL and the database. */
static int url_parse(struct ch_store *s, const char *url, char *err, size_t errlen)
{
	const char *q = strchr(url, '?'), *db;
	size_t base_len, db_len;

	if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
		snprintf(err, errlen, "--clickhouse-url '%s' does not start with http:// or https://",
			 url);
		return -EINVAL;
	}
	db = q ? strstr(q, "database=") : NULL;
	if (!db || (db[-1] != '?' && db[-1] != '&')) {
		snprintf(err, errlen, "--clickhouse-url '%s' names no database (...?database=NAME)",
			 url);
		return -EINVAL;
	}
	db += 9;
	db_len = strcspn(db, "&");
	for (size_t i = 0; i < db_len; i++)
		if (!isalnum((unsigned char)db[i]) && db[i] != '_')
			db_len = 0;
	if (db_len == 0 || db_len > 64) {
		snprintf(err, errlen, "--clickhouse-url: the database name must be 1 to 64 letters,"
			 " digits or underscores");
		return -EINVAL;
	}
	base_len = (size_t)(q - url);
	if (!(s->database = strndup(db, db_len)) ||
	    asprintf(&s->url, "%.*s%s", (int)base_len, url,
		     base_len && url[base_len - 1] == '/' ? "" : "/") < 0) {
		s->url = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Reads "USER:PASSWORD" (the first line) of the credentials file. */
static int credentials_read(struct ch_store *s, const char *path, char *err, size_t errlen)
{
	char line[1024], *colon;
	FILE *f = fopen(path, "re");
	int rc = 0;

	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "cannot open the ClickHouse credentials file %s: %s", path,
			 sysom_strerror(rc));
		return rc;
	}
	if (!fgets(line, sizeof(line), f) || !(colon = strchr(line, ':')) || colon == line) {
		snprintf(err, errlen, "the ClickHouse credentials file %s does not start with a"
			 " USER:PASSWORD line", path);
		rc = -EINVAL;
		goto cleanup;
	}
	line[strcspn(line, "\r\n")] = '\0';
	*colon = '\0';
	if (!(s->user = strdup(line)) || !(s->password = strdup(colon + 1)))
		rc = -ENOMEM;
cleanup:
	explicit_bzero(line, sizeof(line));
	fclose(f);
	return rc;
}

int store_clickhouse_open(const struct store_clickhouse_options *opts, struct store **out,
			  char *err, size_t errlen)
{
	struct ch_store *s = calloc(1, sizeof(*s));
	int rc;

	snprintf(err, errlen, "out of memory");
	if (!s)
		return -ENOMEM;
	s->base.ops = &ch_ops;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		free(s);
		return -ENOMEM;
	}
	pthread_mutex_init(&s->lock, NULL);
	for (unsigned i = 0; i < CH_STRIPES; i++)
		pthread_mutex_init(&s->stripes[i], NULL);
	ch__group_init(&s->inserts, ch__insert_group_run, opts->group_max ? opts->group_max
									  : UINT32_MAX,
		       CH_GROUP_MAX_BYTES);
	ch__group_init(&s->finds, ch__find_group_run,
		       opts->group_max && opts->group_max < CH_GROUP_MAX_FINDS ? opts->group_max
									  : CH_GROUP_MAX_FINDS,
		       SIZE_MAX);
	s->timeout_ms = opts->timeout_ms ? (long)opts->timeout_ms : 10000L;
	s->ids = calloc(CH_ID_CACHE, sizeof(*s->ids));
	s->stacks = calloc(CH_STACK_CACHE, sizeof(*s->stacks));
	if (!s->ids || !s->stacks) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = url_parse(s, opts->url, err, errlen)))
		goto cleanup;
	if (opts->credentials_file && (rc = credentials_read(s, opts->credentials_file, err, errlen)))
		goto cleanup;
	if ((rc = ch__schema_apply(s, err, errlen)))
		goto cleanup;
	*out = &s->base;
	return 0;
cleanup:
	ch_close(&s->base);
	return rc;
}
