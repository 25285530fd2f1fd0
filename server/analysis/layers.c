/* SPDX-License-Identifier: Apache-2.0 */
/* Layered differential diagnosis: the GPU verdict and the CPU function deltas (layers.h). */
#include "server/analysis/layers.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "server/query/folded.h"

enum gpu_verdict layers_gpu_classify(const struct kernel_cmp *k, size_t n, double threshold,
				     double *slowdown)
{
	double weight = 0, sum = 0;
	size_t compared = 0, slower = 0;

	*slowdown = 1;
	for (size_t i = 0; i < n; i++) {
		double w;

		if (!k[i].count || !(k[i].healthy_ns > 0) || !(k[i].mean_ns >= 0))
			continue;
		w = k[i].mean_ns * (double)k[i].count;
		weight += w;
		sum += w * (k[i].mean_ns / k[i].healthy_ns);
		compared++;
		slower += k[i].mean_ns >= threshold * k[i].healthy_ns;
	}
	if (!compared || !(weight > 0))
		return GPU_NO_DATA;
	*slowdown = sum / weight;
	if (*slowdown < threshold)
		return GPU_NORMAL;
	if (compared == 1)
		return GPU_ONE_KERNEL;
	return slower == compared ? GPU_UNIFORM : GPU_KERNEL_SPECIFIC;
}

const char *layers_gpu_verdict_name(enum gpu_verdict v)
{
	switch (v) {
	case GPU_NORMAL:
		return "normal";
	case GPU_UNIFORM:
		return "uniform";
	case GPU_KERNEL_SPECIFIC:
		return "kernel-specific";
	case GPU_ONE_KERNEL:
		return "one-kernel";
	default:
		return "no-data";
	}
}

struct fn_acc {
	char *name;
	uint64_t hash;
	double a, b;
};

struct fn_match {
	const struct fn_acc *fns;
	const char *name;
	size_t len;
};

static bool fn_eq(const void *ctx, uint32_t idx)
{
	const struct fn_match *m = ctx;

	return strlen(m->fns[idx].name) == m->len && !memcmp(m->fns[idx].name, m->name, m->len);
}

static int delta_compare(const void *x, const void *y)
{
	const struct cpu_delta *p = x, *q = y;
	double dp = p->b_fraction - p->a_fraction, dq = q->b_fraction - q->a_fraction;

	return dp < dq ? 1 : dp > dq ? -1 : strcmp(p->name, q->name);
}

void layers_cpu_deltas_free(struct cpu_delta *d, int n)
{
	for (int i = 0; d && i < n; i++)
		free(d[i].name);
	free(d);
}

