/* SPDX-License-Identifier: Apache-2.0 */
/* Profile storage interface: one vtable per backend (SQLite now, ClickHouse later). */
#ifndef SYSOM_SERVER_STORE_STORE_H
#define SYSOM_SERVER_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"
#include "common/wire/wire.h"

/*
 * Errors every backend maps its failures to (the HTTP layer maps them to statuses):
 *   -ENOSPC  storage full (SQLite: SQLITE_FULL)           → 507, the agent retries later
 *   -EIO     storage I/O error (SQLite: SQLITE_IOERR; also a write transaction SQLite
 *            abandoned without saying why)                 → 507, the agent retries later
 *   -EBUSY   storage locked by someone else for too long   → 503, the agent retries
 *   -ENOENT  no such entry (lookups)
 *   -SYSOM_EVERSION  the database has a newer schema than this server knows (open)
 *   -SYSOM_ECORRUPT  the database is damaged or not a sysom database
 *   -ENOMEM, -EINVAL as usual
 * A failed write leaves nothing of itself behind.
 */

struct store;

/* Stack ids are never 0: 0 means "no stack" in sample rows and query results. */
#define STORE_STACK_NONE 0

struct store_sqlite_options {
	uint32_t read_connections; /* pooled reader connections (default 4) */
	uint32_t busy_timeout_ms;  /* wait this long for a lock before -EBUSY (default 5000) */
	uint64_t max_size;         /* database size cap in bytes, 0 = none (writes beyond: -ENOSPC) */
	/* Kernel symbols of all tables together, 0 = no limit; see store_ksyms_put. */
	uint64_t max_kernel_symbols;
	/* A kernel symbol table used this recently is never evicted (0: STORE_KSYMS_IN_USE_NS). */
	int64_t kernel_symbols_in_use_ns;
};

#define STORE_KSYMS_IN_USE_NS (24 * 3600 * 1000000000LL)

/*
 * Opens (creating when needed) `<data_dir>/sysom.db`, creating `data_dir` itself (mode 0750)
 * when it is missing, applies schema migrations in order and refuses a database whose schema
 * is newer than this build (-SYSOM_EVERSION). Takes an exclusive lock on the data directory so
 * that a second server cannot share it (-EBUSY). `opts` may be NULL for the defaults. On
 * failure returns a negative error and a sentence in `err`; on success writes *out, which the
 * caller releases with store_close.
 */
int store_sqlite_open(const char *data_dir, const struct store_sqlite_options *opts,
		      struct store **out, char *err, size_t errlen);

/* The ClickHouse backend (fleet store; docs/operations.md "ClickHouse"). */
struct store_clickhouse_options {
	const char *url;              /* http://HOST:PORT/?database=NAME */
	const char *credentials_file; /* first line USER:PASSWORD; NULL: ClickHouse's default user */
	uint32_t timeout_ms;          /* per statement (default 10000); beyond: -EBUSY */
	uint32_t group_max;           /* most batches per group insert and duplicate check (0: no
				       * count limit; clickhouse_group.c) */
};

/*
 * Connects to ClickHouse over HTTP, creates the database when missing and applies schema
 * migrations (refusing a newer schema with -SYSOM_EVERSION). Any number of servers may share
 * the database. Calls the backend does not implement yet return -ENOTSUP. ClickHouse
 * unreachable or too slow: -EBUSY (here and from every call). On failure returns a negative
 * error and a sentence in `err`; on success writes *out (store_close releases it).
 */
int store_clickhouse_open(const struct store_clickhouse_options *opts, struct store **out,
			  char *err, size_t errlen);

/* Closes the store and frees it; accepts NULL. No call may be in progress. */
void store_close(struct store *s);

/* The schema version of the open database (the newest this build knows after open). */
int store_schema_version(struct store *s);

/*
 * What the store holds under a batch identity (node id, epoch, sequence). The content hash is
 * XXH3-64 (seed 0) of the batch's plain wire bytes (after decompression), as ingest computes
 * it; batches stored before schema version 5 have none.
 */
struct store_batch_record {
	bool exists;           /* a batch with this identity is stored */
	bool hash_known;       /* it was stored with its content hash */
	uint64_t content_hash; /* that hash, when hash_known */
};

/* What store_batch_put did. */
struct store_put_result {
	bool duplicate;       /* a batch with the same (node, epoch, sequence) was already stored
				 with the same content hash, or with none (stored before schema 5) */
	bool conflict;        /* one was stored with a different content hash: nothing stored */
	struct store_batch_record existing; /* the stored one, when duplicate or conflict */
	uint64_t samples;     /* sum of sample counts stored (0 for a duplicate) */
	uint32_t sample_rows; /* sample rows stored */
	uint32_t new_stacks;  /* stacks not seen before in the store */
	uint32_t processes;   /* process rows inserted or refreshed */
	uint32_t job_ranks;     /* job rank rows inserted or refreshed */
	uint32_t communicators; /* communicator records applied (repeats update one row) */
	uint32_t nccl_calls;    /* NCCL call rows stored */
	uint32_t launch_rows;   /* launch rows stored */
	uint64_t launches;      /* sum of their launch counts */
	uint32_t gpu_kernel_rows, nccl_profile_rows, nccl_link_rows; /* GPU-side timing rows */
	uint32_t os_cpu_rows, os_irq_rows, os_thread_rows;           /* OS signal rows */
};

