/* SPDX-License-Identifier: Apache-2.0 */
/* The layered diagnosis's arithmetic (server/analysis/layers.c): GPU verdicts, CPU deltas. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "include/sysom/histogram.h"
#include "server/analysis/layers.h"

static void test_gpu_verdicts(void **state)
{
	double slow;
	const struct kernel_cmp uniform[] = { { "gemm", 100, 2000, 1000 }, { "attn", 50, 900, 450 },
					      { "norm", 10, 110, 100 } };
	const struct kernel_cmp specific[] = { { "gemm", 100, 3000, 1000 }, { "attn", 50, 450, 450 } };
	const struct kernel_cmp normal[] = { { "gemm", 100, 1050, 1000 }, { "attn", 50, 440, 450 } };
	const struct kernel_cmp one[] = { { "gemm", 10, 5000, 1000 } };
	const struct kernel_cmp none[] = { { "gemm", 0, 5000, 1000 }, { "x", 3, 10, 0 } };

	(void)state;
	/* norm is only 1.1x but the time-weighted slowdown is ~1.99 and every kernel is
	 * slower... except norm: so this is kernel-specific, not uniform. */
	assert_int_equal(layers_gpu_classify(uniform, 3, LAYERS_GPU_THRESHOLD, &slow),
			 GPU_KERNEL_SPECIFIC);
	assert_int_equal(layers_gpu_classify(uniform, 2, LAYERS_GPU_THRESHOLD, &slow), GPU_UNIFORM);
	assert_true(fabs(slow - 2) < 1e-9);
	assert_int_equal(layers_gpu_classify(specific, 2, LAYERS_GPU_THRESHOLD, &slow),
			 GPU_KERNEL_SPECIFIC);
	assert_true(fabs(slow - (300000.0 * 3 + 22500.0) / (300000.0 + 22500.0)) < 1e-9);
	assert_int_equal(layers_gpu_classify(normal, 2, LAYERS_GPU_THRESHOLD, &slow), GPU_NORMAL);
	assert_int_equal(layers_gpu_classify(one, 1, LAYERS_GPU_THRESHOLD, &slow), GPU_ONE_KERNEL);
	assert_int_equal(layers_gpu_classify(none, 2, LAYERS_GPU_THRESHOLD, &slow), GPU_NO_DATA);
	assert_true(slow == 1);
	assert_int_equal(layers_gpu_classify(NULL, 0, LAYERS_GPU_THRESHOLD, &slow), GPU_NO_DATA);
	assert_string_equal(layers_gpu_verdict_name(GPU_UNIFORM), "uniform");
	assert_string_equal(layers_gpu_verdict_name(GPU_NO_DATA), "no-data");
}

static void test_cpu_deltas(void **state)
{
	static const char text[] = "py;main;step;fwd 60 30\n"
				   "py;main;step;extra;spin 0 60\n"
				   "py;main;opt 40 10\n"
				   "py;main;rec;rec 0 0\n";
	struct cpu_delta *d;
	uint64_t totals[2];
	int n;

	(void)state;
	n = layers_cpu_deltas(text, sizeof(text) - 1, &d, totals);
	assert_int_equal(n, 7);
	assert_int_equal(totals[0], 100);
	assert_int_equal(totals[1], 100); /* main, step, fwd, extra, spin, opt, rec (py is the comm) */
	/* +60 pp: extra and spin (by name), then step (+30: on 60% of a, 90% of b). */
	assert_string_equal(d[0].name, "extra");
	assert_string_equal(d[1].name, "spin");
	assert_true(fabs(d[1].b_fraction - 0.6) < 1e-12 && d[1].a_fraction == 0);
	assert_string_equal(d[2].name, "step");
	assert_true(fabs(d[2].b_fraction - d[2].a_fraction - 0.3) < 1e-12);
	assert_string_equal(d[n - 1].name, "opt"); /* -30 pp, like fwd, which sorts first by name */
	for (int i = 0; i < n; i++)
		if (!strcmp(d[i].name, "rec")) /* recursion counted once per stack */
			assert_true(d[i].a_fraction == 0 && d[i].b_fraction == 0);
	layers_cpu_deltas_free(d, n);
	assert_int_equal(layers_cpu_deltas("py;a 1\n", 7, &d, totals), -EINVAL);
	assert_int_equal(layers_cpu_deltas("", 0, &d, totals), 0);
	layers_cpu_deltas_free(d, 0);
}

