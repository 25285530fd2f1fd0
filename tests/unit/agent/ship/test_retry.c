/* SPDX-License-Identifier: Apache-2.0 */
/* Backoff bounds, Retry-After, saturating time arithmetic and waits of the sender clock. */
#include <pthread.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "agent/ship/retry.h"
#include "common/bytes.h"

#define S 1000000000ull

struct fake {
	uint64_t now;
	uint64_t next_random;
	uint64_t slept;
	int sleeps;
};

static uint64_t fake_now(void *ctx)
{
	return ((struct fake *)ctx)->now;
}

static void fake_sleep(void *ctx, uint64_t ns)
{
	struct fake *f = ctx;

	f->slept += ns;
	f->sleeps++;
	f->now += ns;
}

static uint64_t fake_random(void *ctx)
{
	return ((struct fake *)ctx)->next_random;
}

static void test_backoff_bounds(void **state)
{
	struct fake f = { 0 };
	struct retry_clock c;

	(void)state;
	retry_clock_init(&c, fake_now, fake_sleep, fake_random, &f);
	/* The largest random value reaches the cap; the smallest gives no delay. */
	f.next_random = UINT64_MAX;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 1, -1), 1 * S);
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 2, -1), 2 * S);
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 6, -1), 32 * S);
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 7, -1), 60 * S);
	/* A huge failure count neither overflows nor loops for long. */
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, UINT32_MAX, -1), 60 * S);
	f.next_random = 0;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 7, -1), 0);
	/* Half of the range maps to half of the cap. */
	f.next_random = UINT64_MAX / 2 + 1;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 1, -1), S / 2);
}

static void test_retry_after(void **state)
{
	struct fake f = { .next_random = 0 };
	struct retry_clock c;

	(void)state;
	retry_clock_init(&c, fake_now, fake_sleep, fake_random, &f);
	/* The server's Retry-After is the least wait... */
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 9, 0), 0);
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 1, 7), 7 * S);
	/* ... with the backoff's jitter on top ... */
	f.next_random = UINT64_MAX;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 1, 7), 8 * S);
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 4, 1), 9 * S);
	f.next_random = UINT64_MAX / 2 + 1;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 3, 1), 3 * S);
	/* ... and never more than the maximum. */
	f.next_random = 0;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 1, 3600), 60 * S);
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 1, INT64_MAX), 60 * S);
	f.next_random = UINT64_MAX;
	assert_int_equal(retry_backoff_ns(&c, 1 * S, 60 * S, 30, 59), 60 * S);
}

/* The overload answer of the server's transport ("too many requests in progress",
 * Retry-After: 1) to a fleet: 5,000 agents refused at the same moment come back spread over
 * the seconds after it, fewer and fewer per second as their refusals repeat, where honouring
 * Retry-After exactly sent all 5,000 again one second later, every second. */
static void test_retry_after_spreads_a_fleet(void **state)
{
	struct retry_clock c;
	uint32_t second[8] = { 0 }, late = 0;

	(void)state;
	retry_clock_init(&c, NULL, NULL, NULL, NULL);
	for (int agent = 0; agent < 5000; agent++) {
		uint64_t d = retry_backoff_ns(&c, 1 * S, 60 * S, 1, 1);
		assert_true(d >= 1 * S && d <= 2 * S);
		d = retry_backoff_ns(&c, 1 * S, 60 * S, 4, 1); /* the fourth refusal in a row */
		assert_true(d >= 1 * S && d <= 9 * S);
		if (d / S < 8)
			second[d / S]++;
		else
			late++;
	}
	/* Uniform over [1 s, 9 s]: about 625 per second (binomial, 6 sigma), none before 1 s. */
	assert_int_equal(second[0], 0);
	for (int s = 1; s < 8; s++)
		assert_in_range(second[s], 625 - 140, 625 + 140);
	assert_in_range(late, 625 - 140, 625 + 140);
}

