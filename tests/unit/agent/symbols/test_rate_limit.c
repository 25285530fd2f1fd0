/* SPDX-License-Identifier: Apache-2.0 */
/* agent/symbols/rate_limit: refill, cap, fractional bytes and the wait it asks for. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/symbols/rate_limit.h"

#define S 1000000000ull

static void test_starts_empty_and_waits(void **state)
{
	struct rate_limit rl;

	(void)state;
	rate_limit_init(&rl, 1000, 5 * S); /* 1000 bytes/s */
	/* Nothing yet: 100 bytes take 100 ms. */
	assert_int_equal(rate_limit_take(&rl, 100, 1000, 5 * S), S / 10);
	/* After the wait it is granted, and the bucket is empty again. */
	assert_int_equal(rate_limit_take(&rl, 100, 1000, 5 * S + S / 10), 0);
	assert_int_equal(rl.tokens, 0);
	/* A clock that goes backwards refills nothing. */
	assert_int_equal(rate_limit_take(&rl, 1, 1000, 4 * S), S / 1000);
}

static void test_cap(void **state)
{
	struct rate_limit rl;

	(void)state;
	rate_limit_init(&rl, 1000, 0);
	/* An hour idle fills only up to the cap. */
	assert_int_equal(rate_limit_take(&rl, 500, 500, 3600 * S), 0);
	assert_int_equal(rl.tokens, 0);
	assert_int_equal(rate_limit_take(&rl, 500, 500, 3600 * S), S / 2);
}

static void test_fractions_accumulate(void **state)
{
	struct rate_limit rl;
	uint64_t t = 0;

	(void)state;
	rate_limit_init(&rl, 3, 0); /* 3 bytes/s: one byte every 333.33 ms */
	/* Steps of 100 ms: the remainders add up, so 3 bytes arrive in exactly one second. */
	int granted = 0;
	for (int i = 1; i <= 10; i++) {
		t = (uint64_t)i * (S / 10);
		if (rate_limit_take(&rl, 1, 10, t) == 0)
			granted++;
	}
	assert_int_equal(granted, 3);
	/* The wait is rounded up, never 0 when not granted. */
	assert_true(rate_limit_take(&rl, 1, 10, t) >= 1);
}

static void test_large_rate_no_overflow(void **state)
{
	struct rate_limit rl;

	(void)state;
	rate_limit_init(&rl, UINT64_MAX / 2, 0);
	assert_int_equal(rate_limit_take(&rl, 1u << 20, 1u << 20, 86400 * S), 0);
	assert_int_equal(rl.tokens, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_starts_empty_and_waits),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_fractions_accumulate),
		cmocka_unit_test(test_large_rate_no_overflow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
