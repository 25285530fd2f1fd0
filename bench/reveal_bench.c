// SPDX-License-Identifier: Apache-2.0
// Host anomaly scoring (server/analysis/reveal.c, Reveal seed 003) for 1,000 / 10,000 / 100,000
// nodes of one job, on one core.
//
// Every node has W windows (default 30: a minute of 2-s batches) of the 38 host signals at
// typical healthy levels with 5% noise; P nodes (default 5) get a fault in their last two
// windows (50x + 1000 of a harmful signal, or a third of a clock / available memory). Every run checks that
// exactly the planted nodes are anomalous, so a fast wrong answer cannot pass.
//
// Side by side, on the same data:
//   sysom   reveal_score: per signal median / MAD of the node's own history and of the peers per
//           period (selection, O(n)), diagonal Mahalanobis distance, 2 periods
//   fullcov the textbook alternative for the last window only: robust z against the peers,
//           then the full 38x38 covariance of the z vectors (ridge 1e-3), Cholesky, and each
//           node's Mahalanobis distance against the same chi-square threshold
// Times are CPU time of the one thread (CLOCK_PROCESS_CPUTIME_ID); generation is not timed.
// Usage: reveal_bench [--nodes N,N,...] [--windows W] [--planted P]
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "server/analysis/reveal.h"
#include "server/analysis/robust.h"

#define S SYSOM_HOST_SIGNAL_MAX

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double uniform01(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(*st >> 11) + 0.5) / 9007199254740992.0;
}

static double noise(uint64_t *st)
{
	return (uniform01(st) + uniform01(st) + uniform01(st) + uniform01(st) - 2.0) * 1.732;
}

static double level(uint16_t s)
{
	switch (s) {
	case SYSOM_HOST_CPU_MHZ: case SYSOM_HOST_CPU_MHZ_MIN: return 2400;
	case SYSOM_HOST_CPU_BUSY: return 0.6;
	case SYSOM_HOST_CONTEXT_SWITCHES: return 20000;
	case SYSOM_HOST_SOFTIRQ_NET_RX: return 5000;
	case SYSOM_HOST_SOFTIRQ_TOTAL: return 12000;
	case SYSOM_HOST_TCP_OUT_SEGS: return 40000;
	case SYSOM_HOST_TCP_RETRANS_SEGS: return 1;
	case SYSOM_HOST_DISK_WRITE_IOPS: return 80;
	case SYSOM_HOST_DISK_WRITE_MS: return 1.5;
	case SYSOM_HOST_MEM_AVAILABLE: return 200e9;
	case SYSOM_HOST_MEM_AVAILABLE_SHARE: return 0.7;
	case SYSOM_HOST_PSI_CPU_SOME_AVG10: return 3;
	default: return 0.5;
	}
}

static bool planted_node(size_t i, size_t n, size_t planted)
{
	return planted && i % (n / planted) == 7 % (n / planted) && i / (n / planted) < planted;
}

static int build(struct reveal_input *in, size_t n, size_t windows, size_t planted, uint64_t *st)
{
	char id[40];
	int rc;

	memset(in, 0, sizeof(*in));
	for (size_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "%032zx", i + 1);
		bool bad = planted_node(i, n, planted);
		uint16_t fault = (uint16_t)(1 + (i * 7) % S);
		while (bad && reveal_signal_direction(fault) == 0)
			fault = (uint16_t)(1 + fault % S);
		for (size_t t = 0; t < windows; t++)
			for (uint16_t s = 1; s <= S; s++) {
				double v = level(s) * (1 + 0.05 * noise(st));
				if (bad && s == fault && t + 2 >= windows)
					v = reveal_signal_direction(s) > 0 ? v * 50 + 1000 : v / 3;
				if (v < 0)
					v = 0;
				if ((rc = reveal_input_add(in, id, "h", (int64_t)t * 2000, s, v)))
					return rc;
			}
	}
	return 0;
}

