/* SPDX-License-Identifier: Apache-2.0 */
/* A token bucket in bytes per second, with exact integer arithmetic (no waiting of its own). */
#ifndef SYSOM_AGENT_SYMBOLS_RATE_LIMIT_H
#define SYSOM_AGENT_SYMBOLS_RATE_LIMIT_H

#include <stdint.h>

struct rate_limit {
	uint64_t rate;    /* bytes per second, > 0 */
	uint64_t tokens;  /* bytes available */
	uint64_t rem;     /* fraction of a byte, in byte-ns units of 1e9 */
	uint64_t last_ns; /* last refill */
};

/* An empty bucket filling at `rate` (> 0) bytes per second from time `now_ns`. */
void rate_limit_init(struct rate_limit *rl, uint64_t rate, uint64_t now_ns);

/*
 * Refills the bucket for the time up to `now_ns` (holding at most `cap` bytes, `cap` >= `n`),
 * then takes `n` bytes if it holds them. Returns 0 when taken, else the nanoseconds (>= 1)
 * until it will hold `n`.
 */
uint64_t rate_limit_take(struct rate_limit *rl, uint64_t n, uint64_t cap, uint64_t now_ns);

#endif
