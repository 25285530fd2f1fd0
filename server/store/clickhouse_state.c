/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mutable state on ClickHouse: the monitor's incidents (diagnoses), per-job analysis settings
 * and baselines, and retention (dropping whole day partitions).
 *
 * Rows that change. ClickHouse has no UPDATE (18.16's ALTER ... UPDATE is an asynchronous
 * mutation), so every change inserts the whole row again into a ReplacingMergeTree(version)
 * ordered by the row's key; merges keep the highest version per key, and reads use FINAL,
 * which applies the same rule at read time to parts not merged yet. FINAL rather than
 * argMax(column, version) per column: the tables are small (incidents, not samples), a row is
 * always replaced as a whole, and one SELECT ... FINAL WHERE reads like the SQLite query.
 * Filters go in WHERE, never PREWHERE: PREWHERE runs before FINAL collapses the versions and
 * would return an old version (18.16 does not move WHERE to PREWHERE with FINAL; the unit
 * test's upsert/resolve cycle checks it).
 *
 * Versions. A row's version is max(previous version + 1, the caller's time in ms): later
 * writes of this server always win, and writes of another replica with a skewed clock still
 * order after what they read. A resolved incident's version has bit 62 set, so resolution is
 * final: an update racing with the resolve (read open, written after) loses to it.
 *
 * Incident ids. They appear in alerts (generatorURL) and `sysomctl diagnosis --id`, so they
 * must be unique and stable even with several replicas writing. An id is not drawn from a
 * counter (two replicas would hand out the same number) but derived from what the incident
 * is: a 53-bit hash (exact in JSON numbers) of (job, identity, generation), where generation
 * counts the earlier, resolved incidents of the same (job, identity). Two replicas opening
 * the same incident compute the same id and write the same key, so they cannot duplicate it,
 * whatever their clocks say. A hash collision with another incident probes the next ids, as
 * stacks do; the probe sequence depends only on stored rows, so replicas agree on it too.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/hash.h"
#include "common/log.h"
#include "server/store/clickhouse_internal.h"

#define RESOLVED_VERSION (1ull << 62)
#define VERSION_MASK (RESOLVED_VERSION - 1)
#define ID_BITS 53
#define ID_PROBES 16
#define MS_PER_DAY 86400000LL

const char *const ch__migration_state[] = {
	"CREATE TABLE IF NOT EXISTS diagnoses (id Int64, generation UInt32, job String,"
	" identity String, kind String, rank Int32, hostname String, communicators String,"
	" layer String, severity String, summary String, action String, report String,"
	" opened_ms Int64, updated_ms Int64, resolved_ms Int64, version UInt64)"
	" ENGINE = ReplacingMergeTree(version) ORDER BY id",
	/* deleted: 1 for a deletion (store_job_settings_put with NULL), a tombstone row. */
	"CREATE TABLE IF NOT EXISTS job_settings (job String, settings String, deleted UInt8,"
	" updated_ms Int64, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY job",
	"CREATE TABLE IF NOT EXISTS job_baselines (job String, from_ms Int64, to_ms Int64,"
	" iteration_ns Int64, samples Int64, profile String, created_ms Int64, source String,"
	" version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY job",
	NULL,
};

static const char diag_columns[] =
	"id, generation, job, identity, kind, rank, hostname, communicators, layer, severity,"
	" summary, action, report, opened_ms, updated_ms, resolved_ms, version";
#define DIAG_FIELDS 17

typedef int (*row_fn)(void *ctx, char **f);

/* Runs the SELECT in `q` (FORMAT TabSeparated appended) and calls `row` per row; *rows
 * (when not NULL) gets the number of rows. */
static int select_rows(struct ch_store *s, struct byte_buf *q, unsigned nfields, row_fn row,
		       void *ctx, uint64_t *rows)
{
	struct byte_buf ans = { 0 };
	struct ch_tsv t;
	char *f[CH_MAX_FIELDS];
	int rc;

	byte_buf_printf(q, " FORMAT TabSeparated");
	byte_buf_append(q, "", 1);
	if ((rc = byte_buf_error(q)) || (rc = ch__exec(s, (const char *)q->data, NULL, 0, &ans)))
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	while ((rc = ch_tsv_row(&t, f, nfields)) == 1)
		if ((rc = row(ctx, f)))
			goto cleanup;
	if (rc < 0)
		goto cleanup;
	rc = 0;
	if (rows)
		*rows = t.rows;
cleanup:
	byte_buf_free(&ans);
	return rc;
}

