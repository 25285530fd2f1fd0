/* SPDX-License-Identifier: Apache-2.0 */
/* Median, MAD, trimmed mean and quantiles by selection (server/analysis/robust.h). */
#include "server/analysis/robust.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline void swap(double *a, double *b)
{
	double t = *a;
	*a = *b;
	*b = t;
}

/* Hoare-style quickselect with a median-of-three pivot; the insertion sort finishes small
 * ranges. Deterministic: adversarial orders are not a concern for analysis data, and the
 * median of three keeps sorted and reversed input linear. */
double robust_select(double *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;

	while (hi > lo + 16) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] < v[lo])
			swap(&v[mid], &v[lo]);
		if (v[hi] < v[lo])
			swap(&v[hi], &v[lo]);
		if (v[hi] < v[mid])
			swap(&v[hi], &v[mid]);
		double pivot = v[mid];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				swap(&v[i], &v[j]);
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		/* [lo, j] <= pivot <= [i, hi], and anything between equals the pivot. */
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return v[k];
	}
	for (size_t i = lo + 1; i <= hi; i++) {
		double x = v[i];
		size_t j = i;
		while (j > lo && v[j - 1] > x) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
	return v[k];
}

double robust_median(double *v, size_t n)
{
	if (!n)
		return 0;
	double hi = robust_select(v, n, n / 2);
	if (n & 1)
		return hi;
	/* The lower middle is the largest of v[0 .. n/2-1], which selection left below. */
	double lo = v[0];
	for (size_t i = 1; i < n / 2; i++)
		if (v[i] > lo)
			lo = v[i];
	return (lo + hi) / 2;
}

void robust_median_mad(const double *v, size_t n, double *scratch, double *median, double *mad)
{
	if (!n) {
		*median = *mad = 0;
		return;
	}
	memcpy(scratch, v, n * sizeof(*v));
	double m = robust_median(scratch, n);
	for (size_t i = 0; i < n; i++)
		scratch[i] = fabs(v[i] - m);
	*median = m;
	*mad = robust_median(scratch, n);
}

double robust_trimmed_mean(double *v, size_t n, double trim)
{
	size_t cut = (size_t)floor(trim * (double)n), lo, hi;
	double sum = 0;

	if (!n)
		return 0;
	if (cut * 2 >= n)
		cut = (n - 1) / 2;
	lo = cut;
	hi = n - cut; /* keep [lo, hi) of the sorted order */
	if (cut) {
		/* Partition so that v[0..lo-1] are the smallest and v[hi..] the largest. */
		robust_select(v, n, lo);
		robust_select(v + lo, n - lo, hi - 1 - lo);
	}
	for (size_t i = lo; i < hi; i++)
		sum += v[i];
	return sum / (double)(hi - lo);
}

double robust_quantile(double *v, size_t n, double q)
{
	if (!n)
		return 0;
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	size_t k = (size_t)floor(q * (double)(n - 1));
	return robust_select(v, n, k);
}
