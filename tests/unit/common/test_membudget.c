/* SPDX-License-Identifier: Apache-2.0 */
/* common/membudget: reserve and release, the capacity never exceeded, bounded waits, -E2BIG
 * for what can never fit, freed bytes handed oldest first without small steps starving, and
 * many threads at once. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/membudget.h"

static struct membudget *budget_new(uint64_t capacity, uint32_t max_wait_ms)
{
	struct membudget_options o = { .capacity = capacity, .max_wait_ms = max_wait_ms };
	struct membudget *b = NULL;

	assert_int_equal(membudget_new(&o, &b), 0);
	assert_non_null(b);
	return b;
}

static struct membudget_stats stats_of(struct membudget *b)
{
	struct membudget_stats st;

	membudget_stats_get(b, &st);
	return st;
}

/* Polls (the condition, not a fixed sleep) until `n` steps wait; fails after 10 s. */
static void wait_for_waiting(struct membudget *b, uint64_t n)
{
	uint64_t deadline = sysom_monotonic_ns() + 10 * SYSOM_NS_PER_S;

	while (stats_of(b).waiting != n) {
		assert_true(sysom_monotonic_ns() < deadline);
		sched_yield();
	}
}

/* A thread growing one hold. */
struct grower {
	pthread_t thread;
	struct membudget_hold hold;
	uint64_t bytes;
	int rc;
};

static void *grow_main(void *arg)
{
	struct grower *g = arg;

	g->rc = membudget_hold_resize(&g->hold, g->bytes);
	return NULL;
}

static void grower_start(struct grower *g, struct membudget *b, uint64_t bytes)
{
	membudget_hold_init(&g->hold, b);
	g->bytes = bytes;
	g->rc = 1;
	assert_int_equal(pthread_create(&g->thread, NULL, grow_main, g), 0);
}

static int grower_join(struct grower *g)
{
	assert_int_equal(pthread_join(g->thread, NULL), 0);
	return g->rc;
}

static void test_invalid_options(void **state)
{
	struct membudget_options zero = { 0 };
	struct membudget *b = NULL;

	(void)state;
	assert_int_equal(membudget_new(&zero, &b), -EINVAL);
	assert_null(b);
	assert_int_equal(membudget_new(NULL, &b), -EINVAL);
	membudget_free(NULL);
	membudget_hold_release(NULL);
}

static void test_reserve_and_release(void **state)
{
	struct membudget *b = budget_new(100, 0);
	struct membudget_hold x, y;

	(void)state;
	membudget_hold_init(&x, b);
	membudget_hold_init(&y, b);
	assert_int_equal(membudget_hold_resize(&x, 60), 0);
	assert_int_equal(x.bytes, 60);
	assert_int_equal(stats_of(b).reserved, 60);
	assert_int_equal(membudget_hold_resize(&x, 40), 0); /* shrinks */
	assert_int_equal(stats_of(b).reserved, 40);
	assert_int_equal(membudget_hold_resize(&y, 60), 0); /* exactly the capacity */
	assert_int_equal(stats_of(b).reserved, 100);
	assert_int_equal(membudget_hold_resize(&y, 61), -EAGAIN); /* full, no waiting allowed */
	assert_int_equal(y.bytes, 60);
	membudget_hold_release(&x);
	membudget_hold_release(&y);
	struct membudget_stats st = stats_of(b);
	assert_int_equal(st.capacity, 100);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.reserved_peak, 100);
	assert_int_equal(st.grants, 2);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.waits, 0); /* max_wait 0: refused without waiting */
	assert_int_equal(x.bytes, 0);
	membudget_free(b);
}

static void test_oversized_fails_at_once(void **state)
{
	struct membudget *b = budget_new(100, 10000);
	struct membudget_hold h;

	(void)state;
	membudget_hold_init(&h, b);
	assert_int_equal(membudget_hold_resize(&h, 50), 0);
	uint64_t t0 = sysom_monotonic_ns();
	assert_int_equal(membudget_hold_resize(&h, 101), -E2BIG);
	assert_true(sysom_monotonic_ns() - t0 < 5 * SYSOM_NS_PER_S); /* no 10 s wait */
	assert_int_equal(h.bytes, 50); /* kept what it had */
	assert_int_equal(stats_of(b).oversized, 1);
	assert_int_equal(stats_of(b).waits, 0);
	membudget_hold_release(&h);
	assert_int_equal(stats_of(b).reserved, 0);
	membudget_free(b);
}