/*
 * Stores a decoded batch in one transaction: the node, the batch record, objects, processes,
 * content-addressed stacks, sample rows, the agent counters, job ranks, communicators, NCCL
 * calls, GPU launch rows and GPU-side timing rows, or nothing at all; the batch record keeps
 * `content_hash` (struct store_batch_record). A batch whose (node id, epoch, sequence) is
 * already stored changes nothing and reports duplicate (same or unknown hash) or conflict
 * (different hash). `received_ns` is the server's receive time (ns since the Unix epoch).
 * Writes *res on success. Returns 0 or a negative error (see the table above).
 */
int store_batch_put(struct store *s, const struct sysom_batch *b, uint64_t content_hash,
		    int64_t received_ns, struct store_put_result *res);

/* What is stored under batch identity (node id, epoch, sequence), in *out. 0 or -errno. */
int store_batch_find(struct store *s, const uint8_t node_id[SYSOM_NODE_ID_SIZE], uint64_t epoch,
		     uint64_t sequence, struct store_batch_record *out);

/* One kernel symbol: offset relative to the kernel's _text (or the module's base). */
struct store_ksym {
	uint64_t offset;
	char type;        /* kallsyms type letter */
	const char *name; /* borrowed */
};

/*
 * Stores the symbol table of kernel (or module) build ID `build_id`; `syms` must be sorted by
 * offset with unique offsets. An existing table for the build ID is left unchanged and *created
 * is false. Returns 0 or a negative error (nothing stored on failure).
 *
 * With max_kernel_symbols (struct store_sqlite_options), a new table that would take the total
 * beyond it first evicts whole tables not in use, least recently used first: a table is used
 * when it is stored (at `uploaded_ns`) and when a stored batch names its build ID as its kernel
 * or as a module (at the batch's receive time, to the minute), and in use while its last use is
 * less than kernel_symbols_in_use_ns before `uploaded_ns`. When evicting every table not in
 * use would not make room (or the table alone is larger than the limit) nothing is evicted or
 * stored and the call returns -SYSOM_ELIMIT; store_ksyms_usage_get says why.
 */
int store_ksyms_put(struct store *s, const uint8_t *build_id, size_t build_id_len,
		    const struct store_ksym *syms, size_t count, int64_t uploaded_ns, bool *created);

/* Number of symbols stored for the build ID: 0 and *count, or -ENOENT without a table. */
int store_ksyms_count(struct store *s, const uint8_t *build_id, size_t build_id_len,
		      uint64_t *count);

/* The symbols around an offset, for nearest-symbol resolution. */
struct store_ksym_range {
	bool has_floor;      /* a symbol starts at or below the offset */
	uint64_t floor;      /* its start */
	char *floor_name;    /* its name (owned; free with store_ksym_range_release) */
	bool has_next;       /* a symbol starts above the offset */
	uint64_t next;       /* the lowest such start */
};

/*
 * Finds the symbol at or below `offset` and the next symbol's start in the table of
 * `build_id`. Returns 0 and *out (release it), -ENOENT when there is no table, or -errno.
 */
int store_ksym_range_get(struct store *s, const uint8_t *build_id, size_t build_id_len,
			 uint64_t offset, struct store_ksym_range *out);
/* Frees what a range owns; accepts NULL. */
void store_ksym_range_release(struct store_ksym_range *r);

/* What the kernel symbol tables hold, the limit on them, and what it evicted. */
struct store_ksyms_usage {
	uint64_t tables;         /* tables stored */
	uint64_t rows;           /* their symbols */
	int64_t oldest_use_ns;   /* the last use of the least recently used table; 0: none */
	uint64_t max_rows;       /* max_kernel_symbols, 0 = none */
	int64_t in_use_ns;       /* kernel_symbols_in_use_ns */
	uint64_t evicted_tables; /* tables evicted by the limit since the store was opened */
	uint64_t evicted_rows;   /* their symbols */
};

/* Fills *out. Returns 0 or a negative error. */
int store_ksyms_usage_get(struct store *s, struct store_ksyms_usage *out);

/* A stored object (the thing a frame's offset is relative to). */
struct store_object {
	struct sysom_build_id id; /* kind: enum sysom_object_kind; len 0 for ANON and UNKNOWN */
	char *name;               /* representative name (owned) */
};

/* Reads object `id`: 0 and *out (release it), -ENOENT, or -errno. */
int store_object_get(struct store *s, int64_t id, struct store_object *out);
/* Frees what an object owns; accepts NULL. */
void store_object_release(struct store_object *o);