static void test_default_random_spreads(void **state)
{
	struct retry_clock c;
	uint64_t below_half = 0;

	(void)state;
	retry_clock_init(&c, NULL, NULL, NULL, NULL);
	for (int i = 0; i < 4000; i++) {
		uint64_t d = retry_backoff_ns(&c, 1000, 1000, 1, -1);
		assert_true(d <= 1000);
		below_half += d < 500;
	}
	/* Uniform jitter: about half below the middle (binomial, 4000 draws, 6 sigma). */
	assert_in_range(below_half, 1810, 2190);
}

static void test_sat_add(void **state)
{
	(void)state;
	assert_int_equal(retry_sat_add(1, 2), 3);
	assert_int_equal(retry_sat_add(UINT64_MAX - 1, 1), UINT64_MAX);
	assert_int_equal(retry_sat_add(UINT64_MAX, UINT64_MAX), UINT64_MAX);
}

static void test_hooked_wait(void **state)
{
	struct fake f = { .now = 100 };
	struct retry_clock c;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond;

	(void)state;
	assert_int_equal(retry_cond_init(&cond), 0);
	retry_clock_init(&c, fake_now, fake_sleep, NULL, &f);
	pthread_mutex_lock(&lock);
	retry_clock_wait_until(&c, &lock, &cond, 350);
	assert_int_equal(f.slept, 250);
	/* A deadline in the past sleeps for nothing. */
	retry_clock_wait_until(&c, &lock, &cond, 10);
	assert_int_equal(f.slept, 250);
	assert_int_equal(f.sleeps, 2);
	pthread_mutex_unlock(&lock);
	pthread_cond_destroy(&cond);
}

struct waker {
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	bool *flag;
};

static void *wake_soon(void *arg)
{
	struct waker *w = arg;
	struct timespec d = { 0, 20000000 };

	nanosleep(&d, NULL);
	pthread_mutex_lock(w->lock);
	*w->flag = true;
	pthread_cond_signal(w->cond);
	pthread_mutex_unlock(w->lock);
	return NULL;
}

static void test_real_wait(void **state)
{
	struct retry_clock c;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond;
	bool woken = false;
	struct waker w = { &lock, &cond, &woken };
	pthread_t thread;

	(void)state;
	assert_int_equal(retry_cond_init(&cond), 0);
	retry_clock_init(&c, NULL, NULL, NULL, NULL);

	/* A deadline is honoured on the monotonic clock (callers re-wait on spurious wakeups). */
	uint64_t start = retry_clock_now(&c), until = start + 20000000ull;
	pthread_mutex_lock(&lock);
	while (retry_clock_now(&c) < until)
		retry_clock_wait_until(&c, &lock, &cond, until);
	pthread_mutex_unlock(&lock);
	assert_true(retry_clock_now(&c) - start >= 20000000ull);

	/* The farthest deadline neither overflows the timespec nor outlasts a signal. */
	pthread_mutex_lock(&lock);
	assert_int_equal(pthread_create(&thread, NULL, wake_soon, &w), 0);
	while (!woken)
		retry_clock_wait_until(&c, &lock, &cond, UINT64_MAX);
	pthread_mutex_unlock(&lock);
	pthread_join(thread, NULL);
	pthread_cond_destroy(&cond);
}

static void test_text_sanitize(void **state)
{
	char out[8];

	(void)state;
	sysom_text_sanitize(out, sizeof(out), "a\nb\x7f\x01" "cdefgh", 10);
	assert_string_equal(out, "a b  cd");
	sysom_text_sanitize(out, sizeof(out), "xyz", 0);
	assert_string_equal(out, "");
	sysom_text_sanitize(out, 1, "xyz", 3);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backoff_bounds),
		cmocka_unit_test(test_retry_after),
		cmocka_unit_test(test_retry_after_spreads_a_fleet),
		cmocka_unit_test(test_default_random_spreads),
		cmocka_unit_test(test_sat_add),
		cmocka_unit_test(test_hooked_wait),
		cmocka_unit_test(test_real_wait),
		cmocka_unit_test(test_text_sanitize),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