static void test_wait_is_bounded_per_hold(void **state)
{
	struct membudget *b = budget_new(100, 100);
	struct membudget_hold full, h;

	(void)state;
	membudget_hold_init(&full, b);
	membudget_hold_init(&h, b);
	assert_int_equal(membudget_hold_resize(&full, 100), 0);
	uint64_t t0 = sysom_monotonic_ns();
	assert_int_equal(membudget_hold_resize(&h, 1), -EAGAIN);
	uint64_t waited = sysom_monotonic_ns() - t0;
	assert_true(waited >= 100 * SYSOM_NS_PER_MS);
	assert_true(h.waited_ns >= 100 * SYSOM_NS_PER_MS);
	assert_int_equal(h.bytes, 0);
	/* The hold's wait is spent: a second step fails without waiting again. */
	t0 = sysom_monotonic_ns();
	assert_int_equal(membudget_hold_resize(&h, 1), -EAGAIN);
	assert_true(sysom_monotonic_ns() - t0 < 50 * SYSOM_NS_PER_MS);
	struct membudget_stats st = stats_of(b);
	assert_int_equal(st.waits, 1);
	assert_int_equal(st.timeouts, 2);
	assert_int_equal(st.waiting, 0);
	/* A fresh hold (a new request) may wait again. */
	membudget_hold_init(&h, b);
	assert_int_equal(membudget_hold_resize(&h, 1), -EAGAIN);
	assert_int_equal(stats_of(b).waits, 2);
	membudget_hold_release(&full);
	assert_int_equal(stats_of(b).reserved, 0);
	membudget_free(b);
}

static void test_waiter_gets_released_bytes(void **state)
{
	struct membudget *b = budget_new(100, 10000);
	struct membudget_hold first;
	struct grower g;

	(void)state;
	membudget_hold_init(&first, b);
	assert_int_equal(membudget_hold_resize(&first, 80), 0);
	grower_start(&g, b, 50);
	wait_for_waiting(b, 1);
	assert_int_equal(g.rc, 1); /* still waiting */
	membudget_hold_resize(&first, 50); /* frees 30: 70 free, 50 wanted */
	assert_int_equal(grower_join(&g), 0);
	assert_int_equal(g.hold.bytes, 50);
	struct membudget_stats st = stats_of(b);
	assert_int_equal(st.reserved, 100);
	assert_int_equal(st.waits, 1);
	assert_int_equal(st.timeouts, 0);
	assert_int_equal(st.waiting, 0);
	membudget_hold_release(&g.hold);
	membudget_hold_release(&first);
	assert_int_equal(stats_of(b).reserved, 0);
	membudget_free(b);
}

/* Saturated while a step waits or every byte is reserved, not before. */
static void test_saturated(void **state)
{
	struct membudget *b = budget_new(100, 10000);
	struct membudget_hold first;
	struct grower g;

	(void)state;
	membudget_hold_init(&first, b);
	assert_false(membudget_saturated(b));
	assert_int_equal(membudget_hold_resize(&first, 80), 0);
	assert_false(membudget_saturated(b));
	grower_start(&g, b, 50);
	wait_for_waiting(b, 1);
	assert_true(membudget_saturated(b)); /* 20 free, but a step waits */
	membudget_hold_resize(&first, 50);
	assert_int_equal(grower_join(&g), 0);
	assert_true(membudget_saturated(b)); /* 100 of 100 reserved */
	membudget_hold_release(&g.hold);
	assert_false(membudget_saturated(b));
	membudget_hold_release(&first);
	membudget_free(b);
}

static void test_small_steps_pass_a_large_waiter(void **state)
{
	struct membudget *b = budget_new(100, 10000);
	struct membudget_hold first, small;
	struct grower large;

	(void)state;
	membudget_hold_init(&first, b);
	membudget_hold_init(&small, b);
	assert_int_equal(membudget_hold_resize(&first, 80), 0);
	grower_start(&large, b, 50);
	wait_for_waiting(b, 1);
	/* 20 free: the waiting 50 does not hold back a 15 that fits. */
	uint64_t t0 = sysom_monotonic_ns();
	assert_int_equal(membudget_hold_resize(&small, 15), 0);
	assert_true(sysom_monotonic_ns() - t0 < 5 * SYSOM_NS_PER_S);
	assert_int_equal(stats_of(b).waiting, 1);
	membudget_hold_release(&first); /* 85 free: the large one goes */
	assert_int_equal(grower_join(&large), 0);
	assert_int_equal(stats_of(b).reserved, 65);
	membudget_hold_release(&large.hold);
	membudget_hold_release(&small);
	membudget_free(b);
}