/* One frame of a stored stack: a store-wide object id and an offset inside the object. */
struct store_frame {
	int64_t object;
	uint64_t offset;
};

/* A stored stack. Frames are leaf first, as on the wire. */
struct store_stack {
	int64_t id;
	uint8_t kind;        /* enum sysom_stack_kind */
	uint8_t stop_reason; /* enum sysom_stack_stop */
	uint16_t nframes;
	struct store_frame frames[]; /* nframes entries */
};

/* Reads stack `id`: 0 and *out (free() it), -ENOENT, or -errno. */
int store_stack_get(struct store *s, int64_t id, struct store_stack **out);

/* A node as listed by store_nodes_list; strings are borrowed for the callback only. */
struct store_node {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1]; /* lower-case hex */
	const char *hostname, *kernel_release, *machine, *agent_version;
	char boot_id[33];
	uint32_t sample_hz, sample_rate_ppm, online_cpus;
	int64_t first_seen_ns, last_seen_ns; /* server receive times */
	uint64_t batches;
	uint64_t last_epoch, last_sequence;
};

/*
 * Callbacks return 0 to continue or a negative error to stop the listing with that error.
 * They run while the store holds one of its connections: they must not call the store.
 */
typedef int (*store_node_fn)(void *arg, const struct store_node *node);

/* Calls `fn` for every node, ordered by hostname then node id. Returns 0 or a negative error. */
int store_nodes_list(struct store *s, store_node_fn fn, void *arg);

/* Which samples a query covers. */
struct store_sample_filter {
	int64_t from_ms, to_ms; /* sample times (ms since the Unix epoch), both inclusive */
	const char *node;       /* node id hex or hostname; NULL: every node */
	bool has_pid;
	uint32_t pid;           /* process id (tgid) */
	const char *comm;       /* process comm or thread comm; NULL: any */
	const char *job;        /* only processes with this job id (job_ranks); NULL: any */
	bool has_rank;          /* with job: only the processes of this job rank */
	int32_t rank;
	/* Identity (wire 1.5 IDENTITIES, process_identities); NULL / false: any. */
	const char *pod_namespace; /* Kubernetes namespace */
	const char *pod;        /* pod name or pod UID */
	const char *container;  /* container id (full, or a prefix of at least 12 digits) or name */
	const char *unit;       /* systemd unit */
	bool has_slurm_job;
	uint64_t slurm_job;
};

/* Whether `f` filters by identity (namespace, pod, container, unit, Slurm job). */
bool store_filter_has_identity(const struct store_sample_filter *f);

/* Who a process belongs to (wire 1.5); known false (strings NULL) when no identity is stored
 * (an older agent, a process in no container, pod, Slurm job or unit, or a backend without
 * identities). Strings borrowed for the callback only; "" when unknown. */
struct store_identity {
	bool known;
	const char *runtime, *container_id, *pod_uid, *pod_namespace, *pod_name;
	const char *container_name, *slurm_step, *unit;
	uint64_t slurm_job; /* 0 none */
};

/* A process with its sample count over a range; strings borrowed for the callback only. */
struct store_process {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname;
	uint32_t pid, ppid, generation;
	uint64_t start_time_ns; /* since the node's boot */
	const char *comm, *exe, *cmdline;
	int64_t first_seen_ns, last_seen_ns; /* sample windows it appeared in */
	uint64_t samples;
	struct store_identity identity;
};

typedef int (*store_process_fn)(void *arg, const struct store_process *p);

/*
 * Calls `fn` for up to `limit` processes having samples that match `f` (pid and comm filters
 * apply too), by sample count descending. Returns 0 or a negative error.
 */
int store_processes_list(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			 store_process_fn fn, void *arg);

/* One group of samples: same process comm, user stack and kernel stack. */
struct store_stack_count {
	const char *comm;     /* process comm (borrowed for the callback only) */
	int64_t pid;          /* the tgid when one process contributed, else -1 */
	uint64_t processes;   /* distinct processes (node, tgid, start time, generation) */
	int64_t user_stack;   /* stack id or STORE_STACK_NONE */
	int64_t kernel_stack; /* stack id or STORE_STACK_NONE */
	uint64_t count;
};

typedef int (*store_stack_count_fn)(void *arg, const struct store_stack_count *row);

/*
 * Aggregates samples matching `f` by (process comm, user stack, kernel stack) and calls `fn`
 * for the `limit` largest groups, by count descending (ties in a stable order). *total gets
 * the sum over all matching samples, beyond the limit too. Returns 0 or a negative error.
 */
int store_stacks_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			   store_stack_count_fn fn, void *arg, uint64_t *total);

/*
 * Off-CPU time matching `f`, grouped like store_stacks_aggregate; counts are microseconds of
 * blocked time (rounded down per group), *total the sum of every group's count (beyond the
 * limit too). 0 or an error.
 */
int store_offcpu_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			   store_stack_count_fn fn, void *arg, uint64_t *total);