static int u64_row(void *ctx, char **f)
{
	return ch_tsv_u64(f[0], ctx);
}

/* The highest version stored for `key` = 'value' in `table` (0 when none). */
static int version_max(struct ch_store *s, const char *table, const char *key, const char *value,
		       uint64_t *out)
{
	struct byte_buf q = { 0 };
	int rc;

	*out = 0;
	byte_buf_printf(&q, "SELECT max(version) FROM %s WHERE %s = ", table, key);
	ch__quote(&q, value);
	rc = select_rows(s, &q, 1, u64_row, out, NULL);
	byte_buf_free(&q);
	return rc;
}

static uint64_t version_next(uint64_t prev, int64_t now_ms)
{
	uint64_t v = (prev & VERSION_MASK) + 1;

	if (now_ms > 0 && (uint64_t)now_ms > v)
		v = (uint64_t)now_ms;
	return v & VERSION_MASK;
}

static int64_t clamp63(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* ---- diagnoses ------------------------------------------------------------------------------ */

/* One stored incident row, its strings pointing into an answer. */
struct diag_row {
	struct store_diagnosis d;
	uint64_t generation, version;
};

static int diag_parse(char **f, struct diag_row *r)
{
	int64_t rank;

	if (ch_tsv_i64(f[0], &r->d.id) || ch_tsv_u64(f[1], &r->generation) ||
	    ch_tsv_i64(f[5], &rank) || rank < INT32_MIN || rank > INT32_MAX ||
	    ch_tsv_i64(f[13], &r->d.opened_ms) || ch_tsv_i64(f[14], &r->d.updated_ms) ||
	    ch_tsv_i64(f[15], &r->d.resolved_ms) || ch_tsv_u64(f[16], &r->version))
		return -EPROTO;
	for (unsigned i = 2; i <= 12; i++)
		if (i != 5 && !f[i])
			return -EPROTO;
	r->d.job = f[2];
	r->d.identity = f[3];
	r->d.kind = f[4];
	r->d.rank = (int32_t)rank;
	r->d.hostname = f[6];
	r->d.communicators = f[7];
	r->d.layer = f[8];
	r->d.severity = f[9];
	r->d.summary = f[10];
	r->d.action = f[11];
	r->d.report = f[12];
	return 0;
}

static void diag_rowbinary(struct byte_buf *b, const struct store_diagnosis *d, uint32_t generation,
			   uint64_t version)
{
	byte_buf_put_u64(b, (uint64_t)d->id);
	byte_buf_put_u32(b, generation);
	ch__rb_str(b, d->job);
	ch__rb_str(b, d->identity);
	ch__rb_str(b, d->kind);
	byte_buf_put_u32(b, (uint32_t)d->rank);
	ch__rb_str(b, or_empty(d->hostname));
	ch__rb_str(b, or_empty(d->communicators));
	ch__rb_str(b, or_empty(d->layer));
	ch__rb_str(b, or_empty(d->severity));
	ch__rb_str(b, or_empty(d->summary));
	ch__rb_str(b, or_empty(d->action));
	ch__rb_str(b, or_empty(d->report));
	byte_buf_put_u64(b, (uint64_t)d->opened_ms);
	byte_buf_put_u64(b, (uint64_t)d->updated_ms);
	byte_buf_put_u64(b, (uint64_t)d->resolved_ms);
	byte_buf_put_u64(b, version);
}

static int diag_insert(struct ch_store *s, const struct store_diagnosis *d, uint32_t generation,
		       uint64_t version)
{
	struct byte_buf rows = { 0 }, sql = { 0 };
	int rc;

	diag_rowbinary(&rows, d, generation, version);
	byte_buf_printf(&sql, "INSERT INTO diagnoses (%s) FORMAT RowBinary", diag_columns);
	byte_buf_append(&sql, "", 1);
	if ((rc = byte_buf_error(&rows)) || (rc = byte_buf_error(&sql)))
		goto cleanup;
	rc = ch__exec(s, (const char *)sql.data, rows.data, rows.len, NULL);
cleanup:
	byte_buf_free(&rows);
	byte_buf_free(&sql);
	return rc;
}

/* The newest row (highest generation) of a (job, identity), with its own copy of nothing:
 * only the numbers are kept. */
struct latest {
	bool found;
	int64_t id, opened_ms, resolved_ms;
	uint64_t generation, version;
};

static int latest_row(void *ctx, char **f)
{
	struct latest *l = ctx;

	l->found = true;
	return ch_tsv_i64(f[0], &l->id) || ch_tsv_u64(f[1], &l->generation) ||
	       ch_tsv_i64(f[2], &l->opened_ms) || ch_tsv_i64(f[3], &l->resolved_ms) ||
	       ch_tsv_u64(f[4], &l->version) ? -EPROTO : 0;
}

struct owner {
	bool found, same;
	const struct store_diagnosis *d;
	uint64_t generation;
};

static int owner_row(void *ctx, char **f)
{
	struct owner *o = ctx;
	uint64_t gen;

	o->found = true;
	if (!f[0] || !f[1] || ch_tsv_u64(f[2], &gen))
		return -EPROTO;
	o->same = !strcmp(f[0], o->d->job) && !strcmp(f[1], o->d->identity) &&
		  gen == o->generation;
	return 0;
}

/* The id of generation `gen` of the incident: its hash, or the next free one on a collision. */
static int diag_id(struct ch_store *s, const struct store_diagnosis *d, uint64_t gen,
		   int64_t *out)
{
	struct byte_buf key = { 0 };
	uint64_t h;
	int rc;

	byte_buf_printf(&key, "%s", d->job);
	byte_buf_append(&key, "", 1);
	byte_buf_printf(&key, "%s", d->identity);
	byte_buf_append(&key, "", 1);
	byte_buf_put_u64(&key, gen);
	if ((rc = byte_buf_error(&key)))
		goto cleanup;
	h = sysom_hash64(key.data, key.len, 0x6469616700000000ull) & ((1ull << ID_BITS) - 1);
	rc = -EOVERFLOW;
	for (unsigned i = 0; i < ID_PROBES; i++) {
		struct owner o = { .d = d, .generation = gen };
		struct byte_buf q = { 0 };
		int64_t cand = (int64_t)(((h + i) & ((1ull << ID_BITS) - 1)) ?: 1);

		byte_buf_printf(&q, "SELECT job, identity, generation FROM diagnoses FINAL"
			       " WHERE id = %" PRId64, cand);
		rc = select_rows(s, &q, 3, owner_row, &o, NULL);
		byte_buf_free(&q);
		if (rc)
			goto cleanup;
		if (!o.found || o.same) {
			*out = cand;
			goto cleanup;
		}
		rc = -EOVERFLOW;
	}
	log_error("ClickHouse: %u incident ids in a row taken for job %s", ID_PROBES, d->job);
cleanup:
	byte_buf_free(&key);
	return rc;
}

int ch__diagnosis_upsert(struct store *base, const struct store_diagnosis *d, int64_t *id,
			  bool *opened)
{
	struct ch_store *s = ch__store(base);
	struct store_diagnosis row = *d;
	struct latest l = { 0 };
	struct byte_buf q = { 0 };
	uint64_t gen = 0;
	pthread_mutex_t *lock = &s->stripes[sysom_hash64(d->job, strlen(d->job), 0) % CH_STRIPES];
	int rc;

	pthread_mutex_lock(lock);
	byte_buf_printf(&q, "SELECT id, generation, opened_ms, resolved_ms, version FROM diagnoses"
		       " FINAL WHERE job = ");
	ch__quote(&q, d->job);
	byte_buf_printf(&q, " AND identity = ");
	ch__quote(&q, d->identity);
	byte_buf_printf(&q, " ORDER BY generation DESC LIMIT 1");
	if ((rc = select_rows(s, &q, 5, latest_row, &l, NULL)))
		goto cleanup;
	if (l.found && l.resolved_ms == 0) {
		/* The open one: updated, its id and opening time kept. */
		row.id = l.id;
		row.opened_ms = l.opened_ms;
		gen = l.generation;
	} else {
		gen = l.found ? l.generation + 1 : 0;
		if (gen > UINT32_MAX) {
			rc = -EOVERFLOW;
			goto cleanup;
		}
		if ((rc = diag_id(s, d, gen, &row.id)))
			goto cleanup;
		row.opened_ms = d->updated_ms;
		l.version = 0;
	}
	row.resolved_ms = 0;
	if ((rc = diag_insert(s, &row, (uint32_t)gen, version_next(l.version, d->updated_ms))))
		goto cleanup;
	*id = row.id;
	*opened = !(l.found && l.resolved_ms == 0);
cleanup:
	pthread_mutex_unlock(lock);
	byte_buf_free(&q);
	return rc;
}

struct resolve_ctx {
	bool found;
	struct diag_row r;
	int64_t now_ms;
	struct ch_store *s;
};

static int resolve_row(void *ctx, char **f)
{
	struct resolve_ctx *c = ctx;
	int rc;

	c->found = true;
	if ((rc = diag_parse(f, &c->r)))
		return rc;
	c->r.d.resolved_ms = c->now_ms;
	/* Written while the answer (the strings) is alive. */
	return diag_insert(c->s, &c->r.d, (uint32_t)c->r.generation,
			   RESOLVED_VERSION | version_next(c->r.version, c->now_ms));
}

int ch__diagnosis_resolve(struct store *base, int64_t id, int64_t now_ms)
{
	struct ch_store *s = ch__store(base);
	struct resolve_ctx c = { .now_ms = now_ms, .s = s };
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT %s FROM diagnoses FINAL WHERE id = %" PRId64
		       " AND resolved_ms = 0 LIMIT 1", diag_columns, id);
	rc = select_rows(s, &q, DIAG_FIELDS, resolve_row, &c, NULL);
	byte_buf_free(&q);
	return !rc && !c.found ? -ENOENT : rc;
}

