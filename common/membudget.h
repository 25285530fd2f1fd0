/* SPDX-License-Identifier: Apache-2.0 */
/* A process-wide memory budget that concurrent requests reserve from before they allocate. */
#ifndef SYSOM_COMMON_MEMBUDGET_H
#define SYSOM_COMMON_MEMBUDGET_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The server decompresses and decodes what peers send on many threads at once; each request
 * reserves the bytes it is about to allocate, and the sum of the reservations never exceeds
 * the budget's capacity. A reservation ("hold") grows in steps (a stream whose size is not
 * known up front) and shrinks as buffers are freed.
 *
 * Waiting: a step that does not fit waits, at most `max_wait_ms` summed over the hold's life
 * (a request never waits longer than that however many steps it takes), then fails with
 * -EAGAIN (the caller answers 503 with Retry-After and frees what the hold covers). Memory
 * released goes to waiters oldest first, but a waiter that does not fit does not block the
 * ones behind it, and a new step that fits is granted at once: small requests are never
 * starved by large ones that wait. A large step may wait out its bound while small ones pass;
 * it then fails and is retried by its client (the wait is bounded either way). A step that
 * would take a hold past the whole capacity can never succeed and fails at once with -E2BIG.
 *
 * Holds that grew part way and wait for more can wait on one another: when every reserved
 * byte belongs to a waiting hold, nothing will be freed, so the newest of them that holds
 * memory fails at once with -EAGAIN instead of waiting out its bound (its caller then frees
 * what it holds and the others go on).
 */

struct membudget_options {
	uint64_t capacity;    /* bytes that may be reserved at once, summed over holds (> 0) */
	uint32_t max_wait_ms; /* longest a hold waits over its life (0: never waits) */
};

/* Counters and gauges (a snapshot). */
struct membudget_stats {
	uint64_t capacity;      /* the budget */
	uint64_t reserved;      /* bytes reserved now (gauge) */
	uint64_t reserved_peak; /* largest `reserved` seen since creation (high-water mark) */
	uint64_t waiting;       /* steps waiting now (gauge) */
	uint64_t grants;        /* steps that grew a hold */
	uint64_t waits;         /* ... of which had to wait first */
	uint64_t timeouts;      /* steps that failed with -EAGAIN (waited out their bound, or
				   were failed to break a cycle of holds waiting on one another) */
	uint64_t oversized;     /* steps that failed with -E2BIG (past the whole capacity) */
};

struct membudget;

/*
 * Creates a budget. Returns 0 and the budget in *out, -EINVAL for a zero capacity, or
 * -ENOMEM / another -errno from the thread primitives.
 */
int membudget_new(const struct membudget_options *opts, struct membudget **out);

/* Frees it; accepts NULL. Every hold must have been released. */
void membudget_free(struct membudget *b);

/* A consistent snapshot of the statistics; callable from any thread. */
void membudget_stats_get(struct membudget *b, struct membudget_stats *out);

/*
 * Whether the budget is saturated now: a step is waiting for memory, or every byte is
 * reserved. A request arriving now would wait (or fail), so the server refuses it before
 * reading its body. Callable from any thread; never blocks on a wait.
 */
bool membudget_saturated(struct membudget *b);

/*
 * One request's reservation. Initialise with membudget_hold_init, change with
 * membudget_hold_resize, end with membudget_hold_release on every exit path. A hold is used by
 * one thread at a time.
 */
struct membudget_hold {
	struct membudget *budget; /* borrowed; NULL: nothing is accounted, every resize succeeds */
	uint64_t bytes;           /* reserved by this hold now */
	uint64_t waited_ns;       /* waited so far (counts against max_wait_ms) */
};

/* Starts an empty hold on `b` (borrowed, may be NULL). */
void membudget_hold_init(struct membudget_hold *h, struct membudget *b);

/*
 * Makes the hold reserve `bytes` in total. Shrinking always succeeds and hands the freed bytes
 * to waiters. Growing returns 0 once the extra bytes are reserved, -EAGAIN after waiting out
 * the hold's bound without getting them, or -E2BIG at once when `bytes` exceeds the capacity;
 * on failure the hold keeps what it had.
 */
int membudget_hold_resize(struct membudget_hold *h, uint64_t bytes);

/* Gives everything back (resize to 0); accepts NULL; the hold can be reused. */
void membudget_hold_release(struct membudget_hold *h);

#endif
