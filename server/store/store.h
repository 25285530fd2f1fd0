/* SPDX-License-Identifier: Apache-2.0 */
/* Profile storage interface: one vtable per backend (SQLite now, ClickHouse later). */
#ifndef SYSOM_SERVER_STORE_STORE_H
#define SYSOM_SERVER_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"
#include "common/wire.h"

/*
 * Errors every backend maps its failures to (the HTTP layer maps them to statuses):
 *   -ENOSPC  storage full (SQLite: SQLITE_FULL)           → 507, the agent retries later
 *   -EIO     storage I/O error (SQLite: SQLITE_IOERR)      → 507, the agent retries later
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
};

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

/* Closes the store and frees it; accepts NULL. No call may be in progress. */
void store_close(struct store *s);

/* The schema version of the open database (the newest this build knows after open). */
int store_schema_version(struct store *s);

/* What store_batch_put did. */
struct store_put_result {
	bool duplicate;       /* a batch with the same (node, epoch, sequence) was already stored */
	uint64_t samples;     /* sum of sample counts stored (0 for a duplicate) */
	uint32_t sample_rows; /* sample rows stored */
	uint32_t new_stacks;  /* stacks not seen before in the store */
	uint32_t processes;   /* process rows inserted or refreshed */
};

/*
 * Stores a decoded batch in one transaction: the node, the batch record, objects, processes,
 * content-addressed stacks, sample rows and the agent counters, or nothing at all. A batch
 * whose (node id, epoch, sequence) is already stored changes nothing and reports duplicate.
 * `received_ns` is the server's receive time (ns since the Unix epoch). Writes *res on success.
 * Returns 0 or a negative error (see the table above).
 */
int store_batch_put(struct store *s, const struct sysom_batch *b, int64_t received_ns,
		    struct store_put_result *res);

/* Sets *exists to whether batch (node id, epoch, sequence) is stored. Returns 0 or -errno. */
int store_batch_exists(struct store *s, const uint8_t node_id[SYSOM_NODE_ID_SIZE], uint64_t epoch,
		       uint64_t sequence, bool *exists);

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

#endif
