/* SPDX-License-Identifier: Apache-2.0 */
/* Incidents in SQLite: the monitor's diagnoses, per-job analysis settings and baselines. */
#include <errno.h>
#include <stdlib.h>

#include "server/store/sqlite_internal.h"

static const char diagnosis_find_sql[] =
	"SELECT id FROM diagnoses WHERE job = ?1 AND identity = ?2 AND resolved_ms IS NULL";
static const char diagnosis_update_sql[] =
	"UPDATE diagnoses SET kind = ?2, rank = ?3, hostname = ?4, communicators = ?5,"
	" layer = ?6, severity = ?7, summary = ?8, action = ?9, report = ?10, updated_ms = ?11"
	" WHERE id = ?1";
static const char diagnosis_insert_sql[] =
	"INSERT INTO diagnoses (job, identity, kind, rank, hostname, communicators, layer,"
	" severity, summary, action, report, opened_ms, updated_ms) VALUES (?1, ?2, ?3, ?4,"
	" ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)";
static const char diagnosis_resolve_sql[] =
	"UPDATE diagnoses SET resolved_ms = ?2 WHERE id = ?1 AND resolved_ms IS NULL";
static const char diagnoses_list_sql[] =
	"SELECT id, job, identity, kind, rank, hostname, communicators, layer, severity,"
	" summary, action, report, opened_ms, updated_ms, coalesce(resolved_ms, 0)"
	" FROM diagnoses WHERE (?1 > 0 AND id = ?1) OR (?1 <= 0 AND (?2 IS NULL OR job = ?2)"
	" AND opened_ms <= ?4 AND (resolved_ms IS NULL OR resolved_ms >= ?3)"
	" AND (?5 = 0 OR resolved_ms IS NULL)) ORDER BY opened_ms DESC, id DESC LIMIT ?6";
static const char settings_get_sql[] = "SELECT settings FROM job_settings WHERE job = ?1";
static const char settings_put_sql[] =
	"INSERT INTO job_settings (job, settings, updated_ms) VALUES (?1, ?2, ?3)"
	" ON CONFLICT (job) DO UPDATE SET settings = ?2, updated_ms = ?3";
static const char settings_delete_sql[] = "DELETE FROM job_settings WHERE job = ?1";
static const char baseline_put_sql[] =
	"INSERT INTO job_baselines (job, from_ms, to_ms, iteration_ns, samples, profile,"
	" created_ms, source) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (job) DO"
	" UPDATE SET from_ms = ?2, to_ms = ?3, iteration_ns = ?4, samples = ?5, profile = ?6,"
	" created_ms = ?7, source = ?8";
static const char baseline_get_sql[] =
	"SELECT from_ms, to_ms, iteration_ns, samples, profile, created_ms, source"
	" FROM job_baselines WHERE job = ?1";

/* "" for a missing text of a diagnosis. */
#define TEXT_OR_EMPTY(s) STORE__TEXT((s) ? (s) : "")

int store__sqlite_diagnosis_upsert(struct store *base, const struct store_diagnosis *d, int64_t *id,
				   bool *opened)
{
	struct sqlite_store *s = store__sqlite(base);
	sqlite3_int64 found = 0;
	struct conn *c;
	int rc;

	if ((rc = store__write_begin(s, &c)))
		return rc;
	rc = store__query(c, &(struct store__query){
		.sql = diagnosis_find_sql,
		.args = STORE__ARGS(STORE__TEXT(d->job), STORE__TEXT(d->identity)),
		.row = store__row_i64, .ctx = &found, .max_rows = 1 });
	if (rc)
		goto cleanup;
	if (found)
		rc = store__query(c, &(struct store__query){
			.sql = diagnosis_update_sql,
			.args = STORE__ARGS(STORE__INT(found), STORE__TEXT(d->kind), STORE__INT(d->rank),
					    TEXT_OR_EMPTY(d->hostname), TEXT_OR_EMPTY(d->communicators),
					    TEXT_OR_EMPTY(d->layer), TEXT_OR_EMPTY(d->severity),
					    TEXT_OR_EMPTY(d->summary), TEXT_OR_EMPTY(d->action),
					    TEXT_OR_EMPTY(d->report), STORE__INT(d->updated_ms)) });
	else
		rc = store__query(c, &(struct store__query){
			.sql = diagnosis_insert_sql,
			.args = STORE__ARGS(STORE__TEXT(d->job), STORE__TEXT(d->identity),
					    STORE__TEXT(d->kind), STORE__INT(d->rank),
					    TEXT_OR_EMPTY(d->hostname), TEXT_OR_EMPTY(d->communicators),
					    TEXT_OR_EMPTY(d->layer), TEXT_OR_EMPTY(d->severity),
					    TEXT_OR_EMPTY(d->summary), TEXT_OR_EMPTY(d->action),
					    TEXT_OR_EMPTY(d->report), STORE__INT(d->updated_ms)) });
	if (rc)
		goto cleanup;
	*id = found ? found : sqlite3_last_insert_rowid(c->db);
	*opened = !found;
cleanup:
	return store__write_end(s, c, rc, true);
}

