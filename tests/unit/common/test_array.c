/* SPDX-License-Identifier: Apache-2.0 */
/* common/array: doubling growth, the first capacity, bounds of the capacity's type, failures
 * that leave the array as it was. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/array.h"

static void test_grows_by_doubling(void **state)
{
	uint64_t *items = NULL;
	uint32_t cap = 0, n = 0;

	(void)state;
	for (uint32_t i = 0; i < 1000; i++) {
		assert_int_equal(SYSOM_ARRAY_RESERVE(items, cap, n, 16), 0);
		assert_true(cap > n);
		items[n++] = i;
	}
	assert_int_equal(cap, 1024); /* 16, 32, ..., 1024 */
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(items[i], i);
	/* Room left: nothing moves. */
	uint64_t *before = items;
	assert_int_equal(SYSOM_ARRAY_RESERVE(items, cap, 500, 16), 0);
	assert_ptr_equal(items, before);
	assert_int_equal(cap, 1024);
	free(items);
}

static void test_first_zero_means_one(void **state)
{
	int *items = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(SYSOM_ARRAY_RESERVE(items, cap, 0, 0), 0);
	assert_int_equal(cap, 1);
	free(items);
}

static void test_bounded_by_cap_type(void **state)
{
	char *items = NULL;
	uint8_t cap = 0;
	size_t n = 0;

	(void)state;
	while (n < 255) {
		assert_int_equal(SYSOM_ARRAY_RESERVE(items, cap, n, 100), 0);
		n++;
	}
	assert_int_equal(cap, 255); /* 100, 200, then clamped to the type's largest value */
	/* Full at the type's bound: refused, array untouched. */
	char *before = items;
	assert_int_equal(SYSOM_ARRAY_RESERVE(items, cap, n, 100), -EOVERFLOW);
	assert_ptr_equal(items, before);
	assert_int_equal(cap, 255);
	free(items);
}

static void test_explicit_bound_and_size_overflow(void **state)
{
	void *items = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(sysom_array_reserve(&items, &cap, 0, 8, 64, 10), 0);
	assert_int_equal(cap, 10); /* the first capacity clamped to max_cap */
	assert_int_equal(sysom_array_reserve(&items, &cap, 10, 8, 64, 10), -EOVERFLOW);
	assert_int_equal(cap, 10);
	free(items);
	items = NULL;
	cap = 0;
	/* elements so large that the byte size overflows size_t */
	assert_int_equal(sysom_array_reserve(&items, &cap, 0, SIZE_MAX / 2, 4, SIZE_MAX), -EOVERFLOW);
	assert_null(items);
	assert_int_equal(cap, 0);
	/* a capacity that can no longer double */
	cap = SIZE_MAX / 2 + 1;
	assert_int_equal(sysom_array_reserve(&items, &cap, cap, 1, 4, SIZE_MAX), -EOVERFLOW);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grows_by_doubling),
		cmocka_unit_test(test_first_zero_means_one),
		cmocka_unit_test(test_bounded_by_cap_type),
		cmocka_unit_test(test_explicit_bound_and_size_overflow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
