/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Robust location and scale (DESIGN.md "Algorithms"; EROICA, seed 004 §4.3): the median and
 * the median absolute deviation, in O(n) expected time by selection (no full sort), so that a
 * million values take milliseconds. Used by the straggler test (straggler.c) and the behaviour
 * patterns' localisation (patterns.c).
 *
 * MAD is reported raw; ROBUST_MAD_SIGMA × MAD estimates σ for Gaussian data, which is what a
 * threshold "median + k·scale" multiplies.
 */
#ifndef SYSOM_SERVER_ANALYSIS_ROBUST_H
#define SYSOM_SERVER_ANALYSIS_ROBUST_H

#include <stddef.h>

#define ROBUST_MAD_SIGMA 1.4826

/* The k-th smallest (0-based, k < n) of v[0..n-1]; reorders v. */
double robust_select(double *v, size_t n, size_t k);

/* The median of v[0..n-1] (mean of the two middle values when n is even; 0 when n == 0);
 * reorders v. */
double robust_median(double *v, size_t n);

/* Median and MAD of v[0..n-1], v left untouched; `scratch` holds n doubles. */
void robust_median_mad(const double *v, size_t n, double *scratch, double *median, double *mad);

/* The mean of v[0..n-1] without its floor(trim × n) smallest and largest values
 * (0 <= trim < 0.5); reorders v. 0 when n == 0. */
double robust_trimmed_mean(double *v, size_t n, double trim);

/* The q-quantile (0..1, nearest rank, the lower of two) of v[0..n-1]; reorders v. */
double robust_quantile(double *v, size_t n, double q);

#endif
