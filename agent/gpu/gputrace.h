/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL and CUDA driver probes: finds the libnccl / libcuda files processes map, attaches
 * uprobes to each file once (they then fire in every process mapping it), and hands the
 * ring-buffer events and the in-kernel launch counts to the caller.
 */
#ifndef SYSOM_AGENT_GPU_GPUTRACE_H
#define SYSOM_AGENT_GPU_GPUTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bpf/gputrace.h"
#include "common/report.h"

struct gputrace;

/* What the dynamic loader's notification (a probe on ld.so's _dl_debug_state) does when a
 * process maps an NCCL/CUDA library: nothing (discovery by periodic scans only), make the
 * agent attach at once while the process runs on, or stop the process (SIGSTOP from the
 * probe) until the agent has attached and sends SIGCONT, so that no call is missed. */
enum gputrace_loader_mode { GPUTRACE_LOADER_OFF, GPUTRACE_LOADER_NOTIFY, GPUTRACE_LOADER_HOLD };

/* "off", "notify", "hold" → mode; -EINVAL otherwise. */
int gputrace_loader_mode_parse(const char *s, enum gputrace_loader_mode *out);
const char *gputrace_loader_mode_name(enum gputrace_loader_mode m);

struct gputrace_options {
	const char *proc_root;        /* "/proc" */
	int exec_generation_fd;       /* the sampler's tgid → generation map, or -1 */
	/* The sampler's hybrid unwinder maps (struct sampler_unwind_maps), so launch stacks are
	 * unwound like the CPU samples; -1: frame-pointer launch stacks. */
	int unwind_tables_fd, unwind_procs_fd, unwind_markers_fd;
	int py_procs_fd; /* the sampler's Python processes (bpf/pyframes.h), or -1 */
	uint32_t ring_bytes;          /* event ring buffer size (power of two, >= 4096) */
	uint64_t detach_grace_ns;     /* keep a file's probes this long after its last user */
	bool launch_tracing;          /* attach kernel launch probes from the start (default) */
	enum gputrace_loader_mode loader; /* default NOTIFY */
	/* Colon-separated ld.so files probed at open (default: the usual x86-64/aarch64 ones);
	 * loaders seen in a process's mappings are probed as well. */
	const char *loader_paths;
	/* Called for every ring-buffer event (struct gt_nccl_event, gt_nccl_init_event,
	 * gt_name_event or gt_dl_event, told apart by their first u32), valid during the call
	 * only; a gt_dl_event once its libraries are attached, before a held process resumes. */
	void (*on_event)(void *ctx, const void *data, size_t len);
	void *ctx;
	/* Messages for the log (attachments, missing probes, ...): the daemon logs them. */
	struct sysom_reporter report;
};

void gputrace_options_default(struct gputrace_options *o);

/* Loads the BPF programs (no probe attached yet). 0 or -errno with `err` explaining. */
int gputrace_open(const struct gputrace_options *o, struct gputrace **out, char *err,
		  size_t errlen);
/* Detaches everything and frees; accepts NULL. */
void gputrace_close(struct gputrace *g);

/* Which library a path names: 1 NCCL (libnccl.so*), 2 CUDA driver (libcuda.so*), 0 neither. */
int gputrace_library_kind(const char *path);

/*
 * How many of the traced functions the library file at `path` (kind from its name) defines,
 * read as gputrace_scan_process reads it: with pread, never mmap, so a file truncated while it
 * is read fails cleanly. Returns the count (>= 0), -EINVAL for a name that is neither NCCL nor
 * CUDA, -EIO (the file changed while read), -SYSOM_ELIMIT (a symbol table over 256 MiB),
 * -SYSOM_ECORRUPT (not ELF), -errno from open.
 */
int gputrace_library_symbols(const char *path);

/*
 * Reads the executable mappings of `pid` and attaches probes to every NCCL or CUDA driver
 * file it maps that has none yet; records that `pid` uses the files. Returns the number of
 * files newly attached (>= 0), -ESRCH when the process is gone, or another -errno.
 */
int gputrace_scan_process(struct gputrace *g, uint32_t pid);

