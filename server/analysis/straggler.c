/* SPDX-License-Identifier: Apache-2.0 */
/* Slow-rank detection for one communication group; see straggler.h. */
#include "server/analysis/straggler.h"

#include "server/analysis/robust.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct straggler_group {
	int32_t nranks;
	uint32_t window;
	uint32_t count;     /* instances held */
	uint32_t next;      /* ring position of the next instance */
	uint64_t incomplete;
	double *lateness;   /* window x nranks, ns */
	uint64_t *missing;  /* per rank */
};

void straggler_params_default(struct straggler_params *p)
{
	p->k = STRAGGLER_DEFAULT_K;
	p->window = STRAGGLER_DEFAULT_WINDOW;
	p->min_excess_ns = STRAGGLER_DEFAULT_MIN_EXCESS_NS;
	p->persistent_fraction = STRAGGLER_DEFAULT_PERSISTENT;
	p->scale_floor_ns = STRAGGLER_DEFAULT_SCALE_FLOOR_NS;
}

const char *straggler_verdict_name(enum straggler_verdict v)
{
	switch (v) {
	case STRAGGLER_PERSISTENT:
		return "persistent";
	case STRAGGLER_INTERMITTENT:
		return "intermittent";
	default:
		return NULL;
	}
}

int straggler_group_new(int32_t nranks, uint32_t window, struct straggler_group **out)
{
	struct straggler_group *g;

	if (nranks < 1 || nranks > STRAGGLER_MAX_RANKS || window < 1 || window > STRAGGLER_MAX_WINDOW)
		return -EINVAL;
	if (!(g = calloc(1, sizeof(*g))))
		return -ENOMEM;
	g->nranks = nranks;
	g->window = window;
	g->lateness = calloc((size_t)window * (size_t)nranks, sizeof(*g->lateness));
	g->missing = calloc((size_t)nranks, sizeof(*g->missing));
	if (!g->lateness || !g->missing) {
		straggler_group_free(g);
		return -ENOMEM;
	}
	*out = g;
	return 0;
}

void straggler_group_free(struct straggler_group *g)
{
	if (!g)
		return;
	free(g->lateness);
	free(g->missing);
	free(g);
}

void straggler_group_add(struct straggler_group *g, const int64_t *entry_ns)
{
	double *row = g->lateness + (size_t)g->next * (size_t)g->nranks;
	int64_t first = entry_ns[0];

	for (int32_t r = 1; r < g->nranks; r++)
		if (entry_ns[r] < first)
			first = entry_ns[r];
	for (int32_t r = 0; r < g->nranks; r++)
		row[r] = (double)(entry_ns[r] - first);
	g->next = (g->next + 1) % g->window;
	if (g->count < g->window)
		g->count++;
}

void straggler_group_add_incomplete(struct straggler_group *g, const bool *present)
{
	g->incomplete++;
	for (int32_t r = 0; r < g->nranks; r++)
		if (!present[r])
			g->missing[r]++;
}

uint32_t straggler_group_instances(const struct straggler_group *g)
{
	return g->count;
}

uint64_t straggler_group_incomplete(const struct straggler_group *g)
{
	return g->incomplete;
}

int32_t straggler_group_nranks(const struct straggler_group *g)
{
	return g->nranks;
}

/* The other ranks' center and robust scale for each rank of v[0..n-1]: leave-one-out when
 * n <= STRAGGLER_EXACT_LOO, otherwise the whole group's. `scratch` holds 2n doubles. */
