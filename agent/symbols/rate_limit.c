/* SPDX-License-Identifier: Apache-2.0 */
/* A token bucket in bytes per second, with exact integer arithmetic (no waiting of its own). */
#include "agent/symbols/rate_limit.h"

#include "common/clock.h"

#define NS_PER_S SYSOM_NS_PER_S

void rate_limit_init(struct rate_limit *rl, uint64_t rate, uint64_t now_ns)
{
	*rl = (struct rate_limit){ .rate = rate, .last_ns = now_ns };
}

uint64_t rate_limit_take(struct rate_limit *rl, uint64_t n, uint64_t cap, uint64_t now_ns)
{
	if (now_ns > rl->last_ns) {
		unsigned __int128 add =
			(unsigned __int128)(now_ns - rl->last_ns) * rl->rate + rl->rem;
		uint64_t whole = add / NS_PER_S > cap ? cap : (uint64_t)(add / NS_PER_S);
		rl->rem = (uint64_t)(add % NS_PER_S);
		rl->tokens = rl->tokens + whole > cap ? cap : rl->tokens + whole;
		if (rl->tokens == cap)
			rl->rem = 0;
		rl->last_ns = now_ns;
	}
	if (rl->tokens >= n) {
		rl->tokens -= n;
		return 0;
	}
	unsigned __int128 need = (unsigned __int128)(n - rl->tokens) * NS_PER_S;
	need = need > rl->rem ? need - rl->rem : 0;
	return (uint64_t)((need + rl->rate - 1) / rl->rate);
}
