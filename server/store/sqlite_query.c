/* SPDX-License-Identifier: Apache-2.0 */
/* The SQLite query helper: cached statements, typed binding, row callbacks, error mapping. */
#include <errno.h>
#include <stdint.h>

#include "common/error.h"
#include "server/store/sqlite_internal.h"

int store__errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_IOERR:
		return -EIO;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -SYSOM_ECORRUPT;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
	case SQLITE_CANTOPEN:
		return -EACCES;
	case SQLITE_TOOBIG:
		return -E2BIG;
	}
	return -EPROTO; /* anything else is a bug or an unexpected database state */
}

/* The error of a write transaction SQLite abandoned without saying why (or with the commit
 * guard's veto): what it recorded if that is a storage error, else -EIO (every cause SQLite
 * rolls back for, I/O, full disk, out of memory, is worth a retry). */
static int transaction_lost(struct conn *c)
{
	int rc = store__errno(sqlite3_errcode(c->db));

	return rc && rc != -EPROTO ? rc : -EIO;
}

int store__sql_end(struct byte_buf *sql)
{
	byte_buf_append(sql, "", 1);
	return byte_buf_error(sql);
}

int store__row_i64(void *ctx, sqlite3_stmt *st)
{
	*(sqlite3_int64 *)ctx = sqlite3_column_int64(st, 0);
	return 0;
}

/*
 * The statement for q->sql: the connection's cached one (keyed by the text's address, checked
 * against its text), else a new one, cached when there is room; *cached says which.
 */
static int stmt_get(struct conn *c, const struct store__query *q, sqlite3_stmt **out,
		    bool *cached)
{
	size_t h = ((uintptr_t)q->sql >> 3) % STORE__STMT_CACHE;
	size_t slot = STORE__STMT_CACHE;
	int rc;

	*cached = false;
	for (size_t i = 0; !q->once && i < STORE__STMT_CACHE; i++) {
		size_t k = (h + i) % STORE__STMT_CACHE;

		if (!c->stmts[k].sql) {
			slot = k;
			break;
		}
		if (c->stmts[k].sql == q->sql) {
			if (strcmp(sqlite3_sql(c->stmts[k].st), q->sql) != 0)
				break; /* not static after all: run it once */
			*out = c->stmts[k].st;
			*cached = true;
			return 0;
		}
	}
	if (slot == STORE__STMT_CACHE) {
		rc = sqlite3_prepare_v2(c->db, q->sql, -1, out, NULL);
		return store__errno(rc);
	}
	rc = sqlite3_prepare_v3(c->db, q->sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);
	if (rc != SQLITE_OK)
		return store__errno(rc);
	c->stmts[slot].sql = q->sql;
	c->stmts[slot].st = *out;
	*cached = true;
	return 0;
}

static int bind(sqlite3_stmt *st, int i, const struct store__arg *a)
{
	switch (a->kind) {
	case STORE__ARG_SKIP:
		return SQLITE_OK;
	case STORE__ARG_NULL:
		return sqlite3_bind_null(st, i);
	case STORE__ARG_INT:
		return sqlite3_bind_int64(st, i, a->v.i);
	case STORE__ARG_REAL:
		return sqlite3_bind_double(st, i, a->v.d);
	case STORE__ARG_TEXT:
		return sqlite3_bind_text(st, i, a->v.p, -1, SQLITE_STATIC);
	case STORE__ARG_BLOB:
		return sqlite3_bind_blob(st, i, a->v.p, a->len, SQLITE_STATIC);
	}
	return SQLITE_MISUSE;
}

int store__query(struct conn *c, const struct store__query *q)
{
	sqlite3_stmt *st = NULL;
	bool cached = false;
	uint64_t rows = 0;
	int rc;

	if ((rc = stmt_get(c, q, &st, &cached)))
		goto cleanup;
	for (size_t i = 0; i < q->nargs; i++) {
		if ((rc = bind(st, (int)i + 1, &q->args[i])) != SQLITE_OK) {
			rc = store__errno(rc);
			goto cleanup;
		}
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (!q->row) {
			rc = -EPROTO; /* a statement that should return nothing returned a row */
			goto cleanup;
		}
		if (q->max_rows && rows == q->max_rows) {
			if (q->truncated)
				*q->truncated = true;
			rc = SQLITE_DONE;
			break;
		}
		rows++;
		if ((rc = q->row(q->ctx, st)))
			goto cleanup;
		if (q->max_rows && rows == q->max_rows && !q->truncated) {
			rc = SQLITE_DONE; /* no need to look for a further row */
			break;
		}
	}
	rc = store__errno(rc);
cleanup:
	/*
	 * Ending a statement can fail too (one stopped early at max_rows ends here). And SQLite
	 * may abandon a write transaction without failing the statement that was running
	 * (sqlite_pool.c, commit_guard): then the statements that follow would run outside it,
	 * so a write transaction must still be open once a statement is done.
	 */
	if (st) {
		int end_rc = cached ? sqlite3_reset(st) : sqlite3_finalize(st);

		if (!rc)
			rc = store__errno(end_rc);
		if (cached)
			sqlite3_clear_bindings(st);
	}
	if (c->in_write && sqlite3_get_autocommit(c->db) && (!rc || rc == -EPROTO))
		rc = transaction_lost(c);
	if (q->rows)
		*q->rows = rows;
	return rc;
}

int store__read(struct sqlite_store *s, const struct store__query *q)
{
	struct conn *c = store__reader_acquire(s);
	int rc = store__query(c, q);

	store__reader_release(s, c);
	return rc;
}

int store__write(struct sqlite_store *s, const struct store__query *q)
{
	int rc;

	pthread_mutex_lock(&s->write_lock);
	rc = store__query(&s->writer, q);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}