/*
 * Wall-clock time matching `f`, grouped like store_stacks_aggregate, in microseconds: CPU
 * samples weighted by their node's sampling period (1 / (Hz x sampling rate)) plus off-CPU
 * time. Meant for one thread group (a pid or a job rank). 0 or an error.
 */
int store_wall_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			 store_stack_count_fn fn, void *arg, uint64_t *total);

/* One group of GPU kernel launches: same process comm, launching user stack and kernel. */
struct store_launch_count {
	const char *comm;   /* process comm (borrowed for the callback only) */
	const char *kernel; /* kernel name, or "0x<function handle>" when unknown (borrowed) */
	bool named;         /* kernel is a name */
	int64_t pid;        /* the tgid when one process contributed, else -1 */
	uint64_t processes; /* distinct processes */
	int64_t user_stack; /* stack id or STORE_STACK_NONE */
	uint64_t count;     /* launches */
};

typedef int (*store_launch_count_fn)(void *arg, const struct store_launch_count *row);

/*
 * Aggregates launch rows matching `f` (times: the rows' window end in ms; `comm`: the process
 * comm) by (process comm, user stack, kernel) and calls `fn` for the `limit` largest groups by
 * count descending. *total gets the sum over every matching row. Returns 0 or an error.
 */
int store_launches_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			     store_launch_count_fn fn, void *arg, uint64_t *total);

/* A training job as seen in job_ranks (job ids that are not ""). */
struct store_job {
	const char *job;          /* borrowed for the callback only */
	int32_t world_size;       /* the largest reported, -1 unknown */
	uint32_t ranks;           /* distinct ranks >= 0 seen */
	uint32_t processes;       /* process incarnations */
	uint32_t nodes;
	int64_t first_seen_ns, last_seen_ns; /* batch windows */
};

typedef int (*store_job_fn)(void *arg, const struct store_job *j);

/* Calls `fn` for up to `limit` jobs, most recently seen first. Returns 0 or an error. */
int store_jobs_list(struct store *s, uint32_t limit, store_job_fn fn, void *arg);

/* As store_jobs_list, only the jobs with a process matching the identity filters of `f`
 * (namespace, pod, container, unit, Slurm job; its other fields are ignored); the jobs'
 * figures count all their processes. -ENOTSUP on a store without identities. */
int store_jobs_list_identity(struct store *s, const struct store_sample_filter *f,
			     uint32_t limit, store_job_fn fn, void *arg);

/* A process of a job; strings borrowed for the callback only. */
struct store_job_rank {
	int32_t rank, world_size, local_rank, local_world_size, group_rank; /* -1 unknown */
	uint8_t source;           /* enum sysom_job_source */
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname;
	uint32_t pid, generation;
	uint64_t start_time_ns;   /* since the node's boot */
	const char *comm, *job_id_source, *master, *groups;
	int64_t first_seen_ns, last_seen_ns;
	uint8_t role;             /* enum sysom_job_role: a worker carries its rank's numbers */
	uint32_t rank_pid;        /* a worker's rank process (pid on the same node); 0 for a rank */
	int32_t gpu_device;       /* the rank's GPU, NVML index on its node (wire 1.7); -1 unknown */
	struct store_identity identity;
};

typedef int (*store_job_rank_fn)(void *arg, const struct store_job_rank *r);

/*
 * Calls `fn` for up to `limit` processes of job `job`, by rank (unknown last), node id, pid.
 * Returns 0 (also when the job has none) or an error.
 */
int store_job_ranks_list(struct store *s, const char *job, uint32_t limit, store_job_rank_fn fn,
			 void *arg);

/* One GPU's health over one agent window (wire 1.6 GPU_HEALTH); unknown numbers are
 * SYSOM_GPU_UNKNOWN / SYSOM_GPU_UNKNOWN64 in `h` (its string fields are not used); strings
 * borrowed for the callback only. */
struct store_gpu_health {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname;
	int64_t window_start_ns, window_end_ns;
	const char *uuid, *pci_bus_id, *name;
	struct sysom_gpu_health h;
};

typedef int (*store_gpu_health_fn)(void *arg, const struct store_gpu_health *g);

/*
 * Calls `fn` for up to `limit` GPU windows of node `node` (node id hex or hostname; NULL:
 * every node) that end within [from_ms, to_ms], by node, device, then window end. Returns 0,
 * -ENOTSUP on a backend that does not store GPU health, or an error.
 */
int store_gpu_health_list(struct store *s, const char *node, int64_t from_ms, int64_t to_ms,
			  uint32_t limit, store_gpu_health_fn fn, void *arg);

/* A communicator as one process of a job sees it; strings borrowed for the callback only. */
struct store_job_communicator {
	uint64_t key, parent_key, comm_hash;
	int32_t rank, nranks;     /* in the communicator, -1 unknown */
	int32_t split_color, split_key; /* -1 none */
	uint32_t split_ordinal;   /* 0 none */
	uint8_t key_source;       /* enum sysom_comm_key_source */
	bool destroyed;
	int64_t created_ns;       /* 0 unknown */
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname;
	uint32_t pid;
	int32_t job_rank;         /* the process's rank in the job, -1 unknown */
	int64_t first_seen_ns, last_seen_ns;
};

