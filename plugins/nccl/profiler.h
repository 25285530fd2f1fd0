/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of libnccl-profiler-sysom.so (docs/nccl-profiler.md): the per-communicator
 * windowed event buffers written by NCCL's threads, and the aggregation the background thread
 * runs over a closed window.
 *
 * A communicator has PROF_WINDOWS pre-allocated windows of `slots` events. One 64-bit word per
 * window packs its state (bits 56-63), the number of its events started and not yet stopped
 * (bits 32-55) and the next free slot (bits 0-31): starting an event is one fetch_add on it
 * (claim a slot and count the event open), stopping one a fetch_sub. The background thread
 * moves the current window FILLING → CLOSING when it is 3/4 full or old enough, and a CLOSING
 * one → PROCESSING when no event in it is open and it has lingered (children of its
 * operations, e.g. kernels that start late, still land in it), or when it has been open too
 * long (a forced close, counted). A child event is stored in its parent's window, so one
 * window holds whole operation trees. Handles given to NCCL are slot pointers tagged with the
 * window generation in the top 16 bits: a stop or state for a slot whose window was recycled
 * is recognised and counted as an orphan instead of corrupting the new window.
 */
#ifndef SYSOM_PLUGINS_NCCL_PROFILER_H
#define SYSOM_PLUGINS_NCCL_PROFILER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/sysom_channel.h"

#define PROF_WINDOWS 4
#define PROF_DEFAULT_SLOTS 4096
#define PROF_MAX_SLOTS (1u << 20)
#define PROF_DEFAULT_WINDOW_MS 1000
#define PROF_DEFAULT_LINGER_MS 200
#define PROF_MAX_OPEN_MS 10000 /* a window with events open this long is processed anyway */

enum prof_win_state {
	WIN_READY = 0,      /* processed (or never used): may become the current window */
	WIN_FILLING = 1,    /* the current window */
	WIN_CLOSING = 2,    /* no new top-level events; children of its operations still land */
	WIN_PROCESSING = 3, /* the background thread reads it */
};

#define WIN_STATE_SHIFT 56
#define WIN_OPEN_SHIFT 32
#define WIN_OPEN_ONE (1ull << WIN_OPEN_SHIFT)
#define WIN_OPEN_MASK 0xffffffull
#define WIN_SLOT_MASK 0xffffffffull

static inline unsigned win_word_state(uint64_t w)
{
	return (unsigned)(w >> WIN_STATE_SHIFT);
}

static inline uint32_t win_word_open(uint64_t w)
{
	return (uint32_t)((w >> WIN_OPEN_SHIFT) & WIN_OPEN_MASK);
}

static inline uint32_t win_word_slot(uint64_t w)
{
	return (uint32_t)(w & WIN_SLOT_MASK);
}

/* The tag of a window generation: 1..65535, stored in slots and in handles' top 16 bits. */
static inline uint32_t win_tag(uint32_t gen)
{
	return gen % 0xffffu + 1;
}

enum prof_ev_type { EV_COLL = 1, EV_P2P, EV_PROXY_OP, EV_PROXY_STEP, EV_KERNEL_CH };

#define EV_STOPPED 0x1      /* stopEvent seen */
#define EV_SEND 0x2         /* ProxyOp: send side */
#define EV_PXN 0x4          /* ProxyOp of another process's rank (PXN): no parent */
#define EV_SEND_WAIT 0x8    /* ProxyStep: reached SendWait (wait_ns, bytes set) */
#define EV_KERNEL_STOP 0x10 /* KernelCh: KernelChStop recorded (gpu_stop set) */
#define EV_NO_PARENT UINT32_MAX

struct prof_window;

/* One event; written by the thread that started it (and stop/state calls on its handle). */
struct prof_event {
	_Atomic uint32_t tag;   /* win_tag(window generation) once the slot is written */
	uint8_t type;           /* enum prof_ev_type */
	_Atomic uint8_t flags;  /* EV_* */
	uint8_t channel;
	uint8_t nchannels;
	int32_t peer;
	uint32_t parent;        /* slot of the parent in the same window, or EV_NO_PARENT */
	uint64_t start_ns, stop_ns;   /* CPU clock in ticks (see prof_ticks; durations only) */
	uint64_t gpu_start, gpu_stop; /* KernelCh: GPU timer */
	uint64_t wait_ns;       /* ProxyStep: when SendWait began (ticks) */
	uint64_t bytes;         /* Coll/P2p: count x datatype size; ProxyStep: transfer size */
	uint64_t seq;           /* Coll: NCCL seqNumber */
	const char *func, *algo, *proto, *datatype; /* NCCL's static strings */
	struct prof_window *win;
};

struct prof_context;

struct prof_window {
	_Atomic uint64_t word;
	_Atomic uint32_t gen;    /* bumped each time the window becomes current */
	uint32_t index;
	uint64_t opened_ns, closed_ns;       /* monotonic */
	uint64_t opened_real, closed_real;   /* CLOCK_REALTIME, for the records */
	struct prof_context *ctx;
	struct prof_event *slots;
};

/* Process-wide counters (STATS records). */
struct prof_counters {
	_Atomic uint64_t events, dropped, orphans, forced, windows, pxn;
};

struct prof_context {
	uint64_t comm_id;
	char name[SYSOM_REC_NAME_MAX + 1];
	int nnodes, nranks, rank;
	uint32_t nslots;
	_Atomic uint32_t current;     /* index of the FILLING window */
	struct prof_window win[PROF_WINDOWS];
	struct prof_event *arena;     /* PROF_WINDOWS x nslots */
	bool announced;               /* NCCL_COMM sent */
	struct prof_context *next;    /* the process's list (under the plugin lock) */
};

/* Settings read from the environment at the first init. */
struct prof_settings {
	uint32_t slots;
	uint64_t window_ns, linger_ns, max_open_ns;
	int mask;
};

/*
 * Aggregates window `w` (PROCESSING, `nslots` claimed slots) and sends its NCCL_COLL and
 * NCCL_LINK tables for communicator `ctx` through `ch` (which may be NULL: nothing sent) using
 * the scratch table `t`; CPU durations are tick differences times `ns_per_tick`. Adds the
 * number of events found to *events. Returns the number of records it could not send.
 */
unsigned prof_window_aggregate(const struct prof_context *ctx, const struct prof_window *w,
			       uint32_t nslots, double ns_per_tick, struct sysom_channel *ch,
			       struct sysom_table *t, uint64_t *events);

#endif
