/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the SQLite backend's files (sqlite_*.c): connections, the query helper. */
#ifndef SYSOM_SERVER_STORE_SQLITE_INTERNAL_H
#define SYSOM_SERVER_STORE_SQLITE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "common/bytes.h"
#include "server/store/store_impl.h"

/* ---- connections (sqlite_pool.c) ---------------------------------------------------------- */

/* Prepared statements a connection keeps (a few dozen fixed texts exist; the rest run once). */
#define STORE__STMT_CACHE 128

/* A connection with its cached prepared statements; used by one thread at a time. */
struct conn {
	sqlite3 *db;
	struct {
		const char *sql;   /* the caller's static text: the cache key */
		sqlite3_stmt *st;
	} stmts[STORE__STMT_CACHE];
	struct conn *next_free;
	bool in_write;   /* inside a transaction of store__write_begin (store__query checks it holds) */
	bool committing; /* store__write_end's COMMIT runs: the only commit allowed while in_write */
	bool fk_off;     /* foreign keys not enforced (store__write_begin_unchecked) */
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
	uint64_t ksyms_max_rows;   /* max_kernel_symbols, 0: none */
	int64_t ksyms_in_use_ns;   /* kernel_symbols_in_use_ns */
	atomic_uint_least64_t ksyms_evicted_tables, ksyms_evicted_rows;
};

static inline struct sqlite_store *store__sqlite(struct store *s)
{
	return (struct sqlite_store *)s;
}

/* Opens `path` (creating it unless `reader`) and sets the connection's pragmas; on failure
 * returns a negative error with a sentence in `err` and leaves nothing open. */
int store__conn_open(struct conn *c, const char *path, uint32_t busy_timeout_ms, bool reader,
		     char *err, size_t errlen);

/* Finalizes the cached statements and closes the connection; accepts a closed one. */
void store__conn_close(struct conn *c);

/* Runs SQL text without results (pragmas, BEGIN/COMMIT, migrations). Returns 0 or an error. */
int store__conn_exec(struct conn *c, const char *sql);

/* Takes a reader connection from the pool, waiting for one to be free; never fails. */
struct conn *store__reader_acquire(struct sqlite_store *s);

/* Gives a connection from store__reader_acquire back to the pool. */
void store__reader_release(struct sqlite_store *s, struct conn *c);

/* Takes the write lock and opens a write transaction (BEGIN IMMEDIATE) on the writer, which
 * it returns in *c. On failure the lock is released again and a negative error returned. */
int store__write_begin(struct sqlite_store *s, struct conn **c);

/* store__write_begin without foreign-key enforcement for that transaction (store__write_end
 * turns it on again): for deletes whose references the caller checked itself where SQLite
 * would scan a table without an index per row (stacks: sqlite_retention.c). */
int store__write_begin_unchecked(struct sqlite_store *s, struct conn **c);

/*
 * Ends a transaction of store__write_begin: commits it when `rc` is 0 and `commit` is true,
 * otherwise (or when the commit fails) rolls it back; releases the write lock. Returns `rc`,
 * or the commit's error.
 */
int store__write_end(struct sqlite_store *s, struct conn *c, int rc, bool commit);

/* Takes a reader and opens a read transaction on it (one snapshot for several queries). On
 * failure the reader is released again and a negative error returned. */
int store__read_begin(struct sqlite_store *s, struct conn **c);

/* Ends a transaction of store__read_begin and releases the reader. Returns `rc`. */
int store__read_end(struct sqlite_store *s, struct conn *c, int rc);

/* Sets the writer's page limit for a database size cap (0: none); the caller holds the write
 * lock or has the store to itself. Returns 0 or an error. */
int store__size_limit_apply(struct sqlite_store *s, uint64_t max_bytes);

/* ---- the query helper (sqlite_query.c) ---------------------------------------------------- */

/* Maps an SQLite result code to the store's negative errors (store.h); 0 for OK/ROW/DONE. */
int store__errno(int sqlite_rc);

enum store__arg_kind {
	STORE__ARG_SKIP,  /* leave the parameter unbound (NULL; the text may not name it) */
	STORE__ARG_NULL,
	STORE__ARG_INT,
	STORE__ARG_REAL,
	STORE__ARG_TEXT,  /* NUL-terminated; a NULL pointer binds NULL */
	STORE__ARG_BLOB,  /* a NULL pointer binds NULL */
};

/* One parameter; pointers are borrowed until the query returns (bound SQLITE_STATIC). */
struct store__arg {
	enum store__arg_kind kind;
	int len; /* blob bytes */
	union {
		sqlite3_int64 i;
		double d;
		const void *p;
	} v;
};

