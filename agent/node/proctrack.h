/* SPDX-License-Identifier: Apache-2.0 */
/* Process tracker: executable mappings per process incarnation, object identities, and
 * user addresses → (object, file offset). */
#ifndef SYSOM_AGENT_NODE_PROCTRACK_H
#define SYSOM_AGENT_NODE_PROCTRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/node/identity.h"
#include "common/elf_buildid.h"

struct pt_object;
struct pt_process;

struct proctrack_options {
	const char *proc_root;            /* "/proc" (tests may point elsewhere) */
	const char *pod_log_root;         /* kubelet pod log directories for pod names and
					   * namespaces (identity_pod_lookup); NULL or "": none */
	const char *container_log_root;   /* kubelet container log links for container names
					   * (identity_container_name); NULL or "": none */
	uint32_t max_processes;           /* tracked incarnations (default 16384) */
	uint32_t max_mappings;            /* executable mappings per process (default 4096) */
	uint32_t max_objects;             /* cached file identities (default 65536) */
	uint64_t rescan_interval_ns;      /* min time between rescans of one process (1 s) */
	uint64_t periodic_rescan_ns;      /* rescan live processes this often (default 5 s) */
	/* Optional: called once per file (ELF or content-hashed) or vDSO object, the first time
	 * a sampled address resolves into it, with the process and mapping [start, end) of that
	 * address. Objects that are mapped but never appear in a stack are never announced, so
	 * symbol uploads go to the code that runs. It runs on the caller's thread inside
	 * proctrack_resolve: it must be cheap, must not block and must not call back into the
	 * tracker. `obj` is owned by the tracker. */
	void (*on_new_object)(void *ctx, const struct pt_object *obj, uint32_t tgid,
			      uint64_t start, uint64_t end);
	void *object_ctx;
	/* Optional: called after every successful read of a process's mappings (first read and
	 * rescans), and once when the tracker forgets an incarnation it had read. Same rules as
	 * on_new_object; `proc` is owned by the tracker. */
	void (*on_mappings)(void *ctx, const struct pt_process *proc);
	void (*on_forget)(void *ctx, const struct pt_process *proc);
	void *mappings_ctx;
};

void proctrack_options_default(struct proctrack_options *opts);

/* An executable object: a file (by build ID or content hash), the vDSO, or a pseudo object. */
struct pt_object {
	struct sysom_build_id id; /* kind: SYSOM_OBJECT_ELF, _FILE_HASH, _ANON or _UNKNOWN */
	char *path;               /* path as first seen ("[vdso]", "[anon:jit]", ...) */
	bool sampled;             /* an address has resolved into it (it was announced) */
};

/* An executable mapping of a process. */
struct pt_mapping {
	uint64_t start, end;
	uint64_t file_offset;
	const struct pt_object *object; /* owned by the tracker */
};

/* Who an incarnation belongs to, from its cgroup, read once when it is first seen. */
struct pt_identity {
	struct proc_identity cg;
	char pod_namespace[IDENTITY_K8S_NAME_MAX]; /* "" when the pod log directory is absent */
	char pod_name[IDENTITY_K8S_NAME_MAX];
	char container_name[IDENTITY_CONTAINER_NAME_MAX]; /* "" when no log link names it */
};

/* A process incarnation: (tgid, generation), see bpf/profile.h. */
struct pt_process {
	uint32_t tgid;
	uint32_t generation;
	uint32_t ppid;
	uint64_t start_time_ns;  /* since boot */
	char comm[16];           /* its current name (renames: proctrack_note_comm, rescans) */
	char *exe;
	char *cmdline;
	struct pt_identity *identity; /* NULL when its cgroup names nothing (or is unreadable) */
	struct pt_mapping *mappings; /* sorted by start */
	uint32_t mapping_count;
	bool vanished;           /* /proc/<tgid> was gone when we needed it */
	bool exited;             /* exit event seen */
	bool scanned;            /* its mappings were read at least once */
	uint64_t exit_drain;     /* drain count when the exit was seen */
	uint64_t exit_ns;        /* monotonic time the exit was seen */
	uint64_t last_scan_ns;
	uint32_t scans;          /* times its mappings were read (attempts) */
	bool rescan_due;         /* a library was loaded since the last scan (rescan_loaded) */
	uint64_t last_load_scan_ns; /* last scan made for a loader notification (rescan_loaded) */
};

