/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Slow-rank detection for one communication group (DESIGN.md "Algorithms", seed 000 §3.1).
 *
 * Collective instances are matched across the group's ranks by (communicator, op, sequence
 * number) before they get here. No clock synchronisation across nodes is assumed beyond what
 * the collective itself gives: within one instance every rank is held until the last one
 * enters, so a rank's lateness is its entry time minus the instance's earliest entry (barrier
 * semantics). Over the last W complete instances:
 *
 *   m_r       mean lateness of rank r
 *   excess_r  m_r minus the mean of the other ranks' m  (leave-one-out, so a group of two
 *             ranks, where μ + kσ over all ranks can never be exceeded, still works)
 *   straggler excess_r > k σ_{-r} (σ of the other ranks' m) and excess_r >= min_excess
 *   per instance: the same test on that instance's lateness; flagged_fraction is how often
 *             it held, and a straggler is persistent when it held in at least
 *             `persistent_fraction` of the instances, intermittent otherwise.
 *
 * Bounded: W × nranks lateness values per group (a ring), nranks <= STRAGGLER_MAX_RANKS.
 */
#ifndef SYSOM_SERVER_ANALYSIS_STRAGGLER_H
#define SYSOM_SERVER_ANALYSIS_STRAGGLER_H

#include <stdbool.h>
#include <stdint.h>

#define STRAGGLER_MAX_RANKS (1 << 20) /* a million GPUs in one communicator */
#define STRAGGLER_MAX_WINDOW 10000
#define STRAGGLER_DEFAULT_K 2.0
#define STRAGGLER_DEFAULT_WINDOW 100
#define STRAGGLER_DEFAULT_MIN_EXCESS_NS 1000000ull /* 1 ms: below, lateness is noise */
#define STRAGGLER_DEFAULT_PERSISTENT 0.5

struct straggler_params {
	double k;
	uint32_t window;
	uint64_t min_excess_ns;
	double persistent_fraction;
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
	double mean_lateness_ns;  /* m_r */
	double excess_ns;         /* m_r - mean of the others */
	double z;                 /* excess / σ of the others (HUGE_VAL when σ = 0 and excess > 0) */
	double flagged_fraction;  /* instances where the per-instance test held */
	double last_fraction;     /* instances where it entered last */
	uint64_t missing;         /* incomplete instances it did not enter */
	bool straggler, persistent;
	enum straggler_verdict verdict; /* the same, as one value */
};

/* Instances held (<= window) and incomplete instances seen. */
uint32_t straggler_group_instances(const struct straggler_group *g);
uint64_t straggler_group_incomplete(const struct straggler_group *g);
int32_t straggler_group_nranks(const struct straggler_group *g);

/* Fills out[0 .. nranks-1] (by rank). Returns the number of stragglers. */
int straggler_group_analyse(const struct straggler_group *g, const struct straggler_params *p,
			    struct straggler_rank *out);

#endif
