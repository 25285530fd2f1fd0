/* SPDX-License-Identifier: Apache-2.0 */
/* Clock readings as integer nanoseconds: monotonic, realtime (Unix epoch), boottime. */
#ifndef SYSOM_COMMON_CLOCK_H
#define SYSOM_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#define SYSOM_NS_PER_S 1000000000ull
#define SYSOM_NS_PER_MS 1000000ull
#define SYSOM_NS_PER_US 1000ull

/*
 * Clock `id` (CLOCK_MONOTONIC, CLOCK_REALTIME, ...) in nanoseconds. clock_gettime cannot fail
 * for the clocks this project uses; if it did, the reading is 0.
 */
static inline uint64_t sysom_clock_ns(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * SYSOM_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in nanoseconds: for intervals and deadlines. */
static inline uint64_t sysom_monotonic_ns(void)
{
	return sysom_clock_ns(CLOCK_MONOTONIC);
}

/* CLOCK_REALTIME in nanoseconds since the Unix epoch: for timestamps that leave the process. */
static inline uint64_t sysom_realtime_ns(void)
{
	return sysom_clock_ns(CLOCK_REALTIME);
}

/* CLOCK_BOOTTIME in nanoseconds: monotonic, counting time suspended. */
static inline uint64_t sysom_boottime_ns(void)
{
	return sysom_clock_ns(CLOCK_BOOTTIME);
}

/* CLOCK_REALTIME in milliseconds since the Unix epoch. */
static inline int64_t sysom_realtime_ms(void)
{
	return (int64_t)(sysom_realtime_ns() / SYSOM_NS_PER_MS);
}

/* CLOCK_MONOTONIC in whole seconds. */
static inline int64_t sysom_monotonic_s(void)
{
	return (int64_t)(sysom_monotonic_ns() / SYSOM_NS_PER_S);
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t sysom_monotonic_ms(void)
{
	return (int64_t)(sysom_monotonic_ns() / SYSOM_NS_PER_MS);
}

#endif