#define STORE__SKIP ((struct store__arg){ .kind = STORE__ARG_SKIP })
#define STORE__NULL ((struct store__arg){ .kind = STORE__ARG_NULL })
#define STORE__INT(x) ((struct store__arg){ .kind = STORE__ARG_INT, .v.i = (sqlite3_int64)(x) })
#define STORE__REAL(x) ((struct store__arg){ .kind = STORE__ARG_REAL, .v.d = (x) })
#define STORE__TEXT(s) ((struct store__arg){ .kind = STORE__ARG_TEXT, .v.p = (s) })
#define STORE__BLOB(ptr, n) ((struct store__arg){ .kind = STORE__ARG_BLOB, .len = (int)(n), .v.p = (ptr) })
/* The parameter array of a query, ?1 first: .args = STORE__ARGS(STORE__INT(id), ...). */
#define STORE__ARGS(...)                                                                   \
	(const struct store__arg[]){ __VA_ARGS__ },                                         \
		.nargs = sizeof((const struct store__arg[]){ __VA_ARGS__ }) / sizeof(struct store__arg)

/* The columns of process_identities (alias i, LEFT JOINed) that store__identity_read reads. */
#define STORE__IDENTITY_COLUMNS                                                                \
	"i.process, i.runtime, i.container_id, i.pod_uid, i.namespace, i.pod_name,"          \
	" i.container_name, i.slurm_job, i.slurm_step, i.unit"
/* Reads STORE__IDENTITY_COLUMNS from column `col` on (sqlite_read_nodes.c). */
struct store_identity;
void store__identity_read(sqlite3_stmt *st, int col, struct store_identity *id);

/* Called per result row; 0 continues, anything else stops the query, which returns it. */
typedef int (*store__row_fn)(void *ctx, sqlite3_stmt *st);

/* One statement run. */
struct store__query {
	/* Statement text. Unless `once`, it must be static (a literal or static array): it is
	 * prepared once per connection (SQLITE_PREPARE_PERSISTENT) and cached by its address. */
	const char *sql;
	bool once;                     /* text built at run time: prepare, run, finalize */
	const struct store__arg *args; /* parameters ?1 .. ?nargs */
	size_t nargs;
	store__row_fn row;             /* per result row; NULL: a row is an error (-EPROTO) */
	void *ctx;                     /* passed to `row` */
	uint32_t max_rows;             /* 0: every row; else stop after that many ... */
	bool *truncated;               /* ... and set this when a further row exists */
	uint64_t *rows;                /* when set: the rows passed to `row` */
};

/*
 * Runs a query on connection `c` (a pooled reader, or the writer inside a transaction):
 * prepares (or takes the cached statement), binds, steps calling q->row per row, and resets
 * or finalizes the statement on every path. Returns 0, what q->row returned to stop, or a
 * negative error.
 */
int store__query(struct conn *c, const struct store__query *q);

/* store__query on a pooled reader connection. */
int store__read(struct sqlite_store *s, const struct store__query *q);

/* store__query on the writer under the write lock, as one autocommit statement. */
int store__write(struct sqlite_store *s, const struct store__query *q);

/* NUL-terminates SQL text built in `sql` for a `once` query; returns 0 or the buffer's error. */
int store__sql_end(struct byte_buf *sql);

/* ---- values ------------------------------------------------------------------------------- */

/* Same bits, signed: how unsigned 64-bit wire values are stored. */
static inline sqlite3_int64 store__i64(uint64_t v)
{
	sqlite3_int64 r;

	memcpy(&r, &v, sizeof(r));
	return r;
}

static inline uint64_t store__u64(sqlite3_int64 v)
{
	uint64_t r;

	memcpy(&r, &v, sizeof(r));
	return r;
}

/* Counts are unsigned on the wire; the database keeps them as non-negative signed values. */
static inline sqlite3_int64 store__clamp(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

/* A text column, "" for NULL; valid until the next step. */
static inline const char *store__text(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);

	return t ? (const char *)t : "";
}

static inline void store__text_copy(sqlite3_stmt *st, int i, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s", store__text(st, i));
}

/* Row callback for a single integer column 0 into *(sqlite3_int64 *)ctx. */
int store__row_i64(void *ctx, sqlite3_stmt *st);

/* ---- schema (sqlite_schema.c) ------------------------------------------------------------- */

/* Brings the schema of the writer's database to the newest version, one transaction per
 * migration; on failure a negative error with a sentence in `err`. */
int store__schema_migrate(struct conn *c, const char *path, char *err, size_t errlen);

/* The newest schema version this build knows. */
int store__schema_version(void);

