/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test and benchmark support for the hybrid unwinder: a sampler wired to a process tracker
 * and an unwinder the way sysom-agent wires them, the no-frame-pointer workload
 * (tests/fixtures/nofp), and stack accuracy against the workload's expected call chain.
 */
#ifndef SYSOM_TESTS_SUPPORT_UNWIND_SESSION_H
#define SYSOM_TESTS_SUPPORT_UNWIND_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/node/proctrack.h"
#include "agent/sampling/sampler.h"
#include "agent/sampling/unwinder.h"
#include "tests/support/symtab.h"
#include "tests/support/workload.h"

struct unwind_session {
	struct sampler *sampler;
	struct proctrack *pt;
	struct unwinder *unwinder; /* NULL in frame-pointer mode */
	uint64_t unmapped_events;  /* UNMAPPED reports received */
};

/* The unwinder's row budget for sessions opened next; 0: the agent's default. */
extern uint64_t unwind_session_max_rows;

/* Opens a sampler in `mode` at `hz` and `rate` with tracker and unwinder. 0 or -errno. */
int unwind_session_open(struct unwind_session *s, enum sysom_unwinder mode, uint32_t hz,
			double rate, char *err, size_t errlen);
/* Handles pending process events (NEW, EXEC, EXIT, UNMAPPED) as the agent does. */
void unwind_session_poll(struct unwind_session *s);
/* Polls events, drains into fn, then the tracker's and unwinder's after-drain work. */
int unwind_session_drain(struct unwind_session *s, sampler_drain_fn fn, void *ctx);
void unwind_session_close(struct unwind_session *s);

#define NOFP_CHAIN_MAX 16

/* A running tests/fixtures/nofp workload and the chain it announced (leaf first). */
struct nofp_workload {
	struct workload w;
	char chain[NOFP_CHAIN_MAX][64];
	int chain_len;
	uint64_t jit_start, jit_end; /* --mode jit */
};

/*
 * Starts `nofp_workload SECONDS ARGS...` (ARGS NULL-terminated) and reads its "ready" and
 * "chain" lines. 0 or -errno. Stop it with workload_stop(&n->w) / workload_wait(&n->w).
 */
int nofp_workload_start(struct nofp_workload *n, double seconds, const char *const *args);

/* Waits up to timeout_ms for a line starting with `prefix`; copies it to line. 0 or -errno. */
int nofp_workload_expect(struct nofp_workload *n, const char *prefix, char *line, size_t size,
			 int timeout_ms);

/* Accuracy of user stacks against the expected chain (the definitions). */
struct chain_accuracy {
	uint64_t samples;         /* samples whose first user frame is the chain's leaf */
	uint64_t full_chain;      /* ... whose stack holds the whole chain, in caller order */
	uint64_t frames_expected; /* chain length x samples */
	uint64_t frames_found;    /* expected frames recovered in order */
	uint64_t stop[32];        /* leaf samples per stop reason */
	const char *label;        /* set: SYSOM_DEBUG_CHAIN=1 prints partial stacks under it */
};

/*
 * Adds one drained stack of the workload (`count` samples), symbolized with `t`: frame 0 at
 * its pc, callers at pc - 1 (inside the call instruction).
 */
void chain_accuracy_add(struct chain_accuracy *a, const struct nofp_workload *n,
			const struct symtab *t, const struct sysom_stack_trace *user, uint64_t count);

/* The same for a stack already symbolized (names[i] NULL when unknown), e.g. by perf. */
void chain_accuracy_add_names(struct chain_accuracy *a, const struct nofp_workload *n,
			      const char *const *names, int nframes, uint8_t stop_reason,
			      uint64_t count);

#endif
