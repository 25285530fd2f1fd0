/* SPDX-License-Identifier: Apache-2.0 */
/* Median, MAD, selection, trimmed mean and quantiles against a full sort
 * (server/analysis/robust.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/robust.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static uint64_t next(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return *st >> 33;
}

/* Random arrays of many sizes and shapes (distinct, few distinct values, sorted, reversed):
 * every k of the selection and the median and MAD equal what a sort gives. */
static void test_against_sort(void **state)
{
	uint64_t st = 1;
	double *v = malloc(3000 * sizeof(*v)), *s = malloc(3000 * sizeof(*s));
	double *w = malloc(3000 * sizeof(*w)), *scratch = malloc(3000 * sizeof(*scratch));

	(void)state;
	assert_non_null(v);
	assert_non_null(s);
	assert_non_null(w);
	assert_non_null(scratch);
	for (int round = 0; round < 400; round++) {
		size_t n = 1 + next(&st) % (round < 300 ? 70 : 3000);
		int shape = round % 4;
		for (size_t i = 0; i < n; i++)
			v[i] = shape == 1 ? (double)(next(&st) % 3)
			       : shape == 2 ? (double)i
			       : shape == 3 ? (double)(n - i)
					    : (double)next(&st) / 1000.0;
		memcpy(s, v, n * sizeof(*v));
		qsort(s, n, sizeof(*s), cmp);
		size_t k = next(&st) % n;
		memcpy(w, v, n * sizeof(*v));
		assert_true(robust_select(w, n, k) == s[k]);
		for (size_t i = 0; i < n; i++) /* partitioned around k */
			assert_true(i < k ? w[i] <= s[k] : w[i] >= s[k]);
		double med = n & 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2, m, mad;
		memcpy(w, v, n * sizeof(*v));
		assert_true(robust_median(w, n) == med);
		for (size_t i = 0; i < n; i++)
			w[i] = fabs(v[i] - med);
		qsort(w, n, sizeof(*w), cmp);
		double want_mad = n & 1 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
		robust_median_mad(v, n, scratch, &m, &mad);
		assert_true(m == med && mad == want_mad);
		/* Trimmed mean: the sorted middle. */
		size_t cut = (size_t)floor(0.1 * (double)n), lo = cut, hi = n - cut;
		double sum = 0;
		for (size_t i = lo; i < hi; i++)
			sum += s[i];
		memcpy(w, v, n * sizeof(*v));
		assert_true(fabs(robust_trimmed_mean(w, n, 0.1) - sum / (double)(hi - lo)) <=
			    1e-9 * fabs(sum));
		memcpy(w, v, n * sizeof(*v));
		assert_true(robust_quantile(w, n, 0.5) == s[(n - 1) / 2]);
		memcpy(w, v, n * sizeof(*v));
		assert_true(robust_quantile(w, n, 1.0) == s[n - 1]);
		memcpy(w, v, n * sizeof(*v));
		assert_true(robust_quantile(w, n, 0.0) == s[0]);
	}
	free(v);
	free(s);
	free(w);
	free(scratch);
}

static void test_edges(void **state)
{
	double v[4] = { 5, 5, 5, 5 }, scratch[4], m, mad;

	(void)state;
	assert_true(robust_median(v, 0) == 0);
	assert_true(robust_trimmed_mean(v, 0, 0.1) == 0);
	assert_true(robust_quantile(v, 0, 0.5) == 0);
	robust_median_mad(v, 0, scratch, &m, &mad);
	assert_true(m == 0 && mad == 0);
	robust_median_mad(v, 4, scratch, &m, &mad);
	assert_true(m == 5 && mad == 0);
	/* A trim of nearly half keeps the middle one or two. */
	double w[5] = { 1, 100, 2, 3, -50 };
	assert_true(robust_trimmed_mean(w, 5, 0.49) == 2);
	/* An outlier moves the median by at most one order statistic, the MAD barely. */
	double x[7] = { 1, 2, 3, 4, 5, 6, 1e9 };
	double sx[7];
	robust_median_mad(x, 7, sx, &m, &mad);
	assert_true(m == 4 && mad == 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_sort),
		cmocka_unit_test(test_edges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
