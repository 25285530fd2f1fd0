/* SPDX-License-Identifier: Apache-2.0 */
/* SQLite connections: opening with pragmas, the reader pool, the writer's transactions. */
#include <errno.h>
#include <stdio.h>

#include "server/store/sqlite_internal.h"

int store__conn_exec(struct conn *c, const char *sql)
{
	return store__errno(sqlite3_exec(c->db, sql, NULL, NULL, NULL));
}

void store__conn_close(struct conn *c)
{
	for (int i = 0; i < STORE__STMT_CACHE; i++) {
		sqlite3_finalize(c->stmts[i].st);
		c->stmts[i].st = NULL;
		c->stmts[i].sql = NULL;
	}
	sqlite3_close(c->db);
	c->db = NULL;
}

/*
 * Commit hook: inside a write transaction only its own COMMIT commits. SQLite can abandon a
 * transaction by itself and go on running the statement, or let the following statements run,
 * each committing on its own: seen when an allocation fails while a statement is re-prepared
 * after a schema change (another process's CREATE INDEX or ANALYZE does that). Vetoing those
 * commits (they roll back, the statement fails) keeps a failed batch wholly absent.
 */
static int commit_guard(void *ctx)
{
	const struct conn *c = ctx;

	return c->in_write && !c->committing;
}

int store__conn_open(struct conn *c, const char *path, uint32_t busy_timeout_ms, bool reader,
		     char *err, size_t errlen)
{
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (reader ? 0 : SQLITE_OPEN_CREATE);
	int rc = sqlite3_open_v2(path, &c->db, flags, NULL);

	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s: %s", path,
			 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		rc = store__errno(rc);
		goto cleanup;
	}
	sqlite3_extended_result_codes(c->db, 1);
	sqlite3_commit_hook(c->db, commit_guard, c);
	sqlite3_busy_timeout(c->db, (int)busy_timeout_ms);
	rc = store__conn_exec(c, reader ? "PRAGMA foreign_keys = ON; PRAGMA query_only = ON;"
				       : "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;"
					 " PRAGMA cache_size = -32768;");
	if (rc)
		snprintf(err, errlen, "cannot configure %s: %s", path, sqlite3_errmsg(c->db));
cleanup:
	if (rc)
		store__conn_close(c);
	return rc;
}

struct conn *store__reader_acquire(struct sqlite_store *s)
{
	struct conn *c;

	pthread_mutex_lock(&s->pool_lock);
	while (!s->free_readers)
		pthread_cond_wait(&s->pool_cond, &s->pool_lock);
	c = s->free_readers;
	s->free_readers = c->next_free;
	pthread_mutex_unlock(&s->pool_lock);
	return c;
}

void store__reader_release(struct sqlite_store *s, struct conn *c)
{
	pthread_mutex_lock(&s->pool_lock);
	c->next_free = s->free_readers;
	s->free_readers = c;
	pthread_cond_signal(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
}

/* Ends a failed write transaction, if SQLite did not already roll it back itself. */
static void rollback(struct conn *c)
{
	if (!sqlite3_get_autocommit(c->db))
		store__conn_exec(c, "ROLLBACK");
}

static int write_begin(struct sqlite_store *s, struct conn **c, bool fk_off)
{
	int rc;

	pthread_mutex_lock(&s->write_lock);
	/* A ROLLBACK that failed (it needs memory too) left the last transaction open: end it
	 * now, or every later write would fail to begin. */
	if (!sqlite3_get_autocommit(s->writer.db) &&
	    (rc = store__conn_exec(&s->writer, "ROLLBACK"))) {
		pthread_mutex_unlock(&s->write_lock);
		return rc;
	}
	/* Foreign keys are switched outside transactions only; one left off by a failed
	 * switch back goes on again before anything else writes. */
	if (s->writer.fk_off != fk_off) {
		if ((rc = store__conn_exec(&s->writer, fk_off ? "PRAGMA foreign_keys = OFF"
							     : "PRAGMA foreign_keys = ON"))) {
			pthread_mutex_unlock(&s->write_lock);
			return rc;
		}
		s->writer.fk_off = fk_off;
	}
	if ((rc = store__conn_exec(&s->writer, "BEGIN IMMEDIATE"))) {
		rollback(&s->writer);
		pthread_mutex_unlock(&s->write_lock);
		return rc;
	}
	s->writer.in_write = true;
	*c = &s->writer;
	return 0;
}

int store__write_begin(struct sqlite_store *s, struct conn **c)
{
	return write_begin(s, c, false);
}

int store__write_begin_unchecked(struct sqlite_store *s, struct conn **c)
{
	return write_begin(s, c, true);
}

int store__write_end(struct sqlite_store *s, struct conn *c, int rc, bool commit)
{
	if (!rc && commit) {
		c->committing = true;
		rc = store__conn_exec(c, "COMMIT");
		c->committing = false;
	}
	rollback(c);
	c->in_write = false;
	if (c->fk_off && !store__conn_exec(c, "PRAGMA foreign_keys = ON"))
		c->fk_off = false;
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

int store__read_begin(struct sqlite_store *s, struct conn **c)
{
	struct conn *r = store__reader_acquire(s);
	int rc = store__conn_exec(r, "BEGIN");

	if (rc) {
		store__read_end(s, r, rc);
		return rc;
	}
	*c = r;
	return 0;
}

int store__read_end(struct sqlite_store *s, struct conn *c, int rc)
{
	/* A COMMIT that failed (it may need memory) must not leave the snapshot held: it would
	 * keep every checkpoint from finishing. */
	if (!sqlite3_get_autocommit(c->db) && store__conn_exec(c, "COMMIT"))
		rollback(c);
	store__reader_release(s, c);
	return rc;
}

int store__size_limit_apply(struct sqlite_store *s, uint64_t max_bytes)
{
	char sql[80];
	uint64_t pages = max_bytes ? max_bytes / s->page_size : 0xfffffffeULL;

	if (pages == 0)
		pages = 1;
	if (pages > 0xfffffffeULL)
		pages = 0xfffffffeULL;
	/* SQLite raises a limit below the current size to the current size: growth then fails. */
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %llu", (unsigned long long)pages);
	return store__conn_exec(&s->writer, sql);
}
