/* SPDX-License-Identifier: Apache-2.0 */
/* common/clock: the readings agree with clock_gettime and move the right way. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <time.h>

#include "common/clock.h"

static uint64_t ts_ns(clockid_t id)
{
	struct timespec ts;

	assert_int_equal(clock_gettime(id, &ts), 0);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void test_monotonic(void **state)
{
	(void)state;
	uint64_t a = ts_ns(CLOCK_MONOTONIC);
	uint64_t b = sysom_monotonic_ns();
	uint64_t c = sysom_monotonic_ns();
	uint64_t d = ts_ns(CLOCK_MONOTONIC);

	assert_true(a <= b && b <= c && c <= d);
	int64_t ms = sysom_monotonic_ms();
	assert_true(ms >= (int64_t)(d / 1000000) &&
		    ms <= (int64_t)(ts_ns(CLOCK_MONOTONIC) / 1000000));
	int64_t s = sysom_monotonic_s();
	assert_true(s >= (int64_t)(d / 1000000000) &&
		    s <= (int64_t)(ts_ns(CLOCK_MONOTONIC) / 1000000000));
}

static void test_realtime(void **state)
{
	(void)state;
	uint64_t a = ts_ns(CLOCK_REALTIME);
	uint64_t b = sysom_realtime_ns();
	int64_t ms = sysom_realtime_ms();
	uint64_t c = ts_ns(CLOCK_REALTIME);

	assert_true(b >= a && b <= c); /* (a step of the wall clock in between would fail this) */
	assert_true(ms >= (int64_t)(a / 1000000) && ms <= (int64_t)(c / 1000000));
	assert_true(b > 1577836800ull * 1000000000ull); /* after 2020: seconds, not ms, scaled */
}

static void test_boottime(void **state)
{
	(void)state;
	uint64_t a = ts_ns(CLOCK_BOOTTIME);
	uint64_t b = sysom_boottime_ns();

	assert_true(b >= a && b <= ts_ns(CLOCK_BOOTTIME));
	assert_true(b >= sysom_monotonic_ns() - 1000000000ull); /* boottime counts suspend too */
	assert_int_equal(sysom_clock_ns((clockid_t)-1000), 0); /* an invalid clock reads 0 */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_monotonic),
		cmocka_unit_test(test_realtime),
		cmocka_unit_test(test_boottime),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
