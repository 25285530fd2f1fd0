/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Slow-rank detection for one communication group (DESIGN.md "Algorithms", seed 000 §3.1).
 *
 * Collective instances are matched across the group's ranks by (communicator, op, sequence
 * number) before they get here. No clock synchronisation across nodes is assumed beyond what
 * the collective itself gives: within one instance every rank is held until the last one
 * enters, so a rank's lateness is its entry time minus the instance's earliest entry (barrier
 * semantics). The verdict is taken on the evidence of the whole window of the last W complete
 * instances, robustly (EROICA, seed 004 §4.3: median + k·MAD), not instance by instance:
 *
 *   T_r       rank r's trimmed mean lateness over the window (the STRAGGLER_TRIM smallest and
 *             largest instances left out, so a few hiccups of a healthy rank do not count)
 *   c_r, s_r  the median of the other ranks' T and their scale, max(1.4826 MAD, scale_floor):
 *             leave-one-out (so a group of two or three still works) — exactly up to
 *             STRAGGLER_EXACT_LOO ranks, above that from all ranks (one rank moves the median
 *             and MAD of hundreds by at most one order statistic); the floor keeps a group
 *             whose ranks are nearly identical from firing on microseconds
 *   excess_r  T_r − c_r;  z = excess_r / s_r
 *   straggler excess_r > k s_r and excess_r >= min_excess (the effect size a user cares about)
 *   persistent the same test holds on the rank's (1 − persistent_fraction) quantile of
 *             lateness (its median by default): it is late in at least that fraction of the
 *             instances; a straggler by its trimmed mean only is intermittent.
 *   flagged_fraction  (informational) instances where its lateness − c_r passed the threshold.
 *
 * With noise σ per instance the trimmed mean's noise is about σ/√W, so a rank whose every
 * instance is a few σ late is named as soon as about half the window is past the onset.
 *
 * Bounded: W × nranks lateness values per group (a ring), nranks <= STRAGGLER_MAX_RANKS.
 */
#ifndef SYSOM_SERVER_ANALYSIS_STRAGGLER_H
#define SYSOM_SERVER_ANALYSIS_STRAGGLER_H

#include <stdbool.h>
#include <stdint.h>

#define STRAGGLER_MAX_RANKS (1 << 20) /* a million GPUs in one communicator */
#define STRAGGLER_MAX_WINDOW 10000
#define STRAGGLER_DEFAULT_K 3.5       /* in σ-consistent MADs (Iglewicz-Hoaglin's 3.5) */
#define STRAGGLER_DEFAULT_WINDOW 100
#define STRAGGLER_DEFAULT_MIN_EXCESS_NS 1000000ull /* 1 ms: below, lateness is noise */
#define STRAGGLER_DEFAULT_PERSISTENT 0.5
#define STRAGGLER_DEFAULT_SCALE_FLOOR_NS 50000ull /* 50 µs */
#define STRAGGLER_TRIM 0.1         /* trimmed from each end of a rank's window */
#define STRAGGLER_EXACT_LOO 256    /* groups up to this size get an exact leave-one-out */

struct straggler_params {
	double k;
	uint32_t window;
	uint64_t min_excess_ns;
	double persistent_fraction;
	uint64_t scale_floor_ns;
};

void straggler_params_default(struct straggler_params *p);

struct straggler_group;

/* A group of `nranks` ranks keeping the last `window` instances. 0, -EINVAL, -ENOMEM. */
int straggler_group_new(int32_t nranks, uint32_t window, struct straggler_group **out);
void straggler_group_free(struct straggler_group *g);

/* One complete instance: entry_ns[r] for every rank r of the group. */
void straggler_group_add(struct straggler_group *g, const int64_t *entry_ns);

/* An instance some rank never entered (it is not analysed; the missing ranks are counted). */
void straggler_group_add_incomplete(struct straggler_group *g, const bool *present);

/* What the analysis concludes about one rank. */
enum straggler_verdict {
	STRAGGLER_NONE,          /* not a straggler */
	STRAGGLER_INTERMITTENT,  /* a straggler, flagged in fewer than persistent_fraction instances */
	STRAGGLER_PERSISTENT,    /* a straggler in at least persistent_fraction of the instances */
};

/* "persistent", "intermittent", or NULL for STRAGGLER_NONE. */
const char *straggler_verdict_name(enum straggler_verdict v);

struct straggler_rank {
	int32_t rank;
	double mean_lateness_ns;  /* plain mean over the window */
	double trimmed_lateness_ns; /* T_r */
	double quantile_lateness_ns; /* its (1 - persistent_fraction) quantile */
	double excess_ns;         /* T_r - median of the others' T */
	double z;                 /* excess / robust scale of the others (never 0-divided: floor) */
	double flagged_fraction;  /* instances whose lateness passed the window's threshold */
	double last_fraction;     /* instances where it entered last */
	uint64_t missing;         /* incomplete instances it did not enter */
	bool straggler, persistent;
	enum straggler_verdict verdict; /* the same, as one value */
};

/* Instances held (<= window) and incomplete instances seen. */
uint32_t straggler_group_instances(const struct straggler_group *g);
uint64_t straggler_group_incomplete(const struct straggler_group *g);
int32_t straggler_group_nranks(const struct straggler_group *g);

/* Fills out[0 .. nranks-1] (by rank). Returns the number of stragglers, or -ENOMEM. */
int straggler_group_analyse(const struct straggler_group *g, const struct straggler_params *p,
			    struct straggler_rank *out);

#endif