/* ---- rows shared by readers (sqlite_read_gpu.c) ------------------------------------------- */

/* Columns 0-3 of every per-process job row query (GPU and OS): who it belongs to. */
#define STORE__OWNER_COLUMNS "coalesce(j.rank, -1), p.tgid, p.start_time_ns, n.hostname"
#define STORE__OWNER_JOIN(t)                                                               \
	" JOIN processes p ON p.id = " t ".process JOIN nodes n ON n.id = p.node"              \
	" JOIN job_ranks j ON j.process = " t ".process"                                      \
	" WHERE j.job = ?1 AND (?2 IS NULL OR j.rank = ?2) AND " t ".time_ms BETWEEN ?3 AND ?4"
#define STORE__OWNER_ORDER "j.rank < 0, j.rank, p.tgid, p.start_time_ns"

/* The owner from columns 0-3 (STORE__OWNER_COLUMNS). */
struct store_gpu_owner store__owner(sqlite3_stmt *st);

/* Runs one static query of a job's rows (?1 job, ?2 rank, ?3..?4 range, ?5 limit) on `c`,
 * calling `row` with `v` per row, at most max_rows rows (*truncated when there were more). */
int store__job_rows(struct conn *c, const char *sql, const struct store_gpu_filter *f,
		    uint32_t max_rows, store__row_fn row, const void *v, bool *truncated);

/* ---- writers of a batch (sqlite_write_*.c) ------------------------------------------------ */

/* The ids a batch's rows refer to, in the store (indexes as on the wire). */
struct store__batch_ids {
	sqlite3_int64 node;
	const sqlite3_int64 *processes;
	const sqlite3_int64 *stacks;
};

/* Job ranks, communicators, NCCL calls, launches, GPU kernels, NCCL profiles and links of a
 * batch, inside the batch's transaction (sqlite_write_gpu.c). Returns 0 or an error. */
int store__batch_write_gpu(struct conn *c, const struct sysom_batch *b,
			   const struct store__batch_ids *ids, struct store_put_result *r);

/* The OS rows of a batch, inside the batch's transaction (sqlite_write_os.c). */
/* Tests: caps the instances store__sqlite_collectives_list reads per slice (0: no cap). */
void store__sqlite_collectives_slice_set(size_t instances);
/* Schema 13's step: moves the rows of nccl_calls into nccl_call_chunks and drops the table. */
int store__nccl_calls_to_chunks(struct conn *c);
int store__batch_write_os(struct conn *c, const struct sysom_batch *b,
			  const struct store__batch_ids *ids, struct store_put_result *r);

/* A u64 array as a little-endian blob into `buf` (8 * n bytes, n <= 16) and from one. */
void store__u64_blob(uint8_t *buf, const uint64_t *v, size_t n);
void store__column_u64_blob(sqlite3_stmt *st, int col, uint64_t *v, size_t n);

/* ---- the vtable entries by file; semantics as documented in store.h ---------------------- */

/* sqlite_write_batch.c */
int store__sqlite_batch_put(struct store *s, const struct sysom_batch *b, uint64_t content_hash,
			    int64_t received_ns, struct store_put_result *res);
int store__sqlite_batch_find(struct store *s, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
			     uint64_t epoch, uint64_t sequence, struct store_batch_record *out);
/* sqlite_ksyms.c */
int store__sqlite_ksyms_put(struct store *s, const uint8_t *build_id, size_t build_id_len,
			    const struct store_ksym *syms, size_t count, int64_t uploaded_ns,
			    bool *created);
int store__sqlite_ksyms_count(struct store *s, const uint8_t *build_id, size_t build_id_len,
			      uint64_t *count);
int store__sqlite_ksym_range_get(struct store *s, const uint8_t *build_id, size_t build_id_len,
				 uint64_t offset, struct store_ksym_range *out);
int store__sqlite_ksyms_usage_get(struct store *s, struct store_ksyms_usage *out);
/* Marks the kernel symbol tables of the batch's kernel and module objects used at `used_ns`
 * (inside the batch's write transaction). 0 or a negative error. */
int store__ksyms_touch(struct conn *c, const struct sysom_batch *b, int64_t used_ns);
/* sqlite_read_profiles.c */
int store__sqlite_object_get(struct store *s, int64_t id, struct store_object *out);
int store__sqlite_stack_get(struct store *s, int64_t id, struct store_stack **out);
int store__sqlite_processes_list(struct store *s, const struct store_sample_filter *f,
				 uint32_t limit, store_process_fn fn, void *arg);
int store__sqlite_stacks_aggregate(struct store *s, const struct store_sample_filter *f,
				   uint32_t limit, store_stack_count_fn fn, void *arg,
				   uint64_t *total);
