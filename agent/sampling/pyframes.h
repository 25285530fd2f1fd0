/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPython 3.10–3.13 processes: finds the interpreter (libpython or a static python binary),
 * its version and the offsets of the structs the BPF walker reads (from _Py_DebugOffsets in
 * 3.13, from a per-version table checked against the real interpreters for 3.10–3.12),
 * publishes them per process (bpf/pyframes.h), and resolves the Python frames of sampled
 * stacks (code object, instruction) into qualified name, file and line from process memory.
 * A version without known offsets is never walked: its process is sampled natively and
 * counted (`unsupported`).
 */
#ifndef SYSOM_AGENT_SAMPLING_PYFRAMES_H
#define SYSOM_AGENT_SAMPLING_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/node/proctrack.h"
#include "agent/sampling/pylinetable.h"
#include "bpf/pyframes.h"
#include "common/report.h"

/* Offsets of the code object and strings, used in user space only. */
struct py_code_offsets {
	uint16_t qualname;   /* co_qualname (3.11+); co_name in 3.10 */
	uint16_t filename;
	uint16_t firstlineno;
	uint16_t linetable;  /* co_linetable: 3.10 address/line pairs, 3.11+ location table */
	uint16_t ascii_size; /* sizeof(PyASCIIObject): ASCII data follows */
	uint16_t compact_size; /* sizeof(PyCompactUnicodeObject): other compact data follows */
};

/* What pyframes_inspect found in one process. */
struct py_target {
	struct py_proc proc;         /* as published to BPF (generation filled by the caller) */
	struct py_code_offsets code;
	uint64_t runtime_addr;       /* &_PyRuntime */
	bool debug_offsets;          /* the offsets came from the process's _Py_DebugOffsets */
	char path[256];              /* the file holding the interpreter */
};

/* pyframes_inspect's verdicts besides 0. */
#define PY_NOT_PYTHON 1  /* no interpreter mapped */
#define PY_UNSUPPORTED 2 /* an interpreter without known offsets (version, no symbols) */

/*
 * Looks for a CPython interpreter among `proc`'s mappings (through
 * <proc_root>/<tgid>/map_files and /mem). 0 and *out for a supported one; PY_NOT_PYTHON;
 * PY_UNSUPPORTED with `why` saying what is missing; or -errno (process gone, unreadable).
 */
int pyframes_inspect(const char *proc_root, const struct pt_process *proc, struct py_target *out,
		     char *why, size_t whylen);

/* pyframes_inspect of process `tgid`, its executable mappings read from
 * <proc_root>/<tgid>/maps (for `--check` and tests, without a process tracker). */
int pyframes_inspect_pid(const char *proc_root, uint32_t tgid, struct py_target *out, char *why,
			 size_t whylen);

/*
 * Walks, from user space, the Python frames of the thread whose thread_id (pthread_self) is
 * `thread_id` (0: the first thread state) with the offsets of `t`, as the BPF walker does:
 * frame values (PY_FRAME_*) innermost first into `values`. For tests and `--check`: it
 * proves the offsets on a live process. 0, -ESRCH (no such thread), -EFAULT (unreadable).
 */
int pyframes_walk(const char *proc_root, uint32_t tgid, const struct py_target *t,
		  uint64_t thread_id, uint64_t *values, size_t max, size_t *count);

struct pyframes_options {
	const char *proc_root;    /* "/proc" */
	uint32_t max_processes;   /* Python processes tracked (default 1024) */
	uint32_t cache_slots;     /* code objects cached (default 4096, direct-mapped; each at
				   * most 2 KiB of names and a 4 KiB line table) */
	struct sysom_reporter report;
};

void pyframes_options_default(struct pyframes_options *opts);

struct pyframes_stats {
	uint32_t processes;        /* Python processes published now */
	uint64_t published;        /* publishes (processes × scans) */
	uint64_t publish_failures; /* refused by the kernel */
	uint64_t unsupported;      /* interpreters seen without known offsets (per process) */
	uint64_t lookups;          /* frames resolved (cache hits included) */
	uint64_t cache_hits;       /* ... whose code object was cached (no process read) */
	uint64_t resolve_failures; /* frames whose code object could not be read or was no code */
	uint64_t reused;           /* frames whose code object was freed and its address given to
				    * another code object before they were named (check mismatch) */
	uint64_t no_line;          /* resolved without a line (table missing/too big/malformed) */
};

/* A resolved Python frame; strings owned by the cache, valid until the next resolve call. */
struct py_name {
	const char *qualname;
	const char *filename;
	int line;                  /* -1 when unknown */
};

struct pyframes;

/* `procs_fd`: the BPF map tgid → struct py_proc (-1: resolve only, publish nothing). */
int pyframes_new(const struct pyframes_options *opts, int procs_fd, struct pyframes **out);
void pyframes_free(struct pyframes *pf);

/* Inspects `proc` (once per generation unless its mappings changed) and publishes it when
 * it runs a supported interpreter. 0, or -errno when the kernel refused the entry. */
int pyframes_publish(struct pyframes *pf, const struct pt_process *proc);

/* The process is gone: withdraws its entry. */
void pyframes_forget(struct pyframes *pf, const struct pt_process *proc);

/*
 * Resolves a Python frame value (PY_FRAME_IS(value)) of process (tgid, generation). 0 and
 * *out, or -ENOENT (not a known Python process) / -EFAULT (code object unreadable or not a
 * code object: freed or corrupted) / -ESTALE (the address holds another code object than the
 * one sampled: PY_FRAME_CHECK differs) / -ENOMEM.
 */
int pyframes_resolve(struct pyframes *pf, uint32_t tgid, uint32_t generation, uint64_t value,
		     struct py_name *out);

/* Lines for `--check`: one per Python process (version, layout, offsets source) and per
 * unsupported interpreter. Writes at most `len` bytes; returns what it would write. */
size_t pyframes_describe(const struct pyframes *pf, char *buf, size_t len);

void pyframes_stats_read(const struct pyframes *pf, struct pyframes_stats *out);

#endif
