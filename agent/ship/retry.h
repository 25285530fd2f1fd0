/* SPDX-License-Identifier: Apache-2.0 */
/* Time, jitter and waits of the agent's background senders (batches, symbols), with hooks
 * so tests can run backoff and Retry-After without real waits. */
#ifndef SYSOM_AGENT_SHIP_RETRY_H
#define SYSOM_AGENT_SHIP_RETRY_H

#include <pthread.h>
#include <stdint.h>

struct retry_clock {
	uint64_t (*now_ns)(void *ctx);            /* monotonic ns */
	void (*sleep_ns)(void *ctx, uint64_t ns); /* NULL: wait on the caller's condition variable */
	uint64_t (*random_u64)(void *ctx);        /* NULL: xorshift64* seeded from getrandom */
	void *ctx;
	uint64_t rng;                             /* state of the default random source */
};

/* Sets up a clock; NULL hooks select the real clock, condition-variable waits and a seeded
 * xorshift generator. */
void retry_clock_init(struct retry_clock *c, uint64_t (*now_ns)(void *ctx),
		      void (*sleep_ns)(void *ctx, uint64_t ns), uint64_t (*random_u64)(void *ctx),
		      void *ctx);

uint64_t retry_clock_now(const struct retry_clock *c);

/* Uniform 64-bit values (not thread-safe for the default source: one user thread). */
uint64_t retry_clock_random(struct retry_clock *c);

/* Initialises a condition variable whose timed waits run on CLOCK_MONOTONIC, as
 * retry_clock_wait_until requires. Returns 0 or a negative errno. */
int retry_cond_init(pthread_cond_t *cond);

/*
 * Waits until `until` on the clock, or until `cond` is signalled, with `lock` held on entry
 * and on return (a hooked sleep runs with the lock released). Spurious returns are possible:
 * callers re-check their condition.
 */
void retry_clock_wait_until(const struct retry_clock *c, pthread_mutex_t *lock,
			    pthread_cond_t *cond, uint64_t until);

/*
 * Delay before the next attempt after `failures` consecutive failures: full jitter, uniform in
 * [0, min(max_ns, initial_ns * 2^(failures - 1))], added to the server's Retry-After (seconds,
 * >= 0; -1 when it sent none), the sum capped at `max_ns`. Retry-After is a floor, so that a
 * fleet told the same value spreads out instead of returning together.
 */
uint64_t retry_backoff_ns(struct retry_clock *c, uint64_t initial_ns, uint64_t max_ns,
			  uint32_t failures, int64_t retry_after_s);

static inline uint64_t retry_sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

#endif
