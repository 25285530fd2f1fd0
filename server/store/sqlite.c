/* SPDX-License-Identifier: Apache-2.0 */
/* SQLite store backend: versioned schema, one serialized writer, pooled WAL readers. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "common/bytes.h"
#include "common/elf_buildid.h"
#include "common/error.h"
#include "common/hash.h"
#include "server/store/store_impl.h"

/*
 * Durability: journal_mode=WAL with synchronous=FULL. The agent deletes its spool file as soon
 * as ingest answers 2xx, so a batch we acknowledged must survive a power loss, not only a
 * process crash; NORMAL would let the last commits vanish on power loss. FULL costs one fsync
 * of the WAL per batch (one commit per node every 30 s), which a single disk sustains for
 * thousands of nodes.
 */
#define DEFAULT_READERS 4
#define MAX_READERS 64
#define DEFAULT_BUSY_TIMEOUT_MS 5000
#define STACK_PROBES 16 /* content-hash collisions tolerated per stack (never seen in practice) */

/*
 * Schema migrations, applied in order; migration i brings user_version from i to i + 1.
 * Never edit a released migration: append a new one.
 *
 * Integers that are unsigned 64-bit on the wire (epochs, sequences, offsets, start times) are
 * stored as the signed 64-bit value with the same bits. Times are ns (or ms where named
 * *_ms) since the Unix epoch.
 */