struct list_ctx {
	store_diagnosis_fn fn;
	void *arg;
};

static int list_row(void *ctx, char **f)
{
	const struct list_ctx *c = ctx;
	struct diag_row r;
	int rc;

	if ((rc = diag_parse(f, &r)))
		return rc;
	return c->fn(c->arg, &r.d);
}

int ch__diagnoses_list(struct store *base, const struct store_diagnosis_filter *f,
			uint32_t limit, store_diagnosis_fn fn, void *arg)
{
	struct list_ctx c = { fn, arg };
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT %s FROM diagnoses FINAL WHERE ", diag_columns);
	if (f->id > 0) {
		byte_buf_printf(&q, "id = %" PRId64, f->id);
	} else {
		byte_buf_printf(&q, "opened_ms <= %" PRId64 " AND (resolved_ms = 0 OR resolved_ms >= %"
			       PRId64 ")", f->to_ms, f->from_ms);
		if (f->open_only)
			byte_buf_printf(&q, " AND resolved_ms = 0");
		if (f->job) {
			byte_buf_printf(&q, " AND job = ");
			ch__quote(&q, f->job);
		}
	}
	byte_buf_printf(&q, " ORDER BY opened_ms DESC, id DESC LIMIT %" PRIu32, limit);
	rc = select_rows(ch__store(base), &q, DIAG_FIELDS, list_row, &c, NULL);
	byte_buf_free(&q);
	return rc;
}