static void test_released_bytes_go_to_the_oldest(void **state)
{
	struct membudget *b = budget_new(100, 10000);
	struct membudget_hold full;
	struct grower older, younger;

	(void)state;
	membudget_hold_init(&full, b);
	assert_int_equal(membudget_hold_resize(&full, 100), 0);
	grower_start(&older, b, 60);
	wait_for_waiting(b, 1);
	grower_start(&younger, b, 60);
	wait_for_waiting(b, 2);
	membudget_hold_release(&full); /* room for one of them: the older */
	assert_int_equal(grower_join(&older), 0);
	wait_for_waiting(b, 1);
	assert_int_equal(younger.rc, 1);
	membudget_hold_release(&older.hold);
	assert_int_equal(grower_join(&younger), 0);
	assert_int_equal(stats_of(b).reserved, 60);
	assert_int_equal(stats_of(b).reserved_peak, 100);
	membudget_hold_release(&younger.hold);
	membudget_free(b);
}

static void test_growing_hold_waits_for_the_difference(void **state)
{
	struct membudget *b = budget_new(100, 10000);
	struct membudget_hold other;
	struct grower g;

	(void)state;
	membudget_hold_init(&other, b);
	assert_int_equal(membudget_hold_resize(&other, 60), 0);
	membudget_hold_init(&g.hold, b);
	assert_int_equal(membudget_hold_resize(&g.hold, 30), 0);
	/* Growing 30 → 50 needs 20 more; 10 are free. */
	g.bytes = 50;
	g.rc = 1;
	assert_int_equal(pthread_create(&g.thread, NULL, grow_main, &g), 0);
	wait_for_waiting(b, 1);
	membudget_hold_resize(&other, 50); /* 20 free now */
	assert_int_equal(grower_join(&g), 0);
	assert_int_equal(g.hold.bytes, 50);
	assert_int_equal(stats_of(b).reserved, 100);
	membudget_hold_release(&g.hold);
	membudget_hold_release(&other);
	membudget_free(b);
}

static void test_holds_waiting_on_one_another(void **state)
{
	struct membudget *b = budget_new(100, 30000);
	struct grower older, newer;

	(void)state;
	/* Two requests grew part way: 60 + 40 = everything. */
	membudget_hold_init(&older.hold, b);
	membudget_hold_init(&newer.hold, b);
	assert_int_equal(membudget_hold_resize(&older.hold, 60), 0);
	assert_int_equal(membudget_hold_resize(&newer.hold, 40), 0);
	older.bytes = 90;
	older.rc = 1;
	assert_int_equal(pthread_create(&older.thread, NULL, grow_main, &older), 0);
	wait_for_waiting(b, 1);
	/* The newer one wanting more closes the cycle: it fails at once, not after 30 s. */
	uint64_t t0 = sysom_monotonic_ns();
	assert_int_equal(membudget_hold_resize(&newer.hold, 60), -EAGAIN);
	assert_true(sysom_monotonic_ns() - t0 < 10 * SYSOM_NS_PER_S);
	assert_int_equal(newer.hold.bytes, 40);
	assert_int_equal(older.rc, 1); /* the older still waits */
	membudget_hold_release(&newer.hold); /* its request gives up: the older goes on */
	assert_int_equal(grower_join(&older), 0);
	assert_int_equal(older.hold.bytes, 90);
	struct membudget_stats st = stats_of(b);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.waits, 2);
	assert_int_equal(st.waiting, 0);
	membudget_hold_release(&older.hold);
	assert_int_equal(stats_of(b).reserved, 0);
	membudget_free(b);
}