static const char *const migrations[] = {
	/* 1: initial schema. */
	"CREATE TABLE nodes ("
	"  id INTEGER PRIMARY KEY,"
	"  node_id TEXT NOT NULL UNIQUE,"         /* 32 lower-case hex digits */
	"  hostname TEXT NOT NULL,"
	"  kernel_release TEXT NOT NULL,"
	"  machine TEXT NOT NULL,"
	"  agent_version TEXT NOT NULL,"
	"  boot_id TEXT NOT NULL,"
	"  kernel_object INTEGER REFERENCES objects(id),"
	"  sample_hz INTEGER NOT NULL,"
	"  sample_rate_ppm INTEGER NOT NULL,"
	"  online_cpus INTEGER NOT NULL,"
	"  first_seen_ns INTEGER NOT NULL,"       /* server receive time of the first batch */
	"  last_seen_ns INTEGER NOT NULL,"        /* ... of the latest */
	"  batches INTEGER NOT NULL,"
	"  last_epoch INTEGER NOT NULL,"
	"  last_sequence INTEGER NOT NULL"
	");"
	"CREATE INDEX nodes_hostname ON nodes(hostname);"
	/* The primary key is the idempotency key: a replayed batch conflicts with it. */
	"CREATE TABLE batches ("
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  epoch INTEGER NOT NULL,"
	"  sequence INTEGER NOT NULL,"
	"  received_ns INTEGER NOT NULL,"
	"  window_start_ns INTEGER NOT NULL,"
	"  window_end_ns INTEGER NOT NULL,"
	"  samples INTEGER NOT NULL,"             /* sum of sample counts */
	"  sample_rows INTEGER NOT NULL,"
	"  counters TEXT NOT NULL,"               /* JSON object: counter name -> value */
	"  PRIMARY KEY (node, epoch, sequence)"
	");"
	/* key: the build ID for ELF/FILE_HASH/KERNEL/KMODULE objects, the name otherwise. */
	"CREATE TABLE objects ("
	"  id INTEGER PRIMARY KEY,"
	"  kind INTEGER NOT NULL,"
	"  key BLOB NOT NULL,"
	"  build_id BLOB,"
	"  name TEXT NOT NULL,"                   /* first name seen */
	"  UNIQUE (kind, key)"
	");"
	"CREATE TABLE processes ("
	"  id INTEGER PRIMARY KEY,"
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  tgid INTEGER NOT NULL,"
	"  start_time_ns INTEGER NOT NULL,"       /* since the node's boot */
	"  generation INTEGER NOT NULL,"
	"  ppid INTEGER NOT NULL,"
	"  comm TEXT NOT NULL,"
	"  exe TEXT NOT NULL,"
	"  cmdline TEXT NOT NULL,"
	"  first_seen_ns INTEGER NOT NULL,"       /* batch windows it appeared in */
	"  last_seen_ns INTEGER NOT NULL,"
	"  UNIQUE (node, tgid, start_time_ns, generation)"
	");"
	"CREATE INDEX processes_comm ON processes(comm);"
	/* Content-addressed: id = 64-bit hash of (kind, stop reason, frames), probing on a
	 * collision; frames = nframes x (u64 object id, u64 offset) little-endian, leaf first. */
	"CREATE TABLE stacks ("
	"  id INTEGER PRIMARY KEY,"
	"  kind INTEGER NOT NULL,"
	"  stop_reason INTEGER NOT NULL,"
	"  nframes INTEGER NOT NULL,"
	"  frames BLOB NOT NULL"
	");"
	"CREATE TABLE samples ("
	"  time_ms INTEGER NOT NULL,"             /* window start + time offset */
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  process INTEGER NOT NULL REFERENCES processes(id),"
	"  tid INTEGER NOT NULL,"
	"  cpu INTEGER NOT NULL,"
	"  thread_comm TEXT NOT NULL,"
	"  kernel_stack INTEGER REFERENCES stacks(id),"
	"  user_stack INTEGER REFERENCES stacks(id),"
	"  count INTEGER NOT NULL"
	");"
	"CREATE INDEX samples_time ON samples(time_ms);"
	"CREATE INDEX samples_node_time ON samples(node, time_ms);"
	"CREATE INDEX samples_process_time ON samples(process, time_ms);"
	/* Running totals of the agents' counters, for /metrics without scanning batches. */
	"CREATE TABLE node_counters ("
	"  node INTEGER NOT NULL REFERENCES nodes(id),"
	"  counter INTEGER NOT NULL,"
	"  total INTEGER NOT NULL,"
	"  PRIMARY KEY (node, counter)"
	") WITHOUT ROWID;"
	"CREATE TABLE kernel_symbol_tables ("
	"  id INTEGER PRIMARY KEY,"
	"  build_id BLOB NOT NULL UNIQUE,"
	"  symbols INTEGER NOT NULL,"
	"  uploaded_ns INTEGER NOT NULL"
	");"
	"CREATE TABLE kernel_symbols ("
	"  tbl INTEGER NOT NULL REFERENCES kernel_symbol_tables(id),"
	"  offset INTEGER NOT NULL,"              /* from _text (or the module base), < 2^63 */
	"  type TEXT NOT NULL,"
	"  name TEXT NOT NULL,"
	"  PRIMARY KEY (tbl, offset)"
	") WITHOUT ROWID;",
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

enum stmt_id {
	ST_NODE_ROW,
	ST_BATCH_FIND,
	ST_NODE_UPSERT,
	ST_BATCH_INSERT,
	ST_OBJECT_FIND,
	ST_OBJECT_INSERT,
	ST_PROCESS_UPSERT,
	ST_STACK_FIND,
	ST_STACK_INSERT,
	ST_SAMPLE_INSERT,
	ST_COUNTER_ADD,
	ST_KSYMS_FIND,
	ST_KSYMS_INSERT,
	ST_KSYM_INSERT,
	ST_KSYM_FLOOR,
	ST_KSYM_NEXT,
	ST_OBJECT_GET,
	ST_STACK_GET,
	ST_NODES_LIST,
	ST_COUNTERS_LIST,
	ST_PING,
	ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_NODE_ROW] = "SELECT id FROM nodes WHERE node_id = ?1",
	[ST_BATCH_FIND] = "SELECT 1 FROM batches b JOIN nodes n ON n.id = b.node"
			  " WHERE n.node_id = ?1 AND b.epoch = ?2 AND b.sequence = ?3",
	[ST_NODE_UPSERT] =
		"INSERT INTO nodes (node_id, hostname, kernel_release, machine, agent_version, boot_id,"
		" kernel_object, sample_hz, sample_rate_ppm, online_cpus, first_seen_ns, last_seen_ns,"
		" batches, last_epoch, last_sequence)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, 1, ?12, ?13)"
		" ON CONFLICT (node_id) DO UPDATE SET hostname = excluded.hostname,"
		" kernel_release = excluded.kernel_release, machine = excluded.machine,"
		" agent_version = excluded.agent_version, boot_id = excluded.boot_id,"
		" kernel_object = excluded.kernel_object, sample_hz = excluded.sample_hz,"
		" sample_rate_ppm = excluded.sample_rate_ppm, online_cpus = excluded.online_cpus,"
		" first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
		" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns), batches = batches + 1,"
		" last_sequence = CASE WHEN last_epoch = excluded.last_epoch"
		"   THEN max(last_sequence, excluded.last_sequence) ELSE excluded.last_sequence END,"
		" last_epoch = excluded.last_epoch"
		" RETURNING id",
	[ST_BATCH_INSERT] = "INSERT INTO batches (node, epoch, sequence, received_ns, window_start_ns,"
			    " window_end_ns, samples, sample_rows, counters)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
			    " ON CONFLICT (node, epoch, sequence) DO NOTHING",
	[ST_OBJECT_FIND] = "SELECT id FROM objects WHERE kind = ?1 AND key = ?2",
	[ST_OBJECT_INSERT] = "INSERT INTO objects (kind, key, build_id, name) VALUES (?1, ?2, ?3, ?4)",
	[ST_PROCESS_UPSERT] =
		"INSERT INTO processes (node, tgid, start_time_ns, generation, ppid, comm, exe, cmdline,"
		" first_seen_ns, last_seen_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
		" ON CONFLICT (node, tgid, start_time_ns, generation) DO UPDATE SET"
		" ppid = excluded.ppid, comm = excluded.comm, exe = excluded.exe,"
		" cmdline = excluded.cmdline, first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),"
		" last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)"
		" RETURNING id",
	[ST_STACK_FIND] = "SELECT kind, stop_reason, frames FROM stacks WHERE id = ?1",
	[ST_STACK_INSERT] = "INSERT INTO stacks (id, kind, stop_reason, nframes, frames)"
			    " VALUES (?1, ?2, ?3, ?4, ?5)",
	[ST_SAMPLE_INSERT] = "INSERT INTO samples (time_ms, node, process, tid, cpu, thread_comm,"
			     " kernel_stack, user_stack, count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
	[ST_COUNTER_ADD] = "INSERT INTO node_counters (node, counter, total) VALUES (?1, ?2, ?3)"
			   " ON CONFLICT (node, counter) DO UPDATE SET total = total + excluded.total",
	[ST_KSYMS_FIND] = "SELECT id, symbols FROM kernel_symbol_tables WHERE build_id = ?1",
	[ST_KSYMS_INSERT] = "INSERT INTO kernel_symbol_tables (build_id, symbols, uploaded_ns)"
			    " VALUES (?1, ?2, ?3)",
	[ST_KSYM_INSERT] = "INSERT INTO kernel_symbols (tbl, offset, type, name) VALUES (?1, ?2, ?3, ?4)",
	[ST_KSYM_FLOOR] = "SELECT offset, name FROM kernel_symbols WHERE tbl = ?1 AND offset <= ?2"
			  " ORDER BY offset DESC LIMIT 1",
	[ST_KSYM_NEXT] = "SELECT offset FROM kernel_symbols WHERE tbl = ?1 AND offset > ?2"
			 " ORDER BY offset LIMIT 1",
	[ST_OBJECT_GET] = "SELECT kind, build_id, name FROM objects WHERE id = ?1",
	[ST_STACK_GET] = "SELECT kind, stop_reason, nframes, frames FROM stacks WHERE id = ?1",
	[ST_NODES_LIST] = "SELECT node_id, hostname, kernel_release, machine, agent_version, boot_id,"
			  " sample_hz, sample_rate_ppm, online_cpus, first_seen_ns, last_seen_ns,"
			  " batches, last_epoch, last_sequence FROM nodes ORDER BY hostname, node_id",
	[ST_COUNTERS_LIST] = "SELECT n.node_id, n.hostname, c.counter, c.total FROM node_counters c"
			     " JOIN nodes n ON n.id = c.node ORDER BY c.counter, n.node_id",
	[ST_PING] = "SELECT count(*) FROM kernel_symbol_tables WHERE id = 0",
};

/* A connection with its lazily prepared statements; used by one thread at a time. */
struct conn {
	sqlite3 *db;
	sqlite3_stmt *stmts[ST_COUNT];
	struct conn *next_free;
};

struct sqlite_store {
	struct store base;
	char *db_path;
	char *wal_path;
	int lock_fd;
	uint32_t page_size;
	pthread_mutex_t write_lock; /* serializes every write transaction on `writer` */
	struct conn writer;
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct conn *readers;
	uint32_t reader_count;
	struct conn *free_readers;
};