/* OS signals: factor and floor both required; the largest excess in floors wins; no healthy
 * data implicates nothing. */
static void test_os_signals(void **state)
{
	(void)state;
	struct os_signal_cmp s[] = {
		{ "run-queue wait", "ms/s", 120, 20, 20, false },   /* 6x, +100 = 5 floors */
		{ "interrupt time", "ms/s", 30, 2, 10, false },     /* 15x, +28 = 2.8 floors */
		{ "involuntary switches", "/s", 90, 50, 50, false }, /* 1.8x: below the factor */
		{ "NUMA migrations", "/s", 3, 0, 5, false },        /* below the floor */
	};
	double v[] = { 5, 1, 3, 2 }, e[] = { 0 };

	assert_int_equal(layers_os_classify(s, 4, LAYERS_OS_FACTOR), 0);
	assert_true(s[0].implicated);
	assert_true(s[1].implicated);
	assert_false(s[2].implicated);
	assert_false(s[3].implicated);
	s[0].straggler = 30; /* +10 = half a floor */
	assert_int_equal(layers_os_classify(s, 4, LAYERS_OS_FACTOR), 1);
	assert_false(s[0].implicated);
	s[1].healthy = NAN;
	assert_int_equal(layers_os_classify(s, 4, LAYERS_OS_FACTOR), -1);
	assert_false(s[1].implicated);
	assert_true(layers_median(v, 4) == 2.5);
	assert_true(layers_median(v, 3) == 2);
	assert_true(isnan(layers_median(e, 0)));
}

/* Waterline: the rank far above the others' mean for a function is flagged; a function every
 * rank runs alike is not; the floor holds back tiny excesses. */
static void test_waterline(void **state)
{
	(void)state;
	/* 5 ranks x 3 functions: f0 alike, f1 hot on rank 3, f2 slightly higher on rank 1. */
	const double frac[] = {
		0.30, 0.05, 0.100,
		0.30, 0.05, 0.115,
		0.30, 0.06, 0.100,
		0.30, 0.45, 0.100,
		0.30, 0.04, 0.100,
	};
	struct waterline_flag *f = NULL;
	int n = layers_waterline(frac, 5, 3, 1.5, 0.01, &f);

	assert_int_equal(n, 2);
	assert_int_equal(f[0].rank, 3);
	assert_int_equal(f[0].fn, 1);
	assert_true(fabs(f[0].mean - 0.05) < 1e-9); /* the others' mean */
	assert_true(f[0].z > 50);
	assert_int_equal(f[1].rank, 1); /* f2: 1.5 pp over the others, who run it alike */
	assert_int_equal(f[1].fn, 2);
	free(f);
	/* A 2 pp floor keeps only rank 3. */
	n = layers_waterline(frac, 5, 3, 1.5, 0.02, &f);
	assert_int_equal(n, 1);
	assert_int_equal(f[0].rank, 3);
	free(f);
	assert_int_equal(layers_waterline(frac, 1, 3, 2, 0.01, &f), 0);
	assert_int_equal(layers_waterline(frac, 5, 3, 0, 0.01, &f), -EINVAL);
}

/* Full stacks through a function, by how much more of the straggler's samples they hold. */
static void test_cpu_stacks(void **state)
{
	static const char text[] = "py;main;step;hot 0 30\n"
				   "py;main;step 10 10\n"
				   "py;main;other;hot 5 10\n"
				   "py;hotter;x 1 1\n"
				   "hot;main 4 0\n";
	const uint64_t totals[2] = { 20, 51 };
	struct cpu_stack *s = NULL;
	int n = layers_cpu_stacks(text, sizeof(text) - 1, "hot", totals, 5, &s);

	(void)state;
	assert_int_equal(n, 2); /* not "hotter", not the comm "hot" */
	assert_string_equal(s[0].stack, "py;main;step;hot");
	assert_true(fabs(s[0].b_fraction - 30.0 / 51) < 1e-12);
	assert_string_equal(s[1].stack, "py;main;other;hot");
	assert_true(fabs(s[1].a_fraction - 0.25) < 1e-12);
	layers_cpu_stacks_free(s, n);
	n = layers_cpu_stacks(text, sizeof(text) - 1, "hot", totals, 1, &s);
	assert_int_equal(n, 1);
	layers_cpu_stacks_free(s, n);
	n = layers_cpu_stacks(text, sizeof(text) - 1, "absent", totals, 5, &s);
	assert_int_equal(n, 0);
	layers_cpu_stacks_free(s, n);
}