int store__sqlite_launches_aggregate(struct store *s, const struct store_sample_filter *f,
				     uint32_t limit, store_launch_count_fn fn, void *arg,
				     uint64_t *total);
int store__sqlite_offcpu_aggregate(struct store *s, const struct store_sample_filter *f,
				   uint32_t limit, store_stack_count_fn fn, void *arg,
				   uint64_t *total);
int store__sqlite_wall_aggregate(struct store *s, const struct store_sample_filter *f,
				 uint32_t limit, store_stack_count_fn fn, void *arg,
				 uint64_t *total);
int store__sqlite_gpu_time_aggregate(struct store *s, const struct store_sample_filter *f,
				     uint32_t limit, store_gpu_time_fn fn, void *arg,
				     uint64_t *total);
/* sqlite_read_nodes.c */
int store__sqlite_nodes_list(struct store *s, store_node_fn fn, void *arg);
int store__sqlite_counters_list(struct store *s, store_counter_fn fn, void *arg);
int store__sqlite_jobs_list(struct store *s, uint32_t limit, store_job_fn fn, void *arg);
int store__sqlite_jobs_list_identity(struct store *s, const struct store_sample_filter *f,
				     uint32_t limit, store_job_fn fn, void *arg);
int store__sqlite_job_ranks_list(struct store *s, const char *job, uint32_t limit,
				 store_job_rank_fn fn, void *arg);
int store__sqlite_job_communicators_list(struct store *s, const char *job, uint32_t limit,
					 store_job_communicator_fn fn, void *arg);
/* sqlite_read_gpu.c */
int store__sqlite_gpu_health_list(struct store *s, const char *node, int64_t from_ms,
				  int64_t to_ms, uint32_t limit, store_gpu_health_fn fn, void *arg);
/* sqlite_read_collectives.c */
int store__sqlite_collectives_list(struct store *s, const struct store_collective_filter *f,
				   uint32_t max_instances, store_collective_fn fn, void *arg);
/* sqlite_read_gpu.c */
int store__sqlite_job_gpu(struct store *s, const struct store_gpu_filter *f, uint32_t max_rows,
			  const struct store_gpu_visitor *v, bool *truncated);
/* sqlite_read_os.c */
int store__sqlite_host_signals(struct store *s, const struct store_host_filter *f,
				uint32_t max_rows, store_host_signal_fn fn, void *arg, bool *truncated);
int store__sqlite_job_os(struct store *s, const struct store_os_filter *f, uint32_t max_rows,
			 const struct store_os_visitor *v, bool *truncated);
/* sqlite_incidents.c */
int store__sqlite_diagnosis_upsert(struct store *s, const struct store_diagnosis *d, int64_t *id,
				   bool *opened);
int store__sqlite_diagnosis_resolve(struct store *s, int64_t id, int64_t now_ms);
int store__sqlite_diagnoses_list(struct store *s, const struct store_diagnosis_filter *f,
				 uint32_t limit, store_diagnosis_fn fn, void *arg);
int store__sqlite_job_settings_get(struct store *s, const char *job, char **json);
int store__sqlite_job_settings_put(struct store *s, const char *job, const char *json,
				   int64_t now_ms);
int store__sqlite_baseline_put(struct store *s, const struct store_baseline *b);
int store__sqlite_baseline_get(struct store *s, const char *job,
			       int (*fn)(void *arg, const struct store_baseline *b), void *arg);

/* ---- retention (sqlite_retention.c) ------------------------------------------------------- */

/* Raw rows before before_ms, rollup rows before rollup_before_ms (<= 0: none). */
int store__sqlite_retention(struct store *base, int64_t before_ms, int64_t rollup_before_ms,
			    struct store_retention_stats *st);
/* NCCL instance rollups (sqlite_nccl_rollup.c; the ops of store_impl.h). */
int store__sqlite_nccl_rollup_state(struct store *base, int64_t *watermark_ns,
				    int64_t *max_span_ns);
int store__sqlite_nccl_rollup_put(struct store *base,
				  const struct store__nccl_instances *rows, size_t n);
int store__sqlite_nccl_rollup_watermark_set(struct store *base, int64_t watermark_ns);
int store__sqlite_nccl_rollup_list(struct store *base, const struct store__nccl_rollup_query *q,
				   store__nccl_instances_fn fn, void *arg);
int store__sqlite_nccl_rollup_process(struct store *base, int64_t process,
				      struct store__nccl_process *out);
int store__sqlite_retention_apply(struct store *base, int64_t before_ms,
				  int64_t rollup_before_ms, uint32_t *dropped);

#endif