static struct sqlite_store *from_base(struct store *s)
{
	return (struct sqlite_store *)s;
}

/* Maps an SQLite result code to the store's negative errors. */
static int sql_error(int rc)
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

/* Same bits, signed: how unsigned 64-bit wire values are stored. */
static sqlite3_int64 as_i64(uint64_t v)
{
	sqlite3_int64 r;

	memcpy(&r, &v, sizeof(r));
	return r;
}

static uint64_t as_u64(sqlite3_int64 v)
{
	uint64_t r;

	memcpy(&r, &v, sizeof(r));
	return r;
}

/* Counts are unsigned on the wire; the database keeps them as non-negative signed values. */
static sqlite3_int64 clamp_i64(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

static void hex_of(const uint8_t *bytes, size_t len, char *out, size_t outlen)
{
	struct sysom_build_id id = { .len = (uint8_t)len };

	memcpy(id.bytes, bytes, len);
	sysom_build_id_hex(&id, out, outlen);
}

static const char *column_text(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);

	return t ? (const char *)t : "";
}

static void copy_column(sqlite3_stmt *st, int i, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s", column_text(st, i));
}

static int conn_exec(struct conn *c, const char *sql)
{
	return sql_error(sqlite3_exec(c->db, sql, NULL, NULL, NULL));
}

/* The prepared statement `id` of the connection, reset and unbound. */
static int conn_stmt(struct conn *c, enum stmt_id id, sqlite3_stmt **out)
{
	if (!c->stmts[id]) {
		int rc = sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
					    &c->stmts[id], NULL);
		if (rc != SQLITE_OK)
			return sql_error(rc);
	}
	*out = c->stmts[id];
	return 0;
}

/* Ends a use of a cached statement so it holds no locks or borrowed bindings. */
static void stmt_done(sqlite3_stmt *st)
{
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
}

/* Steps a statement that returns no row. */
static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	return rc == SQLITE_DONE ? 0 : rc == SQLITE_ROW ? -EPROTO : sql_error(rc);
}

static void conn_close(struct conn *c)
{
	for (int i = 0; i < ST_COUNT; i++) {
		sqlite3_finalize(c->stmts[i]);
		c->stmts[i] = NULL;
	}
	sqlite3_close(c->db);
	c->db = NULL;
}

static int conn_open(struct conn *c, const char *path, uint32_t busy_timeout_ms, bool reader,
		     char *err, size_t errlen)
{
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (reader ? 0 : SQLITE_OPEN_CREATE);
	int rc = sqlite3_open_v2(path, &c->db, flags, NULL);

	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s: %s", path,
			 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		rc = sql_error(rc);
		goto cleanup;
	}
	sqlite3_extended_result_codes(c->db, 1);
	sqlite3_busy_timeout(c->db, (int)busy_timeout_ms);
	rc = conn_exec(c, reader ? "PRAGMA foreign_keys = ON; PRAGMA query_only = ON;"
				 : "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;"
				   " PRAGMA cache_size = -32768;");
	if (rc)
		snprintf(err, errlen, "cannot configure %s: %s", path, sqlite3_errmsg(c->db));
cleanup:
	if (rc)
		conn_close(c);
	return rc;
}

static int pragma_int(struct conn *c, const char *sql, sqlite3_int64 *out)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);

	if (rc != SQLITE_OK) {
		rc = sql_error(rc);
		goto cleanup;
	}
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -EPROTO : sql_error(rc);
		goto cleanup;
	}
	*out = sqlite3_column_int64(st, 0);
	rc = 0;
cleanup:
	sqlite3_finalize(st);
	return rc;
}

/* Brings the schema to SCHEMA_VERSION, one transaction per migration. */
static int migrate(struct conn *c, const char *path, char *err, size_t errlen)
{
	sqlite3_int64 version;
	int rc = pragma_int(c, "PRAGMA user_version", &version);

	if (rc) {
		snprintf(err, errlen, "cannot read the schema version of %s: %s", path,
			 sqlite3_errmsg(c->db));
		return rc;
	}
	if (version > SCHEMA_VERSION) {
		snprintf(err, errlen,
			 "%s has schema version %lld, newer than the %d this sysom-server supports;"
			 " run a newer sysom-server",
			 path, (long long)version, SCHEMA_VERSION);
		return -SYSOM_EVERSION;
	}
	if (version < 0) {
		snprintf(err, errlen, "%s has an invalid schema version %lld", path, (long long)version);
		return -SYSOM_ECORRUPT;
	}
	for (int v = (int)version; v < SCHEMA_VERSION; v++) {
		char bump[64];

		snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
		rc = conn_exec(c, "BEGIN IMMEDIATE");
		if (!rc)
			rc = conn_exec(c, migrations[v]);
		if (!rc)
			rc = conn_exec(c, bump);
		if (!rc)
			rc = conn_exec(c, "COMMIT");
		if (rc) {
			snprintf(err, errlen, "cannot migrate %s to schema version %d: %s", path, v + 1,
				 sqlite3_errmsg(c->db));
			if (!sqlite3_get_autocommit(c->db))
				conn_exec(c, "ROLLBACK");
			return rc;
		}
	}
	return 0;
}

static int apply_size_limit(struct sqlite_store *s, uint64_t max_bytes)
{
	char sql[80];
	uint64_t pages = max_bytes ? max_bytes / s->page_size : 0xfffffffeULL;

	if (pages == 0)
		pages = 1;
	if (pages > 0xfffffffeULL)
		pages = 0xfffffffeULL;
	/* SQLite raises a limit below the current size to the current size: growth then fails. */
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %llu", (unsigned long long)pages);
	return conn_exec(&s->writer, sql);
}

static void sqlite_close(struct store *base)
{
	struct sqlite_store *s = from_base(base);

	for (uint32_t i = 0; i < s->reader_count; i++)
		conn_close(&s->readers[i]);
	free(s->readers);
	/* The writer closes last: the last connection checkpoints the WAL into the database. */
	conn_close(&s->writer);
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
	return SCHEMA_VERSION;
}

static struct conn *reader_acquire(struct sqlite_store *s)
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