/* How a user address resolved. */
struct pt_resolved {
	const struct pt_object *object;
	uint64_t offset; /* file offset for files and the vDSO; the address itself otherwise */
};

struct proctrack_stats {
	uint32_t processes, objects;
	uint64_t scans, scan_failures, vanished, build_id_reads, content_hashes, unmapped;
	uint64_t object_errors; /* files whose identity could not be read (named by path) */
	uint64_t container_log_scans;     /* identity_names_stats.scans */
	uint64_t container_names_missing; /* processes in a container left unnamed */
};

struct proctrack;

/* Creates a tracker. 0 or -ENOMEM. */
int proctrack_new(const struct proctrack_options *opts, struct proctrack **out);
/* Frees it (and every pt_process/pt_object); accepts NULL. */
void proctrack_free(struct proctrack *pt);

/* A NEW event: make sure (tgid, generation) has a snapshot while it is alive. */
void proctrack_on_new(struct proctrack *pt, uint32_t tgid, uint32_t generation);
/* An EXEC event: (tgid, generation - 1) is replaced by (tgid, generation). */
void proctrack_on_exec(struct proctrack *pt, uint32_t tgid, uint32_t generation);
/* An EXIT event: keep the incarnation until the drain after the current one. */
void proctrack_on_exit(struct proctrack *pt, uint32_t tgid, uint32_t generation);

/*
 * The incarnation (tgid, generation), reading /proc when it is not known yet. Never NULL
 * unless out of memory or over max_processes: a process that vanished before it could be
 * read is returned with `vanished` set and no mappings (its frames resolve as unknown).
 */
struct pt_process *proctrack_get(struct proctrack *pt, uint32_t tgid, uint32_t generation);

/*
 * Resolves a user address of `proc`. An address in no known mapping triggers a rate-limited
 * rescan of a live process (a library dlopen'ed since the last scan) and then resolves to the
 * UNKNOWN object. Never fails.
 */
void proctrack_resolve(struct proctrack *pt, struct pt_process *proc, uint64_t addr,
		       struct pt_resolved *out);

/*
 * The unwinder met an address of (tgid, generation) in no mapping it knew: rescan that live
 * incarnation (at most once per rescan interval). Returns true when it rescanned.
 */
bool proctrack_rescan(struct proctrack *pt, uint32_t tgid, uint32_t generation);

/*
 * A process renamed after exec (prctl(PR_SET_NAME) or pthread_setname_np on its main thread,
 * setproctitle): `comm`, its main thread's name as a sample saw it, becomes its name (batches
 * sealed from now on carry it). Every rescan also re-reads /proc/<tgid>/comm, for processes
 * whose main thread is not sampled. Returns whether the name changed.
 */
bool proctrack_note_comm(struct pt_process *proc, const char *comm);

/*
 * The process mapped a new library at `load_ns` (CLOCK_MONOTONIC; the dynamic loader's
 * notification): when its mappings were last read before that, read them again now, so
 * stacks in the library resolve and unwind from the first ones on, not only once a rescan
 * happens to come. Scans for loads come at most once per tenth of the rescan interval per
 * process, counted from the last such scan only (a process scanned for any other reason just
 * before is rescanned at once: the load is what it lacks); one refused by that floor is done
 * by the first proctrack_after_drain past it. Returns true when it rescanned.
 */
bool proctrack_rescan_loaded(struct proctrack *pt, uint32_t tgid, uint32_t generation,
			     uint64_t load_ns);

/* Like proctrack_get, but a process neither tracked nor alive is not created (NULL): for
 * records about a process (its job identity, communicators) that are useless without its
 * identity, unlike its samples or calls. */
struct pt_process *proctrack_get_live(struct proctrack *pt, uint32_t tgid, uint32_t generation);

/* Called after each drain: forgets incarnations that exited before that drain started and at
 * least PROCTRACK_EXIT_KEEP_NS ago (their last events may still be on their way: a ring record
 * can reach the consumer hundreds of milliseconds late), and rescans live ones periodically. */
#define PROCTRACK_EXIT_KEEP_NS (5ull * 1000000000ull)
void proctrack_after_drain(struct proctrack *pt);

void proctrack_stats_read(const struct proctrack *pt, struct proctrack_stats *out);

/* Visits every tracked live process (for metrics/tests). */
typedef void (*proctrack_visit_fn)(void *ctx, const struct pt_process *proc);
void proctrack_for_each(const struct proctrack *pt, proctrack_visit_fn fn, void *ctx);

#endif