typedef int (*store_job_communicator_fn)(void *arg, const struct store_job_communicator *c);

/*
 * Calls `fn` for up to `limit` (process, communicator) rows of job `job`, ordered by key, then
 * rank in the communicator (unknown last), node id, pid. Returns 0 or an error.
 */
int store_job_communicators_list(struct store *s, const char *job, uint32_t limit,
				 store_job_communicator_fn fn, void *arg);

/* Which collective instances a query covers. */
struct store_collective_filter {
	const char *job;          /* required */
	int64_t from_ns, to_ns;   /* entry times (ns since the Unix epoch), inclusive */
	bool has_comm;
	uint64_t comm;            /* communicator key */
	uint8_t op;               /* enum sysom_nccl_op (collective or point-to-point); 0: any */
	bool latest;              /* pick the last max_instances instances (still ascending) */
};

/* One rank's call in a collective instance; strings borrowed for the callback only. */
struct store_collective_call {
	uint64_t comm_key, seq;
	uint8_t op;
	int64_t first_entry_ns;   /* the instance's earliest entry (of all its calls) */
	int32_t nranks;           /* communicator size the job's processes reported, -1 unknown */
	int32_t rank;             /* the call's rank (else the process's rank in the comm), -1 */
	int64_t entry_ns, exit_ns;
	uint64_t count, bytes;
	int32_t peer, result;
	uint32_t pid, tid;
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname;
	int32_t job_rank;         /* the process's rank in the job, -1 unknown */
	int64_t process;          /* the store's id of the process, 0 unknown */
};

typedef int (*store_collective_fn)(void *arg, const struct store_collective_call *c);

/*
 * Matches the NCCL calls of job `f->job` across ranks by (communicator key, op, sequence):
 * picks the first `max_instances` instances (by earliest entry, then key, op, seq; the last
 * ones with f->latest, still visited in ascending order) having a
 * call of the job entered in [from, to], and calls `fn` for every call of those instances made
 * by the job's processes (also ones entered outside the range), grouped by instance and
 * ordered by rank. Calls without a communicator or of non-collective ops are left out.
 * Instances retention kept past the raw calls (store_retention_apply: those whose first
 * entry is before the last raw cutoff) are answered from their rollups, in the same order
 * and with the same fields, except tid (0: not kept); a range spanning both is one answer.
 * Returns 0 or an error.
 */
int store_collectives_list(struct store *s, const struct store_collective_filter *f,
			   uint32_t max_instances, store_collective_fn fn, void *arg);

/* GPU-side timing of a job's processes (wire 1.2), for GET /api/v1/jobs/{job}/gpu. */
struct store_gpu_filter {
	const char *job;          /* required */
	bool has_rank;
	int32_t rank;             /* only this job rank */
	int64_t from_ms, to_ms;   /* the rows' batch window end, inclusive */
};

/* Whose row: the process and its place in the job; strings borrowed for the callback only. */
struct store_gpu_owner {
	int32_t job_rank;         /* -1 unknown */
	uint32_t pid;
	uint64_t start_time_ns;   /* with pid: the process incarnation */
	const char *hostname;
};

struct store_gpu_kernel_row {
	struct store_gpu_owner who;
	const char *name;
	uint32_t device;
	uint64_t stream;
	uint64_t count, total_ns, min_ns, max_ns;
	uint32_t hist[SYSOM_GPU_HIST_BUCKETS];
};

struct store_nccl_profile_row {
	struct store_gpu_owner who;
	uint64_t comm_id;
	const char *comm_name, *func, *algo, *proto, *datatype;
	int32_t rank, nranks, peer;
	uint32_t nchannels;
	uint64_t count, bytes, kernel_timed, kernel_ns_total, kernel_ns_min, kernel_ns_max;
	uint64_t span_timed, span_ns_total, enqueue_ns_total, transfers, transfer_bytes;
	uint64_t first_seq, last_seq;
};

struct store_nccl_link_row {
	struct store_gpu_owner who;
	uint64_t comm_id;
	int32_t rank, peer, channel;
	uint64_t transfers, bytes, time_ns_total;
	double sx, sy, sxx, sxy, syy;
	double min_latency_ns, min_bytes_per_ns, min_r2; /* NaN: no MIN-mode fit */
	uint32_t min_points;
};

/* Called per stored row (rows repeat per batch: the caller merges rows with equal keys, which
 * arrive consecutively: ordered by job rank, process, then the row's key). */
struct store_gpu_visitor {
	int (*kernel)(void *arg, const struct store_gpu_kernel_row *r);
	int (*profile)(void *arg, const struct store_nccl_profile_row *r);
	int (*link)(void *arg, const struct store_nccl_link_row *r);
	void *arg;
};