static void reader_release(struct sqlite_store *s, struct conn *c)
{
	pthread_mutex_lock(&s->pool_lock);
	c->next_free = s->free_readers;
	s->free_readers = c;
	pthread_cond_signal(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
}

/* ---- writing a batch ---------------------------------------------------------------------- */

static bool kind_has_build_id(uint8_t kind)
{
	return kind == SYSOM_OBJECT_ELF || kind == SYSOM_OBJECT_FILE_HASH ||
	       kind == SYSOM_OBJECT_KERNEL || kind == SYSOM_OBJECT_KMODULE;
}

/* The store-wide id of a batch object, inserting it when new. */
static int object_id(struct conn *c, const struct sysom_batch *b, const struct sysom_object *o,
		     sqlite3_int64 *out)
{
	const char *name = sysom_batch_string(b, o->name);
	bool by_id = kind_has_build_id(o->kind);
	const void *key = by_id ? (const void *)o->build_id : (const void *)name;
	int key_len = by_id ? o->build_id_len : (int)strlen(name);
	sqlite3_stmt *st = NULL;
	int rc;

	/* A zero-length blob needs a non-NULL pointer (NULL would bind SQL NULL). */
	if ((rc = conn_stmt(c, ST_OBJECT_FIND, &st)))
		return rc;
	sqlite3_bind_int(st, 1, o->kind);
	sqlite3_bind_blob(st, 2, key_len ? key : "", key_len, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		stmt_done(st);
		return 0;
	}
	stmt_done(st);
	if (rc != SQLITE_DONE)
		return sql_error(rc);
	if ((rc = conn_stmt(c, ST_OBJECT_INSERT, &st)))
		return rc;
	sqlite3_bind_int(st, 1, o->kind);
	sqlite3_bind_blob(st, 2, key_len ? key : "", key_len, SQLITE_STATIC);
	if (by_id)
		sqlite3_bind_blob(st, 3, o->build_id, o->build_id_len, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, name, -1, SQLITE_STATIC);
	rc = step_done(st);
	stmt_done(st);
	if (!rc)
		*out = sqlite3_last_insert_rowid(c->db);
	return rc;
}

static int node_upsert(struct conn *c, const struct sysom_batch *b, const char *node_hex,
		       sqlite3_int64 kernel_object, int64_t received_ns, sqlite3_int64 *out)
{
	const struct sysom_node_info *n = &b->node;
	char boot_hex[33];
	sqlite3_stmt *st = NULL;
	int rc;

	hex_of(n->boot_id, sizeof(n->boot_id), boot_hex, sizeof(boot_hex));
	if ((rc = conn_stmt(c, ST_NODE_UPSERT, &st)))
		return rc;
	sqlite3_bind_text(st, 1, node_hex, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, sysom_batch_string(b, n->hostname), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, sysom_batch_string(b, n->kernel_release), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, sysom_batch_string(b, n->machine), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, sysom_batch_string(b, n->agent_version), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, boot_hex, -1, SQLITE_STATIC);
	if (kernel_object)
		sqlite3_bind_int64(st, 7, kernel_object);
	sqlite3_bind_int64(st, 8, n->sample_hz);
	sqlite3_bind_int64(st, 9, n->sample_rate_ppm);
	sqlite3_bind_int64(st, 10, n->online_cpus);
	sqlite3_bind_int64(st, 11, received_ns);
	sqlite3_bind_int64(st, 12, as_i64(b->agent_epoch));
	sqlite3_bind_int64(st, 13, as_i64(b->sequence));
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -EPROTO : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

/* The batch's counters as a JSON object {"name": value}; caller frees. */
static char *counters_json(const struct sysom_batch *b)
{
	json_t *obj = json_object();
	char *text = NULL;

	if (!obj)
		return NULL;
	for (uint32_t i = 0; i < b->counter_count; i++) {
		const char *name = sysom_counter_name(b->counters[i].id);
		char fallback[32];

		if (!name) {
			snprintf(fallback, sizeof(fallback), "counter_%u", b->counters[i].id);
			name = fallback;
		}
		if (json_object_set_new(obj, name, json_integer(clamp_i64(b->counters[i].value))))
			goto cleanup;
	}
	text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
cleanup:
	json_decref(obj);
	return text;
}

static int batch_insert(struct conn *c, const struct sysom_batch *b, sqlite3_int64 node,
			int64_t received_ns, uint64_t samples, const char *counters, bool *inserted)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_BATCH_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int64(st, 2, as_i64(b->agent_epoch));
	sqlite3_bind_int64(st, 3, as_i64(b->sequence));
	sqlite3_bind_int64(st, 4, received_ns);
	sqlite3_bind_int64(st, 5, clamp_i64(b->window_start_ns));
	sqlite3_bind_int64(st, 6, clamp_i64(b->window_end_ns));
	sqlite3_bind_int64(st, 7, clamp_i64(samples));
	sqlite3_bind_int64(st, 8, b->sample_count);
	sqlite3_bind_text(st, 9, counters, -1, SQLITE_STATIC);
	rc = step_done(st);
	stmt_done(st);
	if (!rc)
		*inserted = sqlite3_changes(c->db) == 1;
	return rc;
}

static int process_upsert(struct conn *c, const struct sysom_batch *b, const struct sysom_process *p,
			  sqlite3_int64 node, sqlite3_int64 *out)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_PROCESS_UPSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int64(st, 2, p->tgid);
	sqlite3_bind_int64(st, 3, as_i64(p->start_time_ns));
	sqlite3_bind_int64(st, 4, p->generation);
	sqlite3_bind_int64(st, 5, p->ppid);
	sqlite3_bind_text(st, 6, sysom_batch_string(b, p->comm), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, sysom_batch_string(b, p->exe), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 8, sysom_batch_string(b, p->cmdline), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 9, clamp_i64(b->window_start_ns));
	sqlite3_bind_int64(st, 10, clamp_i64(b->window_end_ns));
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -EPROTO : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

/*
 * The content-addressed id of a stack whose frames (already mapped to store-wide object ids)
 * are in `blob`, inserting it when new; *created says whether it was.
 */
static int stack_id(struct conn *c, uint8_t kind, uint8_t stop, uint16_t nframes,
		    const struct byte_buf *blob, sqlite3_int64 *out, bool *created)
{
	uint64_t h = sysom_hash_mix(sysom_hash64(blob->data, blob->len, 0), (uint64_t)kind << 8 | stop);
	sqlite3_stmt *st = NULL;
	int rc;

	for (int probe = 0; probe < STACK_PROBES; probe++, h++) {
		sqlite3_int64 id = as_i64(h);

		if (id == STORE_STACK_NONE)
			continue;
		if ((rc = conn_stmt(c, ST_STACK_FIND, &st)))
			return rc;
		sqlite3_bind_int64(st, 1, id);
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			bool same = sqlite3_column_int(st, 0) == kind &&
				    sqlite3_column_int(st, 1) == stop &&
				    (size_t)sqlite3_column_bytes(st, 2) == blob->len &&
				    memcmp(sqlite3_column_blob(st, 2), blob->data, blob->len) == 0;
			stmt_done(st);
			if (same) {
				*out = id;
				*created = false;
				return 0;
			}
			continue; /* a different stack holds this hash: probe the next id */
		}
		stmt_done(st);
		if (rc != SQLITE_DONE)
			return sql_error(rc);
		if ((rc = conn_stmt(c, ST_STACK_INSERT, &st)))
			return rc;
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, kind);
		sqlite3_bind_int(st, 3, stop);
		sqlite3_bind_int(st, 4, nframes);
		sqlite3_bind_blob(st, 5, blob->data, (int)blob->len, SQLITE_STATIC);
		rc = step_done(st);
		stmt_done(st);
		if (!rc) {
			*out = id;
			*created = true;
		}
		return rc;
	}
	return -EOVERFLOW;
}