/* Share differences: 5 pp over ~100 samples a side is chance, 40 pp over 200 is not. */
static void test_cpu_significance(void **state)
{
	(void)state;
	double z = layers_cpu_z(0.245, 0.296, 102, 81);
	assert_true(z > 0.5 && z < 1.0);
	z = layers_cpu_z(0.0, 0.40, 200, 200);
	assert_true(z > 8);
	assert_true(layers_cpu_z(0.3, 0.2, 100, 100) < 0);
	assert_true(layers_cpu_z(0.1, 0.2, 0, 100) == 0);
	assert_true(layers_cpu_z(0, 0, 100, 100) == 0);
	assert_true(layers_cpu_z(0, 1, 100, 100) > 10);
}

/* CPU time, not share: the sleeping straggler of stop 29 (a frame on 95% of 114 samples against
 * 50% of 264) runs it no longer; extra work on the straggler (120 samples against 10) does. */
static void test_cpu_time_significance(void **state)
{
	(void)state;
	double share_z = layers_cpu_z(0.50, 0.95, 264, 114);
	assert_true(share_z > 3);
	assert_true(layers_cpu_time_z(0.50 * 264, 0.95 * 114, 0, 0) < 0);
	assert_true(layers_cpu_time_z(10, 120, 0, 0) > 9);
	/* Rates: 120 samples at 100/s is 1.2 CPU-s; 10 at 10/s is 1.0 CPU-s: about equal. */
	assert_true(fabs(layers_cpu_time_z(10, 120, 10, 100)) < 1);
	/* The straggler's node samples twice as often: twice the count is the same time. */
	assert_true(fabs(layers_cpu_time_z(100, 200, 10, 20)) < 1e-9);
	assert_true(layers_cpu_time_z(0, 0, 10, 10) == 0);
	assert_true(layers_cpu_time_z(0, 25, 10, 10) == 5);
}

/* The share of the straggler's runs above the healthy ranks' p99 bucket: all of them for a
 * kernel slow on every run, about half for one slow half the time, none for an equal one;
 * unknown with too few runs on a side. */
static void test_gpu_slow_share(void **state)
{
	(void)state;
	uint64_t healthy[SYSOM_GPU_HIST_BUCKETS] = { 0 }, strag[SYSOM_GPU_HIST_BUCKETS] = { 0 };

	healthy[11] = 990; /* 1-2 ms */
	healthy[12] = 10;  /* 1% tail: the p99 bucket is 11 */
	strag[11] = 500;
	strag[13] = 500;
	assert_float_equal(layers_gpu_slow_share(healthy, strag, SYSOM_GPU_HIST_BUCKETS), 0.5, 1e-9);
	assert_true(layers_gpu_intermittent(0.5));
	memset(strag, 0, sizeof(strag));
	strag[13] = 1000;
	assert_float_equal(layers_gpu_slow_share(healthy, strag, SYSOM_GPU_HIST_BUCKETS), 1.0, 1e-9);
	assert_false(layers_gpu_intermittent(1.0));
	memcpy(strag, healthy, sizeof(strag));
	/* a healthy-like tail stays at or below the p99 bucket only when 99% are below it */
	healthy[12] = 5;
	strag[12] = 0;
	assert_float_equal(layers_gpu_slow_share(healthy, strag, SYSOM_GPU_HIST_BUCKETS), 0.0, 1e-9);
	assert_false(layers_gpu_intermittent(0.0));
	memset(strag, 0, sizeof(strag));
	strag[13] = LAYERS_GPU_MIN_RUNS - 1;
	assert_true(isnan(layers_gpu_slow_share(healthy, strag, SYSOM_GPU_HIST_BUCKETS)));
	assert_false(layers_gpu_intermittent(NAN));
	memset(healthy, 0, sizeof(healthy));
	strag[13] = 100;
	assert_true(isnan(layers_gpu_slow_share(healthy, strag, SYSOM_GPU_HIST_BUCKETS)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_verdicts),
		cmocka_unit_test(test_gpu_slow_share),
		cmocka_unit_test(test_cpu_deltas),
		cmocka_unit_test(test_os_signals),
		cmocka_unit_test(test_cpu_significance),
		cmocka_unit_test(test_cpu_time_significance),
		cmocka_unit_test(test_waterline),
		cmocka_unit_test(test_cpu_stacks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
