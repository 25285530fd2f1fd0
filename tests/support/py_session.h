/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test and benchmark support for Python frames: a sampler (hybrid unwinder, off-CPU
 * recording in "jobs" mode) wired to a process tracker, an unwinder and the CPython walker
 * the way sysom-agent wires them, following one process only (the workload), so a busy
 * machine's other processes never fill the unwind tables.
 */
#ifndef SYSOM_TESTS_SUPPORT_PY_SESSION_H
#define SYSOM_TESTS_SUPPORT_PY_SESSION_H

#include <stdint.h>

#include "agent/node/proctrack.h"
#include "agent/sampling/pyframes.h"
#include "agent/sampling/sampler.h"
#include "agent/sampling/unwinder.h"

struct py_session {
	struct sampler *sampler;
	struct proctrack *pt;
	struct unwinder *unwinder;
	struct pyframes *py;
	struct sampler_unwind_maps maps;
	uint32_t pid; /* the one process followed */
};

/* Opens the session for process `pid` (sampling at 99 Hz, every tick). 0 or -errno. */
int py_session_open(struct py_session *s, uint32_t pid, char *err, size_t errlen);

/*
 * Polls, drains (CPU samples dropped) and compiles tables until `pid` is published as a
 * Python process and every table of the files it maps is loaded, then records its blocks.
 * The process must run on-CPU meanwhile (to be sampled). 0, or -ETIMEDOUT after `timeout_ms`.
 * On success *entry holds its published interpreter (to withdraw and restore it).
 */
int py_session_ready(struct py_session *s, int timeout_ms, struct py_proc *entry);

/* Drains into `fn` (off-CPU entries; CPU samples dropped), then the after-drain work. */
int py_session_drain(struct py_session *s, sampler_offcpu_fn fn, void *ctx);

void py_session_close(struct py_session *s);

#endif