static int sample_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_sample *smp,
			 sqlite3_int64 node, const sqlite3_int64 *processes,
			 const sqlite3_int64 *stacks)
{
	sqlite3_stmt *st = NULL;
	int64_t time_ms = (int64_t)(b->window_start_ns / 1000000) + smp->time_offset_ms;
	int rc;

	if ((rc = conn_stmt(c, ST_SAMPLE_INSERT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, time_ms);
	sqlite3_bind_int64(st, 2, node);
	sqlite3_bind_int64(st, 3, processes[smp->process]);
	sqlite3_bind_int64(st, 4, smp->tid);
	sqlite3_bind_int64(st, 5, smp->cpu);
	sqlite3_bind_text(st, 6, sysom_batch_string(b, smp->thread_comm), -1, SQLITE_STATIC);
	if (smp->kernel_stack != SYSOM_WIRE_NONE)
		sqlite3_bind_int64(st, 7, stacks[smp->kernel_stack]);
	if (smp->user_stack != SYSOM_WIRE_NONE)
		sqlite3_bind_int64(st, 8, stacks[smp->user_stack]);
	sqlite3_bind_int64(st, 9, clamp_i64(smp->count));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int counter_add(struct conn *c, sqlite3_int64 node, const struct sysom_counter *ctr)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_COUNTER_ADD, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, node);
	sqlite3_bind_int(st, 2, ctr->id);
	sqlite3_bind_int64(st, 3, clamp_i64(ctr->value));
	rc = step_done(st);
	stmt_done(st);
	return rc;
}

static int batch_find(struct conn *c, const char *node_hex, uint64_t epoch, uint64_t sequence,
		      bool *exists)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_BATCH_FIND, &st)))
		return rc;
	sqlite3_bind_text(st, 1, node_hex, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, as_i64(epoch));
	sqlite3_bind_int64(st, 3, as_i64(sequence));
	rc = sqlite3_step(st);
	stmt_done(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return sql_error(rc);
	*exists = rc == SQLITE_ROW;
	return 0;
}

/* Everything of a batch after the duplicate check, inside the open transaction. */
static int batch_write(struct conn *c, const struct sysom_batch *b, const char *node_hex,
		       int64_t received_ns, struct store_put_result *r)
{
	sqlite3_int64 *objects = calloc(b->object_count + 1, sizeof(*objects));
	sqlite3_int64 *processes = calloc(b->process_count + 1, sizeof(*processes));
	sqlite3_int64 *stacks = calloc(b->stack_count + 1, sizeof(*stacks));
	struct byte_buf blob = { 0 };
	sqlite3_int64 node = 0, kernel_object = 0;
	char *counters = counters_json(b);
	bool inserted = false;
	int rc = 0;

	if (!objects || !processes || !stacks || !counters) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->sample_count; i++)
		r->samples = b->samples[i].count > UINT64_MAX - r->samples ? UINT64_MAX
									    : r->samples + b->samples[i].count;
	for (uint32_t i = 0; i < b->object_count; i++)
		if ((rc = object_id(c, b, &b->objects[i], &objects[i])))
			goto cleanup;
	if (b->node.kernel_object != SYSOM_WIRE_NONE && b->node.kernel_object < b->object_count)
		kernel_object = objects[b->node.kernel_object];
	if ((rc = node_upsert(c, b, node_hex, kernel_object, received_ns, &node)) ||
	    (rc = batch_insert(c, b, node, received_ns, r->samples, counters, &inserted)))
		goto cleanup;
	if (!inserted) {
		rc = -EPROTO; /* the duplicate check ran in this transaction: cannot happen */
		goto cleanup;
	}
	for (uint32_t i = 0; i < b->process_count; i++)
		if ((rc = process_upsert(c, b, &b->processes[i], node, &processes[i])))
			goto cleanup;
	r->processes = b->process_count;
	for (uint32_t i = 0; i < b->stack_count; i++) {
		const struct sysom_stack *stk = &b->stacks[i];
		const struct sysom_frame *f = sysom_batch_stack_frames(b, i);
		bool created = false;

		blob.len = 0;
		for (uint16_t j = 0; j < stk->nframes; j++) {
			byte_buf_put_u64(&blob, (uint64_t)objects[f[j].object]);
			byte_buf_put_u64(&blob, f[j].offset);
		}
		if ((rc = byte_buf_error(&blob)))
			goto cleanup;
		rc = stack_id(c, stk->kind, stk->stop_reason, stk->nframes, &blob, &stacks[i], &created);
		if (rc)
			goto cleanup;
		r->new_stacks += created;
	}
	for (uint32_t i = 0; i < b->sample_count; i++)
		if ((rc = sample_insert(c, b, &b->samples[i], node, processes, stacks)))
			goto cleanup;
	r->sample_rows = b->sample_count;
	for (uint32_t i = 0; i < b->counter_count; i++)
		if ((rc = counter_add(c, node, &b->counters[i])))
			goto cleanup;
cleanup:
	free(objects);
	free(processes);
	free(stacks);
	free(counters);
	byte_buf_free(&blob);
	return rc;
}

/* Ends a failed write transaction, if SQLite did not already roll it back itself. */
static void rollback(struct conn *c)
{
	if (!sqlite3_get_autocommit(c->db))
		conn_exec(c, "ROLLBACK");
}

