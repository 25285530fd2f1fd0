/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layered differential diagnosis of a straggling rank against the healthy ranks of its group
 * (DESIGN.md, seed 000 §3.1), the parts that are pure arithmetic:
 *
 * GPU layer: per kernel, the straggler's mean GPU time per execution against the median of
 * the healthy ranks' means. The time-weighted mean ratio is the straggler's GPU slowdown; when
 * it is at least `threshold` the GPU layer is implicated, and the slowdown is *uniform* when
 * every kernel both sides ran is slower by at least `threshold` (clocks, thermal throttling,
 * a degraded device: hardware suspected) or *kernel-specific* when some are and others are
 * not (software: those kernels' inputs or implementation).
 *
 * CPU layer: functions ranked by how much more of the straggler's CPU samples they are on
 * (inclusive) than of a healthy rank's, in percentage points.
 */
#ifndef SYSOM_SERVER_ANALYSIS_LAYERS_H
#define SYSOM_SERVER_ANALYSIS_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/query/folded.h"

#define LAYERS_GPU_THRESHOLD 1.15   /* 15% slower */
#define LAYERS_CPU_MIN_SAMPLES 50    /* per side: fewer cannot tell a function's share */
#define LAYERS_CPU_MIN_Z 3.0         /* a share difference must be this many standard errors */

struct kernel_cmp {
	const char *name;
	uint64_t count;     /* the straggler's executions */
	double mean_ns;     /* the straggler's mean GPU time per execution */
	double healthy_ns;  /* median over the healthy ranks of their means */
};

enum gpu_verdict {
	GPU_NO_DATA,         /* no kernel both sides ran */
	GPU_NORMAL,          /* slowdown below the threshold */
	GPU_UNIFORM,         /* every compared kernel slower: hardware suspected */
	GPU_KERNEL_SPECIFIC, /* some kernels slower, others not: software */
	GPU_ONE_KERNEL,      /* slower, but only one kernel to compare: cannot tell */
};

/*
 * How intermittent a kernel's slowdown is: the share of the straggler's executions in duration
 * buckets (include/sysom/histogram.h, log2 of µs) above the bucket that holds the healthy
 * ranks' 99th percentile. A kernel slower on every run (a throttled GPU, a larger input) has
 * most of its runs there; one slowed only while something else loads the node (contention for
 * memory bandwidth, PCIe, power) has some. NAN when either side has fewer than
 * LAYERS_GPU_MIN_RUNS executions in its histogram.
 */
#define LAYERS_GPU_MIN_RUNS 20
double layers_gpu_slow_share(const uint64_t *healthy_hist, const uint64_t *straggler_hist,
			     size_t buckets);
/* A slow share in [LAYERS_GPU_INTERMITTENT_MIN, LAYERS_GPU_INTERMITTENT_MAX]: slow on some of
 * its runs only (the rest as fast as on the healthy ranks). */
#define LAYERS_GPU_INTERMITTENT_MIN 0.05
#define LAYERS_GPU_INTERMITTENT_MAX 0.8
bool layers_gpu_intermittent(double slow_share);

/* Classifies; *slowdown gets the time-weighted mean ratio (1 when no data). */
enum gpu_verdict layers_gpu_classify(const struct kernel_cmp *k, size_t n, double threshold,
				     double *slowdown);

const char *layers_gpu_verdict_name(enum gpu_verdict v);

struct cpu_delta {
	char *name;         /* owned */
	double a_fraction;  /* share of the healthy rank's samples with the function on the stack */
	double b_fraction;  /* ... of the straggler's */
};

/*
 * Every function of a two-sided profile (the first frame of a stack is the process comm and
 * is skipped) with its inclusive share on each side, in *out (owned; free with
 * layers_cpu_deltas_free), largest b − a first, and in totals[] each side's sample total.
 * Returns the count or -ENOMEM.
 */
int layers_cpu_diff_deltas(const struct folded_diff *diff, struct cpu_delta **out,
			   uint64_t totals[2]);

/* The same over folded diff text ("stack count_a count_b" lines); -EINVAL when a line lacks
 * its two counts. */
int layers_cpu_deltas(const char *text, size_t len, struct cpu_delta **out, uint64_t totals[2]);
void layers_cpu_deltas_free(struct cpu_delta *d, int n);

/* One full stack of a folded diff with its share of each side's samples. */
struct cpu_stack {
	char *stack;        /* owned: "comm;frame;...;leaf" */
	double a_fraction, b_fraction;
};

/*
 * The stacks of a two-sided profile that have `function` as one of their frames (the first,
 * the process comm, excluded), largest b − a share first, at most `max`; `totals` as
 * layers_cpu_diff_deltas gave them. Returns the count in *out (free with
 * layers_cpu_stacks_free) or -ENOMEM.
 */
int layers_cpu_diff_stacks(const struct folded_diff *diff, const char *function,
			   const uint64_t totals[2], size_t max, struct cpu_stack **out);

/* The same over folded diff text; -EINVAL when a line lacks its two counts. */
int layers_cpu_stacks(const char *text, size_t len, const char *function, const uint64_t totals[2],
		      size_t max, struct cpu_stack **out);
void layers_cpu_stacks_free(struct cpu_stack *s, int n);

/*
 * How many standard errors apart two sample shares are (two-proportion z statistic with the
 * pooled share): b − a over sqrt(p (1 − p) (1/na + 1/nb)). With a few hundred samples a side a
 * share moves by several percentage points by chance alone; a difference is only evidence
 * when z is large. 0 when a side has no samples or the shares are equal.
 */
double layers_cpu_z(double a_fraction, double b_fraction, uint64_t na, uint64_t nb);

/*
 * How many standard errors the CPU time of one function on side b exceeds side a's, from its
 * sample counts over the same window (Poisson counts): with `rate` the samples a side takes per
 * CPU-second (hz x sample rate; 1 on both sides when unknown), (b/rb − a/ra) over
 * sqrt(b/rb² + a/ra²). A larger share alone does not make a function a cause of lateness: when
 * the healthy ranks spend more time waiting in a collective for the straggler (or the straggler
 * sleeps), every function of the straggler's takes a larger share of fewer samples though it
 * runs no longer. 0 when both counts are 0; a rate ≤ 0 counts as 1.
 */
double layers_cpu_time_z(double a_count, double b_count, double a_rate, double b_rate);

/*
 * OS layer: per signal, the straggler's rate against the median of the healthy ranks' rates
 * (rates per second the rank's threads were on a CPU, so busier ranks are not penalised). A
 * signal is implicated when the straggler's rate is at least `factor` times the healthy median
 * and above it by at least `floor` (an absolute amount that matters at all).
 */
#define LAYERS_OS_FACTOR 2.0

struct os_signal_cmp {
	const char *name;       /* "run-queue wait", "interrupt time", ... */
	const char *unit;       /* "ms/s", "/s" */
	double straggler;
	double healthy;         /* median over the healthy ranks; NAN when none */
	double floor;
	bool implicated;        /* out */
};

/* Sets `implicated` on each signal; returns the index of the most implicated one (largest
 * excess in units of its floor) or -1. */
int layers_os_classify(struct os_signal_cmp *s, size_t n, double factor);

/*
 * CPU waterline of a communication group (DESIGN.md): per function f, the mean μ_f and standard
 * deviation σ_f of its CPU fraction (inclusive share of samples) across the group's other ranks
 * (leave one out, as for stragglers: over all ranks one outlier among n can never be more than
 * sqrt(n − 1) deviations out, so small groups could never flag); rank r is flagged for f when
 * its fraction exceeds μ_f + k σ_f and μ_f by at least `min_fraction` (so a function every rank
 * runs alike, σ = 0, is not flagged for a rounding difference).
 * `frac` is nranks x nfns, row-major. Returns the number of flags in *out (owned, free()),
 * largest excess over μ first, or -ENOMEM / -EINVAL.
 */
struct waterline_flag {
	size_t rank;      /* row index */
	size_t fn;        /* column index */
	double fraction, mean, std;
	double z;         /* (fraction − mean) / std; HUGE_VAL when std == 0 */
};

int layers_waterline(const double *frac, size_t nranks, size_t nfns, double k,
		     double min_fraction, struct waterline_flag **out);

/* Median of n values (sorted in place); NAN when n == 0. */
double layers_median(double *v, size_t n);

#endif
