/* SPDX-License-Identifier: Apache-2.0 */
/* Memory budget: reservations under one mutex, bounded waits, freed bytes handed to waiters. */
#include "common/membudget.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/list.h"

/* One step waiting for bytes, on the waiting thread's stack while it waits. */
struct waiter {
	struct waiter *prev, *next;
	pthread_cond_t wake;
	uint64_t need;  /* extra bytes wanted */
	uint64_t held;  /* what its hold reserves while it waits */
	bool granted;   /* the bytes were reserved for it by the thread that freed them */
	bool refused;   /* it was failed to break a wait cycle (see break_cycle) */
};

struct membudget {
	pthread_mutex_t lock;
	uint64_t max_wait_ns;
	uint64_t reserved;
	uint64_t waiting_held;       /* bytes reserved by holds that are waiting */
	struct waiter *first, *last; /* oldest first */
	struct membudget_stats stats; /* reserved and waiting kept in sync with the fields above */
};

int membudget_new(const struct membudget_options *opts, struct membudget **out)
{
	struct membudget *b;
	int rc;

	if (!opts || !opts->capacity)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	if ((rc = pthread_mutex_init(&b->lock, NULL))) {
		free(b);
		return -rc;
	}
	b->stats.capacity = opts->capacity;
	b->max_wait_ns = (uint64_t)opts->max_wait_ms * SYSOM_NS_PER_MS;
	*out = b;
	return 0;
}

void membudget_free(struct membudget *b)
{
	if (!b)
		return;
	pthread_mutex_destroy(&b->lock);
	free(b);
}

void membudget_stats_get(struct membudget *b, struct membudget_stats *out)
{
	pthread_mutex_lock(&b->lock);
	*out = b->stats;
	pthread_mutex_unlock(&b->lock);
}

bool membudget_saturated(struct membudget *b)
{
	bool full;

	pthread_mutex_lock(&b->lock);
	full = b->stats.waiting > 0 || b->stats.reserved >= b->stats.capacity;
	pthread_mutex_unlock(&b->lock);
	return full;
}

void membudget_hold_init(struct membudget_hold *h, struct membudget *b)
{
	h->budget = b;
	h->bytes = 0;
	h->waited_ns = 0;
}

/* Reserves `n` bytes that fit (lock held). */
static void take(struct membudget *b, uint64_t n)
{
	b->reserved += n;
	b->stats.reserved = b->reserved;
	if (b->reserved > b->stats.reserved_peak)
		b->stats.reserved_peak = b->reserved;
	b->stats.grants++;
}

/* Takes `w` off the queue (lock held). */
static void unqueue(struct membudget *b, struct waiter *w)
{
	SYSOM_DLIST_UNLINK(b->first, b->last, w, prev, next);
	b->stats.waiting--;
	b->waiting_held -= w->held;
}

/*
 * When every reserved byte belongs to a waiting hold, nothing will be freed until one of them
 * gives up: they wait on one another (each grew part way, a decompressed body waiting for its
 * decoder's share, say). Rather than let all of them wait out their bound, the newest waiter
 * that holds memory fails at once, and its request frees what it holds (lock held).
 */
static void break_cycle(struct membudget *b)
{
	struct waiter *w;

	if (!b->first || b->waiting_held != b->reserved)
		return;
	for (w = b->last; w && !w->held; w = w->prev)
		;
	if (!w)
		return;
	w->refused = true;
	unqueue(b, w);
	pthread_cond_signal(&w->wake);
}

/* Hands free bytes to the waiters that fit, oldest first (lock held). */
static void grant_waiters(struct membudget *b)
{
	struct waiter *w = b->first, *following;

	for (; w && b->reserved < b->stats.capacity; w = following) {
		following = w->next;
		if (w->need > b->stats.capacity - b->reserved)
			continue; /* too large for now: it does not hold back smaller ones behind it */
		take(b, w->need);
		w->granted = true;
		unqueue(b, w);
		pthread_cond_signal(&w->wake);
	}
	break_cycle(b);
}

/* Waits (lock held) until `w` is granted or refused, or `deadline_ns` passes. */
static void wait_answer(struct membudget *b, struct waiter *w, uint64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / SYSOM_NS_PER_S),
			       .tv_nsec = (long)(deadline_ns % SYSOM_NS_PER_S) };

	while (!w->granted && !w->refused && sysom_monotonic_ns() < deadline_ns)
		pthread_cond_timedwait(&w->wake, &b->lock, &ts); /* spurious wakes loop */
}

int membudget_hold_resize(struct membudget_hold *h, uint64_t bytes)
{
	struct membudget *b = h->budget;
	pthread_condattr_t attr;
	struct waiter w = { 0 };
	uint64_t start, need;
	int rc = 0;

	if (!b) {
		h->bytes = bytes;
		return 0;
	}
	pthread_mutex_lock(&b->lock);
	if (bytes <= h->bytes) {
		b->reserved -= h->bytes - bytes;
		b->stats.reserved = b->reserved;
		h->bytes = bytes;
		grant_waiters(b);
		goto unlock;
	}
	if (bytes > b->stats.capacity) {
		b->stats.oversized++;
		rc = -E2BIG;
		goto unlock;
	}
	need = bytes - h->bytes;
	/* Waiters left over from the last hand-out do not fit what is free now, so a step that
	 * fits takes it without passing anyone who could have used it. */
	if (need <= b->stats.capacity - b->reserved) {
		take(b, need);
		h->bytes = bytes;
		goto unlock;
	}
	if (h->waited_ns >= b->max_wait_ns) {
		b->stats.timeouts++;
		rc = -EAGAIN;
		goto unlock;
	}
	if ((rc = -pthread_condattr_init(&attr)))
		goto unlock;
	rc = -pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (!rc)
		rc = -pthread_cond_init(&w.wake, &attr);
	pthread_condattr_destroy(&attr);
	if (rc)
		goto unlock;
	w.need = need;
	w.held = h->bytes;
	SYSOM_DLIST_PUSH_BACK(b->first, b->last, &w, prev, next);
	b->stats.waiting++;
	b->stats.waits++;
	b->waiting_held += w.held;
	break_cycle(b);
	start = sysom_monotonic_ns();
	wait_answer(b, &w, start + (b->max_wait_ns - h->waited_ns));
	if (w.granted) {
		h->bytes = bytes;
	} else {
		if (!w.refused)
			unqueue(b, &w); /* timed out */
		b->stats.timeouts++;
		rc = -EAGAIN;
	}
	h->waited_ns += sysom_monotonic_ns() - start;
	pthread_cond_destroy(&w.wake);
unlock:
	pthread_mutex_unlock(&b->lock);
	return rc;
}

void membudget_hold_release(struct membudget_hold *h)
{
	if (h)
		membudget_hold_resize(h, 0);
}