/*
 * Visits the GPU kernel, NCCL profile and NCCL link rows of job `f->job` in [from, to] (in that
 * order), at most `max_rows` of each kind; sets *truncated when a kind had more. A kind whose
 * callback is NULL is not read (nor counted in *truncated). Returns 0 or an error (or what a
 * callback returned).
 */
int store_job_gpu(struct store *s, const struct store_gpu_filter *f, uint32_t max_rows,
		  const struct store_gpu_visitor *v, bool *truncated);

/* GPU time of one kernel attributed to one launching user stack (GPU-time flame graph). */
struct store_gpu_time {
	const char *comm;   /* process comm; borrowed for the callback only */
	int64_t pid;        /* -1 when the group spans processes */
	uint64_t processes;
	int64_t user_stack; /* stack id, STORE_STACK_NONE (launched from an unknown stack) */
	bool launch_seen;   /* false: no launch of this kernel was traced in the range */
	const char *kernel; /* the kernel name */
	uint64_t ns;        /* GPU time */
};

typedef int (*store_gpu_time_fn)(void *arg, const struct store_gpu_time *row);

/*
 * GPU kernel time of the processes matching `f` (times: the rows' window end in ms), each
 * (process, kernel)'s total split over its launching stacks in proportion to the launches the
 * uprobes counted in the same range; kernels never seen launched keep launch_seen false.
 * Largest first, at most `limit` groups; *total is the time of every group. Returns 0 or an
 * error.
 */
int store_gpu_time_aggregate(struct store *s, const struct store_sample_filter *f, uint32_t limit,
			     store_gpu_time_fn fn, void *arg, uint64_t *total);

/* ---- OS signals (wire 1.3) ------------------------------------------------------------------ */

struct store_os_filter {
	const char *job;          /* required: threads of this job's processes, CPUs of its nodes */
	bool has_rank;
	int32_t rank;             /* only this job rank (and its node's CPUs) */
	int64_t from_ms, to_ms;   /* the rows' batch window end, inclusive */
};

struct store_os_thread_row {
	struct store_gpu_owner who; /* the process and its job rank */
	uint32_t tid;
	const char *comm;
	uint64_t oncpu_ns, runq_wait_ns, runq_waits;
	uint32_t runq_hist[SYSOM_RUNQ_HIST_BUCKETS];
	uint64_t voluntary_switches, involuntary_switches, migrations, numa_migrations;
	uint64_t pages_migrated, hardirq_ns, softirq_ns;
	uint64_t cpus[SYSOM_CPU_MASK_WORDS];
};

struct store_os_cpu_row {
	const char *hostname;
	int64_t time_ms, window_ms;
	uint32_t cpu;
	int32_t numa_node;
	uint64_t busy_ns, hardirq_count, hardirq_ns, context_switches, runq_wait_ns;
	uint64_t softirq_count[SYSOM_SOFTIRQ_COUNT], softirq_ns[SYSOM_SOFTIRQ_COUNT];
};

struct store_os_irq_row {
	const char *hostname;
	uint32_t cpu, irq;
	const char *name;
	uint64_t count, ns;       /* summed over the range */
};

/* Rows of each kind are per stored batch except IRQs (summed per (node, cpu, irq, name));
 * threads arrive ordered by job rank, process, tid; CPUs by node, cpu, time. */
struct store_os_visitor {
	int (*thread)(void *arg, const struct store_os_thread_row *r);
	int (*cpu)(void *arg, const struct store_os_cpu_row *r);
	int (*irq)(void *arg, const struct store_os_irq_row *r);
	void *arg;
};

/* Visits the job's thread rows, then the CPU and IRQ rows of the nodes its (selected) ranks
 * ran on, at most `max_rows` of each kind (*truncated set when a kind had more). */
int store_job_os(struct store *s, const struct store_os_filter *f, uint32_t max_rows,
		 const struct store_os_visitor *v, bool *truncated);

/* ---- host signals (wire 1.6) ------------------------------------------------------------------ */

struct store_host_filter {
	const char *job;          /* required: the nodes its processes ran on */
	int64_t from_ms, to_ms;   /* the batch window end, inclusive */
};

/* One signal of one node's batch window; strings borrowed for the callback only. */
struct store_host_signal_row {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname;
	int64_t time_ms, window_ms; /* the window's end and length */
	uint16_t signal;          /* enum sysom_host_signal */
	double value;
};

typedef int (*store_host_signal_fn)(void *arg, const struct store_host_signal_row *r);

/* Calls `fn` for at most `max_rows` host signal rows of the job's nodes in the range, grouped
 * by node, then by time and signal (*truncated set when there were more). -ENOTSUP on a backend
 * that does not store them (both do). */
int store_host_signals_list(struct store *s, const struct store_host_filter *f, uint32_t max_rows,
			    store_host_signal_fn fn, void *arg, bool *truncated);

/* ---- diagnoses, job settings, baselines (written by the monitor) ---------------------------- */