int layers_cpu_diff_deltas(const struct folded_diff *diff, struct cpu_delta **out,
			   uint64_t totals[2])
{
	struct hash_index index = { 0 };
	struct fn_acc *fns = NULL;
	size_t n = 0, cap = 0;
	double total[2] = { 0, 0 };
	struct cpu_delta *d = NULL;
	int rc;

	*out = NULL;
	totals[0] = totals[1] = 0;
	if ((rc = hash_index_init(&index, 1024)))
		return rc;
	for (size_t s = 0; s < diff->n; s++) {
		const struct folded_stack *st = &diff->stacks[s];
		const char *end = st->stack + st->len, *f;
		const char *seen[512];
		size_t nseen = 0;

		total[0] += (double)st->count[0];
		total[1] += (double)st->count[1];
		/* Frames after the comm, each function once per stack. */
		f = memchr(st->stack, ';', st->len);
		while (f && f < end) {
			const char *name = f + 1, *next = memchr(name, ';', (size_t)(end - name));
			size_t nlen = (size_t)((next ? next : end) - name);
			bool dup = false;

			for (size_t i = 0; i < nseen && !dup; i++)
				dup = strlen(seen[i]) == nlen && !memcmp(seen[i], name, nlen);
			f = next;
			if (dup || !nlen)
				continue;
			uint64_t h = sysom_hash64(name, nlen, 0);
			struct fn_match m = { fns, name, nlen };
			uint32_t idx = hash_index_find(&index, h, fn_eq, &m);
			if (idx == HASH_INDEX_NONE) {
				if (SYSOM_ARRAY_RESERVE(fns, cap, n,
								256)) {
						rc = -ENOMEM;
						goto cleanup;
					}
				if (!(fns[n].name = strndup(name, nlen))) {
					rc = -ENOMEM;
					goto cleanup;
				}
				fns[n].a = fns[n].b = 0;
				if ((rc = hash_index_insert(&index, h, (uint32_t)n))) {
					free(fns[n].name);
					goto cleanup;
				}
				idx = (uint32_t)n++;
			}
			fns[idx].a += (double)st->count[0];
			fns[idx].b += (double)st->count[1];
			if (nseen < sizeof(seen) / sizeof(seen[0]))
				seen[nseen++] = fns[idx].name;
		}
	}
	if (!(d = calloc(n + 1, sizeof(*d)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		d[i].name = fns[i].name;
		fns[i].name = NULL;
		d[i].a_fraction = total[0] > 0 ? fns[i].a / total[0] : 0;
		d[i].b_fraction = total[1] > 0 ? fns[i].b / total[1] : 0;
	}
	qsort(d, n, sizeof(*d), delta_compare);
	totals[0] = (uint64_t)total[0];
	totals[1] = (uint64_t)total[1];
	*out = d;
	rc = (int)n;
cleanup:
	for (size_t i = 0; i < n; i++)
		free(fns[i].name);
	free(fns);
	hash_index_free(&index);
	return rc;
}

int layers_cpu_deltas(const char *text, size_t len, struct cpu_delta **out, uint64_t totals[2])
{
	struct folded_diff diff;
	int rc;

	*out = NULL;
	totals[0] = totals[1] = 0;
	if (!(rc = folded_diff_parse(text, len, &diff)))
		rc = layers_cpu_diff_deltas(&diff, out, totals);
	folded_diff_free(&diff);
	return rc;
}

static int double_compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double layers_median(double *v, size_t n)
{
	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(*v), double_compare);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int layers_os_classify(struct os_signal_cmp *s, size_t n, double factor)
{
	double best = 0;
	int top = -1;

	for (size_t i = 0; i < n; i++) {
		double h = isnan(s[i].healthy) ? 0 : s[i].healthy;
		double excess = s[i].straggler - h;

		s[i].implicated = !isnan(s[i].healthy) && isfinite(s[i].straggler) &&
				  s[i].straggler >= factor * h && excess >= s[i].floor && s[i].floor > 0;
		if (s[i].implicated && excess / s[i].floor > best) {
			best = excess / s[i].floor;
			top = (int)i;
		}
	}
	return top;
}

double layers_cpu_z(double a_fraction, double b_fraction, uint64_t na, uint64_t nb)
{
	double p, se;

	if (na == 0 || nb == 0)
		return 0;
	p = (a_fraction * (double)na + b_fraction * (double)nb) / (double)(na + nb);
	se = sqrt(p * (1 - p) * (1.0 / (double)na + 1.0 / (double)nb));
	if (se == 0) /* pooled share 0 or 1: both shares equal it */
		return 0;
	return (b_fraction - a_fraction) / se;
}

double layers_cpu_time_z(double a_count, double b_count, double a_rate, double b_rate)
{
	double var;

	if (!(a_rate > 0))
		a_rate = 1;
	if (!(b_rate > 0))
		b_rate = 1;
	var = b_count / (b_rate * b_rate) + a_count / (a_rate * a_rate);
	if (!(var > 0))
		return 0;
	return (b_count / b_rate - a_count / a_rate) / sqrt(var);
}

static int flag_compare(const void *a, const void *b)
{
	const struct waterline_flag *x = a, *y = b;
	double ex = x->fraction - x->mean, ey = y->fraction - y->mean;

	if (ex != ey)
		return ex < ey ? 1 : -1;
	return x->rank != y->rank ? (x->rank < y->rank ? -1 : 1) : (x->fn < y->fn ? -1 : x->fn > y->fn);
}

int layers_waterline(const double *frac, size_t nranks, size_t nfns, double k,
		     double min_fraction, struct waterline_flag **out)
{
	struct waterline_flag *flags = NULL;
	size_t n = 0, cap = 0;

	*out = NULL;
	if (nranks < 2 || !(k > 0))
		return nranks < 2 ? 0 : -EINVAL;
	for (size_t f = 0; f < nfns; f++) {
		double sum = 0, sq = 0;
		for (size_t r = 0; r < nranks; r++) {
			double x = frac[r * nfns + f];
			sum += x;
			sq += x * x;
		}
		for (size_t r = 0; r < nranks; r++) {
			/* Leave-one-out: the others' mean and deviation (with all ranks counted, one
			 * outlier among n can never be more than sqrt(n - 1) deviations out). */
			double x = frac[r * nfns + f], m = (double)(nranks - 1);
			double mean = (sum - x) / m, var = (sq - x * x) / m - mean * mean;
			double std = var > 0 ? sqrt(var) : 0;
			if (!(x > mean + k * std) || x - mean < min_fraction)
				continue;
			if (SYSOM_ARRAY_RESERVE(flags, cap, n,
							16)) {
					free(flags);
					return -ENOMEM;
				}
			flags[n++] = (struct waterline_flag){ r, f, x, mean, std,
							      std > 0 ? (x - mean) / std : HUGE_VAL };
		}
	}
	if (n > 1)
		qsort(flags, n, sizeof(*flags), flag_compare);
	*out = flags;
	return (int)n;
}

/* Whether the frames after the first of `stack` (len bytes, ';'-separated) include `fn`. */
static bool stack_has_frame(const char *stack, size_t len, const char *fn, size_t fnlen)
{
	const char *p = memchr(stack, ';', len), *end = stack + len;

	while (p && p < end) {
		const char *frame = p + 1, *next = memchr(frame, ';', (size_t)(end - frame));
		size_t flen = (size_t)((next ? next : end) - frame);
		if (flen == fnlen && memcmp(frame, fn, fnlen) == 0)
			return true;
		p = next;
	}
	return false;
}

static int stack_by_excess(const void *x, const void *y)
{
	const struct cpu_stack *a = x, *b = y;
	double ea = a->b_fraction - a->a_fraction, eb = b->b_fraction - b->a_fraction;

	return ea < eb ? 1 : ea > eb ? -1 : strcmp(a->stack, b->stack);
}

void layers_cpu_stacks_free(struct cpu_stack *s, int n)
{
	for (int i = 0; i < n; i++)
		free(s[i].stack);
	free(s);
}

int layers_cpu_diff_stacks(const struct folded_diff *diff, const char *function,
			   const uint64_t totals[2], size_t max, struct cpu_stack **out)
{
	size_t n = 0, cap = 0, fnlen = strlen(function);
	struct cpu_stack *all = NULL;

	*out = NULL;
	for (size_t i = 0; i < diff->n; i++) {
		const struct folded_stack *st = &diff->stacks[i];

		if (!stack_has_frame(st->stack, st->len, function, fnlen))
			continue;
		if (SYSOM_ARRAY_RESERVE(all, cap, n,
						16)) {
				layers_cpu_stacks_free(all, (int)n);
				return -ENOMEM;
			}
		all[n].stack = strdup(st->stack);
		all[n].a_fraction = totals[0] ? (double)st->count[0] / (double)totals[0] : 0;
		all[n].b_fraction = totals[1] ? (double)st->count[1] / (double)totals[1] : 0;
		if (!all[n++].stack) {
			layers_cpu_stacks_free(all, (int)n - 1);
			return -ENOMEM;
		}
	}
	if (n > 1)
		qsort(all, n, sizeof(*all), stack_by_excess);
	while (n > max)
		free(all[--n].stack);
	*out = all;
	return (int)n;
}

int layers_cpu_stacks(const char *text, size_t len, const char *function, const uint64_t totals[2],
		      size_t max, struct cpu_stack **out)
{
	struct folded_diff diff;
	int rc;

	*out = NULL;
	if (!(rc = folded_diff_parse(text, len, &diff)))
		rc = layers_cpu_diff_stacks(&diff, function, totals, max, out);
	folded_diff_free(&diff);
	return rc;
}

double layers_gpu_slow_share(const uint64_t *healthy_hist, const uint64_t *straggler_hist,
			     size_t buckets)
{
	uint64_t healthy = 0, straggler = 0, seen = 0, above = 0;
	size_t p99 = 0;

	for (size_t i = 0; i < buckets; i++) {
		healthy += healthy_hist[i];
		straggler += straggler_hist[i];
	}
	if (healthy < LAYERS_GPU_MIN_RUNS || straggler < LAYERS_GPU_MIN_RUNS)
		return NAN;
	/* The lowest bucket at which 99% of the healthy runs are seen. */
	for (p99 = 0; p99 < buckets; p99++) {
		seen += healthy_hist[p99];
		if ((double)seen >= 0.99 * (double)healthy)
			break;
	}
	for (size_t i = p99 + 1; i < buckets; i++)
		above += straggler_hist[i];
	return (double)above / (double)straggler;
}

bool layers_gpu_intermittent(double slow_share)
{
	return slow_share >= LAYERS_GPU_INTERMITTENT_MIN && slow_share <= LAYERS_GPU_INTERMITTENT_MAX;
}