int store__sqlite_diagnosis_resolve(struct store *base, int64_t id, int64_t now_ms)
{
	struct sqlite_store *s = store__sqlite(base);
	int rc;

	pthread_mutex_lock(&s->write_lock);
	rc = store__query(&s->writer, &(struct store__query){
		.sql = diagnosis_resolve_sql,
		.args = STORE__ARGS(STORE__INT(id), STORE__INT(now_ms)) });
	if (!rc && sqlite3_changes(s->writer.db) == 0)
		rc = -ENOENT;
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

struct diagnosis_visit {
	store_diagnosis_fn fn;
	void *arg;
};

static int diagnosis_row(void *ctx, sqlite3_stmt *st)
{
	const struct diagnosis_visit *v = ctx;
	struct store_diagnosis d = {
		.id = sqlite3_column_int64(st, 0),
		.job = store__text(st, 1),
		.identity = store__text(st, 2),
		.kind = store__text(st, 3),
		.rank = sqlite3_column_int(st, 4),
		.hostname = store__text(st, 5),
		.communicators = store__text(st, 6),
		.layer = store__text(st, 7),
		.severity = store__text(st, 8),
		.summary = store__text(st, 9),
		.action = store__text(st, 10),
		.report = store__text(st, 11),
		.opened_ms = sqlite3_column_int64(st, 12),
		.updated_ms = sqlite3_column_int64(st, 13),
		.resolved_ms = sqlite3_column_int64(st, 14),
	};

	return v->fn(v->arg, &d);
}

int store__sqlite_diagnoses_list(struct store *base, const struct store_diagnosis_filter *f,
				 uint32_t limit, store_diagnosis_fn fn, void *arg)
{
	struct diagnosis_visit v = { fn, arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = diagnoses_list_sql,
		.args = STORE__ARGS(STORE__INT(f->id), f->job ? STORE__TEXT(f->job) : STORE__SKIP,
				    STORE__INT(f->from_ms), STORE__INT(f->to_ms),
				    STORE__INT(f->open_only), STORE__INT(limit)),
		.row = diagnosis_row, .ctx = &v });
}

static int settings_row(void *ctx, sqlite3_stmt *st)
{
	char **json = ctx;

	return (*json = strdup(store__text(st, 0))) ? 0 : -ENOMEM;
}

int store__sqlite_job_settings_get(struct store *base, const char *job, char **json)
{
	return store__read(store__sqlite(base), &(struct store__query){
		.sql = settings_get_sql, .args = STORE__ARGS(STORE__TEXT(job)), .row = settings_row,
		.ctx = json, .max_rows = 1 });
}

int store__sqlite_job_settings_put(struct store *base, const char *job, const char *json,
				   int64_t now_ms)
{
	struct sqlite_store *s = store__sqlite(base);

	if (!json)
		return store__write(s, &(struct store__query){
			.sql = settings_delete_sql, .args = STORE__ARGS(STORE__TEXT(job)) });
	return store__write(s, &(struct store__query){
		.sql = settings_put_sql,
		.args = STORE__ARGS(STORE__TEXT(job), STORE__TEXT(json), STORE__INT(now_ms)) });
}

int store__sqlite_baseline_put(struct store *base, const struct store_baseline *b)
{
	return store__write(store__sqlite(base), &(struct store__query){
		.sql = baseline_put_sql,
		.args = STORE__ARGS(STORE__TEXT(b->job), STORE__INT(b->from_ms), STORE__INT(b->to_ms),
				    STORE__INT(store__clamp(b->iteration_ns)),
				    STORE__INT(store__clamp(b->samples)),
				    STORE__TEXT(b->profile ? b->profile : ""),
				    STORE__INT(b->created_ms),
				    STORE__TEXT(b->source ? b->source : "auto")) });
}

struct baseline_visit {
	const char *job;
	int (*fn)(void *arg, const struct store_baseline *b);
	void *arg;
};

static int baseline_row(void *ctx, sqlite3_stmt *st)
{
	const struct baseline_visit *v = ctx;
	struct store_baseline b = {
		.job = v->job,
		.from_ms = sqlite3_column_int64(st, 0),
		.to_ms = sqlite3_column_int64(st, 1),
		.iteration_ns = (uint64_t)sqlite3_column_int64(st, 2),
		.samples = (uint64_t)sqlite3_column_int64(st, 3),
		.profile = store__text(st, 4),
		.created_ms = sqlite3_column_int64(st, 5),
		.source = store__text(st, 6),
	};

	return v->fn(v->arg, &b);
}

int store__sqlite_baseline_get(struct store *base, const char *job,
			       int (*fn)(void *arg, const struct store_baseline *b), void *arg)
{
	struct baseline_visit v = { job, fn, arg };
	uint64_t rows = 0;
	int rc = store__read(store__sqlite(base), &(struct store__query){
		.sql = baseline_get_sql, .args = STORE__ARGS(STORE__TEXT(job)), .row = baseline_row,
		.ctx = &v, .max_rows = 1, .rows = &rows });

	return !rc && !rows ? -ENOENT : rc;
}
