/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the ClickHouse backend (clickhouse_*.c): HTTP client, answers, id caches. */
#ifndef SYSOM_SERVER_STORE_CLICKHOUSE_INTERNAL_H
#define SYSOM_SERVER_STORE_CLICKHOUSE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "server/store/store_impl.h"

/* The newest schema this build knows (clickhouse_schema.c). */
#define CH_SCHEMA_VERSION 17

/*
 * The first and last millisecond a batch's rows can be timed, from its `batches` row: the
 * writer times a row window_start_ns / 1e6 + its offset, which wire_decode.c bounds by the
 * window's length; windows compare as the unsigned wire values they were.
 */
#define CH_WINDOW_LO_MS "intDiv(toUInt64(window_start_ns), 1000000)"
#define CH_WINDOW_HI_MS "(intDiv(toUInt64(window_end_ns), 1000000) + 1)"
/* The (span, start) of each slot of `span` ms that [CH_WINDOW_LO_MS, CH_WINDOW_HI_MS] touches. */
#define CH_WINDOW_SLOTS(span)                                                                 \
	"arrayMap(i -> (toInt64(" span "), toInt64((intDiv(" CH_WINDOW_LO_MS ", " span ") + i) * " \
	span ")), range(toUInt64(intDiv(" CH_WINDOW_HI_MS ", " span ") - intDiv("               \
	CH_WINDOW_LO_MS ", " span ") + 1)))"

/* The HTTP timeout while migrating (a backfill reads every stored row once), at least. */
#define CH_MIGRATION_TIMEOUT_MS (3600L * 1000L)
/* Largest answer the store reads from ClickHouse (bigger: -E2BIG, nothing half-used). */
#define CH_MAX_ANSWER (256u << 20)
/* Longest statement the store sends in a request body (ClickHouse's max_query_size for it). */
#define CH_MAX_QUERY (16u << 20)
/* Most fields a row of an answer may have. */
#define CH_MAX_FIELDS 64
/* Idle HTTP handles kept for reuse (keep-alive connections). */
#define CH_HANDLES 16
/* Locks serializing the duplicate check and write of one batch identity. */
#define CH_STRIPES 64
/* Direct-mapped caches: content hash -> resolved id (objects, stacks), and stacks read. */
#define CH_ID_CACHE (1u << 16)
#define CH_STACK_CACHE (1u << 16)

struct ch_id_slot {
	uint64_t h0, h1; /* the content's two hashes; h0 == 0: empty */
	int64_t id;
	uint16_t day;    /* stacks: a day (days since 1970) stack_days holds it for; objects: 0 */
};

struct ch_stack_slot {
	int64_t id;               /* 0: empty */
	struct store_stack *stk;  /* owned */
};

/* ---- groups (clickhouse_group.c) ------------------------------------------------------------ */

/* Most tables one batch writes rows to (the writers name fewer). */
#define CH_GROUP_TABLES 32
/* Most bytes of rows one group insert takes (a batch bigger than this goes alone). */
#define CH_GROUP_MAX_BYTES (32u << 20)
/* Most batch identities one duplicate check looks up. */
#define CH_GROUP_MAX_FINDS 256
/* Groups of one kind running at the same time. */
#define CH_GROUP_RUNNERS 2

/* One table's RowBinary rows of a batch. */
struct ch_table_rows {
	const char *table; /* a name with static storage (the writers' literals) */
	struct byte_buf rows;
};

/* The rows a batch writes, by table, until its group inserts them. */
struct ch_batch_rows {
	unsigned count;
	size_t bytes;
	struct ch_table_rows tables[CH_GROUP_TABLES];
};

/* One caller's part of a group (on the caller's stack while it waits). */
struct ch_group_entry {
	void *arg;      /* what the group's run reads (and writes its answer to) */
	size_t bytes;   /* its size against the group's byte limit */
	struct ch_group_entry *next;
	int rc;         /* the group's result */
	bool done;
};

struct ch_store;
/* Runs one group: the entries from `first` (a list ending in NULL). Its result is every
 * entry's. */
typedef int (*ch_group_run_fn)(struct ch_store *s, struct ch_group_entry *first);

