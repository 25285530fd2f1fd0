// SPDX-License-Identifier: Apache-2.0
// Localisation of behaviour patterns (server/analysis/patterns.c, EROICA seed 004 §4.3) for
// 1,000 / 100,000 / 1,000,000 workers on one core, with bounded memory.
//
// Each worker runs F key functions (default 20: EROICA finds no more than 20 with β > 1%).
// One function's patterns (β, μ, σ for every worker) are generated, localised, and dropped
// before the next: memory is O(workers), not O(workers × functions), plus the bounded top
// list. A handful of abnormal (worker, function) pairs are planted (3× slower μ, doubled β, a
// collective straggler's low β, a noisy σ); every run checks that exactly those are found,
// the largest first, so a fast wrong answer cannot pass.
//
// Side by side, on the same patterns:
//   sysom      patterns_localise: median and MAD by selection, O(n) per dimension
//   sort       the same test with medians by qsort (O(n log n)): what selection saves
//   eroica     EROICA's own Δ (eq. 8-11): max-normalised patterns, Δ = share of N = 100
//              sampled workers farther than δ = 0.4 (Manhattan), then median + 5 MAD of Δ;
//              O(100 n) per function. Timed on at most --eroica-max workers (its cost is
//              linear in n: the table scales it and says so).
// Times are CPU time of the one thread (CLOCK_PROCESS_CPUTIME_ID): the goal is per core, and
// the machine may be shared. Generation is not timed. Usage: patterns_bench [--workers N,N,...] [--functions F]
//                                               [--eroica-max N]
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/bench_stats.h"
#include "server/analysis/patterns.h"
#include "server/analysis/robust.h"

#define PLANTED 4 /* per run: (function, kind of fault) pairs */

static double uniform01(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(*st >> 11) + 0.5) / 9007199254740992.0;
}

/* An approximately normal deviate (sum of 4 uniforms, scaled): cheap for 60 M draws. */
static double noise(uint64_t *st)
{
	return (uniform01(st) + uniform01(st) + uniform01(st) + uniform01(st) - 2.0) * 1.732;
}

/* CPU time of this process: the machine is shared, and the goal is per core. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t peak_rss(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (size_t)ru.ru_maxrss * 1024;
}

struct plant {
	uint32_t function;
	size_t worker;
	int kind; /* 0 μ ×3, 1 β ×2, 2 β ÷10 (a collective's straggler), 3 σ ×6 */
};

/* Function f's patterns for n workers, with the planted faults of that function. */
static void generate(uint32_t f, size_t n, const struct plant *pl, double *beta, double *mu,
		     double *cov)
{
	uint64_t st = 0x9e3779b97f4a7c15ull ^ ((uint64_t)f << 32);
	double b0 = 0.02 + 0.4 * (double)(f % 7) / 7, m0 = 1e5 * (1 + f % 11);

	for (size_t w = 0; w < n; w++) {
		beta[w] = b0 * (1 + 0.02 * noise(&st));
		mu[w] = m0 * (1 + 0.02 * noise(&st));
		cov[w] = 0.05 * (1 + 0.05 * noise(&st));
	}
	for (int i = 0; i < PLANTED; i++) {
		if (pl[i].function != f)
			continue;
		size_t w = pl[i].worker;
		switch (pl[i].kind) {
		case 0:
			mu[w] *= 3;
			beta[w] *= 1.5;
			break;
		case 1:
			beta[w] *= 2;
			break;
		case 2:
			beta[w] /= 10;
			mu[w] /= 10;
			break;
		default:
			cov[w] *= 6;
			break;
		}
	}
}

/* The "sort" baseline: the same test with qsort medians. */
static size_t localise_sorted(const double *dims[3], size_t n, const struct patterns_params *p,
			      double *scratch)
{
	static const double floors[3] = { 0.005, 1000.0, 0.05 };
	double med[3], scale[3];
	size_t found = 0;

	for (int d = 0; d < 3; d++) {
		memcpy(scratch, dims[d], n * sizeof(double));
		med[d] = bench_median(scratch, (int)n);
		for (size_t i = 0; i < n; i++)
			scratch[i] = fabs(dims[d][i] - med[d]);
		double mad = bench_median(scratch, (int)n);
		scale[d] = fmax(fmax(ROBUST_MAD_SIGMA * mad, p->rel_floor * fabs(med[d])), floors[d]);
	}
	for (size_t w = 0; w < n; w++) {
		if (!(dims[0][w] >= p->min_beta || med[0] >= p->min_beta))
			continue;
		for (int d = 0; d < 3; d++)
			if (fabs(dims[d][w] - med[d]) / scale[d] > p->k) {
				found++;
				break;
			}
	}
	return found;
}

/* EROICA's Δ (seed 004 eq. 8-11) over n workers: abnormal when Δ > M + 5 MAD (β > 1%). */
static size_t localise_eroica(const double *dims[3], size_t n, double *delta, double *scratch)
{
	double max[3] = { 0, 0, 0 }, m, mad;
	size_t sample = n < 100 ? n : 100, found = 0;
	uint64_t st = 7;

	for (int d = 0; d < 3; d++)
		for (size_t w = 0; w < n; w++)
			max[d] = fmax(max[d], dims[d][w]);
	for (size_t w = 0; w < n; w++) {
		size_t far = 0;
		for (size_t s = 0; s < sample; s++) {
			size_t o = (size_t)(uniform01(&st) * (double)n);
			double dist = 0;
			for (int d = 0; d < 3; d++)
				dist += fabs(dims[d][w] - dims[d][o]) / max[d];
			far += dist >= 0.4;
		}
		delta[w] = (double)far / (double)sample;
	}
	robust_median_mad(delta, n, scratch, &m, &mad);
	for (size_t w = 0; w < n; w++)
		found += dims[0][w] > 0.01 && delta[w] > m + 5 * mad;
	return found;
}

