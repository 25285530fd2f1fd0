/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel symbol tables in SQLite: one table per build ID, looked up by offset; a bound on
 * their symbols that evicts the least recently used tables not in use. */
#include <errno.h>
#include <stdlib.h>

#include "common/array.h"
#include "common/error.h"
#include "server/store/sqlite_internal.h"

/* A table's last use is recorded to this precision: most batches then write nothing. */
#define TOUCH_GRANULARITY_NS (60 * 1000000000LL)

static const char ksyms_find_sql[] =
	"SELECT id, symbols FROM kernel_symbol_tables WHERE build_id = ?1";
static const char ksyms_insert_sql[] =
	"INSERT INTO kernel_symbol_tables (build_id, symbols, uploaded_ns, last_used_ns)"
	" VALUES (?1, ?2, ?3, ?3)";
static const char ksyms_usage_sql[] =
	"SELECT COUNT(*), COALESCE(SUM(symbols), 0), COALESCE(MIN(last_used_ns), 0)"
	" FROM kernel_symbol_tables";
static const char ksyms_lru_sql[] =
	"SELECT id, symbols FROM kernel_symbol_tables WHERE last_used_ns < ?1"
	" ORDER BY last_used_ns, id";
static const char ksyms_delete_symbols_sql[] = "DELETE FROM kernel_symbols WHERE tbl = ?1";
static const char ksyms_delete_table_sql[] = "DELETE FROM kernel_symbol_tables WHERE id = ?1";
static const char ksyms_touch_sql[] =
	"UPDATE kernel_symbol_tables SET last_used_ns = ?2 WHERE build_id = ?1 AND last_used_ns < ?3";
static const char ksym_insert_sql[] =
	"INSERT INTO kernel_symbols (tbl, offset, type, name) VALUES (?1, ?2, ?3, ?4)";
static const char ksym_floor_sql[] =
	"SELECT offset, name FROM kernel_symbols WHERE tbl = ?1 AND offset <= ?2"
	" ORDER BY offset DESC LIMIT 1";
static const char ksym_next_sql[] =
	"SELECT offset FROM kernel_symbols WHERE tbl = ?1 AND offset > ?2 ORDER BY offset LIMIT 1";

struct table_row {
	sqlite3_int64 id;
	uint64_t count;
};

static int table_row(void *ctx, sqlite3_stmt *st)
{
	struct table_row *t = ctx;

	t->id = sqlite3_column_int64(st, 0);
	t->count = (uint64_t)sqlite3_column_int64(st, 1);
	return 0;
}

/* Finds the table of a build ID: 0 with *id (and *count), -ENOENT, or an error. */
static int ksyms_find(struct conn *c, const uint8_t *build_id, size_t len, sqlite3_int64 *id,
		      uint64_t *count)
{
	struct table_row t = { 0 };
	uint64_t rows = 0;
	int rc = store__query(c, &(struct store__query){
		.sql = ksyms_find_sql, .args = STORE__ARGS(STORE__BLOB(build_id, len)),
		.row = table_row, .ctx = &t, .max_rows = 1, .rows = &rows });

	if (rc)
		return rc;
	if (!rows)
		return -ENOENT;
	*id = t.id;
	if (count)
		*count = t.count;
	return 0;
}

static int ksyms_write(struct conn *c, const uint8_t *build_id, size_t len,
		       const struct store_ksym *syms, size_t count, int64_t uploaded_ns)
{
	sqlite3_int64 tbl;
	int rc = store__query(c, &(struct store__query){
		.sql = ksyms_insert_sql,
		.args = STORE__ARGS(STORE__BLOB(build_id, len), STORE__INT(count),
				    STORE__INT(uploaded_ns)) });

	if (rc)
		return rc;
	tbl = sqlite3_last_insert_rowid(c->db);
	for (size_t i = 0; i < count; i++) {
		char type[2] = { syms[i].type, '\0' };

		rc = store__query(c, &(struct store__query){
			.sql = ksym_insert_sql,
			.args = STORE__ARGS(STORE__INT(tbl), STORE__INT(syms[i].offset),
					    STORE__TEXT(type), STORE__TEXT(syms[i].name)) });
		if (rc)
			return rc;
	}
	return 0;
}

