/* SPDX-License-Identifier: Apache-2.0 */
/* Slow-rank detection for one communication group; see straggler.h. */
#include "server/analysis/straggler.h"

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

/* Leave-one-out test of v[r] against the other n-1 values, given their sum and sum of squares
 * over all n: excess over the others' mean and the others' population σ. */
static void leave_one_out(const double *v, int32_t n, int32_t r, double sum, double sumsq,
			  double *excess, double *sigma)
{
	double m = n > 1 ? (sum - v[r]) / (n - 1) : 0;
	double var = n > 1 ? (sumsq - v[r] * v[r]) / (n - 1) - m * m : 0;

	*excess = v[r] - m;
	*sigma = var > 0 ? sqrt(var) : 0;
}

static bool exceeds(double excess, double sigma, const struct straggler_params *p)
{
	return excess >= (double)p->min_excess_ns && excess > p->k * sigma;
}

int straggler_group_analyse(const struct straggler_group *g, const struct straggler_params *p,
			    struct straggler_rank *out)
{
	int32_t n = g->nranks;
	double sum = 0, sumsq = 0;
	int found = 0;

	memset(out, 0, (size_t)n * sizeof(*out));
	for (int32_t r = 0; r < n; r++) {
		out[r].rank = r;
		out[r].missing = g->missing[r];
	}
	if (!g->count)
		return 0;
	/* Per instance: who entered last, and who was late against the others. */
	for (uint32_t i = 0; i < g->count; i++) {
		const double *row = g->lateness + (size_t)i * (size_t)n;
		double s = 0, sq = 0, worst = -1;
		int32_t last = 0;

		for (int32_t r = 0; r < n; r++) {
			s += row[r];
			sq += row[r] * row[r];
			out[r].mean_lateness_ns += row[r];
			if (row[r] > worst) {
				worst = row[r];
				last = r;
			}
		}
		out[last].last_fraction += 1;
		for (int32_t r = 0; r < n; r++) {
			double excess, sigma;
			leave_one_out(row, n, r, s, sq, &excess, &sigma);
			if (exceeds(excess, sigma, p))
				out[r].flagged_fraction += 1;
		}
	}
	double *m = malloc((size_t)n * sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (int32_t r = 0; r < n; r++) {
		out[r].mean_lateness_ns /= g->count;
		out[r].last_fraction /= g->count;
		out[r].flagged_fraction /= g->count;
		m[r] = out[r].mean_lateness_ns;
		sum += m[r];
		sumsq += m[r] * m[r];
	}
	/* Over the window: the mean lateness against the other ranks'. */
	for (int32_t r = 0; r < n; r++) {
		double excess, sigma;

		leave_one_out(m, n, r, sum, sumsq, &excess, &sigma);
		out[r].excess_ns = excess;
		out[r].z = sigma > 0 ? excess / sigma : (excess > 0 ? HUGE_VAL : 0);
		out[r].straggler = n > 1 && exceeds(excess, sigma, p);
		out[r].persistent = out[r].straggler &&
				    out[r].flagged_fraction >= p->persistent_fraction;
		out[r].verdict = !out[r].straggler ? STRAGGLER_NONE
				 : out[r].persistent ? STRAGGLER_PERSISTENT : STRAGGLER_INTERMITTENT;
		found += out[r].straggler;
	}
	free(m);
	return found;
}
