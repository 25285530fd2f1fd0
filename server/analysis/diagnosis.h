/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Straggler detection and layered differential diagnosis of one training job, over the stored
 * data of a time range: the document behind GET /api/v1/jobs/{job}/stragglers, and what the
 * monitor (server/analysis/monitor.h) evaluates as batches arrive.
 *
 * Bounded work: per communication group only the latest `window` complete collective
 * instances are read (an indexed query, at most QUERY_MAX_STRAGGLER_INSTANCES over all groups),
 * and at most DIAGNOSE_MAX_STRAGGLERS stragglers are diagnosed per evaluation, so the cost of
 * one evaluation does not grow with the job's history.
 */
#ifndef SYSOM_SERVER_ANALYSIS_DIAGNOSIS_H
#define SYSOM_SERVER_ANALYSIS_DIAGNOSIS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/bytes.h"
#include "server/analysis/report.h"
#include "server/analysis/settings.h"
#include "server/analysis/straggler.h"
#include "server/store/store.h"

#define DIAGNOSIS_MIN_WINDOW 16 /* a group whose window the cell budget cuts below: skipped */


/* What the analysis reads: the store, and symbolised profiles of a filter as folded
 * "stack count" lines (server/query/profile.h), through callbacks over `profiles_arg`. */
struct diagnosis_ctx {
	struct store *store;
	void *profiles_arg;
	int (*folded)(void *arg, const struct store_sample_filter *f, uint32_t limit,
		      struct byte_buf *out);
	/* GPU kernel time by launching stack, "stack;[gpu] kernel ns" lines (NULL: none). */
	int (*gpu_time_folded)(void *arg, const struct store_sample_filter *f, uint32_t limit,
			       struct byte_buf *out);
	/* Off-CPU time by stack, folded "stack us" lines (NULL: the store has no off-CPU data);
	 * the hang report shows a missing rank's top blocked stacks with it. */
	int (*offcpu_folded)(void *arg, const struct store_sample_filter *f, uint32_t limit,
			     struct byte_buf *out);
};

struct diagnosis_scope {
	const char *job;
	int64_t from_ms, to_ms; /* inclusive, ms since the epoch */
	bool has_comm;          /* only this communicator */
	uint64_t comm;
	bool skip_pipeline;     /* leave out the point-to-point pass (the job made no Send/Recv) */
};

/* Point-to-point instances (communicator, op, per-pair seq) read per op for the pipeline
 * pass (server/analysis/pipeline.h), latest first. */
#define DIAGNOSIS_PIPELINE_INSTANCES 8192


/*
 * Where the collective calls come from: calls `fn` for every call of the instances to analyse,
 * grouped by instance (communicator key, op, seq), instances of a communicator in time order,
 * as store_collectives_list does. Returns 0 or what `fn` returned / an error.
 */
typedef int (*diagnosis_source_fn)(void *arg, const struct diagnosis_scope *scope,
				   store_collective_fn fn, void *fn_arg);

/*
 * The stragglers of `scope` with their layered diagnoses, typed (owned by the caller in *out:
 * free with straggler_report_free), from the calls `source` gives (NULL: the store's latest
 * instances). Returns 0 or a negative errno (store errors as the store returns them; what
 * `source` returned, such as -ENOENT from live_source).
 */
int diagnosis_report_build(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			   const struct diagnosis_params *p, diagnosis_source_fn source,
			   void *source_arg, struct straggler_report **out);

/*
 * The same rendered as the JSON document documented in docs/http-api.md (owned by the caller
 * in *out), from the store's instances: what GET /api/v1/jobs/{job}/stragglers serves.
 */
int diagnosis_stragglers(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			 const struct diagnosis_params *p, json_t **out);

/* The same over another source of calls (the monitor's in-memory instances). */
int diagnosis_stragglers_from(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			      const struct diagnosis_params *p, diagnosis_source_fn source,
			      void *source_arg, json_t **out);

/*
 * The CPU waterline of the job's communication groups (DESIGN.md): per group and function,
 * mean and standard deviation of the CPU fraction across its ranks; ranks over mean + k σ
 * (and over the mean by at least min_pp percentage points) are flagged. One profile per rank
 * (ranks with fewer than LAYERS_CPU_MIN_SAMPLES samples are left out); groups of more than
 * DIAGNOSIS_WATERLINE_MAX_RANKS ranks are skipped (counted). 0 or -errno.
 */
#define DIAGNOSIS_WATERLINE_MAX_RANKS 256
#define DIAGNOSIS_WATERLINE_K 2.0
#define DIAGNOSIS_WATERLINE_MIN_PP 2.0

int diagnosis_waterline(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			double k, double min_pp, json_t **out);

#endif