/* The full-covariance baseline on the last window; returns nodes flagged, `hits` planted ones. */
static size_t fullcov(const struct reveal_input *in, size_t planted, size_t *hits)
{
	size_t n = in->nnodes, flagged = 0;
	double *z = malloc(n * S * sizeof(*z)), *v = malloc(n * sizeof(*v));
	double *scr = malloc(n * sizeof(*scr)), cov[S][S], mean[S];
	double thr = reveal_threshold(S, REVEAL_TAIL);

	*hits = 0;
	if (!z || !v || !scr)
		goto cleanup;
	for (int s = 0; s < S; s++) {
		double med, mad;
		for (size_t i = 0; i < n; i++)
			v[i] = in->nodes[i].w[in->nodes[i].nw - 1].v[s + 1];
		robust_median_mad(v, n, scr, &med, &mad);
		double sc = ROBUST_MAD_SIGMA * mad > 1e-9 ? ROBUST_MAD_SIGMA * mad : 1e-9;
		for (size_t i = 0; i < n; i++)
			z[i * S + s] = (v[i] - med) / sc;
	}
	memset(cov, 0, sizeof(cov));
	memset(mean, 0, sizeof(mean));
	for (size_t i = 0; i < n; i++)
		for (int a = 0; a < S; a++)
			mean[a] += z[i * S + a] / (double)n;
	for (size_t i = 0; i < n; i++)
		for (int a = 0; a < S; a++)
			for (int b = 0; b <= a; b++)
				cov[a][b] += (z[i * S + a] - mean[a]) * (z[i * S + b] - mean[b]) /
					     (double)(n - 1);
	for (int a = 0; a < S; a++) {
		cov[a][a] += 1e-3;
		for (int b = 0; b < a; b++)
			cov[b][a] = cov[a][b];
	}
	/* Cholesky in place (lower). */
	for (int j = 0; j < S; j++) {
		double d = cov[j][j];
		for (int k = 0; k < j; k++)
			d -= cov[j][k] * cov[j][k];
		cov[j][j] = sqrt(d > 1e-12 ? d : 1e-12);
		for (int i = j + 1; i < S; i++) {
			double x = cov[i][j];
			for (int k = 0; k < j; k++)
				x -= cov[i][k] * cov[j][k];
			cov[i][j] = x / cov[j][j];
		}
	}
	for (size_t i = 0; i < n; i++) {
		double y[S], d2 = 0;
		for (int a = 0; a < S; a++) { /* forward solve L y = z - mean */
			double x = z[i * S + a] - mean[a];
			for (int k = 0; k < a; k++)
				x -= cov[a][k] * y[k];
			y[a] = x / cov[a][a];
			d2 += y[a] * y[a];
		}
		if (sqrt(d2) > thr) {
			flagged++;
			*hits += planted_node(i, n, planted);
		}
	}
cleanup:
	free(z);
	free(v);
	free(scr);
	return flagged;
}

static size_t peak_rss_kib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (size_t)ru.ru_maxrss;
}

int main(int argc, char **argv)
{
	const char *nodes_arg = "1000,10000";
	size_t windows = 30, planted = 5;
	uint64_t st = 12345;
	int fails = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--nodes") && i + 1 < argc)
			nodes_arg = argv[++i];
		else if (!strcmp(argv[i], "--windows") && i + 1 < argc)
			windows = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--planted") && i + 1 < argc)
			planted = strtoul(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: %s [--nodes N,N,...] [--windows W] [--planted P]\n",
				argv[0]);
			return 2;
		}
	}
	if (windows < 8 || windows > REVEAL_MAX_WINDOWS) {
		fprintf(stderr, "--windows: 8..%d\n", REVEAL_MAX_WINDOWS);
		return 2;
	}
	printf("%10s %8s %12s %12s %10s %14s %10s %12s\n", "nodes", "windows", "sysom_s",
	       "fullcov_s", "ratio", "sysom_found", "fullcov", "input_MiB");
	for (const char *p = nodes_arg; *p;) {
		size_t n = strtoul(p, NULL, 10);
		struct reveal_input in;
		struct reveal_options o;
		struct reveal_node_score *out;
		size_t found = 0, right = 0, hits = 0, flagged;

		p += strcspn(p, ",");
		p += *p == ',';
		if (n < 10 * planted || n > REVEAL_MAX_NODES) {
			fprintf(stderr, "nodes: %zu..%d\n", 10 * planted, REVEAL_MAX_NODES);
			return 2;
		}
		if (build(&in, n, windows, planted, &st) || !(out = calloc(n, sizeof(*out)))) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		reveal_options_default(&o);
		uint64_t t0 = cpu_ns();
		if (reveal_score(&in, &o, out)) {
			fprintf(stderr, "reveal_score failed\n");
			return 1;
		}
		uint64_t t1 = cpu_ns();
		flagged = fullcov(&in, planted, &hits);
		uint64_t t2 = cpu_ns();
		for (size_t i = 0; i < n; i++) {
			found += out[i].anomalous;
			right += out[i].anomalous && planted_node(i, n, planted);
		}
		bool ok = found == planted && right == planted;
		fails += !ok;
		char fc[32];
		snprintf(fc, sizeof(fc), "%zu/%zu+%zu", hits, planted, flagged - hits);
		printf("%10zu %8zu %12.4f %12.4f %9.2fx %8zu/%zu %s %10s %12.1f\n", n, windows,
		       (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9,
		       (double)(t2 - t1) / (double)(t1 - t0 ? t1 - t0 : 1), right, planted,
		       ok ? "ok " : "BAD", fc,
		       (double)(n * REVEAL_MAX_WINDOWS * sizeof(struct reveal_window)) / 1048576.0);
		free(out);
		reveal_input_free(&in);
	}
	printf("peak RSS %.1f MiB (whole run)\n", (double)peak_rss_kib() / 1024.0);
	return fails ? 1 : 0;
}