struct store_diagnosis {
	int64_t id;
	const char *job, *identity, *kind;
	int32_t rank;             /* -1: the whole job */
	const char *hostname, *communicators, *layer, *severity, *summary, *action;
	const char *report;       /* JSON text */
	int64_t opened_ms, updated_ms;
	int64_t resolved_ms;      /* 0: open */
};

/*
 * Opens an incident or updates the open one with the same (job, identity): the fields and
 * updated_ms = d->updated_ms; opened_ms is kept. *id gets its id, *opened whether it is new.
 */
int store_diagnosis_upsert(struct store *s, const struct store_diagnosis *d, int64_t *id,
			   bool *opened);
/* Resolves open incident `id` at `now_ms`. 0, -ENOENT when not open. */
int store_diagnosis_resolve(struct store *s, int64_t id, int64_t now_ms);

struct store_diagnosis_filter {
	const char *job;          /* NULL: every job */
	int64_t from_ms, to_ms;   /* incidents open at some time in [from, to] */
	bool open_only;
	int64_t id;               /* > 0: only this one (other fields ignored) */
};

typedef int (*store_diagnosis_fn)(void *arg, const struct store_diagnosis *d);

/* Newest first, at most `limit`. Strings are borrowed for the callback only. */
int store_diagnoses_list(struct store *s, const struct store_diagnosis_filter *f, uint32_t limit,
			 store_diagnosis_fn fn, void *arg);

/* Per-job analysis settings as JSON text; *json NULL (and 0) when none. Caller frees. */
int store_job_settings_get(struct store *s, const char *job, char **json);
/* Replaces them; NULL deletes. */
int store_job_settings_put(struct store *s, const char *job, const char *json, int64_t now_ms);

struct store_baseline {
	const char *job;
	int64_t from_ms, to_ms, created_ms;
	uint64_t iteration_ns, samples;
	const char *profile;      /* folded "stack count" lines */
	const char *source;       /* "auto" | "api" */
};

/* Replaces the job's baseline. */
int store_baseline_put(struct store *s, const struct store_baseline *b);
/* Calls fn with the job's baseline (strings borrowed for the call); -ENOENT when none. */
int store_baseline_get(struct store *s, const char *job,
		       int (*fn)(void *arg, const struct store_baseline *b), void *arg);

/* Totals of one agent counter on one node, summed over its stored batches. */
struct store_counter_total {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	const char *hostname; /* borrowed for the callback only */
	uint16_t counter;     /* enum sysom_counter_id */
	uint64_t total;
};

typedef int (*store_counter_fn)(void *arg, const struct store_counter_total *c);

/* Calls `fn` per (counter, node), ordered by counter id then node id. Returns 0 or an error. */
int store_counters_list(struct store *s, store_counter_fn fn, void *arg);

/* Checks that the store answers a trivial read. Returns 0 or a negative error. */
int store_ping(struct store *s);

/* Bytes the store occupies on disk (database and journal). Returns 0 or a negative error. */
int store_size_get(struct store *s, uint64_t *bytes);

/*
 * Caps the store's size (0: no cap); writes that would grow it beyond fail with -ENOSPC.
 * Returns 0, or -ENOTSUP when the backend cannot cap its size.
 */
int store_size_limit_set(struct store *s, uint64_t max_bytes);

/*
 * Retention: deletes the raw profile data (batches, samples, off-CPU, launches, NCCL, GPU and
 * OS rows) from before `before_ms`, and the per-minute rollups of CPU samples and off-CPU time
 * (store_rollup_raw_keep_set) from before `rollup_before_ms` (<= before_ms, else -EINVAL;
 * 0 or less: rollups are kept). Incidents, settings, baselines, nodes, objects and kernel
 * symbols stay. First, the NCCL collective instances whose first entry is before
 * `before_ms` and that no earlier run kept are written to a rollup of one row per instance
 * (store_collectives_list reads them back; nccl_instance.h), kept like the per-minute
 * rollups until `rollup_before_ms`, with the processes they name.
 * ClickHouse drops the partitions of the days (UTC) that ended at or before the cutoff whole;
 * what the rollups need to answer like raw rows (batches, processes, job ranks, identities)
 * goes with the rollups, not with the raw rows; *dropped gets the number of partitions
 * dropped.
 * SQLite deletes the rows whose time is before the cutoff, in short write transactions, then
 * the processes and stacks no row (raw or rollup) names any more, then returns free pages to
 * the file system (databases created with incremental auto-vacuum); *dropped gets the rows
 * deleted.
 * Returns 0 or a negative error; an error leaves a consistent store (run it again).
 */
int store_retention_apply(struct store *s, int64_t before_ms, int64_t rollup_before_ms,
			  uint32_t *dropped);

