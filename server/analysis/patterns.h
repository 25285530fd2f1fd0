/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Behaviour patterns (EROICA, seed 004 §4.2-4.3): per worker (job rank) and key function over
 * a window, three numbers independent of absolute timestamps (no clock synchronisation):
 *
 *   β   the share of the worker's wall time spent in the function (calls: Σ duration / the
 *       worker's observed span; CPU functions: the function's share of the worker's on-CPU
 *       samples — the innermost Python function of a sample that has one (lines merged),
 *       else self time of its user-space leaf — for ranks with at least
 *       PATTERNS_CPU_MIN_SAMPLES samples; NaN: no pattern)
 *   μ   the mean duration of one call or kernel execution (CPU functions: none)
 *   σ   the coefficient of variation of those durations (CPU functions: none)
 *
 * Key functions: NCCL collectives and point-to-point calls (host side, entry to exit), GPU
 * kernels (GPU time), the hottest CPU functions.
 *
 * Localisation, per function and dimension: a worker is abnormal when its value lies further
 * than k × scale from the median over the workers, scale = max(1.4826 MAD, floors) — a
 * relative floor (differences under `rel_floor` of the median are not worth naming) and an
 * absolute one per dimension — and the function matters (β >= min_beta on that worker or the
 * median). The verdicts are combined into one list ranked by cost: the share of the
 * iteration the deviation is worth (|β − median β| for β; β × the relative deviation for μ
 * and σ). Two-sided: a rank spending less time than its peers in a collective is the one the
 * others wait for.
 *
 * Every worker affected alike leaves nothing to localise: the job's medians are then compared
 * with its own history (patterns of an earlier, healthy stretch), and a function whose median β
 * or μ changed by more than `history_change` is reported for the whole job.
 *
 * Cost: O(workers) per function and dimension (selection, not sorting); memory: 3 doubles per
 * (worker, function) for the table, 2 per worker scratch, and the bounded top list.
 */
#ifndef SYSOM_SERVER_ANALYSIS_PATTERNS_H
#define SYSOM_SERVER_ANALYSIS_PATTERNS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/analysis/diagnosis.h"

#define PATTERNS_DEFAULT_K 3.5
#define PATTERNS_DEFAULT_MIN_BETA 0.01       /* EROICA: at least 1% of the iteration */
#define PATTERNS_DEFAULT_REL_FLOOR 0.05      /* 5% of the median */
#define PATTERNS_DEFAULT_HISTORY_CHANGE 0.2  /* 20% */
#define PATTERNS_DEFAULT_LIMIT 50
#define PATTERNS_MAX_LIMIT 10000
#define PATTERNS_MAX_FUNCTIONS 256           /* per job, the first seen; more are counted */
#define PATTERNS_MAX_WORKERS 65536           /* ranks of one job analysed */
#define PATTERNS_MAX_CPU_WORKERS 256         /* ranks whose CPU profile is read */
#define PATTERNS_CPU_TOP 8                   /* hottest CPU functions per rank */
#define PATTERNS_CPU_MIN_SAMPLES 20          /* a rank's CPU shares need this many samples */
#define PATTERNS_CPU_NAME_MAX 512            /* a CPU function's name (longer ones are cut) */
#define PATTERNS_MAX_INSTANCES 20000

enum patterns_kind { PATTERNS_COLLECTIVE, PATTERNS_P2P, PATTERNS_KERNEL, PATTERNS_CPU };
enum patterns_dim { PATTERNS_BETA, PATTERNS_MU, PATTERNS_COV };

const char *patterns_kind_name(enum patterns_kind k);
const char *patterns_dim_name(enum patterns_dim d);

struct patterns_params {
	double k, min_beta, rel_floor, history_change;
	uint32_t limit; /* findings kept */
	/* false: NCCL calls are not read (no collective or p2p patterns; β of the other
	 * functions is then their share of the window, not of each rank's observed span). The
	 * monitor's pattern check, which leaves calls to the straggler and pipeline analyses,
	 * skips them: reading the window's calls is most of the cost. */
	bool calls;
};

void patterns_params_default(struct patterns_params *p);

/* ---- the pure core: one function over n workers ------------------------------------------ */

struct patterns_vectors {
	const double *beta; /* n values, 0 when the worker never ran it, NaN: unknown */
	const double *mu;   /* n values or NULL; NaN: none */
	const double *cov;  /* n values or NULL; NaN: none */
	const double *beta_se; /* n values or NULL: β's own standard error (sampled shares), a
				* per-worker floor of the β scale */
	size_t n;
};

struct patterns_finding {
	uint32_t function;
	int32_t worker;
	enum patterns_dim dim;
	double value, median, scale, z; /* z = (value − median) / scale */
	double beta;                    /* the worker's β */
	double cost;                    /* share of the iteration the deviation is worth */
};

/* The findings with the largest cost, at most `cap` (a min-heap while filling). */
struct patterns_top {
	struct patterns_finding *f;
	size_t n, cap;
	uint64_t total; /* abnormal (worker, function) pairs, kept or not */
};

int patterns_top_init(struct patterns_top *t, size_t cap);
void patterns_top_free(struct patterns_top *t);
/* Orders the kept findings by cost, largest first (the heap is gone). */
void patterns_top_sort(struct patterns_top *t);

/* The medians of one function (NaN where no worker has a value). */
struct patterns_summary {
	double beta, mu, cov;
	double beta_mad, mu_mad, cov_mad;
	size_t workers; /* with β > 0 */
};

/*
 * Localises function `function` over v->n workers into `top`; `scratch` holds 2 × v->n
 * doubles. `summary` (may be NULL) gets the medians. Returns the abnormal workers found.
 */
size_t patterns_localise(const struct patterns_vectors *v, uint32_t function,
			 const struct patterns_params *p, double *scratch, struct patterns_top *top,
			 struct patterns_summary *summary);

/*
 * The key CPU function of one folded stack text[0..len) ("comm;frame;...;leaf", no count):
 * its innermost Python frame when it has one ("qualname (file.py)": the line dropped, so
 * the lines of one function are one function), else its leaf. Written NUL-terminated into
 * out[0..cap) (cut to fit); returns its length, 0 for none (the comm alone, a kernel leaf).
 */
size_t patterns_cpu_function(const char *stack, size_t len, char *out, size_t cap);

/* ---- a job's patterns from the store ------------------------------------------------------- */

/*
 * The document GET /api/v1/jobs/{job}/patterns serves (docs/http-api.md): patterns of the
 * ranks of `scope->job` over [from, to], the ranked findings, and the comparison with the
 * history stretch [hist_from_ms, hist_to_ms] (both 0: the job's stored baseline stretch when
 * it has one, else none). 0, -ENOENT (no rank of the job), or a negative errno.
 */
int patterns_job(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
		 const struct patterns_params *p, int64_t hist_from_ms, int64_t hist_to_ms,
		 json_t **out);

#endif