/* ---- job settings --------------------------------------------------------------------------- */

static int settings_row(void *ctx, char **f)
{
	char **json = ctx;
	uint64_t deleted;

	if (!f[0] || ch_tsv_u64(f[1], &deleted))
		return -EPROTO;
	if (deleted)
		return 0;
	return (*json = strdup(f[0])) ? 0 : -ENOMEM;
}

int ch__job_settings_get(struct store *base, const char *job, char **json)
{
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT settings, deleted FROM job_settings FINAL WHERE job = ");
	ch__quote(&q, job);
	byte_buf_printf(&q, " LIMIT 1");
	rc = select_rows(ch__store(base), &q, 2, settings_row, json, NULL);
	byte_buf_free(&q);
	if (rc) {
		free(*json);
		*json = NULL;
	}
	return rc;
}

int ch__job_settings_put(struct store *base, const char *job, const char *json, int64_t now_ms)
{
	struct ch_store *s = ch__store(base);
	pthread_mutex_t *lock = &s->stripes[sysom_hash64(job, strlen(job), 0) % CH_STRIPES];
	struct byte_buf row = { 0 };
	uint64_t prev;
	int rc;

	pthread_mutex_lock(lock);
	if ((rc = version_max(s, "job_settings", "job", job, &prev)))
		goto cleanup;
	ch__rb_str(&row, job);
	ch__rb_str(&row, or_empty(json));
	byte_buf_put_u8(&row, json ? 0 : 1);
	byte_buf_put_u64(&row, (uint64_t)now_ms);
	byte_buf_put_u64(&row, version_next(prev, now_ms));
	if ((rc = byte_buf_error(&row)))
		goto cleanup;
	rc = ch__exec(s, "INSERT INTO job_settings (job, settings, deleted, updated_ms, version)"
		      " FORMAT RowBinary", row.data, row.len, NULL);
cleanup:
	pthread_mutex_unlock(lock);
	byte_buf_free(&row);
	return rc;
}

