/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The analysis's thresholds: the parameters of one straggler evaluation, and the settings of a
 * job (defaults, then the overrides stored with PUT /api/v1/jobs/{job}/settings, a JSON object
 * documented in docs/http-api.md). Pure: no store, no I/O, so the settings decoder has its own
 * fuzz target (tests/fuzz/fuzz_job_settings.c).
 */
#ifndef SYSOM_SERVER_ANALYSIS_SETTINGS_H
#define SYSOM_SERVER_ANALYSIS_SETTINGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/analysis/straggler.h"

#define DIAGNOSIS_DEFAULT_CPU_MIN_PP 5.0 /* a function this much more on the straggler's stacks */

struct diagnosis_params {
	struct straggler_params sp;
	bool diagnose;         /* add a layered diagnosis to each straggler */
	double gpu_threshold;  /* per-kernel slowdown that implicates the GPU (1.15) */
	double cpu_min_pp;     /* CPU layer: top function's excess share, percentage points */
};

void diagnosis_params_default(struct diagnosis_params *p);

#define SETTINGS_DEFAULT_LOOKBACK_MS (600u * 1000) /* instances older than this are not read */
#define SETTINGS_DEFAULT_RESOLVE_AFTER_MS 60000u  /* an incident not seen this long resolves */
#define SETTINGS_DEFAULT_REGRESSION 0.10          /* iteration time rise that starts a baseline diff */
#define SETTINGS_DEFAULT_BASELINE_DELTA_PP 0.5    /* δ: CPU-fraction rise that names a function */
#define SETTINGS_DEFAULT_REGRESSION_HOLD_MS 60000u /* the rise must last this long */
#define SETTINGS_DEFAULT_BASELINE_AFTER_MS 120000u /* a job's baseline: its first healthy stretch this long */
#define SETTINGS_DEFAULT_HANG_FLOOR_MS 30000u     /* see server/analysis/hang.h */
#define SETTINGS_DEFAULT_HANG_FACTOR 5.0
/* Pattern incidents (server/analysis/patterns.h fed into the monitor): a deviation at least
 * pattern_k robust scales out, worth at least pattern_min_cost of the iteration, held for
 * pattern_hold consecutive checks (one every pattern_period) over the last pattern_window. */
#define SETTINGS_DEFAULT_PATTERN_K 6.0
#define SETTINGS_DEFAULT_PATTERN_MIN_COST 0.03     /* 3% of the iteration */
#define SETTINGS_DEFAULT_PATTERN_CHANGE 0.5        /* job-wide: +-50% against its history */
#define SETTINGS_DEFAULT_PATTERN_WINDOW_MS 30000u
#define SETTINGS_DEFAULT_PATTERN_PERIOD_MS 10000u
#define SETTINGS_DEFAULT_PATTERN_HOLD 2u

/* The thresholds of one job (defaults, then its stored settings). */
struct job_settings {
	struct diagnosis_params diag;
	uint32_t lookback_ms;
	uint32_t resolve_after_ms;
	bool alert_intermittent;  /* alert on intermittent stragglers too (default: persistent only) */
	bool alerts;              /* send alerts for this job at all */
	double regression;        /* relative iteration-time rise, e.g. 0.10 */
	uint32_t regression_hold_ms; /* ... held this long (a transient slowdown is no regression) */
	double baseline_delta_pp; /* δ */
	uint32_t baseline_after_ms;
	uint32_t hang_floor_ms;   /* no hang before an instance waited this long (30 s) */
	double hang_factor;       /* ... nor before this many of its usual spacings (5) */
	bool patterns;            /* open pattern incidents at all */
	double pattern_k, pattern_min_cost, pattern_change;
	uint32_t pattern_window_ms, pattern_period_ms, pattern_hold;
};

void job_settings_default(struct job_settings *s);

/*
 * Applies a settings object ({"k": 2, "window": 100, ...}, documented in docs/http-api.md) on
 * top of `s`. Unknown keys and out-of-range values are refused: -EINVAL with a message in
 * `err`. Used for PUT validation and when loading stored settings.
 */
int job_settings_apply(struct job_settings *s, const json_t *obj, char *err, size_t errlen);

/* The settings as the JSON object GET returns (every key). NULL when out of memory. */
json_t *job_settings_json(const struct job_settings *s);

#endif