static void test_cycle_closed_by_a_release(void **state)
{
	struct membudget *b = budget_new(100, 30000);
	struct membudget_hold running;
	struct grower w1, w2;

	(void)state;
	membudget_hold_init(&running, b);
	membudget_hold_init(&w1.hold, b);
	membudget_hold_init(&w2.hold, b);
	assert_int_equal(membudget_hold_resize(&running, 20), 0);
	assert_int_equal(membudget_hold_resize(&w1.hold, 50), 0);
	assert_int_equal(membudget_hold_resize(&w2.hold, 30), 0);
	w1.bytes = 90;
	w1.rc = 1;
	assert_int_equal(pthread_create(&w1.thread, NULL, grow_main, &w1), 0);
	wait_for_waiting(b, 1);
	w2.bytes = 60;
	w2.rc = 1;
	assert_int_equal(pthread_create(&w2.thread, NULL, grow_main, &w2), 0);
	wait_for_waiting(b, 2);
	/* The running request ends: 20 free fits neither (40 and 30 wanted), and all 80 reserved
	 * now belong to waiters. The newer one is failed at once... */
	uint64_t t0 = sysom_monotonic_ns();
	membudget_hold_release(&running);
	assert_int_equal(grower_join(&w2), -EAGAIN);
	assert_true(sysom_monotonic_ns() - t0 < 10 * SYSOM_NS_PER_S); /* not its 30 s bound */
	assert_int_equal(w1.rc, 1);
	/* ... and once its request gives its 30 back, the older one goes on. */
	membudget_hold_release(&w2.hold);
	assert_int_equal(grower_join(&w1), 0);
	assert_int_equal(w1.hold.bytes, 90);
	membudget_hold_release(&w1.hold);
	assert_int_equal(stats_of(b).reserved, 0);
	assert_int_equal(stats_of(b).timeouts, 1);
	membudget_free(b);
}

static void test_null_budget_accounts_nothing(void **state)
{
	struct membudget_hold h;

	(void)state;
	membudget_hold_init(&h, NULL);
	assert_int_equal(membudget_hold_resize(&h, UINT64_MAX), 0);
	membudget_hold_release(&h);
	assert_int_equal(h.bytes, 0);
}

/* Many threads reserving and releasing: what they believe they hold never passes the
 * capacity, every step is served (none holds while it waits, so none can be stuck), and the
 * budget ends empty. */
#define STRESS_THREADS 8
#define STRESS_ROUNDS 3000
#define STRESS_CAPACITY 100

static atomic_uint_least64_t stress_held;
static atomic_bool stress_over;

struct stresser {
	pthread_t thread;
	struct membudget *budget;
	unsigned seed;
	int failures;
};

static void *stress_main(void *arg)
{
	struct stresser *s = arg;
	struct membudget_hold h;

	membudget_hold_init(&h, s->budget);
	for (int i = 0; i < STRESS_ROUNDS; i++) {
		uint64_t want = 1 + (uint64_t)(rand_r(&s->seed) % 40);

		h.waited_ns = 0; /* each round is a new request */
		if (membudget_hold_resize(&h, want)) {
			s->failures++;
			continue;
		}
		if (atomic_fetch_add(&stress_held, want) + want > STRESS_CAPACITY)
			atomic_store(&stress_over, true);
		atomic_fetch_sub(&stress_held, want - want / 2);
		membudget_hold_resize(&h, want / 2);
		atomic_fetch_sub(&stress_held, want / 2);
		membudget_hold_release(&h);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct membudget *b = budget_new(STRESS_CAPACITY, 30000);
	struct stresser s[STRESS_THREADS];

	(void)state;
	atomic_store(&stress_held, 0);
	atomic_store(&stress_over, false);
	for (int i = 0; i < STRESS_THREADS; i++) {
		s[i] = (struct stresser){ .budget = b, .seed = 17u + (unsigned)i };
		assert_int_equal(pthread_create(&s[i].thread, NULL, stress_main, &s[i]), 0);
	}
	for (int i = 0; i < STRESS_THREADS; i++) {
		assert_int_equal(pthread_join(s[i].thread, NULL), 0);
		assert_int_equal(s[i].failures, 0);
	}
	assert_false(atomic_load(&stress_over));
	struct membudget_stats st = stats_of(b);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.waiting, 0);
	assert_true(st.reserved_peak <= STRESS_CAPACITY);
	assert_int_equal(st.grants, STRESS_THREADS * STRESS_ROUNDS);
	assert_int_equal(st.timeouts, 0);
	membudget_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invalid_options),
		cmocka_unit_test(test_reserve_and_release),
		cmocka_unit_test(test_oversized_fails_at_once),
		cmocka_unit_test(test_wait_is_bounded_per_hold),
		cmocka_unit_test(test_waiter_gets_released_bytes),
		cmocka_unit_test(test_saturated),
		cmocka_unit_test(test_small_steps_pass_a_large_waiter),
		cmocka_unit_test(test_released_bytes_go_to_the_oldest),
		cmocka_unit_test(test_growing_hold_waits_for_the_difference),
		cmocka_unit_test(test_holds_waiting_on_one_another),
		cmocka_unit_test(test_cycle_closed_by_a_release),
		cmocka_unit_test(test_null_budget_accounts_nothing),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