/* Callers whose statements run as one (leader/follower; clickhouse_group.c). */
struct ch_group {
	pthread_mutex_t lock;
	pthread_cond_t done;                 /* a group ran */
	struct ch_group_entry *head, **tail; /* waiting, oldest first */
	unsigned running;                    /* groups running */
	ch_group_run_fn run;
	uint32_t max_entries;
	size_t max_bytes;
	uint64_t groups, entries;            /* run so far (failed ones included) */
};

struct ch_store {
	struct store base;
	char *url;        /* http://host:port/ (no query) */
	char *database;
	char *user, *password; /* NULL: none */
	long timeout_ms;
	int schema_version;
	pthread_mutex_t lock; /* handles and caches */
	void *handles[CH_HANDLES];
	unsigned nhandles;
	struct ch_id_slot *ids;       /* CH_ID_CACHE */
	struct ch_stack_slot *stacks; /* CH_STACK_CACHE */
	pthread_mutex_t stripes[CH_STRIPES];
	struct ch_group inserts; /* batches' rows (clickhouse_group.c) */
	struct ch_group finds;   /* duplicate checks (clickhouse_write.c) */
};

static inline struct ch_store *ch__store(struct store *s)
{
	return (struct ch_store *)s;
}

/* ---- HTTP (clickhouse_http.c) --------------------------------------------------------------- */

/*
 * Runs one statement. Without `data` the statement is the POST body; with `data` (an INSERT
 * ... FORMAT RowBinary) the statement goes in the URL and `data` (len bytes) is the body. The
 * answer (at most CH_MAX_ANSWER bytes) goes to `out` when not NULL (cleared first, NUL added
 * but not counted). Errors: -EBUSY (ClickHouse unreachable, too slow, or refusing load),
 * -ENOSPC, -ENOMEM, -EACCES (credentials), -E2BIG (answer too large), -EIO (any other error
 * ClickHouse reported; logged with its text).
 */
int ch__exec(struct ch_store *s, const char *sql, const void *data, size_t len,
	     struct byte_buf *out);

/* ch__exec with its own HTTP timeout instead of the store's (a long build or backfill). */
int ch__exec_timeout(struct ch_store *s, const char *sql, const void *data, size_t len,
		     struct byte_buf *out, long timeout_ms);