static void others_center_scale(const double *v, int32_t n, uint64_t floor_ns, double *scratch,
				double *center, double *scale)
{
	double med, mad;

	if (n > STRAGGLER_EXACT_LOO) {
		robust_median_mad(v, (size_t)n, scratch, &med, &mad);
		double sc = fmax(ROBUST_MAD_SIGMA * mad, (double)floor_ns);
		for (int32_t r = 0; r < n; r++) {
			center[r] = med;
			scale[r] = sc;
		}
		return;
	}
	for (int32_t r = 0; r < n; r++) {
		size_t k = 0;
		for (int32_t i = 0; i < n; i++)
			if (i != r)
				scratch[k++] = v[i];
		robust_median_mad(scratch, k, scratch + n, &med, &mad);
		center[r] = med;
		scale[r] = fmax(ROBUST_MAD_SIGMA * mad, (double)floor_ns);
	}
}

static bool exceeds(double excess, double scale, const struct straggler_params *p)
{
	return excess >= (double)p->min_excess_ns && excess > p->k * scale;
}

int straggler_group_analyse(const struct straggler_group *g, const struct straggler_params *p,
			    struct straggler_rank *out)
{
	int32_t n = g->nranks;
	uint32_t w = g->count;
	double *col = NULL, *t = NULL, *q = NULL, *ct = NULL, *st = NULL, *cq = NULL, *sq = NULL;
	double *scratch = NULL;
	int found = 0;

	memset(out, 0, (size_t)n * sizeof(*out));
	for (int32_t r = 0; r < n; r++) {
		out[r].rank = r;
		out[r].missing = g->missing[r];
	}
	if (!w)
		return 0;
	col = malloc((size_t)w * sizeof(*col));
	t = malloc((size_t)n * 6 * sizeof(*t));
	scratch = malloc((size_t)n * 2 * sizeof(*scratch));
	if (!col || !t || !scratch) {
		found = -ENOMEM;
		goto cleanup;
	}
	q = t + n;
	ct = q + n;
	st = ct + n;
	cq = st + n;
	sq = cq + n;
	/* Who entered each instance last. */
	for (uint32_t i = 0; i < w; i++) {
		const double *row = g->lateness + (size_t)i * (size_t)n;
		double worst = -1;
		int32_t last = 0;
		for (int32_t r = 0; r < n; r++)
			if (row[r] > worst) {
				worst = row[r];
				last = r;
			}
		out[last].last_fraction += 1;
	}
	/* Each rank's window: mean, trimmed mean, quantile. */
	for (int32_t r = 0; r < n; r++) {
		double sum = 0;
		for (uint32_t i = 0; i < w; i++) {
			col[i] = g->lateness[(size_t)i * (size_t)n + (size_t)r];
			sum += col[i];
		}
		out[r].mean_lateness_ns = sum / w;
		out[r].last_fraction /= w;
		t[r] = out[r].trimmed_lateness_ns = robust_trimmed_mean(col, w, STRAGGLER_TRIM);
		q[r] = out[r].quantile_lateness_ns =
			robust_quantile(col, w, 1.0 - p->persistent_fraction);
	}
	if (n < 2)
		goto cleanup;
	others_center_scale(t, n, p->scale_floor_ns, scratch, ct, st);
	others_center_scale(q, n, p->scale_floor_ns, scratch, cq, sq);
	for (int32_t r = 0; r < n; r++) {
		double excess = t[r] - ct[r];
		double threshold = fmax((double)p->min_excess_ns, p->k * st[r]);

		out[r].excess_ns = excess;
		out[r].z = excess / st[r];
		out[r].straggler = exceeds(excess, st[r], p);
		out[r].persistent = out[r].straggler && exceeds(q[r] - cq[r], sq[r], p);
		out[r].verdict = !out[r].straggler ? STRAGGLER_NONE
				 : out[r].persistent ? STRAGGLER_PERSISTENT : STRAGGLER_INTERMITTENT;
		for (uint32_t i = 0; i < w; i++)
			if (g->lateness[(size_t)i * (size_t)n + (size_t)r] - ct[r] >= threshold)
				out[r].flagged_fraction += 1;
		out[r].flagged_fraction /= w;
		found += out[r].straggler;
	}
cleanup:
	free(scratch);
	free(t);
	free(col);
	return found;
}