/*
 * Per-minute rollups: every stored batch also adds its CPU samples and off-CPU time to rows of
 * (minute, node, process, user stack, kernel stack) — thread, CPU, thread comm and off-CPU
 * state dropped — which retention keeps longer than the raw rows. Tells the readers that raw
 * rows are kept `raw_keep_ms` (the retention of before_ms above; 0: forever, the default):
 * store_stacks_aggregate and store_offcpu_aggregate then answer the part of a range before
 * now - raw_keep_ms (rounded down to the minute) from the rollups, whole minutes (a rollup
 * minute counts when its start is in [from rounded down to the minute, to]), and the rest from
 * raw rows, in one answer grouped and limited as a raw-only one; there a comm filter matches
 * the process comm only (no thread comms). Other readers read raw rows only. Call it before
 * the store is shared between threads.
 */
void store_rollup_raw_keep_set(struct store *s, int64_t raw_keep_ms);

/*
 * Fleet slots (ClickHouse): summaries of the whole fleet's CPU samples and off-CPU time per
 * minute and per hour, without the node dimension, from committed batches only. Fleet-wide
 * reads (store_stacks_aggregate, store_offcpu_aggregate with no node, pid, comm, job or
 * identity condition) answer the whole slots of their range that have a current summary from
 * it, and the rest from rows as before, as a read of the rows alone would but for two things:
 * a group's process count past about 60 is a HyperLogLog estimate (±2%), and a process renamed
 * during the range has its samples grouped under its name as of each slot.
 * A summary is current until a batch touching its slot is stored after it was built (a late,
 * spooled or second copy): that slot is read from rows until the next run builds it again.
 */
struct store_fleet_slots_pass {
	uint32_t built;   /* summaries built (each: the slot's CPU and off-CPU rows) */
	uint32_t rebuilt; /* of which replaced a stale one */
	uint32_t pending; /* slots left for a later run (built lately, or over the run's time) */
	uint32_t merged;  /* of the built, hours merged from their minutes' current summaries */
};

/*
 * Builds the summaries of the slots that ended at least two minutes before `now_ms` and have
 * none current, newest first, for up to about 30 s; a stale slot at most once per 5 minutes.
 * An hour whose minutes all have current summaries is merged from them, not read again.
 * One server of those sharing a store should run it (others' runs only duplicate work).
 * Returns 0, -ENOTSUP (SQLite: its reads use rows only) or the store's error.
 */
int store_fleet_slots_run(struct store *s, int64_t now_ms, struct store_fleet_slots_pass *out);

/* Group inserts so far (ClickHouse: the batches stored together, one INSERT per table). */
struct store_insert_groups {
	uint64_t groups;  /* group inserts, failed ones included */
	uint64_t batches; /* batches in them */
};

/* Fills *out. Returns 0 or -ENOTSUP (SQLite: one transaction per batch). */
int store_insert_groups_get(struct store *s, struct store_insert_groups *out);

/* What one SQLite retention run did. */
struct store_retention_stats {
	uint64_t rows;         /* time-series rows deleted (rollup rows too) */
	uint64_t rollup_rows;  /* of which rollup rows (per-minute, NCCL instances) */
	uint64_t nccl_instances; /* NCCL instances written to their rollup */
	uint64_t nccl_lost;    /* NCCL instances that could not be kept (nccl_instance.h) */
	uint64_t processes;    /* processes collected (with their ranks, communicators, identities) */
	uint64_t stacks;       /* stacks collected */
	uint64_t pages_freed;  /* free pages before the incremental vacuum */
	uint64_t transactions; /* write transactions */
	int64_t max_hold_ns;   /* longest write-lock hold of one transaction */
};

/* store_retention_apply on a SQLite store, with its figures. -ENOTSUP on another backend. */
int store_sqlite_retention(struct store *s, int64_t before_ms, int64_t rollup_before_ms,
			   struct store_retention_stats *st);

/* ---- replicas sharing the store (ClickHouse; server/cluster/cluster.h) -------------------- */

/* One live replica, as store_replicas_list reports it (strings borrowed for the callback). */
struct store_replica {
	const char *id;      /* chosen by the replica at start */
	const char *url;     /* where its peers reach it */
	int64_t started_ms;  /* when it started (its own clock) */
	uint32_t age_s;      /* seconds since its newest heartbeat (the store's clock) */
};

typedef int (*store_replica_fn)(void *arg, const struct store_replica *r);

/*
 * Records a heartbeat of replica `id` reachable at `url`: alive now by the store's clock, or,
 * with `departed`, gone (a clean shutdown). `beat` must grow with each call of one replica (its
 * newest row wins). 0, -ENOTSUP where one server owns the store (SQLite), or an error.
 */
int store_replica_beat(struct store *s, const char *id, const char *url, int64_t started_ms,
		       uint64_t beat, bool departed);

/*
 * Calls `fn` for each replica (at most `limit`, by id) whose newest heartbeat is at most
 * `max_age_s` old and that has not departed. 0, -ENOTSUP (SQLite) or an error.
 */
int store_replicas_list(struct store *s, uint32_t max_age_s, uint32_t limit,
			store_replica_fn fn, void *arg);

#endif