/* ch__exec with a statement from a format (built in a buffer of its own). */
int ch__execf(struct ch_store *s, struct byte_buf *out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Maps a ClickHouse exception code to the store's errors. */
int ch__code_errno(long code);

/* Appends `text` as a quoted SQL string literal ('...' with \\ and \' escaped). */
void ch__quote(struct byte_buf *sql, const char *text);

/*
 * Moves `rows` (emptied; nothing when it is empty) into the batch's rows of `table`. 0, the
 * buffer's error, -ENOMEM, or -E2BIG past CH_GROUP_TABLES tables.
 */
int ch__rows_take(struct ch_batch_rows *out, const char *table, struct byte_buf *rows);
void ch__batch_rows_free(struct ch_batch_rows *r);
void ch__group_init(struct ch_group *g, ch_group_run_fn run, uint32_t max_entries,
		    size_t max_bytes);
void ch__group_destroy(struct ch_group *g);
/*
 * Queues `me` in g and waits until a group holding it has run: the caller runs the group
 * itself when fewer than CH_GROUP_RUNNERS are running (taking the queue's head up to the
 * limits), else waits for one to end. Nothing waits on a timer: a group is what queued while
 * the previous ones ran. Returns the group's result.
 */
int ch__group_join(struct ch_store *s, struct ch_group *g, struct ch_group_entry *me);
/* The inserts' run (ch_batch_rows entries). */
int ch__insert_group_run(struct ch_store *s, struct ch_group_entry *first);
/* The duplicate checks' run (clickhouse_write.c). */
int ch__find_group_run(struct ch_store *s, struct ch_group_entry *first);
/*
 * Inserts a batch's rows with the rows of the batches queued meanwhile: one INSERT per table,
 * the `batches` rows (which commit each batch) after all others. Waits until its group is
 * inserted; returns the group's result (0, or the first error of ch__exec: the whole group
 * failed and none of its batches may be acknowledged).
 */
int ch__group_insert(struct ch_store *s, struct ch_batch_rows *rows);
int ch__insert_groups_get(struct store *base, struct store_insert_groups *out);

/* ---- answers: TabSeparated (clickhouse_tsv.c, fuzzed by tests/fuzz/fuzz_clickhouse_tsv.c) -- */

struct ch_tsv {
	char *p, *end; /* the unread part of the answer (modified in place) */
	uint64_t rows; /* rows read */
};

/* Starts reading an answer of `len` bytes at `data` (which the reader unescapes in place). */
void ch_tsv_init(struct ch_tsv *t, char *data, size_t len);

/*
 * Reads the next row into fields[0..nfields-1] (NUL-terminated, unescaped; \N reads as NULL
 * pointer). Returns 1 with a row, 0 at the end, -EPROTO when the row does not have exactly
 * `nfields` fields (at most CH_MAX_FIELDS) or has a bad escape.
 */
int ch_tsv_row(struct ch_tsv *t, char **fields, unsigned nfields);

/* Skips an empty line (what separates rows from the WITH TOTALS row); false when none. */
bool ch_tsv_blank(struct ch_tsv *t);

/* Field parsers: 0 or -EPROTO (not a number of that type, or NULL). */
int ch_tsv_u64(const char *f, uint64_t *out);
int ch_tsv_u32(const char *f, uint32_t *out);
int ch_tsv_i64(const char *f, int64_t *out);
/* Hex text (even length, at most `max` bytes decoded) into out; *len gets the byte count. */
int ch_tsv_hex(const char *f, uint8_t *out, size_t max, size_t *len);

/* ---- RowBinary (clickhouse_write.c) --------------------------------------------------------- */

/* Runs `INSERT INTO table FORMAT RowBinary` with `rows` (nothing when empty). */
int ch__insert_rows(struct ch_store *s, const char *table, const struct byte_buf *rows);
void ch__rb_string(struct byte_buf *b, const void *data, size_t len);
void ch__rb_str(struct byte_buf *b, const char *text);
void ch__rb_varint(struct byte_buf *b, uint64_t v);
/* A Date: days since the Unix epoch of a time in ns. */
void ch__rb_date_ns(struct byte_buf *b, int64_t ns);

/* ---- backend entry points ------------------------------------------------------------------- */

int ch__schema_apply(struct ch_store *s, char *err, size_t errlen);
int ch__batch_put(struct store *base, const struct sysom_batch *b, uint64_t content_hash,
		  int64_t received_ns, struct store_put_result *res);
int ch__batch_find(struct store *base, const uint8_t node_id[SYSOM_NODE_ID_SIZE],
		   uint64_t epoch, uint64_t sequence, struct store_batch_record *out);
int ch__object_get(struct store *base, int64_t id, struct store_object *out);
int ch__stack_get(struct store *base, int64_t id, struct store_stack **out);
int ch__nodes_list(struct store *base, store_node_fn fn, void *arg);
int ch__processes_list(struct store *base, const struct store_sample_filter *f, uint32_t limit,
		       store_process_fn fn, void *arg);
int ch__stacks_aggregate(struct store *base, const struct store_sample_filter *f, uint32_t limit,
			 store_stack_count_fn fn, void *arg, uint64_t *total);
int ch__counters_list(struct store *base, store_counter_fn fn, void *arg);
int ch__ksyms_put(struct store *base, const uint8_t *build_id, size_t build_id_len,
		  const struct store_ksym *syms, size_t count, int64_t uploaded_ns, bool *created);
int ch__ksyms_count(struct store *base, const uint8_t *build_id, size_t build_id_len,
		    uint64_t *count);
int ch__ksym_range_get(struct store *base, const uint8_t *build_id, size_t build_id_len,
		       uint64_t offset, struct store_ksym_range *out);
int ch__ksyms_usage_get(struct store *base, struct store_ksyms_usage *out);

/* ---- training jobs (clickhouse_*_collectives.c) ------------------------------------------- */

/* Migration 2: job ranks, communicators, NCCL calls and their spans. */
extern const char *const ch__migration_collectives[];

/* Writes the job rank, communicator and NCCL call rows of a batch under `attempt` (process
 * keys: the batch's processes in order). Counts go to r. */
int ch__collectives_write(struct ch_batch_rows *out, const struct sysom_batch *b,
			  const char *node_hex, const uint64_t *process_keys, int64_t received_ns,
			  uint64_t attempt, struct store_put_result *r);

/* Appends a subquery of the process keys whose current job is `job` (and, with has_rank, whose
 * current rank is `rank`), as SQLite's "SELECT process FROM job_ranks WHERE job = ?". */
void ch__job_processes_sql(struct byte_buf *q, const char *job, bool has_rank, int32_t rank);

/* Appends the subquery of each process's merged job rank (columns process, j (job), r (rank),
 * node (node_id), pid (tgid), st (start time), ...) for the processes whose current job is
 * `job` (NULL: every process). */
void ch__job_ranks_sql(struct byte_buf *q, const char *job);

int ch__jobs_list(struct store *base, uint32_t limit, store_job_fn fn, void *arg);
int ch__jobs_list_identity(struct store *base, const struct store_sample_filter *f,
			   uint32_t limit, store_job_fn fn, void *arg);
int ch__job_ranks_list(struct store *base, const char *job, uint32_t limit, store_job_rank_fn fn,
		       void *arg);
int ch__job_communicators_list(struct store *base, const char *job, uint32_t limit,
			       store_job_communicator_fn fn, void *arg);
int ch__collectives_list(struct store *base, const struct store_collective_filter *f,
			 uint32_t max_instances, store_collective_fn fn, void *arg);

/* ---- GPU, OS and off-CPU rows (clickhouse_write_gpu_os.c, clickhouse_read_gpu_os.c) ------- */

/* Migration 3: the tables of those rows (NULL-terminated statements). */
extern const char *const ch__migration_gpu_os[];

/* What the writer of those rows needs of a batch being stored. */
struct ch_gpu_os_put {
	struct ch_store *s;
	struct ch_batch_rows *out; /* the batch's rows, for the group insert */
	const struct sysom_batch *b;
	const char *node_hex;
	uint64_t attempt;
	const uint64_t *processes; /* process keys, per batch process */
	const int64_t *stacks;     /* stack ids, per batch stack */
};

/* Queues the batch's launch, GPU timing, NCCL profile/link, OS and off-CPU rows (before the
 * batch row) and fills their counts in *r. 0 or an error of ch__exec. */
int ch__batch_write_gpu_os(const struct ch_gpu_os_put *p, struct store_put_result *r);

/* Host signals (clickhouse_host.c): migration 5, the batch's rows (before the batch row, as
 * the others), and store_host_signals_list. */
extern const char *const ch__migration_host[];
int ch__batch_write_host(const struct ch_gpu_os_put *p);
int ch__host_signals(struct store *base, const struct store_host_filter *f, uint32_t max_rows,
		     store_host_signal_fn fn, void *arg, bool *truncated);

/* GPU health (clickhouse_gpu_health.c): its migration, the batch's rows (before the batch
 * row), and store_gpu_health_list. */
extern const char *const ch__migration_gpu_health[];
int ch__batch_write_gpu_health(const struct ch_gpu_os_put *p);
int ch__gpu_health_list(struct store *base, const char *node, int64_t from_ms, int64_t to_ms,
			uint32_t limit, store_gpu_health_fn fn, void *arg);

int ch__launches_aggregate(struct store *base, const struct store_sample_filter *f,
			   uint32_t limit, store_launch_count_fn fn, void *arg, uint64_t *total);
int ch__gpu_time_aggregate(struct store *base, const struct store_sample_filter *f,
			   uint32_t limit, store_gpu_time_fn fn, void *arg, uint64_t *total);
int ch__offcpu_aggregate(struct store *base, const struct store_sample_filter *f,
			 uint32_t limit, store_stack_count_fn fn, void *arg, uint64_t *total);
int ch__wall_aggregate(struct store *base, const struct store_sample_filter *f, uint32_t limit,
		       store_stack_count_fn fn, void *arg, uint64_t *total);
int ch__job_gpu(struct store *base, const struct store_gpu_filter *f, uint32_t max_rows,
		const struct store_gpu_visitor *v, bool *truncated);
int ch__job_os(struct store *base, const struct store_os_filter *f, uint32_t max_rows,
	       const struct store_os_visitor *v, bool *truncated);

/* ---- shared by the readers (clickhouse_read.c) ---------------------------------------------- */

typedef int (*ch_row_fn)(void *ctx, char **f);

/* Runs `q` (FORMAT TabSeparated appended) and calls `row` per row of `nfields` fields; with
 * `totals` the answer ends with a WITH TOTALS row, copied into totals[] (free them). */
int ch__select_run(struct ch_store *s, struct byte_buf *q, unsigned nfields, ch_row_fn row,
		   void *ctx, char **totals);

/* Appends " AND ..." for the node, pid, comm, job (and rank) and identity of a sample filter
 * over a row set with columns process, node_id, tgid, comm (the process's) and, when
 * `thread_comm`, thread_comm. 0 or an error. */
int ch__filter_conds(struct byte_buf *q, const struct store_sample_filter *f, bool thread_comm);

/* Runs a stack aggregate `q` whose rows are comm, min(tgid), max(tgid), processes, user
 * stack, kernel stack, count, WITH TOTALS (the total: the count column's), then reads the
 * stacks the groups name into the stack cache. */
int ch__stack_counts(struct ch_store *s, struct byte_buf *q, store_stack_count_fn fn, void *arg,
		     uint64_t *total);

/* Reads stacks `ids` names (STORE_STACK_NONE skipped) into the stack cache, 4096 a query. */
void ch__stacks_prefetch(struct ch_store *s, const int64_t *ids, size_t n);

/* Processes' current comm (the latest batch's), a subquery to join USING process. */
#define CH_PROCESS_COMMS                                                                    \
	"(SELECT process, argMax(comm, received_ns) AS comm FROM processes WHERE " CH_COMMITTED \
	" GROUP BY process)"

/* ---- per-minute rollups (clickhouse_rollup.c; migration 10) -------------------------------- */

extern const char *const ch__migration_rollup[];
extern const char *const ch__migration_nccl_rollup[];
/* Migration 13: the summaries behind the all-time lists (clickhouse_schema_summaries.c). */
extern const char *const ch__migration_summaries[];
/* Migration 14: stacks partitioned by day, collected by retention (clickhouse_schema_stacks.c). */
extern const char *const ch__migration_stack_days[];
extern const char *const ch__migration_batch_minutes[];

/* NCCL instances kept past the raw calls (clickhouse_nccl_rollup.c; store_impl.h's ops). */
int ch__nccl_rollup_state(struct store *base, int64_t *watermark_ns, int64_t *max_span_ns);
int ch__nccl_rollup_put(struct store *base, const struct store__nccl_instances *rows, size_t n);
int ch__nccl_rollup_watermark_set(struct store *base, int64_t watermark_ns);
int ch__nccl_rollup_list(struct store *base, const struct store__nccl_rollup_query *q,
			 store__nccl_instances_fn fn, void *arg);
int ch__nccl_rollup_process(struct store *base, int64_t process,
			    struct store__nccl_process *out);
/* Inserts the batch's CPU sample and off-CPU rollup rows (before the batch row, as the
 * others). 0 or an error of ch__exec. */
int ch__batch_write_rollup(const struct ch_gpu_os_put *p);
/*
 * Appends " FROM <CPU samples (off-CPU rows with `offcpu`) of f's range, committed, joined with
 * their process's comm> WHERE <the range>", without f's other conditions (ch__filter_conds).
 * When part of the range is older than the rollup cutoff (store__rollup_cutoff_ms) the FROM is
 * raw rows from the cutoff UNION ALL rollup rows before it, with the columns node_id, process,
 * tgid, thread_comm ('' for rollup rows), user_stack, kernel_stack, count (blocked_ns) and
 * time_ms (rollup rows: their minute).
 * The committed attempts are those of the batches indexed under the range's minutes
 * (ch__committed_range_sql).
 */
void ch__range_rows_from(struct byte_buf *q, struct store *base,
			 const struct store_sample_filter *f, bool offcpu);
/* ch__range_rows_from from raw rows only, whatever the rollup cutoff (the readers other than
 * the flame graphs read raw rows only, as on SQLite). */
void ch__raw_rows_from(struct byte_buf *q, const struct store_sample_filter *f, bool offcpu);

/* ---- fleet slots (clickhouse_fleet_slots.c; migration 14) ----------------------------------- */

extern const char *const ch__migration_fleet_slots[];
/* Migration 15: process_names (clickhouse_schema_summaries.c). */
extern const char *const ch__migration_process_names[];
int ch__fleet_slots_run(struct store *base, int64_t now_ms, struct store_fleet_slots_pass *out);
/*
 * For a fleet-wide filter (no node, pid, comm, job or identity): when current slot summaries
 * cover part of f's range, appends " FROM (...)" with the columns comm, flo, fhi (tgid range),
 * fst (uniqHLL12 state of the processes), user_stack, kernel_stack and fv (samples, off-CPU
 * with `offcpu`: blocked ns), summaries and the rest's raw rows, and returns 1; else appends
 * nothing and returns 0. Negative: ClickHouse's error.
 */
int ch__fleet_slots_from(struct byte_buf *q, struct store *base,
			 const struct store_sample_filter *f, bool offcpu);

/* Mutable state and retention (clickhouse_state.c; migration 4). */
extern const char *const ch__migration_state[];
/* Schema 5: job_ranks role and rank_pid (clickhouse_schema_workers.c). */
extern const char *const ch__migration_workers[];

/* ---- process identities (clickhouse_schema_identity.c; migration 8) ------------------------ */

extern const char *const ch__migration_identity[];
extern const char *const ch__migration_gpu_device[];
extern const char *const ch__migration_replicas[];
int ch__replica_beat(struct store *base, const char *id, const char *url, int64_t started_ms,
		     uint64_t beat, bool departed);
int ch__replicas_list(struct store *base, uint32_t max_age_s, uint32_t limit,
		      store_replica_fn fn, void *arg);
/* Appends the subquery of each process's merged identity, SQLite's process_identities row:
 * columns process, i_known (1), i_runtime, i_container_id, i_pod_uid, i_namespace,
 * i_pod_name, i_container_name, i_slurm_job, i_slurm_step, i_unit. With `nodes` (a
 * parenthesized list or subquery of node ids): only those nodes' processes, from all their
 * committed batches (from_ms: CH_ALL_TIME), and with `job` only the processes that ever named
 * that job. Without `nodes`: every process, from the batches received since the day before
 * from_ms (CH_ALL_TIME: all). */
void ch__identities_merged_sql(struct byte_buf *q, const char *job, const char *nodes,
			       int64_t from_ms);
/* The identity columns of ch__identities_merged_sql in store_identity's order (10 fields). */
#define CH_IDENTITY_COLUMNS                                                                  \
	"i_known, i_runtime, i_container_id, i_pod_uid, i_namespace, i_pod_name,"          \
	" i_container_name, i_slurm_job, i_slurm_step, i_unit"
#define CH_IDENTITY_FIELDS 10
/* Appends "(SELECT process ...)": the processes whose identity matches the identity filters
 * of `f` (namespace, pod, container, unit, Slurm job), as SQLite's filter. */
void ch__identity_processes_sql(struct byte_buf *q, const struct store_sample_filter *f,
				 int64_t from_ms);
/* Reads CH_IDENTITY_COLUMNS (f[0..9]; borrowed) into *id: known false when i_known is 0 (a
 * process without a stored identity, read through a LEFT JOIN). 0 or -EPROTO. */
int ch__identity_read(char **f, struct store_identity *id);
/* Writes a batch's identity rows (process keys: the batch's processes in order). */
int ch__identities_write(struct ch_batch_rows *out, const struct sysom_batch *b,
			 const char *node_hex, const uint64_t *process_keys, int64_t received_ns,
			 uint64_t attempt);
int ch__diagnosis_upsert(struct store *base, const struct store_diagnosis *d, int64_t *id,
			 bool *opened);
int ch__diagnosis_resolve(struct store *base, int64_t id, int64_t now_ms);
int ch__diagnoses_list(struct store *base, const struct store_diagnosis_filter *f,
		       uint32_t limit, store_diagnosis_fn fn, void *arg);
int ch__job_settings_get(struct store *base, const char *job, char **json);
int ch__job_settings_put(struct store *base, const char *job, const char *json, int64_t now_ms);
int ch__baseline_put(struct store *base, const struct store_baseline *b);
int ch__baseline_get(struct store *base, const char *job,
		     int (*fn)(void *arg, const struct store_baseline *b), void *arg);
int ch__retention_apply(struct store *base, int64_t before_ms, int64_t rollup_before_ms,
			uint32_t *dropped);

/* The committed attempts: rows of other tables count only when their attempt is one of these
 * (the lowest attempt of each batch identity, so replicas agree on one copy). Every batch ever
 * stored is grouped: reads over a time range use ch__committed_since_sql instead. */
#define CH_COMMITTED "attempt IN (SELECT min(attempt) FROM batches GROUP BY node_id, epoch, sequence)"

/*
 * Reads over a time range [from, ...] need only the batches that can hold rows timed from
 * `from` on. A batch's rows are timed within its window (an NCCL call's entry before its
 * exit, which the window holds), and a batch is received (its `day`, server clock) after its
 * window ends: so every such batch was received on or after the day before from's day,
 * with a day to spare for agent clocks ahead of the server's and windows spanning midnight.
 * Bounding `batches.day` and `processes.day` (also receive days) below by that day keeps the
 * committed-attempt and name subqueries to the range's days (partition pruning) instead of
 * every batch of the retention period. CH_DAY_SIZE: "YYYY-MM-DD" and its NUL (days
 * are clamped to 1970-01-01 .. 2105-12-31, what 18.16 parses from text).
 */
#define CH_DAY_SIZE 11
/* Appends CH_COMMITTED over the batches received from the day before from_ms's day on. */
void ch__committed_since_sql(struct byte_buf *q, int64_t from_ms);
/* ch__committed_since_sql grouping only the batches whose window can hold rows timed in
 * [from_ms, to_ms]: those indexed under a minute of it (batch_minutes, schema 17; every copy
 * of a batch has its window), a key range of each day. */
void ch__committed_range_sql(struct byte_buf *q, int64_t from_ms, int64_t to_ms);
/* Appends "day >= <that day> AND " then ch__committed_since_sql: the committed rows of a
 * table whose day is the receive day (batches, processes) that can matter to the range. */
void ch__received_since_sql(struct byte_buf *q, int64_t from_ms);
/*
 * CH_COMMITTED over the batches of some nodes: ch__committed_nodes_begin, then the caller
 * appends a parenthesized list or subquery of node ids, then ch__committed_nodes_end, which
 * with from_ms != CH_ALL_TIME keeps only those received from the day before from_ms's. A job's
 * reads so group the job's nodes' batches (the primary key's prefix), not the fleet's, and
 * exactly: a process's rows are all on its node.
 */
#define CH_ALL_TIME INT64_MIN
void ch__committed_nodes_begin(struct byte_buf *q);
void ch__committed_nodes_end(struct byte_buf *q, int64_t from_ms);
/* "(SELECT node_id FROM job_ranks WHERE job = '<job>')": the nodes that ran a job. */
void ch__job_node_ids_sql(struct byte_buf *q, const char *job);
/* The committed attempts of the batches of the nodes that ran `job` (ch__job_node_ids_sql),
 * with from_ms != CH_ALL_TIME those received from the day before from_ms on. */
void ch__committed_job_sql(struct byte_buf *q, const char *job, int64_t from_ms);
/* Appends CH_PROCESS_COMMS over the process rows received from the day before from_ms's. */
void ch__process_comms_since_sql(struct byte_buf *q, int64_t from_ms);
/* Appends " AND day BETWEEN ... AND ..." for rows whose `day` is their own time's (samples,
 * offcpu, launches, os and host rows, rollups): the partitions of [from_ms, to_ms]. */
void ch__own_days_sql(struct byte_buf *q, int64_t from_ms, int64_t to_ms);

#endif