/*
 * Attaches probes to a library file named by path (kind from its name, as
 * gputrace_library_kind), before any process maps it: those probes are never detached, so the
 * first calls of a job (communicator init) are seen. 1 when attached, 0 when it already was,
 * -EINVAL for a name that is neither NCCL nor CUDA, -errno from stat/open.
 */
int gputrace_attach_path(struct gputrace *g, const char *path);

/* Puts the loader-notification probe on an ld.so file (by path; also done for loaders found
 * in scanned processes). 1 attached, 0 already, -ENOENT (no _dl_debug_state/_r_debug),
 * -E2BIG (GT_LOADER_MAX files), -errno. */
int gputrace_attach_loader(struct gputrace *g, const char *path);

/* Scans every process under proc_root (at start). Returns the files attached. */
int gputrace_scan_all(struct gputrace *g);

/* `pid` exited: it no longer holds its files; files without users are detached after the
 * grace period by gputrace_sweep. */
void gputrace_forget_process(struct gputrace *g, uint32_t pid);
void gputrace_sweep(struct gputrace *g, uint64_t now_ns);

/*
 * Kernel launch probes on or off (their trap costs microseconds per launch, so the agent
 * duty-cycles them); kernel-name and NCCL probes stay. Idempotent.
 */
void gputrace_set_launch_tracing(struct gputrace *g, bool on);
/* Total time the launch probes have been attached (ns), for scaling sampled counts. */
uint64_t gputrace_launch_traced_ns(const struct gputrace *g);

/* True when `pid` maps a traced library (as of its last scan). */
bool gputrace_process_traced(const struct gputrace *g, uint32_t pid);

/* The ring buffer's epoll fd (poll for readability, then gputrace_consume). */
int gputrace_event_fd(const struct gputrace *g);
/* Calls on_event for every event ready; returns the number consumed or -errno. */
int gputrace_consume(struct gputrace *g);

/* Visits and removes every launch aggregate (key, value valid during the call). Returns the
 * number visited or -errno. */
typedef void (*gputrace_launch_fn)(void *ctx, const struct gt_launch_key *k,
				   const struct gt_launch_value *v);
int gputrace_drain_launches(struct gputrace *g, gputrace_launch_fn fn, void *ctx);

/*
 * Visits the collective calls threads are inside of now (entered at least `min_age_ns` before
 * `now_mono_ns`, not returned), as NCCL call events whose exit is `now_mono_ns` and whose
 * generation is left 0; threads that no longer exist under `proc_root` are skipped. Returns
 * the number visited or -errno.
 */
typedef void (*gputrace_pending_fn)(void *ctx, const struct gt_nccl_event *e);
int gputrace_pending_calls(struct gputrace *g, const char *proc_root, uint64_t now_mono_ns,
			   uint64_t min_age_ns, gputrace_pending_fn fn, void *ctx);

struct gputrace_stats {
	struct gt_stats bpf;      /* summed over CPUs */
	bool hybrid_launch_stacks; /* launch stacks use the sampler's unwinder */
	uint32_t libraries;       /* files with probes now */
	uint32_t probes;          /* probes attached now */
	uint64_t attach_errors;   /* probes that failed to attach (cumulative) */
	uint64_t read_errors;     /* library files that could not be read (changed meanwhile) */
	uint32_t processes;       /* processes known to map a traced file */
	uint32_t loaders;         /* ld.so files with the notification probe */
	uint64_t dl_events;       /* loader notifications acted on */
	uint64_t dl_resumed;      /* held processes resumed (SIGCONT) */
	uint64_t dl_attach_ns_max; /* notification → probes attached (and resumed), worst */
	uint64_t dl_attach_ns_total; /* the same, summed over dl_events */
};
void gputrace_stats_read(const struct gputrace *g, struct gputrace_stats *out);

/* A library file with probes, for logs and tests. */
struct gputrace_library_info {
	int kind;                 /* 1 NCCL, 2 CUDA */
	uint32_t slot;
	char path[256];
	uint32_t probes;
	bool comm_layout;         /* ncclComm offsets known (DWARF or table) */
	char version[32];         /* NCCL version, "" unknown */
};
/* Library `i` (0-based, in attach order); -ENOENT past the end. */
int gputrace_library(const struct gputrace *g, uint32_t i, struct gputrace_library_info *out);

#endif