/* ---- baselines ------------------------------------------------------------------------------ */

int ch__baseline_put(struct store *base, const struct store_baseline *b)
{
	struct ch_store *s = ch__store(base);
	pthread_mutex_t *lock = &s->stripes[sysom_hash64(b->job, strlen(b->job), 0) % CH_STRIPES];
	struct byte_buf row = { 0 };
	uint64_t prev;
	int rc;

	pthread_mutex_lock(lock);
	if ((rc = version_max(s, "job_baselines", "job", b->job, &prev)))
		goto cleanup;
	ch__rb_str(&row, b->job);
	byte_buf_put_u64(&row, (uint64_t)b->from_ms);
	byte_buf_put_u64(&row, (uint64_t)b->to_ms);
	byte_buf_put_u64(&row, (uint64_t)clamp63(b->iteration_ns));
	byte_buf_put_u64(&row, (uint64_t)clamp63(b->samples));
	ch__rb_str(&row, or_empty(b->profile));
	byte_buf_put_u64(&row, (uint64_t)b->created_ms);
	ch__rb_str(&row, b->source ? b->source : "auto");
	byte_buf_put_u64(&row, version_next(prev, b->created_ms));
	if ((rc = byte_buf_error(&row)))
		goto cleanup;
	rc = ch__exec(s, "INSERT INTO job_baselines (job, from_ms, to_ms, iteration_ns, samples,"
		      " profile, created_ms, source, version) FORMAT RowBinary", row.data, row.len,
		      NULL);
cleanup:
	pthread_mutex_unlock(lock);
	byte_buf_free(&row);
	return rc;
}

struct baseline_ctx {
	const char *job;
	int (*fn)(void *arg, const struct store_baseline *b);
	void *arg;
};

static int baseline_row(void *ctx, char **f)
{
	const struct baseline_ctx *c = ctx;
	struct store_baseline b = { .job = c->job, .profile = f[4], .source = f[6] };
	int64_t iter, samples;

	if (ch_tsv_i64(f[0], &b.from_ms) || ch_tsv_i64(f[1], &b.to_ms) ||
	    ch_tsv_i64(f[2], &iter) || ch_tsv_i64(f[3], &samples) ||
	    ch_tsv_i64(f[5], &b.created_ms) || !b.profile || !b.source)
		return -EPROTO;
	b.iteration_ns = (uint64_t)iter;
	b.samples = (uint64_t)samples;
	return c->fn(c->arg, &b);
}

int ch__baseline_get(struct store *base, const char *job,
			   int (*fn)(void *arg, const struct store_baseline *b), void *arg)
{
	struct baseline_ctx c = { job, fn, arg };
	struct byte_buf q = { 0 };
	uint64_t rows = 0;
	int rc;

	byte_buf_printf(&q, "SELECT from_ms, to_ms, iteration_ns, samples, profile, created_ms,"
		       " source FROM job_baselines FINAL WHERE job = ");
	ch__quote(&q, job);
	byte_buf_printf(&q, " LIMIT 1");
	rc = select_rows(ch__store(base), &q, 7, baseline_row, &c, &rows);
	byte_buf_free(&q);
	return !rc && !rows ? -ENOENT : rc;
}

/* ---- retention ------------------------------------------------------------------------------ */

struct partition {
	char table[64];
	char id[9];
};

struct partitions {
	struct partition *v;
	size_t n, cap;
	char cutoff[9];        /* YYYYMMDD: partitions of earlier days go */
	char rollup_cutoff[9]; /* the same for the tables kept with the rollups; "": none go */
};

