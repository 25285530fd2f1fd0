/* SPDX-License-Identifier: Apache-2.0 */
/* Slow-rank detection on constructed collective instances (server/analysis/straggler.c). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/straggler.h"

#define MS 1000000ll

/* Deterministic jitter in [0, amp) ns. */
static int64_t jitter(uint32_t *state, int64_t amp)
{
	*state = *state * 1664525u + 1013904223u;
	return amp ? (int64_t)(*state >> 8) % amp : 0;
}

/* `n` instances of `nranks`; rank `slow` enters `late` ns after the others every `every`-th
 * instance; everybody jitters by up to `amp` ns. Each instance's clock starts elsewhere. */
static struct straggler_group *build(int32_t nranks, uint32_t window, int n, int32_t slow,
				     int64_t late, int every, int64_t amp)
{
	struct straggler_group *g;
	int64_t entry[64];
	uint32_t st = 12345;

	assert_int_equal(straggler_group_new(nranks, window, &g), 0);
	for (int i = 0; i < n; i++) {
		int64_t base = 1700000000000000000ll + (int64_t)i * 50 * MS;
		for (int32_t r = 0; r < nranks; r++)
			entry[r] = base + jitter(&st, amp) +
				   (r == slow && every && i % every == 0 ? late : 0);
		straggler_group_add(g, entry);
	}
	return g;
}

static void test_persistent_straggler(void **state)
{
	struct straggler_params p;
	struct straggler_rank out[8];
	struct straggler_group *g = build(8, 100, 150, 5, 5 * MS, 1, 200000);

	(void)state;
	straggler_params_default(&p);
	assert_int_equal(straggler_group_instances(g), 100); /* the window keeps the last 100 */
	assert_int_equal(straggler_group_analyse(g, &p, out), 1);
	assert_true(out[5].straggler && out[5].persistent);
	assert_true(out[5].excess_ns > 4.5 * MS && out[5].excess_ns < 5.5 * MS);
	assert_true(out[5].flagged_fraction > 0.99);
	assert_true(out[5].last_fraction > 0.99);
	assert_true(out[5].z > 10);
	for (int r = 0; r < 8; r++)
		if (r != 5)
			assert_false(out[r].straggler);
	straggler_group_free(g);
}

/* Late by 20 ms in one instance of five: straggling on average, flagged 20% of the time. */
static void test_intermittent_straggler(void **state)
{
	struct straggler_params p;
	struct straggler_rank out[8];
	struct straggler_group *g = build(8, 100, 100, 2, 20 * MS, 5, 300000);

	(void)state;
	straggler_params_default(&p);
	assert_int_equal(straggler_group_analyse(g, &p, out), 1);
	assert_true(out[2].straggler);
	assert_false(out[2].persistent);
	assert_true(fabs(out[2].flagged_fraction - 0.2) < 0.011);
	straggler_group_free(g);
}

/* Jitter only, and a constant 0.5 ms lead below the 1 ms floor: nobody. */
static void test_noise_is_not_a_straggler(void **state)
{
	struct straggler_params p;
	struct straggler_rank out[16];
	struct straggler_group *g = build(16, 100, 100, 7, MS / 2, 1, 800000);

	(void)state;
	straggler_params_default(&p);
	assert_int_equal(straggler_group_analyse(g, &p, out), 0);
	for (int r = 0; r < 16; r++)
		assert_true(out[r].flagged_fraction < 0.05);
	/* A lower floor finds the 0.5 ms rank; a higher k with it does not see noise. */
	p.min_excess_ns = 100000;
	assert_int_equal(straggler_group_analyse(g, &p, out), 1);
	assert_true(out[7].straggler);
	straggler_group_free(g);
}

/* Two ranks: μ + kσ over both can never be exceeded; leave-one-out still names the slow one. */
static void test_two_ranks(void **state)
{
	struct straggler_params p;
	struct straggler_rank out[2];
	struct straggler_group *g = build(2, 100, 40, 1, 3 * MS, 1, 100000);

	(void)state;
	straggler_params_default(&p);
	assert_int_equal(straggler_group_analyse(g, &p, out), 1);
	assert_true(out[1].straggler && out[1].persistent);
	assert_false(out[0].straggler);
	straggler_group_free(g);
}

static void test_incomplete_and_bounds(void **state)
{
	struct straggler_params p;
	struct straggler_rank out[4];
	struct straggler_group *g;
	bool present[4] = { true, true, false, true };

	(void)state;
	straggler_params_default(&p);
	assert_int_equal(straggler_group_new(0, 10, &g), -EINVAL);
	assert_int_equal(straggler_group_new(4, 0, &g), -EINVAL);
	assert_int_equal(straggler_group_new(4, STRAGGLER_MAX_WINDOW + 1, &g), -EINVAL);
	assert_int_equal(straggler_group_new(STRAGGLER_MAX_RANKS + 1, 10, &g), -EINVAL);
	assert_int_equal(straggler_group_new(4, 10, &g), 0);
	/* Nothing yet: nobody, no division by zero. */
	assert_int_equal(straggler_group_analyse(g, &p, out), 0);
	straggler_group_add_incomplete(g, present);
	straggler_group_add_incomplete(g, present);
	assert_int_equal(straggler_group_incomplete(g), 2);
	assert_int_equal(straggler_group_analyse(g, &p, out), 0);
	assert_int_equal(out[2].missing, 2);
	assert_int_equal(out[0].missing, 0);
	straggler_group_free(g);
	/* A single-rank group never has a straggler. */
	int64_t e = 5;
	assert_int_equal(straggler_group_new(1, 10, &g), 0);
	straggler_group_add(g, &e);
	assert_int_equal(straggler_group_analyse(g, &p, out), 0);
	straggler_group_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_persistent_straggler),
		cmocka_unit_test(test_intermittent_straggler),
		cmocka_unit_test(test_noise_is_not_a_straggler),
		cmocka_unit_test(test_two_ranks),
		cmocka_unit_test(test_incomplete_and_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