static int sqlite_batch_put(struct store *base, const struct sysom_batch *b, int64_t received_ns,
			    struct store_put_result *res)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	struct store_put_result r = { 0 };
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	bool exists = false;
	int rc;

	hex_of(b->node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	pthread_mutex_lock(&s->write_lock);
	if ((rc = conn_exec(c, "BEGIN IMMEDIATE")))
		goto cleanup;
	if ((rc = batch_find(c, node_hex, b->agent_epoch, b->sequence, &exists)))
		goto cleanup;
	if (exists) {
		r.duplicate = true;
		goto cleanup; /* rc == 0: the rollback below ends the read-only transaction */
	}
	if ((rc = batch_write(c, b, node_hex, received_ns, &r)))
		goto cleanup;
	rc = conn_exec(c, "COMMIT");
cleanup:
	rollback(c);
	pthread_mutex_unlock(&s->write_lock);
	if (!rc)
		*res = r;
	return rc;
}

static int sqlite_batch_exists(struct store *base, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
			       uint64_t epoch, uint64_t sequence, bool *exists)
{
	struct sqlite_store *s = from_base(base);
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	struct conn *c = reader_acquire(s);
	int rc;

	hex_of(node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	rc = batch_find(c, node_hex, epoch, sequence, exists);
	reader_release(s, c);
	return rc;
}

/* ---- kernel symbols ------------------------------------------------------------------------ */

/* Finds the table of a build ID: 0 with *id (and *count), -ENOENT, or an error. */
static int ksyms_find(struct conn *c, const uint8_t *build_id, size_t len, sqlite3_int64 *id,
		      uint64_t *count)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_KSYMS_FIND, &st)))
		return rc;
	sqlite3_bind_blob(st, 1, build_id, (int)len, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		if (count)
			*count = (uint64_t)sqlite3_column_int64(st, 1);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

static int ksyms_write(struct conn *c, const uint8_t *build_id, size_t len,
		       const struct store_ksym *syms, size_t count, int64_t uploaded_ns)
{
	sqlite3_stmt *st = NULL;
	sqlite3_int64 tbl;
	int rc;

	if ((rc = conn_stmt(c, ST_KSYMS_INSERT, &st)))
		return rc;
	sqlite3_bind_blob(st, 1, build_id, (int)len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)count);
	sqlite3_bind_int64(st, 3, uploaded_ns);
	rc = step_done(st);
	stmt_done(st);
	if (rc)
		return rc;
	tbl = sqlite3_last_insert_rowid(c->db);
	if ((rc = conn_stmt(c, ST_KSYM_INSERT, &st)))
		return rc;
	for (size_t i = 0; i < count; i++) {
		char type[2] = { syms[i].type, '\0' };

		sqlite3_bind_int64(st, 1, tbl);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)syms[i].offset);
		sqlite3_bind_text(st, 3, type, 1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 4, syms[i].name, -1, SQLITE_STATIC);
		rc = step_done(st);
		stmt_done(st);
		if (rc)
			return rc;
	}
	return 0;
}

static int sqlite_ksyms_put(struct store *base, const uint8_t *build_id, size_t build_id_len,
			    const struct store_ksym *syms, size_t count, int64_t uploaded_ns,
			    bool *created)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = &s->writer;
	sqlite3_int64 tbl;
	bool fresh = false;
	int rc;

	if (build_id_len == 0 || build_id_len > SYSOM_BUILD_ID_MAX)
		return -EINVAL;
	for (size_t i = 0; i < count; i++)
		if (syms[i].offset > INT64_MAX || (i && syms[i].offset <= syms[i - 1].offset))
			return -EINVAL;
	pthread_mutex_lock(&s->write_lock);
	if ((rc = conn_exec(c, "BEGIN IMMEDIATE")))
		goto cleanup;
	rc = ksyms_find(c, build_id, build_id_len, &tbl, NULL);
	if (rc == 0)
		goto cleanup; /* already stored: unchanged */
	if (rc != -ENOENT)
		goto cleanup;
	if ((rc = ksyms_write(c, build_id, build_id_len, syms, count, uploaded_ns)))
		goto cleanup;
	if ((rc = conn_exec(c, "COMMIT")))
		goto cleanup;
	fresh = true;
cleanup:
	rollback(c);
	pthread_mutex_unlock(&s->write_lock);
	if (!rc)
		*created = fresh;
	return rc;
}

static int sqlite_ksyms_count(struct store *base, const uint8_t *build_id, size_t build_id_len,
			      uint64_t *count)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_int64 tbl;
	int rc = ksyms_find(c, build_id, build_id_len, &tbl, count);

	reader_release(s, c);
	return rc;
}

static int ksym_range_query(struct conn *c, sqlite3_int64 tbl, uint64_t offset,
			    struct store_ksym_range *r)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_KSYM_FLOOR, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, tbl);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)offset);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		r->has_floor = true;
		r->floor = (uint64_t)sqlite3_column_int64(st, 0);
		r->floor_name = strdup(column_text(st, 1));
		rc = r->floor_name ? 0 : -ENOMEM;
	} else {
		rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
	}
	stmt_done(st);
	if (rc)
		return rc;
	if ((rc = conn_stmt(c, ST_KSYM_NEXT, &st)))
		return rc;
	sqlite3_bind_int64(st, 1, tbl);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)offset);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		r->has_next = true;
		r->next = (uint64_t)sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
	}
	stmt_done(st);
	return rc;
}

static int sqlite_ksym_range_get(struct store *base, const uint8_t *build_id, size_t build_id_len,
				 uint64_t offset, struct store_ksym_range *out)
{
	struct sqlite_store *s = from_base(base);
	struct store_ksym_range r = { 0 };
	struct conn *c = reader_acquire(s);
	sqlite3_int64 tbl;
	int rc = ksyms_find(c, build_id, build_id_len, &tbl, NULL);

	/* Symbol offsets are below 2^63; a larger frame offset lies beyond every symbol. */
	if (!rc && offset <= INT64_MAX)
		rc = ksym_range_query(c, tbl, offset, &r);
	reader_release(s, c);
	if (rc) {
		store_ksym_range_release(&r);
		return rc;
	}
	*out = r;
	return 0;
}

/* ---- reading ------------------------------------------------------------------------------- */