static int run(size_t n, uint32_t nfn, size_t eroica_max)
{
	double *beta = malloc(n * sizeof(double)), *mu = malloc(n * sizeof(double));
	double *cov = malloc(n * sizeof(double)), *scratch = malloc(2 * n * sizeof(double));
	double *delta = malloc(n * sizeof(double));
	struct patterns_params p;
	struct patterns_top top;
	struct plant pl[PLANTED];
	uint64_t t_ours = 0, t_sort = 0, t_eroica = 0;
	size_t found_sort = 0, found_eroica = 0, eroica_n = n < eroica_max ? n : eroica_max;
	int rc = 0;

	patterns_params_default(&p);
	if (!beta || !mu || !cov || !scratch || !delta || patterns_top_init(&top, 100)) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (int i = 0; i < PLANTED; i++)
		pl[i] = (struct plant){ (uint32_t)(i * 5 + 1) % nfn, (n / 7) * (size_t)(i + 1) % n, i };
	for (uint32_t f = 0; f < nfn; f++) {
		generate(f, n, pl, beta, mu, cov);
		struct patterns_vectors v = { .beta = beta, .mu = mu, .cov = cov, .n = n };
		const double *dims[3] = { beta, mu, cov };
		uint64_t t0 = cpu_ns();
		patterns_localise(&v, f, &p, scratch, &top, NULL);
		uint64_t t1 = cpu_ns();
		found_sort += localise_sorted(dims, n, &p, scratch);
		uint64_t t2 = cpu_ns();
		found_eroica += localise_eroica(dims, eroica_n, delta, scratch);
		uint64_t t3 = cpu_ns();
		t_ours += t1 - t0;
		t_sort += t2 - t1;
		t_eroica += t3 - t2;
	}
	patterns_top_sort(&top);
	/* The answer: exactly the planted pairs, the same count from the sort baseline. */
	bool ok = top.total == PLANTED && top.n == PLANTED && found_sort == PLANTED;
	for (int i = 0; ok && i < PLANTED; i++) {
		bool hit = false;
		for (size_t j = 0; j < top.n; j++)
			hit |= top.f[j].function == pl[i].function && (size_t)top.f[j].worker == pl[i].worker;
		ok = hit;
	}
	double eroica_s = (double)t_eroica / 1e9 * (double)n / (double)eroica_n;
	printf("%9zu  %9u  %10.3f  %10.3f  %12.1f%s  %8.1fx  %8.1fx  %10.1f  %14zu  %s\n", n, nfn,
	       (double)t_ours / 1e9, (double)t_sort / 1e9, eroica_s, eroica_n < n ? "*" : " ",
	       (double)t_sort / (double)t_ours, eroica_s * 1e9 / (double)t_ours,
	       (double)(6 * n * sizeof(double)) / 1048576.0, found_eroica,
	       ok ? "ok" : "WRONG");
	if (!ok) {
		fprintf(stderr, "patterns_bench: %zu workers: found %" PRIu64 " (kept %zu), sort %zu\n",
			n, top.total, top.n, found_sort);
		rc = -EINVAL;
	}
cleanup:
	patterns_top_free(&top);
	free(delta);
	free(scratch);
	free(cov);
	free(mu);
	free(beta);
	return rc;
}

int main(int argc, char **argv)
{
	char workers_arg[256] = "1000,100000,1000000";
	uint32_t nfn = 20;
	size_t eroica_max = 100000;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			snprintf(workers_arg, sizeof(workers_arg), "%s", argv[++i]);
		else if (!strcmp(argv[i], "--functions") && i + 1 < argc)
			nfn = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--eroica-max") && i + 1 < argc)
			eroica_max = strtoul(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: patterns_bench [--workers N,N,...] [--functions F] "
					"[--eroica-max N]\n");
			return 2;
		}
	}
	if (nfn < PLANTED * 5 || nfn > 10000 || !eroica_max) {
		fprintf(stderr, "patterns_bench: --functions must be in [%d, 10000]\n", PLANTED * 5);
		return 2;
	}
	printf("%9s  %9s  %10s  %10s  %13s  %9s  %9s  %10s  %14s  %s\n", "workers", "functions",
	       "sysom s", "sort s", "eroica-Δ s", "sort/sys", "eroica/sys", "data MiB", "eroica-flagged",
	       "answer");
	int rc = 0;
	for (char *tok = strtok(workers_arg, ","); tok; tok = strtok(NULL, ",")) {
		size_t n = strtoul(tok, NULL, 10);
		if (n < 16 || n > 100000000) {
			fprintf(stderr, "patterns_bench: workers must be in [16, 1e8]\n");
			return 2;
		}
		rc |= run(n, nfn, eroica_max);
	}
	printf("peak RSS %.1f MiB (* eroica-Δ timed on %zu workers, scaled linearly)\n",
	       (double)peak_rss() / 1048576.0, eroica_max);
	return rc ? 1 : 0;
}