/*
 * The tables kept as long as the per-minute rollups: the rollups, and what their readers need
 * to answer like raw rows: the batch rows (whose lowest attempts are CH_COMMITTED), the
 * processes (comms, pids), job ranks and identities (job and identity filters), the
 * summaries of batch rows and job ranks (schema 13), which go with what they summed, and the
 * stacks (schema 16), dated no earlier than any row, raw or rollup, naming them
 * (clickhouse_schema_stacks.c): a day of stacks goes with the last rows that could name them,
 * and the batch rows by window minute (schema 17), which go with the batch rows.
 * The rest is raw rows, dropped at the raw cutoff.
 */
static const char *const rollup_kept[] = {
	"batches", "processes", "job_ranks", "process_identities", "sample_minutes",
	"offcpu_minutes", "nccl_instances", "node_days", "batch_seqs", "node_counters",
	"job_processes", "fleet_slots", "fleet_slot_state", "fleet_slot_batches", "process_names",
	"stack_days", "batch_minutes",
};

static bool kept_with_rollups(const char *table)
{
	for (size_t i = 0; i < sizeof(rollup_kept) / sizeof(rollup_kept[0]); i++)
		if (!strcmp(table, rollup_kept[i]))
			return true;
	return false;
}

static bool name_ok(const char *t, size_t max)
{
	size_t n = strlen(t);

	if (!n || n >= max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
		      (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
			return false;
	return true;
}

static int partition_row(void *ctx, char **f)
{
	struct partitions *p = ctx;

	if (!f[0] || !f[1])
		return -EPROTO;
	/* A day partition's id is YYYYMMDD; anything else is not ours to drop. */
	if (!name_ok(f[0], sizeof(p->v->table)) || strlen(f[1]) != 8 ||
	    strspn(f[1], "0123456789") != 8 || strcmp(f[1], p->cutoff) >= 0)
		return 0;
	if (kept_with_rollups(f[0]) &&
	    (!p->rollup_cutoff[0] || strcmp(f[1], p->rollup_cutoff) >= 0))
		return 0;
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 16;
		struct partition *v = cap > 1000000 ? NULL : realloc(p->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		p->v = v;
		p->cap = cap;
	}
	snprintf(p->v[p->n].table, sizeof(p->v->table), "%s", f[0]);
	memcpy(p->v[p->n].id, f[1], 9);
	p->n++;
	return 0;
}

/* The YYYYMMDD of the day holding `ms` (UTC) into out[9]. 0 or -EINVAL. */
static int day_id(int64_t ms, char out[9])
{
	time_t day = (time_t)((ms < 0 ? 0 : ms) / MS_PER_DAY) * 86400;
	struct tm tm;

	if (!gmtime_r(&day, &tm))
		return -EINVAL;
	if (!strftime(out, 9, "%Y%m%d", &tm) || strlen(out) != 8)
		return -EINVAL;
	return 0;
}

int ch__retention_apply(struct store *base, int64_t before_ms, int64_t rollup_before_ms,
			uint32_t *dropped)
{
	struct ch_store *s = ch__store(base);
	struct partitions p = { 0 };
	struct byte_buf q = { 0 };
	int rc;

	*dropped = 0;
	if ((rc = day_id(before_ms, p.cutoff)) ||
	    (rollup_before_ms > 0 && (rc = day_id(rollup_before_ms, p.rollup_cutoff))))
		return rc;
	/* Every table partitioned by day, whoever created it; batches first, so that a day's
	 * rows stop counting (CH_COMMITTED) at once, before its other tables go one by one.
	 * Between the two cutoffs only raw rows go: readers answer those days from the rollups
	 * (store__rollup_cutoff_ms), which the kept batch rows still commit. */
	byte_buf_printf(&q, "SELECT DISTINCT table, partition_id FROM system.parts WHERE active"
		       " AND database = ");
	ch__quote(&q, s->database);
	byte_buf_printf(&q, " AND table IN (SELECT name FROM system.tables WHERE database = ");
	ch__quote(&q, s->database);
	byte_buf_printf(&q, " AND partition_key = 'day') ORDER BY table != 'batches', table,"
		       " partition_id");
	if ((rc = select_rows(s, &q, 2, partition_row, &p, NULL)))
		goto cleanup;
	for (size_t i = 0; i < p.n; i++) {
		if ((rc = ch__execf(s, NULL, "ALTER TABLE %s DROP PARTITION ID '%s'", p.v[i].table,
				    p.v[i].id)))
			goto cleanup;
		(*dropped)++;
	}
cleanup:
	free(p.v);
	byte_buf_free(&q);
	return rc;
}