static int sqlite_object_get(struct store *base, int64_t id, struct store_object *out)
{
	struct sqlite_store *s = from_base(base);
	struct store_object o = { 0 };
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_OBJECT_GET, &st)))
		goto cleanup;
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
		goto cleanup;
	}
	o.id.kind = (uint8_t)sqlite3_column_int(st, 0);
	int len = sqlite3_column_bytes(st, 1);
	if (len > SYSOM_BUILD_ID_MAX) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (len)
		memcpy(o.id.bytes, sqlite3_column_blob(st, 1), (size_t)len);
	o.id.len = (uint8_t)len;
	o.name = strdup(column_text(st, 2));
	rc = o.name ? 0 : -ENOMEM;
cleanup:
	stmt_done(st);
	reader_release(s, c);
	if (!rc)
		*out = o;
	return rc;
}

static int sqlite_stack_get(struct store *base, int64_t id, struct store_stack **out)
{
	struct sqlite_store *s = from_base(base);
	struct store_stack *stk = NULL;
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_STACK_GET, &st)))
		goto cleanup;
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_error(rc);
		goto cleanup;
	}
	int nframes = sqlite3_column_int(st, 2);
	const uint8_t *blob = sqlite3_column_blob(st, 3);
	int bytes = sqlite3_column_bytes(st, 3);
	if (nframes < 1 || nframes > UINT16_MAX || bytes != nframes * 16) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	stk = malloc(sizeof(*stk) + (size_t)nframes * sizeof(stk->frames[0]));
	if (!stk) {
		rc = -ENOMEM;
		goto cleanup;
	}
	stk->id = id;
	stk->kind = (uint8_t)sqlite3_column_int(st, 0);
	stk->stop_reason = (uint8_t)sqlite3_column_int(st, 1);
	stk->nframes = (uint16_t)nframes;
	for (int i = 0; i < nframes; i++) {
		stk->frames[i].object = (int64_t)load_le64(blob + 16 * i);
		stk->frames[i].offset = load_le64(blob + 16 * i + 8);
	}
	rc = 0;
cleanup:
	stmt_done(st);
	reader_release(s, c);
	if (rc) {
		free(stk);
		return rc;
	}
	*out = stk;
	return 0;
}