static int usage_row(void *ctx, sqlite3_stmt *st)
{
	struct store_ksyms_usage *u = ctx;

	u->tables = (uint64_t)sqlite3_column_int64(st, 0);
	u->rows = (uint64_t)sqlite3_column_int64(st, 1);
	u->oldest_use_ns = sqlite3_column_int64(st, 2);
	return 0;
}

/* Tables to evict, least recently used first, until `need` symbols are freed. */
struct eviction {
	uint64_t need;
	uint64_t freed;
	sqlite3_int64 *ids;
	size_t n, cap;
};

static int eviction_row(void *ctx, sqlite3_stmt *st)
{
	struct eviction *e = ctx;

	if (SYSOM_ARRAY_RESERVE(e->ids, e->cap, e->n, 16))
		return -ENOMEM;
	e->ids[e->n++] = sqlite3_column_int64(st, 0);
	e->freed += (uint64_t)sqlite3_column_int64(st, 1);
	return e->freed >= e->need ? 1 : 0; /* 1: enough, stop */
}

/*
 * Makes room for a table of `count` symbols under the store's limit by evicting tables last
 * used before `now_ns` - in_use_ns, least recently used first, or evicts nothing and returns
 * -SYSOM_ELIMIT when that would not make room. Inside the write transaction.
 */
static int make_room(struct sqlite_store *s, struct conn *c, uint64_t count, int64_t now_ns,
		     struct eviction *e)
{
	struct store_ksyms_usage u = { 0 };
	int rc;

	if (!s->ksyms_max_rows)
		return 0;
	if (count > s->ksyms_max_rows)
		return -SYSOM_ELIMIT;
	rc = store__query(c, &(struct store__query){ .sql = ksyms_usage_sql, .row = usage_row,
						      .ctx = &u, .max_rows = 1 });
	if (rc)
		return rc;
	if (u.rows <= s->ksyms_max_rows - count)
		return 0;
	e->need = u.rows - (s->ksyms_max_rows - count);
	int64_t cutoff = now_ns > INT64_MIN + s->ksyms_in_use_ns ? now_ns - s->ksyms_in_use_ns
								  : INT64_MIN;
	rc = store__query(c, &(struct store__query){ .sql = ksyms_lru_sql,
						      .args = STORE__ARGS(STORE__INT(cutoff)),
						      .row = eviction_row, .ctx = e });
	if (rc < 0)
		return rc;
	if (e->freed < e->need)
		return -SYSOM_ELIMIT; /* the tables in use fill the limit */
	for (size_t i = 0; i < e->n; i++) {
		if ((rc = store__query(c, &(struct store__query){
			     .sql = ksyms_delete_symbols_sql,
			     .args = STORE__ARGS(STORE__INT(e->ids[i])) })) ||
		    (rc = store__query(c, &(struct store__query){
			     .sql = ksyms_delete_table_sql,
			     .args = STORE__ARGS(STORE__INT(e->ids[i])) })))
			return rc;
	}
	return 0;
}

int store__sqlite_ksyms_put(struct store *base, const uint8_t *build_id, size_t build_id_len,
			    const struct store_ksym *syms, size_t count, int64_t uploaded_ns,
			    bool *created)
{
	struct sqlite_store *s = store__sqlite(base);
	struct eviction ev = { 0 };
	sqlite3_int64 tbl;
	bool fresh = false;
	struct conn *c;
	int rc;

	if ((rc = store__ksyms_check(build_id_len, syms, count)))
		return rc;
	if ((rc = store__write_begin(s, &c)))
		return rc;
	rc = ksyms_find(c, build_id, build_id_len, &tbl, NULL);
	if (rc == 0)
		goto cleanup; /* already stored: unchanged */
	if (rc != -ENOENT)
		goto cleanup;
	if ((rc = make_room(s, c, count, uploaded_ns, &ev)))
		goto cleanup;
	if ((rc = ksyms_write(c, build_id, build_id_len, syms, count, uploaded_ns)))
		goto cleanup;
	fresh = true;
cleanup:
	rc = store__write_end(s, c, rc, fresh);
	if (!rc) {
		*created = fresh;
		if (fresh && ev.n) {
			atomic_fetch_add(&s->ksyms_evicted_tables, ev.n);
			atomic_fetch_add(&s->ksyms_evicted_rows, ev.freed);
		}
	}
	free(ev.ids);
	return rc;
}

