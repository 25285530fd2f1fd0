/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The analysis's typed results (server/analysis/report.h) as JSON, in one place: the document
 * of GET /api/v1/jobs/{job}/stragglers (docs/http-api.md) and the report stored with each
 * incident. Every function returns a new JSON value owned by the caller, or NULL when out of
 * memory.
 */
#ifndef SYSOM_SERVER_ANALYSIS_DIAGNOSIS_RENDER_H
#define SYSOM_SERVER_ANALYSIS_DIAGNOSIS_RENDER_H

#include <jansson.h>
#include <stddef.h>

#include "common/bytes.h"
#include "server/analysis/hang.h"
#include "server/analysis/report.h"

/* The stragglers document: job, range, params, iteration time, stragglers, communicators. */
json_t *diagnosis_report_json(const struct straggler_report *r);

/* One job-level straggler: rank, pid, hostname, communicators, persistence, max_excess_ms
 * and, when one was attempted, its diagnosis (null when it failed). */
json_t *diagnosis_straggler_json(const struct straggler_entry *e);

/* The layered diagnosis: layer, summary, action and each layer's evidence. */
json_t *diagnosis_json(const struct diagnosis *d);

/* What a straggler incident stores as its report: the straggler with the report's params,
 * iteration time and communicators. */
/* The pipeline pass of the report ("pipeline" in docs/http-api.md); JSON null when it did not
 * run, NULL on allocation failure. */
json_t *diagnosis_pipeline_json(const struct straggler_report *r);

json_t *diagnosis_straggler_incident_json(const struct straggler_report *r, size_t straggler);

/* What a regression incident stores as its report. */
json_t *diagnosis_regression_json(const struct regression *g);

/* What a hang incident stores as its report: the waiting instance (communicator, op, seq,
 * since, waited_ms, threshold_ms, interval_ms, entered of nranks, all_entered) and the named
 * ranks with their state, node, pid, whether the process exists, and (the first
 * HANG_EVIDENCE_RANKS) their latest on-CPU and off-CPU stacks and thread activity. */
json_t *diagnosis_hang_json(const struct hang_result *r, const struct hang_evidence *ev,
			    size_t nev);

/* What an agent-lost incident stores: the node, its last batch, the job ranks it listed. */
json_t *diagnosis_agent_lost_json(const struct hang_lost_node *n);

/* The plain-text body of a hang or agent-lost report (as diagnosis_hang_json and
 * diagnosis_agent_lost_json make it), appended to `out`. */
void diagnosis_hang_text(const json_t *report, struct byte_buf *out);

#endif