static int sqlite_nodes_list(struct store *base, store_node_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_NODES_LIST, &st)))
		goto cleanup;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_node n = {
			.hostname = column_text(st, 1),
			.kernel_release = column_text(st, 2),
			.machine = column_text(st, 3),
			.agent_version = column_text(st, 4),
			.sample_hz = (uint32_t)sqlite3_column_int64(st, 6),
			.sample_rate_ppm = (uint32_t)sqlite3_column_int64(st, 7),
			.online_cpus = (uint32_t)sqlite3_column_int64(st, 8),
			.first_seen_ns = sqlite3_column_int64(st, 9),
			.last_seen_ns = sqlite3_column_int64(st, 10),
			.batches = (uint64_t)sqlite3_column_int64(st, 11),
			.last_epoch = as_u64(sqlite3_column_int64(st, 12)),
			.last_sequence = as_u64(sqlite3_column_int64(st, 13)),
		};
		copy_column(st, 0, n.node_id, sizeof(n.node_id));
		copy_column(st, 5, n.boot_id, sizeof(n.boot_id));
		if ((rc = fn(arg, &n)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	stmt_done(st);
	reader_release(s, c);
	return rc;
}

/* Appends the WHERE conditions of a sample filter; parameters ?1 .. ?5 (see bind_filter). */
static void filter_sql(struct byte_buf *sql, const struct store_sample_filter *f)
{
	byte_buf_printf(sql, " WHERE s.time_ms BETWEEN ?1 AND ?2");
	if (f->node)
		byte_buf_printf(sql, " AND s.node IN (SELECT id FROM nodes"
				     " WHERE node_id = lower(?3) OR hostname = ?3)");
	if (f->has_pid)
		byte_buf_printf(sql, " AND p.tgid = ?4");
	if (f->comm)
		byte_buf_printf(sql, " AND (p.comm = ?5 OR s.thread_comm = ?5)");
}

static void bind_filter(sqlite3_stmt *st, const struct store_sample_filter *f)
{
	sqlite3_bind_int64(st, 1, f->from_ms);
	sqlite3_bind_int64(st, 2, f->to_ms);
	if (f->node)
		sqlite3_bind_text(st, 3, f->node, -1, SQLITE_STATIC);
	if (f->has_pid)
		sqlite3_bind_int64(st, 4, f->pid);
	if (f->comm)
		sqlite3_bind_text(st, 5, f->comm, -1, SQLITE_STATIC);
}

/* Prepares a one-off query (filters change its shape, so the planner sees only live terms). */
static int prepare_sql(struct conn *c, struct byte_buf *sql, sqlite3_stmt **out)
{
	byte_buf_append(sql, "", 1);
	if (byte_buf_error(sql))
		return byte_buf_error(sql);
	return sql_error(sqlite3_prepare_v2(c->db, (const char *)sql->data, -1, out, NULL));
}

static int sqlite_processes_list(struct store *base, const struct store_sample_filter *f,
				 uint32_t limit, store_process_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	int rc;

	byte_buf_printf(&sql, "SELECT n.node_id, n.hostname, p.tgid, p.ppid, p.generation,"
			      " p.start_time_ns, p.comm, p.exe, p.cmdline, p.first_seen_ns,"
			      " p.last_seen_ns, sum(s.count) AS c"
			      " FROM samples s JOIN processes p ON p.id = s.process"
			      " JOIN nodes n ON n.id = p.node");
	filter_sql(&sql, f);
	byte_buf_printf(&sql, " GROUP BY s.process ORDER BY c DESC, s.process LIMIT ?6");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	bind_filter(st, f);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_process p = {
			.hostname = column_text(st, 1),
			.pid = (uint32_t)sqlite3_column_int64(st, 2),
			.ppid = (uint32_t)sqlite3_column_int64(st, 3),
			.generation = (uint32_t)sqlite3_column_int64(st, 4),
			.start_time_ns = as_u64(sqlite3_column_int64(st, 5)),
			.comm = column_text(st, 6),
			.exe = column_text(st, 7),
			.cmdline = column_text(st, 8),
			.first_seen_ns = sqlite3_column_int64(st, 9),
			.last_seen_ns = sqlite3_column_int64(st, 10),
			.samples = (uint64_t)sqlite3_column_int64(st, 11),
		};
		copy_column(st, 0, p.node_id, sizeof(p.node_id));
		if ((rc = fn(arg, &p)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	return rc;
}

static int sqlite_stacks_aggregate(struct store *base, const struct store_sample_filter *f,
				   uint32_t limit, store_stack_count_fn fn, void *arg,
				   uint64_t *total)
{
	struct sqlite_store *s = from_base(base);
	struct byte_buf sql = { 0 };
	sqlite3_stmt *st = NULL;
	struct conn *c = reader_acquire(s);
	uint64_t sum = 0;
	int rc;

	/* The window sum runs over every group before LIMIT: the total counts everything. */
	byte_buf_printf(&sql, "SELECT p.comm, min(p.tgid), max(p.tgid), count(DISTINCT s.process),"
			      " coalesce(s.user_stack, 0) AS u, coalesce(s.kernel_stack, 0) AS k,"
			      " sum(s.count) AS c, sum(sum(s.count)) OVER () AS total"
			      " FROM samples s JOIN processes p ON p.id = s.process");
	filter_sql(&sql, f);
	byte_buf_printf(&sql, " GROUP BY p.comm, u, k ORDER BY c DESC, p.comm, u, k LIMIT ?6");
	if ((rc = prepare_sql(c, &sql, &st)))
		goto cleanup;
	bind_filter(st, f);
	sqlite3_bind_int64(st, 6, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
		struct store_stack_count row = {
			.comm = column_text(st, 0),
			.pid = lo == hi ? lo : -1,
			.processes = (uint64_t)sqlite3_column_int64(st, 3),
			.user_stack = sqlite3_column_int64(st, 4),
			.kernel_stack = sqlite3_column_int64(st, 5),
			.count = (uint64_t)sqlite3_column_int64(st, 6),
		};
		sum = (uint64_t)sqlite3_column_int64(st, 7);
		if ((rc = fn(arg, &row)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	sqlite3_finalize(st);
	reader_release(s, c);
	byte_buf_free(&sql);
	if (!rc)
		*total = sum;
	return rc;
}

static int sqlite_counters_list(struct store *base, store_counter_fn fn, void *arg)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_COUNTERS_LIST, &st)))
		goto cleanup;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_counter_total t = {
			.hostname = column_text(st, 1),
			.counter = (uint16_t)sqlite3_column_int(st, 2),
			.total = (uint64_t)sqlite3_column_int64(st, 3),
		};
		copy_column(st, 0, t.node_id, sizeof(t.node_id));
		if ((rc = fn(arg, &t)))
			goto cleanup;
	}
	rc = rc == SQLITE_DONE ? 0 : sql_error(rc);
cleanup:
	stmt_done(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_ping(struct store *base)
{
	struct sqlite_store *s = from_base(base);
	struct conn *c = reader_acquire(s);
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_stmt(c, ST_PING, &st)))
		goto cleanup;
	rc = sqlite3_step(st);
	rc = rc == SQLITE_ROW ? 0 : sql_error(rc == SQLITE_DONE ? SQLITE_ERROR : rc);
cleanup:
	stmt_done(st);
	reader_release(s, c);
	return rc;
}

static int sqlite_size_get(struct store *base, uint64_t *bytes)
{
	struct sqlite_store *s = from_base(base);
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
	struct sqlite_store *s = from_base(base);
	int rc;

	pthread_mutex_lock(&s->write_lock);
	rc = apply_size_limit(s, max_bytes);
	pthread_mutex_unlock(&s->write_lock);
	return rc;
}

static const struct store_ops sqlite_ops = {
	.close = sqlite_close,
	.schema_version = sqlite_schema_version,
	.batch_put = sqlite_batch_put,
	.batch_exists = sqlite_batch_exists,
	.ksyms_put = sqlite_ksyms_put,
	.ksyms_count = sqlite_ksyms_count,
	.ksym_range_get = sqlite_ksym_range_get,
	.object_get = sqlite_object_get,
	.stack_get = sqlite_stack_get,
	.nodes_list = sqlite_nodes_list,
	.processes_list = sqlite_processes_list,
	.stacks_aggregate = sqlite_stacks_aggregate,
	.counters_list = sqlite_counters_list,
	.ping = sqlite_ping,
	.size_get = sqlite_size_get,
	.size_limit_set = sqlite_size_limit_set,
};

/* ---- opening ------------------------------------------------------------------------------- */

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

static int open_connections(struct sqlite_store *s, const struct store_sqlite_options *o,
			    char *err, size_t errlen)
{
	sqlite3_int64 page_size;
	char mode[16] = "";
	sqlite3_stmt *st = NULL;
	int rc;

	if ((rc = conn_open(&s->writer, s->db_path, o->busy_timeout_ms, false, err, errlen)))
		return rc;
	rc = sqlite3_prepare_v2(s->writer.db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		copy_column(st, 0, mode, sizeof(mode));
	rc = sqlite3_finalize(st);
	if (rc != SQLITE_OK || strcmp(mode, "wal") != 0) {
		snprintf(err, errlen, "cannot use %s: %s", s->db_path,
			 rc != SQLITE_OK ? sqlite3_errmsg(s->writer.db) : "WAL journal mode refused");
		return rc != SQLITE_OK ? sql_error(rc) : -EPROTO;
	}
	if ((rc = migrate(&s->writer, s->db_path, err, errlen)))
		return rc;
	if ((rc = pragma_int(&s->writer, "PRAGMA page_size", &page_size)) || page_size <= 0) {
		snprintf(err, errlen, "cannot read the page size of %s", s->db_path);
		return rc ? rc : -EPROTO;
	}
	s->page_size = (uint32_t)page_size;
	if (o->max_size && (rc = apply_size_limit(s, o->max_size))) {
		snprintf(err, errlen, "cannot limit the size of %s: %s", s->db_path,
			 sqlite3_errmsg(s->writer.db));
		return rc;
	}
	s->readers = calloc(o->read_connections, sizeof(*s->readers));
	if (!s->readers)
		return -ENOMEM;
	for (uint32_t i = 0; i < o->read_connections; i++) {
		if ((rc = conn_open(&s->readers[i], s->db_path, o->busy_timeout_ms, true, err, errlen)))
			return rc;
		s->reader_count++;
		s->readers[i].next_free = s->free_readers;
		s->free_readers = &s->readers[i];
	}
	return 0;
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
	if ((rc = data_dir_lock(data_dir, &s->lock_fd, err, errlen)))
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