int store__ksyms_touch(struct conn *c, const struct sysom_batch *b, int64_t used_ns)
{
	for (uint32_t i = 0; i < b->object_count; i++) {
		const struct sysom_object *o = &b->objects[i];
		if ((o->kind != SYSOM_OBJECT_KERNEL && o->kind != SYSOM_OBJECT_KMODULE) ||
		    !o->build_id_len)
			continue;
		int rc = store__query(c, &(struct store__query){
			.sql = ksyms_touch_sql,
			.args = STORE__ARGS(STORE__BLOB(o->build_id, o->build_id_len),
					    STORE__INT(used_ns),
					    STORE__INT(used_ns - TOUCH_GRANULARITY_NS)) });
		if (rc)
			return rc;
	}
	return 0;
}

int store__sqlite_ksyms_usage_get(struct store *base, struct store_ksyms_usage *out)
{
	struct sqlite_store *s = store__sqlite(base);
	struct store_ksyms_usage u = { 0 };
	int rc = store__read(s, &(struct store__query){ .sql = ksyms_usage_sql, .row = usage_row,
							 .ctx = &u, .max_rows = 1 });

	if (rc)
		return rc;
	u.max_rows = s->ksyms_max_rows;
	u.in_use_ns = s->ksyms_in_use_ns;
	u.evicted_tables = atomic_load(&s->ksyms_evicted_tables);
	u.evicted_rows = atomic_load(&s->ksyms_evicted_rows);
	*out = u;
	return 0;
}

int store__sqlite_ksyms_count(struct store *base, const uint8_t *build_id, size_t build_id_len,
			      uint64_t *count)
{
	struct sqlite_store *s = store__sqlite(base);
	struct conn *c = store__reader_acquire(s);
	sqlite3_int64 tbl;
	int rc = ksyms_find(c, build_id, build_id_len, &tbl, count);

	store__reader_release(s, c);
	return rc;
}

static int floor_row(void *ctx, sqlite3_stmt *st)
{
	struct store_ksym_range *r = ctx;

	r->has_floor = true;
	r->floor = (uint64_t)sqlite3_column_int64(st, 0);
	r->floor_name = strdup(store__text(st, 1));
	return r->floor_name ? 0 : -ENOMEM;
}

static int next_row(void *ctx, sqlite3_stmt *st)
{
	struct store_ksym_range *r = ctx;

	r->has_next = true;
	r->next = (uint64_t)sqlite3_column_int64(st, 0);
	return 0;
}

static int ksym_range_query(struct conn *c, sqlite3_int64 tbl, uint64_t offset,
			    struct store_ksym_range *r)
{
	const struct store__arg args[] = { STORE__INT(tbl), STORE__INT(offset) };
	int rc = store__query(c, &(struct store__query){ .sql = ksym_floor_sql, .args = args,
							  .nargs = 2, .row = floor_row, .ctx = r,
							  .max_rows = 1 });

	if (rc)
		return rc;
	return store__query(c, &(struct store__query){ .sql = ksym_next_sql, .args = args,
							.nargs = 2, .row = next_row, .ctx = r,
							.max_rows = 1 });
}

int store__sqlite_ksym_range_get(struct store *base, const uint8_t *build_id, size_t build_id_len,
				 uint64_t offset, struct store_ksym_range *out)
{
	struct sqlite_store *s = store__sqlite(base);
	struct store_ksym_range r = { 0 };
	struct conn *c = store__reader_acquire(s);
	sqlite3_int64 tbl;
	int rc = ksyms_find(c, build_id, build_id_len, &tbl, NULL);

	/* Symbol offsets are below 2^63; a larger frame offset lies beyond every symbol. */
	if (!rc && offset <= INT64_MAX)
		rc = ksym_range_query(c, tbl, offset, &r);
	store__reader_release(s, c);
	if (rc) {
		store_ksym_range_release(&r);
		return rc;
	}
	*out = r;
	return 0;
}
