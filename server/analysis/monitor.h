/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monitor: automatic straggler detection and diagnosis as batches arrive.
 *
 * Ingest tells the monitor which jobs a stored batch carried data for (monitor_batch_stored).
 * The batch's collective calls are folded into in-memory instances as it arrives
 * (server/analysis/live.h), so an evaluation reads the latest W instances from memory, not the store.
 * A background thread evaluates each such job at most once per `interval`: stragglers with
 * their layered diagnosis over the job's latest collective instances (server/analysis/diagnosis.h), and,
 * when there is no straggler but the iteration time rose, the temporal baseline comparison.
 * Each finding is an incident in the store (one open diagnosis per job and identity, updated
 * while it holds, resolved once it has not held for `resolve_after`), and the open incidents
 * of a job are the alert set handed to the alert module (server/alerts/alerts.h).
 *
 * Per-job settings (GET/PUT /api/v1/jobs/{job}/settings) override every threshold.
 */
#ifndef SYSOM_SERVER_ANALYSIS_MONITOR_H
#define SYSOM_SERVER_ANALYSIS_MONITOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/wire.h"
#include "server/analysis/settings.h"
#include "server/analysis/diagnosis.h"
#include "server/analysis/report.h"
#include "server/store/store.h"

#define MONITOR_DEFAULT_INTERVAL_MS 5000u        /* a job is evaluated at most this often */
#define MONITOR_MAX_JOBS 4096                    /* jobs tracked at once (oldest forgotten) */

/* What the monitor tells its owner (for the server's log): it logs nothing itself. */
enum monitor_event_kind {
	MONITOR_SETTINGS_IGNORED,   /* a job's stored settings no longer parse: `text` says why */
	MONITOR_BASELINE_STORED,    /* a job's first healthy stretch became its baseline */
	MONITOR_INCIDENT_OPENED,    /* `incident_id` opened; `text` is its summary */
	MONITOR_INCIDENT_RESOLVED,  /* `incident_id` resolved; `text` is its identity */
	MONITOR_EVALUATION_FAILED,  /* `error` (a negative errno) */
};

struct monitor_event {
	enum monitor_event_kind kind;
	const char *job;
	int64_t incident_id;
	const char *text;
	int error;
	double iteration_ms;        /* baseline stored */
	uint64_t samples;           /* baseline stored */
};

/* Called on the thread that evaluates (never under the monitor's lock); borrowed strings. */
typedef void (*monitor_event_fn)(void *arg, const struct monitor_event *ev);

/*
 * Alert policy and delivery, which live in server/alerts/: the composition root (server/main.c)
 * wires them in, so the analysis depends on no alert code. `severity` is required; `publish`
 * (NULL: incidents only) receives a job's open incidents after each evaluation, on the
 * evaluating thread; `arg` is its first argument (borrowed, outlives the monitor).
 */
struct monitor_alerting {
	const char *(*severity)(enum incident_kind kind, enum diagnosis_layer layer, bool persistent);
	int (*publish)(void *arg, const char *job, const struct incident_summary *open, size_t n,
		       bool enabled, const char *public_url, int64_t now_ms);
	/* Optional: `job` moved to another replica, which alerts on it from now on: forget its
	 * firing alerts without resolving them. */
	void (*forget)(void *arg, const char *job);
	void *arg;
};

/*
 * Which jobs this server analyses, when replicas share the store (server/cluster/cluster.h
 * decides; the composition root wires it in). NULL `owns`: every job.
 */
struct monitor_ownership {
	bool (*owns)(void *arg, const char *job);
	void *arg;
};

struct monitor_options {
	uint32_t interval_ms;      /* 0: default */
	const char *public_url;    /* base of generatorURL ("http://sysom:8080"); NULL: none */
	int64_t (*now_ms)(void);   /* NULL: the real clock */
	size_t live_cells;         /* in-memory instance budget (0: LIVE_DEFAULT_MAX_CELLS) */
	monitor_event_fn on_event; /* NULL: events are only counted */
	void *event_arg;
	struct monitor_alerting alerting; /* copied; see struct monitor_alerting */
	struct monitor_ownership ownership; /* copied; see struct monitor_ownership */
};

struct monitor;

/*
 * Starts the monitor over borrowed objects. 0, -EINVAL without opts->alerting.severity, or
 * another negative errno.
 */
int monitor_new(const struct diagnosis_ctx *ctx, const struct monitor_options *opts,
		struct monitor **out);

/* Stops the thread (an evaluation in progress finishes) and frees. Accepts NULL. */
void monitor_free(struct monitor *m);

/* Notes that a stored batch carried data of the jobs in its JOB_RANKS (any thread). */
void monitor_batch_stored(struct monitor *m, const struct sysom_batch *b);

/*
 * The owners of jobs may have changed (replicas came or went): the monitor checks which jobs
 * it owns before its next evaluation, forgets the alerts of those it lost, and takes up the
 * open incidents in the store of those it gained (a job whose owner died may send no more
 * batches, yet its incidents must still resolve). Any thread.
 */
void monitor_owners_changed(struct monitor *m);

/* Evaluates `job` now, synchronously (tests; the thread does the same). 0 or -errno. */
int monitor_evaluate(struct monitor *m, const char *job);

struct monitor_stats {
	uint64_t evaluations, evaluation_errors;
	uint64_t incidents_opened, incidents_resolved;
	uint64_t open_incidents;     /* gauge */
	uint64_t jobs;               /* gauge: jobs tracked */
	uint64_t last_evaluation_us; /* how long the last evaluation took */
	uint64_t stragglers;         /* gauge: straggling ranks over the jobs' last evaluations */
	uint64_t live_calls;         /* collective calls folded into the in-memory instances */
	uint64_t live_skipped;       /* ... not folded in (unknown size, budget, too old) */
	uint64_t live_cells;         /* gauge: (rank, instance) cells held */
	uint64_t hangs_opened;       /* hang incidents opened */
	uint64_t agents_lost_opened; /* agent-lost incidents opened */
	uint64_t hung_jobs;          /* gauge: jobs whose last evaluation found a hang */
	uint64_t hang_note_errors;   /* batches the hang tracker could not note (out of memory) */

	uint64_t blind_jobs;         /* gauge: jobs with collectives but nothing analysable */
	uint64_t unanalysed_communicators; /* gauge: over the jobs' last evaluations */
	uint64_t pattern_checks;     /* behaviour-pattern checks of a job */
	uint64_t pattern_deviations; /* strong deviations those checks found (held or not yet) */
	uint64_t patterns_opened;    /* pattern incidents opened */
	uint64_t last_pattern_check_us; /* how long the last pattern check took */
	uint64_t pattern_errors;     /* pattern checks that failed (the evaluation went on) */
	uint64_t jobs_owned;         /* gauge: tracked jobs this replica analyses */
	uint64_t jobs_handed_over;   /* jobs this replica stopped analysing (another owns them) */
	uint64_t jobs_taken_over;    /* jobs it started analysing after an ownership change */
};

void monitor_stats_get(struct monitor *m, struct monitor_stats *out);

/* Appends the monitor's Prometheus families without per-job series: evaluations, live
 * folding, incidents opened/resolved/open. */
void monitor_metrics_write(struct monitor *m, struct byte_buf *out);

/* Appends the per-job families (label job): the stragglers and open incidents of each job's
 * last evaluation. /metrics shows them to read credentials only (job ids are data). */
void monitor_job_metrics_write(struct monitor *m, struct byte_buf *out);

#endif
