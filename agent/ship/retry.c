/* SPDX-License-Identifier: Apache-2.0 */
/* Hookable clock, jitter, waits and backoff of the agent's background senders. */
#include "agent/ship/retry.h"
#include "common/clock.h"

#include <sys/random.h>
#include <time.h>

#define NS_PER_S 1000000000ull

static uint64_t monotonic_ns(void *ctx)
{
	(void)ctx;
	return sysom_monotonic_ns();
}

void retry_clock_init(struct retry_clock *c, uint64_t (*now_ns)(void *ctx),
		      void (*sleep_ns)(void *ctx, uint64_t ns), uint64_t (*random_u64)(void *ctx),
		      void *ctx)
{
	c->now_ns = now_ns ? now_ns : monotonic_ns;
	c->sleep_ns = sleep_ns;
	c->random_u64 = random_u64;
	c->ctx = ctx;
	if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != (ssize_t)sizeof(c->rng))
		c->rng = monotonic_ns(NULL) ^ (uint64_t)(uintptr_t)c;
	c->rng |= 1; /* xorshift state must be nonzero */
}

uint64_t retry_clock_now(const struct retry_clock *c)
{
	return c->now_ns(c->ctx);
}

uint64_t retry_clock_random(struct retry_clock *c)
{
	if (c->random_u64)
		return c->random_u64(c->ctx);
	/* xorshift64*: for jitter only. */
	uint64_t x = c->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	c->rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

void retry_clock_wait_until(const struct retry_clock *c, pthread_mutex_t *lock,
			    pthread_cond_t *cond, uint64_t until)
{
	uint64_t t = retry_clock_now(c);
	uint64_t delta = until > t ? until - t : 0;

	if (c->sleep_ns) {
		pthread_mutex_unlock(lock);
		c->sleep_ns(c->ctx, delta);
		pthread_mutex_lock(lock);
		return;
	}
	/* retry_cond_init made `cond` wait on CLOCK_MONOTONIC. */
	struct timespec abs;
	clock_gettime(CLOCK_MONOTONIC, &abs);
	uint64_t ns = retry_sat_add((uint64_t)abs.tv_nsec, delta);
	uint64_t secs = ns / NS_PER_S;
	if (secs > (uint64_t)INT32_MAX)
		secs = INT32_MAX;
	abs.tv_sec += (time_t)secs;
	abs.tv_nsec = (long)(ns % NS_PER_S);
	pthread_cond_timedwait(cond, lock, &abs);
}

int retry_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t attr;
	int err = -pthread_condattr_init(&attr);

	if (err)
		return err;
	/* Backoff waits must not stretch or shrink when the wall clock is stepped. */
	err = -pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (!err)
		err = -pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
	return err;
}

uint64_t retry_backoff_ns(struct retry_clock *c, uint64_t initial_ns, uint64_t max_ns,
			  uint32_t failures, int64_t retry_after_s)
{
	uint64_t cap = initial_ns, ra = 0, jitter, delay;

	for (uint32_t i = 1; i < failures && cap < max_ns; i++)
		cap = cap > UINT64_MAX / 2 ? UINT64_MAX : cap * 2;
	if (cap > max_ns)
		cap = max_ns;
	/* Multiply-shift maps the 64-bit value onto [0, cap] without modulo bias. */
	jitter = (uint64_t)(((unsigned __int128)retry_clock_random(c) * ((unsigned __int128)cap + 1)) >> 64);
	if (retry_after_s >= 0)
		ra = (uint64_t)retry_after_s > UINT64_MAX / NS_PER_S ? UINT64_MAX
								   : (uint64_t)retry_after_s * NS_PER_S;
	/* Retry-After is the least wait, not the wait: every agent the overloaded server answers
	 * gets the same value, and without the jitter on top a whole fleet would come back in
	 * the same second, again and again. */
	delay = retry_sat_add(ra, jitter);
	return delay < max_ns ? delay : max_ns;
}
