/* SPDX-License-Identifier: Apache-2.0 */
/* Automatic straggler detection, incidents and alerts as batches arrive (server/analysis/monitor.h). */
#include "server/analysis/monitor.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/array.h"
#include "common/clock.h"
#include "server/analysis/diagnosis_render.h"
#include "server/query/folded.h"
#include "server/analysis/hang.h"
#include "server/analysis/hostanomaly.h"
#include "server/analysis/layers.h"
#include "server/analysis/live.h"
#include "server/analysis/patterns.h"
#include "server/http/render.h"
#include "server/metrics/metrics.h"

#define MONITOR_MAX_INCIDENTS 64    /* open incidents of one job handled per evaluation */
#define MONITOR_TOP_FUNCTIONS 5
#define MONITOR_PROFILE_LIMIT 20000 /* stacks in a job-wide profile */
#define MONITOR_PATTERN_MAX 8       /* pattern deviations of one job followed per check */

/* A pattern deviation and for how many consecutive pattern checks it has held. */
struct pattern_held {
	char identity[64];
	uint32_t periods;
};

struct pattern_state {
	bool ran;                /* this evaluation checked the patterns */
	int64_t due_ms;          /* the next check */
	uint32_t n;
	struct pattern_held held[MONITOR_PATTERN_MAX];
};

struct job_entry {
	char *job;
	int64_t first_batch_ms; /* first batch seen by this monitor */
	int64_t last_batch_ms;
	int64_t last_eval_ms;   /* 0: never */
	bool dirty;             /* data arrived since the last evaluation */
	bool has_open;          /* it had open incidents after the last evaluation */
	uint32_t window;        /* its W (settings), for the live instances */
	int64_t regress_since_ms; /* its iteration time has been above the baseline's since (0: not) */
	uint32_t stragglers;    /* found by its last evaluation */
	uint32_t open;          /* its open incidents after the last evaluation */
	int64_t hang_due_ms;    /* evaluate again then even without new data (0: no need) */
	bool hung;              /* its last evaluation found a hang */
	uint32_t agents_lost;   /* ... nodes of its ranks that stopped reporting */
	/* Its last evaluation: communicators whose init was missed, recovered by sequence
	 * matching / left unanalysed; blind: collectives seen but no communicator analysed. */
	uint32_t recovered, unanalysed;
	bool blind;
	int64_t p2p_seen_ms;    /* a batch with its Send/Recv calls last arrived then (0: never) */
	struct pattern_state pattern; /* its last pattern check */
	bool owned;             /* this server analyses it (replicas: see monitor_owners_changed) */
};

struct monitor {
	struct diagnosis_ctx ctx;
	struct monitor_alerting alerting;
	struct monitor_ownership ownership;
	bool owners_changed;    /* locked: check which jobs this server owns */
	uint32_t interval_ms;
	char *public_url;
	int64_t (*now_ms)(void);
	monitor_event_fn on_event;
	void *event_arg;

	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool thread_started, stopping;
	struct job_entry *jobs;
	size_t njobs, cap;
	struct monitor_stats stats;
	uint64_t open_at_start;
	struct live *live;      /* the jobs' latest collective instances, fed by ingest */
	struct live_add_stats live_stats;
	struct hang_tracker *hang; /* which nodes report, which processes they list */
};

/* Tells the owner (outside the lock). */
static void event_emit(struct monitor *m, const struct monitor_event *ev)
{
	if (m->on_event)
		m->on_event(m->event_arg, ev);
}

/* The job's settings: defaults, then what is stored (a stored object that no longer parses
 * is reported and ignored rather than stopping the job's analysis). */
static void job_settings_load(struct monitor *m, const char *job, struct job_settings *s)
{
	char *text = NULL, err[160];
	json_t *obj;

	job_settings_default(s);
	if (store_job_settings_get(m->ctx.store, job, &text) || !text)
		return;
	if (!(obj = json_loads(text, 0, NULL)) || job_settings_apply(s, obj, err, sizeof(err)))
		event_emit(m, &(struct monitor_event){ .kind = MONITOR_SETTINGS_IGNORED, .job = job,
						       .text = obj ? err : "not JSON" });
	json_decref(obj);
	free(text);
}

/* ---- incidents --------------------------------------------------------------------------- */

/* The incidents found by one evaluation. */
struct finding {
	char identity[64];
	char kind[16];
	int32_t rank;
	char *hostname, *communicators, *layer, *severity, *summary, *action, *report;
};

/* Frees the text fields (identity and kind stay); a second call frees nothing. */
static void finding_free(struct finding *f)
{
	char **fields[] = { &f->hostname, &f->communicators, &f->layer,  &f->severity,
			    &f->summary,  &f->action,        &f->report };

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		free(*fields[i]);
		*fields[i] = NULL;
	}
}

/* Sets the text fields of `f` to copies of these, `report` serialised (not taken): 0, or
 * -ENOMEM with the fields freed. */
static int finding_set(struct finding *f, const char *hostname, const char *communicators,
		       const char *layer, const char *severity, const char *summary,
		       const char *action, const json_t *report)
{
	f->hostname = strdup(hostname);
	f->communicators = strdup(communicators);
	f->layer = strdup(layer);
	f->severity = strdup(severity);
	f->summary = strdup(summary);
	f->action = strdup(action);
	f->report = report ? json_dumps(report, JSON_COMPACT) : NULL;
	if (f->hostname && f->communicators && f->layer && f->severity && f->summary && f->action &&
	    f->report)
		return 0;
	finding_free(f);
	return -ENOMEM;
}

/* A persistent (or, by setting, intermittent) straggler `i` of the report. */
static int finding_of_straggler(const struct monitor *m, const struct straggler_report *r, size_t i,
				struct finding *f)
{
	const struct straggler_entry *e = &r->stragglers[i];
	const struct diagnosis *dg = e->diagnosis;
	const char *article = e->persistent ? "a persistent" : "an intermittent";
	char summary[640], comms[512] = "", key[32];
	size_t used = 0;
	json_t *report;

	memset(f, 0, sizeof(*f));
	snprintf(f->identity, sizeof(f->identity), "straggler rank=%d", e->rank);
	snprintf(f->kind, sizeof(f->kind), "straggler");
	f->rank = e->rank;
	for (size_t c = 0; c < e->ncommunicators; c++) {
		snprintf(key, sizeof(key), "%016" PRIx64, e->communicators[c]);
		int n = snprintf(comms + used, sizeof(comms) - used, "%s%s", used ? " " : "", key);
		if (n < 0 || (size_t)n >= sizeof(comms) - used)
			break;
		used += (size_t)n;
	}
	if (dg)
		snprintf(summary, sizeof(summary), "rank %d is %s straggler (%.1f ms late on average): %s",
			 e->rank, article, e->max_excess_ms, dg->summary);
	else
		snprintf(summary, sizeof(summary), "rank %d is %s straggler (%.1f ms late on average)",
			 e->rank, article, e->max_excess_ms);
	report = diagnosis_straggler_incident_json(r, i);
	/* A diagnosis that failed names no layer; none attempted: "unknown". */
	int rc = finding_set(f, e->hostname, comms,
			     e->diagnosed && !dg ? ""
						 : diagnosis_layer_name(dg ? dg->layer
									   : DIAGNOSIS_LAYER_UNKNOWN),
			     m->alerting.severity(INCIDENT_STRAGGLER,
						  dg ? dg->layer : DIAGNOSIS_LAYER_UNKNOWN,
						  e->persistent),
			     summary, dg ? dg->action : "", report);
	json_decref(report);
	return rc;
}

/* A slow pipeline stage (link < 0) or slow link `link` of the report's pipeline pass: a
 * straggler incident naming the stage and its rank, or the link. */
static int finding_of_pipeline(const struct monitor *m, const struct straggler_report *r,
			       const struct pipeline_stage *st, const struct pipeline_link *l,
			       struct finding *f)
{
	char summary[640], comm[32];
	json_t *report = NULL, *pj = diagnosis_pipeline_json(r);
	const struct pipeline_stage_where *sw =
		st && r->stage_where ? &r->stage_where[st - r->pipeline.stages] : NULL;
	const struct pipeline_link_where *lw =
		l && r->link_where ? &r->link_where[l - r->pipeline.links] : NULL;
	const struct diagnosis *dg = sw ? sw->diagnosis : NULL;
	char host[256] = "";

	memset(f, 0, sizeof(*f));
	snprintf(f->kind, sizeof(f->kind), "straggler");
	snprintf(comm, sizeof(comm), "%016" PRIx64, st ? st->comm : l->comm);
	if (sw && sw->hostname)
		snprintf(host, sizeof(host), "%s", sw->hostname);
	else if (lw && (lw->src_host || lw->dst_host))
		snprintf(host, sizeof(host), "%s%s%s", lw->src_host ? lw->src_host : "?",
			 lw->dst_host && (!lw->src_host || strcmp(lw->src_host, lw->dst_host))
				 ? " -> " : "",
			 lw->dst_host && (!lw->src_host || strcmp(lw->src_host, lw->dst_host))
				 ? lw->dst_host : "");
	if (st) {
		f->rank = st->job_rank;
		if (st->job_rank >= 0)
			snprintf(f->identity, sizeof(f->identity), "straggler rank=%d", st->job_rank);
		else
			snprintf(f->identity, sizeof(f->identity), "pipeline stage %s/%d", comm,
				 st->rank);
		if (st->host_slow)
			snprintf(summary, sizeof(summary),
				 "pipeline stage %d (rank %d) is slow: +%.1f ms per microbatch "
				 "(%.1f ms busy vs %.1f ms on the other stages); the stages after it "
				 "wait for it in their receives%s%.400s",
				 st->rank, st->job_rank, st->excess_ns / 1e6, st->busy_ns / 1e6,
				 (st->busy_ns - st->excess_ns) / 1e6,
				 dg && dg->layer != DIAGNOSIS_LAYER_UNKNOWN ? ": " : "",
				 dg && dg->layer != DIAGNOSIS_LAYER_UNKNOWN ? dg->summary : "");
		else /* the GPU clock alone: its host time is like the others' */
			snprintf(summary, sizeof(summary),
				 "pipeline stage %d (rank %d) is slow on the GPU: +%.1f ms of GPU "
				 "compute per microbatch (%.1f ms vs %.1f ms on the other stages; its "
				 "host time is like theirs); the stages after it wait for it%s%.400s",
				 st->rank, st->job_rank, st->gpu_excess_ns / 1e6,
				 st->gpu_busy_ns / 1e6, (st->gpu_busy_ns - st->gpu_excess_ns) / 1e6,
				 dg && dg->layer != DIAGNOSIS_LAYER_UNKNOWN ? ": " : "",
				 dg && dg->layer != DIAGNOSIS_LAYER_UNKNOWN ? dg->summary : "");
	} else {
		f->rank = -1;
		snprintf(f->identity, sizeof(f->identity), "pipeline link %s/%d->%d", comm, l->src,
			 l->dst);
		snprintf(summary, sizeof(summary),
			 "pipeline link %d->%d (rank %d to rank %d) is slow: %.1f ms per transfer, "
			 "+%.1f ms over the other links",
			 l->src, l->dst, l->src_job_rank, l->dst_job_rank, l->transfer_ns / 1e6,
			 l->excess_ns / 1e6);
	}
	report = json_pack("{s:s,s:o,s:o}", "pipeline_verdict", st ? "slow-stage" : "slow-link",
			   st ? "stage" : "link",
			   st ? json_pack("{s:s,s:i,s:i,s:I,s:f,s:f,s:f,s:s,s:o,s:o}", "communicator",
					  comm, "stage", (int)st->rank, "job_rank", (int)st->job_rank,
					  "pid", (json_int_t)st->pid, "busy_ms", st->busy_ns / 1e6,
					  "excess_ms", st->excess_ns / 1e6, "z", st->z, "clock",
					  st->host_slow ? "host" : "gpu", "gpu_busy_ms",
					  st->gpu_timed ? json_real(st->gpu_busy_ns / 1e6) : json_null(),
					  "gpu_excess_ms",
					  st->gpu_judged ? json_real(st->gpu_excess_ns / 1e6)
							 : json_null())
			      : json_pack("{s:s,s:i,s:i,s:f,s:f,s:f}", "communicator", comm,
					  "src", (int)l->src, "dst", (int)l->dst, "transfer_ms",
					  l->transfer_ns / 1e6, "excess_ms", l->excess_ns / 1e6, "z",
					  l->z),
			   "pipeline", pj);
	if (report && st && dg)
		json_object_set_new(json_object_get(report, "stage"), "diagnosis", diagnosis_json(dg));
	/* A slow stage whose rank's layers name the cause takes that layer and action. */
	bool layered = dg && dg->layer != DIAGNOSIS_LAYER_UNKNOWN;
	int rc = finding_set(f, host, comm,
			     layered ? diagnosis_layer_name(dg->layer)
			     : st    ? "pipeline-stage"
				     : "pipeline-link",
			     m->alerting.severity(INCIDENT_STRAGGLER,
						  layered ? dg->layer : DIAGNOSIS_LAYER_UNKNOWN, true),
			     summary,
			     layered ? dg->action
			     : st && !st->host_slow
				     ? "look at this stage's rank's GPU kernels (GET /api/v1/jobs/{job}/gpu, "
				       "sysomctl gpu): its GPU compute per microbatch is what the whole "
				       "pipeline runs at"
			     : st    ? "look at this stage's rank: its compute per microbatch (CPU, GPU "
				       "or OS layer) is what the whole pipeline runs at"
				     : "check the network path between these two ranks (NIC, switch "
				       "port, NVLink/PCIe)",
			     report);
	json_decref(report);
	return rc;
}

/* ---- temporal baseline --------------------------------------------------------------------- */

struct baseline_copy {
	int64_t from_ms, to_ms;
	uint64_t iteration_ns, samples;
	struct byte_buf profile;
	bool found;
};

static int baseline_take(void *arg, const struct store_baseline *b)
{
	struct baseline_copy *c = arg;

	c->from_ms = b->from_ms;
	c->to_ms = b->to_ms;
	c->iteration_ns = b->iteration_ns;
	c->samples = b->samples;
	c->found = true;
	byte_buf_append(&c->profile, b->profile, strlen(b->profile));
	return byte_buf_error(&c->profile);
}

/* The job-wide CPU profile of [from, to]. */
static int job_profile(struct monitor *m, const char *job, int64_t from_ms, int64_t to_ms,
		       struct byte_buf *out)
{
	struct store_sample_filter f = { .job = job, .from_ms = from_ms, .to_ms = to_ms };

	return m->ctx.folded(m->ctx.profiles_arg, &f, MONITOR_PROFILE_LIMIT, out);
}

/*
 * No straggler: stores the first baseline once the job has run healthy for baseline_after, or,
 * when the iteration time rose by `regression` over the baseline's, compares the current
 * profile (a stretch as long as the baseline's) with it. *found is set when a regression is
 * reported in `f`.
 */
static int baseline_check(struct monitor *m, struct job_entry *je, const char *job,
			  const struct job_settings *s, double iteration_ms, int64_t now,
			  struct finding *f, bool *found, bool *rising)
{
	struct baseline_copy base = { 0 };
	struct byte_buf current = { 0 };
	struct folded_diff diff = { 0 };
	struct cpu_delta *d = NULL;
	uint64_t totals[2];
	int n = 0, rc;
	struct regression_function fns[MONITOR_TOP_FUNCTIONS];
	size_t nfns = 0;
	json_t *report = NULL;

	*found = false;
	*rising = false;
	if (iteration_ms <= 0)
		return 0;
	rc = store_baseline_get(m->ctx.store, job, baseline_take, &base);
	if (rc == -ENOENT) {
		rc = 0;
		if (now - je->first_batch_ms < (int64_t)s->baseline_after_ms)
			goto cleanup;
		/* The first healthy stretch becomes the baseline. */
		struct store_baseline b = { .job = job, .from_ms = now - s->baseline_after_ms,
					    .to_ms = now, .created_ms = now, .source = "auto",
					    .iteration_ns = (uint64_t)(iteration_ms * 1e6) };
		if ((rc = job_profile(m, job, b.from_ms, b.to_ms, &current)))
			goto cleanup;
		b.samples = folded_samples(&current);
		if (b.samples < LAYERS_CPU_MIN_SAMPLES)
			goto cleanup;
		byte_buf_put_u8(&current, 0);
		if ((rc = byte_buf_error(&current)))
			goto cleanup;
		b.profile = (const char *)current.data;
		if (!(rc = store_baseline_put(m->ctx.store, &b)))
			event_emit(m, &(struct monitor_event){ .kind = MONITOR_BASELINE_STORED,
							       .job = job, .iteration_ms = iteration_ms,
							       .samples = b.samples });
		goto cleanup;
	}
	if (rc || !base.found || base.iteration_ns == 0 ||
	    iteration_ms * 1e6 < (double)base.iteration_ns * (1 + s->regression))
		goto cleanup;
	/* Risen: a regression only once it has lasted regression_hold (a few seconds of a busy
	 * node are no regression of the job). */
	*rising = true;
	if (!je->regress_since_ms || now - je->regress_since_ms < (int64_t)s->regression_hold_ms)
		goto cleanup;
	int64_t span = base.to_ms - base.from_ms > 0 ? base.to_ms - base.from_ms : 60000;
	if (span > (int64_t)s->lookback_ms)
		span = s->lookback_ms;
	if ((rc = job_profile(m, job, now - span, now, &current)) ||
	    (rc = folded_diff_build(&base.profile, &current, &diff)))
		goto cleanup;
	if ((n = layers_cpu_diff_deltas(&diff, &d, totals)) < 0) {
		rc = n;
		n = 0;
		goto cleanup;
	}
	for (int i = 0; i < n && nfns < MONITOR_TOP_FUNCTIONS; i++) {
		double pp = 100 * (d[i].b_fraction - d[i].a_fraction);
		if (pp <= s->baseline_delta_pp)
			break;
		fns[nfns++] = (struct regression_function){ d[i].name, d[i].b_fraction,
							    d[i].a_fraction };
	}
	double base_ms = (double)base.iteration_ns / 1e6, rise = iteration_ms / base_ms - 1;
	char summary[640], action[512];
	const struct regression_function *top = nfns ? &fns[0] : NULL;
	struct regression g = { .iteration_ms = iteration_ms, .baseline_iteration_ms = base_ms,
				.rise = rise, .baseline_from_ms = base.from_ms,
				.baseline_to_ms = base.to_ms, .baseline_samples = totals[0],
				.current_samples = totals[1], .window_ms = span,
				.delta_pp = s->baseline_delta_pp, .functions = fns, .nfunctions = nfns };
	memset(f, 0, sizeof(*f));
	snprintf(f->identity, sizeof(f->identity), "regression");
	snprintf(f->kind, sizeof(f->kind), "regression");
	f->rank = -1;
	if (top) {
		snprintf(summary, sizeof(summary),
			 "iteration time rose from %.1f ms to %.1f ms (+%.0f%%) on every rank with no "
			 "straggler; %s is on %.1f percentage points more of the job's CPU samples than "
			 "in the baseline", base_ms, iteration_ms, 100 * rise, top->function,
			 100 * (top->current_fraction - top->baseline_fraction));
		snprintf(action, sizeof(action),
			 "find what changed that makes every rank run %s more (code, configuration, "
			 "input pipeline) since the baseline", top->function);
	} else {
		snprintf(summary, sizeof(summary),
			 "iteration time rose from %.1f ms to %.1f ms (+%.0f%%) on every rank with no "
			 "straggler; no function's CPU share rose by more than %.1f pp",
			 base_ms, iteration_ms, 100 * rise, s->baseline_delta_pp);
		snprintf(action, sizeof(action),
			 "compare GPU kernel times with the baseline (sysomctl gpu) and the network "
			 "(NCCL link bandwidth)");
	}
	report = diagnosis_regression_json(&g);
	if ((rc = finding_set(f, "", "",
			      diagnosis_layer_name(top ? DIAGNOSIS_LAYER_CPU : DIAGNOSIS_LAYER_UNKNOWN),
			      m->alerting.severity(INCIDENT_REGRESSION,
						   top ? DIAGNOSIS_LAYER_CPU : DIAGNOSIS_LAYER_UNKNOWN,
						   false),
			      summary, action, report)))
		goto cleanup;
	*found = true;
cleanup:
	json_decref(report);
	layers_cpu_deltas_free(d, n);
	byte_buf_free(&base.profile);
	byte_buf_free(&current);
	folded_diff_free(&diff);
	return rc;
}

/* ---- hangs ------------------------------------------------------------------------------------ */

#define HANG_STACK_LOOKBACK_MS 30000 /* stacks from this long before the wait began */

struct hang_outcome {
	int64_t next_check_ms;
	bool hung;
	uint32_t agents_lost;
};

/* The `n` heaviest lines of a folded profile ("stack weight\n") into st[]. */
static int top_stacks(const struct byte_buf *folded, struct hang_stack *st, size_t max,
		      size_t *n, uint64_t *total)
{
	const char *p = (const char *)folded->data, *end = p + folded->len;

	*n = 0;
	*total = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
		const char *sp = eol;
		while (sp > p && sp[-1] != ' ')
			sp--;
		if (sp > p) {
			uint64_t w = strtoull(sp, NULL, 10);
			size_t len = (size_t)(sp - 1 - p), at = *n;
			*total += w;
			while (at > 0 && st[at - 1].weight < w)
				at--;
			if (at < max) {
				/* Not strndup: the folded text is not NUL-terminated, and strndup is
				 * a string function (ASan's strict_string_checks reads to a NUL). */
				char *copy = malloc(len + 1);
				if (!copy)
					return -ENOMEM;
				memcpy(copy, p, len);
				copy[len] = '\0';
				if (*n == max)
					free(st[--*n].stack);
				memmove(&st[at + 1], &st[at], (*n - at) * sizeof(*st));
				st[at] = (struct hang_stack){ copy, w };
				(*n)++;
			}
		}
		p = eol + 1;
	}
	return 0;
}

struct thread_acc {
	struct hang_evidence *ev;
	uint32_t pid;
	struct hang_thread all[256];
	size_t n;
};

static int hang_thread_row(void *arg, const struct store_os_thread_row *r)
{
	struct thread_acc *a = arg;
	size_t i;

	if (r->who.pid != a->pid)
		return 0;
	for (i = 0; i < a->n; i++)
		if (a->all[i].tid == r->tid)
			break;
	if (i == a->n) {
		if (a->n == sizeof(a->all) / sizeof(a->all[0]))
			return 0;
		a->n++;
		memset(&a->all[i], 0, sizeof(a->all[i]));
		a->all[i].tid = r->tid;
		snprintf(a->all[i].comm, sizeof(a->all[i].comm), "%s", r->comm ? r->comm : "");
	}
	a->all[i].oncpu_ns += r->oncpu_ns;
	a->all[i].voluntary_switches += r->voluntary_switches;
	a->all[i].involuntary_switches += r->involuntary_switches;
	return 0;
}

struct node_probe {
	const char *host;
	bool rows; /* a thread row of the node */
};

static int node_probe_row(void *arg, const struct store_os_thread_row *r)
{
	struct node_probe *np = arg;

	np->rows |= r->who.hostname && strcmp(r->who.hostname, np->host) == 0;
	return 0;
}

static int cmp_thread(const void *x, const void *y)
{
	const struct hang_thread *a = x, *b = y;

	return (a->oncpu_ns < b->oncpu_ns) - (a->oncpu_ns > b->oncpu_ns);
}

/* What a missing rank was doing: its latest on-CPU (and off-CPU) stacks and its threads'
 * activity since the others started waiting. Missing data is left empty, not an error. */
static int hang_evidence_fill(struct monitor *m, const char *job, const struct hang_result *r,
			      const struct hang_rank *hr, int64_t now, struct hang_evidence *ev)
{
	struct store_sample_filter f = { .from_ms = r->since_ms - HANG_STACK_LOOKBACK_MS,
					 .to_ms = now, .job = job, .has_pid = true,
					 .pid = hr->pid, .node = hr->host };
	struct byte_buf folded = { 0 };
	struct thread_acc *acc = NULL;
	uint64_t total;
	int rc = 0;

	memset(ev, 0, sizeof(*ev));
	ev->rank = *hr;
	ev->main_active = -1;
	ev->process_exists = hr->state == HANG_RANK_AGENT_LOST ? -1
							       : hr->state != HANG_RANK_EXITED;
	if (hr->rank >= 0) {
		f.has_rank = true;
		f.rank = hr->rank;
	}
	if (m->ctx.folded && !m->ctx.folded(m->ctx.profiles_arg, &f, MONITOR_PROFILE_LIMIT, &folded) &&
	    (rc = top_stacks(&folded, ev->oncpu, HANG_TOP_STACKS, &ev->noncpu, &ev->oncpu_samples)))
		goto cleanup;
	folded.len = 0;
	/* Blocked time since the others started waiting (blocks that ended since): where it
	 * waits now, not how it usually sleeps. */
	f.from_ms = r->since_ms;
	if (m->ctx.offcpu_folded &&
	    !m->ctx.offcpu_folded(m->ctx.profiles_arg, &f, MONITOR_PROFILE_LIMIT, &folded)) {
		ev->offcpu_present = true;
		if ((rc = top_stacks(&folded, ev->offcpu, HANG_TOP_STACKS, &ev->noffcpu, &total)))
			goto cleanup;
	}
	if (hr->rank >= 0 && (acc = calloc(1, sizeof(*acc)))) {
		/* Its threads now: the rows of its node's latest batch window (rows are stamped
		 * with their window's end; a batch arrives shortly after its window ends). */
		int64_t from = hr->node_last_ms - 1000 > r->since_ms ? hr->node_last_ms - 1000
								     : r->since_ms;
		struct store_os_filter of = { .job = job, .has_rank = true, .rank = hr->rank,
					      .from_ms = from, .to_ms = now };
		struct store_os_visitor v = { .thread = hang_thread_row, .arg = acc };
		bool truncated = false;
		acc->ev = ev;
		acc->pid = hr->pid;
		if (!store_job_os(m->ctx.store, &of, 4096, &v, &truncated)) {
			ev->threads_present = true;
			ev->main_active = -1;
			for (size_t i = 0; i < acc->n; i++)
				if (acc->all[i].tid == hr->pid)
					ev->main_active = acc->all[i].oncpu_ns ||
							  acc->all[i].voluntary_switches ||
							  acc->all[i].involuntary_switches;
			qsort(acc->all, acc->n, sizeof(acc->all[0]), cmp_thread);
			ev->threads_total = (uint32_t)acc->n;
			for (size_t i = 0; i < acc->n && ev->nthreads < HANG_TOP_THREADS; i++)
				if (acc->all[i].oncpu_ns || acc->all[i].voluntary_switches)
					ev->threads[ev->nthreads++] = acc->all[i];
		}
		/* A thread that neither runs nor wakes has no row at all: the main thread counts
		 * as idle now only if its node reports thread rows (any of the job's, since
		 * shortly before the wait): otherwise nothing is known. */
		if (ev->threads_present && ev->main_active == -1) {
			struct node_probe np = { .host = hr->host };
			struct store_os_filter jf = { .job = job, .to_ms = now,
						      .from_ms = r->since_ms - HANG_STACK_LOOKBACK_MS };
			struct store_os_visitor pv = { .thread = node_probe_row, .arg = &np };
			if (!store_job_os(m->ctx.store, &jf, 4096, &pv, &truncated) && np.rows)
				ev->main_active = 0;
		}
	}
	hang_classify(ev, &ev->cause);
cleanup:
	free(acc);
	byte_buf_free(&folded);
	return rc;
}

/* ---- host anomalies ------------------------------------------------------------------------- */

static int finding_of_host(const struct monitor *m, const struct reveal_node_score *n,
			   struct finding *f)
{
	char summary[640], dev[480];
	json_t *report = hostanomaly_node_json(n);

	memset(f, 0, sizeof(*f));
	snprintf(f->identity, sizeof(f->identity), "host-anomaly node=%s", n->node_id);
	snprintf(f->kind, sizeof(f->kind), "host-anomaly");
	f->rank = -1;
	hostanomaly_describe(n, dev, sizeof(dev));
	snprintf(summary, sizeof(summary),
		 "node %s (%s) is anomalous (score %.1f over %.1f for %u periods, against its own"
		 " history and its peers): %s", n->hostname ? n->hostname : "", n->node_id,
		 n->score, n->threshold, n->periods_over, dev);
	int rc = finding_set(f, n->hostname ? n->hostname : "", "",
			     diagnosis_layer_name(DIAGNOSIS_LAYER_OS),
			     m->alerting.severity(INCIDENT_HOST_ANOMALY, DIAGNOSIS_LAYER_OS, true),
			     summary,
			     "check the node's network (TCP retransmits, drops, NIC errors), memory "
			     "pressure, disks and CPU clocks; `sysomctl hosts JOB` lists every node's "
			     "deviations",
			     report);
	json_decref(report);
	return rc;
}

/* Host anomalies of the job's nodes as findings; a straggler on an anomalous node says so in its
 * summary. A store without host signals gives none. */
static int host_check(struct monitor *m, const char *job, int64_t now, struct finding *found,
		      size_t *nfound)
{
	struct hostanomaly h;
	size_t nbefore = *nfound;
	int rc = hostanomaly_job(m->ctx.store, job, now, HOSTANOMALY_SPAN_MS, &h);

	if (rc == -ENOTSUP)
		return 0;
	if (rc)
		return rc;
	for (size_t i = 0; i < h.in.nnodes && *nfound < MONITOR_MAX_INCIDENTS; i++) {
		const struct reveal_node_score *n = &h.scores[i];
		if (!n->anomalous)
			continue;
		if ((rc = finding_of_host(m, n, &found[*nfound])))
			goto cleanup;
		(*nfound)++;
		for (size_t j = 0; j < nbefore; j++) {
			struct finding *f = &found[j];
			char *more = NULL, dev[480];
			if (strcmp(f->kind, "straggler") || !f->hostname || !n->hostname ||
			    strcmp(f->hostname, n->hostname) || strstr(f->summary, n->node_id))
				continue; /* the diagnosis named the node already (its OS layer) */
			hostanomaly_describe(n, dev, sizeof(dev));
			if (asprintf(&more, "%s; its node %s is anomalous: %s", f->summary,
				     n->hostname, dev) < 0) {
				rc = -ENOMEM;
				goto cleanup;
			}
			free(f->summary);
			f->summary = more;
		}
	}
cleanup:
	hostanomaly_free(&h);
	return rc;
}

#define HANG_IDENTITY_ROWS_MAX 4096 /* job-rank rows read for the named ranks' identity */

/* The identity of the named ranks' processes (a store without identities, or a failing read,
 * leaves them unknown rather than the report). */
static int hang_identity_take(void *arg, const struct store_job_rank *j)
{
	const struct store_identity *id = &j->identity;

	if (j->role == SYSOM_JOB_ROLE_WORKER || !id->known)
		return 0;
	hang_rank_set_identity(arg, j->rank, j->pid, id->pod_namespace, id->pod_name,
			       id->container_name, id->slurm_job, id->slurm_step);
	return 0;
}

/* The hang verdict of `job` as findings: one "hang" naming the ranks the others wait for,
 * one "agent-lost" per node that stopped reporting while it had ranks of the job. */
static int hang_check(struct monitor *m, const char *job, const struct job_settings *s,
		      int64_t now, struct finding *found, size_t *nfound, struct hang_outcome *o)
{
	struct hang_params hp = { .floor_ms = s->hang_floor_ms, .factor = s->hang_factor };
	struct hang_result *r = calloc(1, sizeof(*r));
	struct hang_evidence *ev = NULL;
	size_t nev = 0;
	json_t *report = NULL;
	int rc;

	if (!r)
		return -ENOMEM;
	pthread_mutex_lock(&m->lock);
	rc = hang_evaluate(m->hang, m->live, job, &hp, now, r);
	pthread_mutex_unlock(&m->lock);
	if (rc)
		goto cleanup;
	o->next_check_ms = r->next_check_ms;
	for (size_t i = 0; i < r->nlost && *nfound < MONITOR_MAX_INCIDENTS; i++) {
		const struct hang_lost_node *ln = &r->lost[i];
		struct finding *f = &found[*nfound];
		char summary[640];
		json_t *lr = diagnosis_agent_lost_json(ln);
		memset(f, 0, sizeof(*f));
		snprintf(f->identity, sizeof(f->identity), "agent-lost node=%.46s", ln->host);
		snprintf(f->kind, sizeof(f->kind), "agent-lost");
		f->rank = ln->nranks == 1 ? ln->ranks[0] : -1;
		snprintf(summary, sizeof(summary),
			 "the agent on %s stopped reporting %.0f s ago while %u process(es) of the job "
			 "ran there: its ranks are not analysed (not a hang of the ranks)",
			 ln->host, (double)(now - ln->last_ms) / 1e3, ln->nranks);
		rc = finding_set(f, ln->host, "", diagnosis_layer_name(DIAGNOSIS_LAYER_UNKNOWN),
				 m->alerting.severity(INCIDENT_AGENT_LOST, DIAGNOSIS_LAYER_UNKNOWN,
						      false),
				 summary,
				 "check sysom-agent on the node (systemctl status sysom-agent, its "
				 "journal) and whether the node is reachable",
				 lr);
		json_decref(lr);
		(*nfound)++;
		o->agents_lost++;
		if (rc)
			goto cleanup;
	}
	if ((r->verdict != HANG_HUNG && r->verdict != HANG_STALL) ||
	    *nfound == MONITOR_MAX_INCIDENTS)
		goto cleanup;
	o->hung = true;
	nev = r->nnamed < HANG_EVIDENCE_RANKS ? r->nnamed : HANG_EVIDENCE_RANKS;
	if (!(ev = calloc(nev ? nev : 1, sizeof(*ev)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	(void)store_job_ranks_list(m->ctx.store, job, HANG_IDENTITY_ROWS_MAX, hang_identity_take, r);
	for (size_t i = 0; i < nev; i++)
		if ((rc = hang_evidence_fill(m, job, r, &r->ranks[i], now, &ev[i])))
			goto cleanup;
	{
		struct finding *f = &found[*nfound];
		const struct hang_rank *h0 = &r->ranks[0];
		char summary[1024], action[512], who[480] = "", comm[24];
		size_t used = 0;
		for (size_t i = 0; i < r->nnamed && used < sizeof(who) - 64; i++) {
			const struct hang_rank *h = &r->ranks[i];
			/* Its pod, when known, as the straggler evidence names it. */
			int n = snprintf(who + used, sizeof(who) - used,
					 "%srank %d (%s, %s%.64s%s%.96s%spid %u, %s)", i ? ", " : "",
					 h->rank, h->host, h->identity.pod[0] ? "pod " : "",
					 h->identity.pod_namespace, h->identity.pod[0] ? "/" : "",
					 h->identity.pod, h->identity.pod[0] ? ", " : "", h->pid,
					 hang_rank_state_name(h->state));
			if (n > 0)
				used += (size_t)n < sizeof(who) - used ? (size_t)n : sizeof(who) - used - 1;
		}
		const struct hang_cause *cz = nev ? &ev[0].cause : NULL;
		char cause[HANG_CAUSE_DETAIL_MAX + 64] = "";
		bool stall = r->verdict == HANG_STALL;
		if (cz)
			snprintf(cause, sizeof(cause), "; cause: %s (%s)", hang_cause_name(cz->cls),
				 cz->detail);
		snprintf(comm, sizeof(comm), "%016" PRIx64, r->comm);
		if (stall) {
			char what[320];
			hang_stall_describe(r, what, sizeof(what));
			snprintf(summary, sizeof(summary), "stall: %s; rank %d (%s, pid %u)%s", what,
				 h0->rank, h0->host, h0->pid, cause);
		}
		else if (r->link && r->all_entered)
			snprintf(summary, sizeof(summary),
				 "hang: transfer #%" PRIu64 " from rank %d to rank %d of communicator "
				 "%s: both entered (ncclSend, ncclRecv) %.0f s ago and neither "
				 "finished%s", r->seq, r->src, r->dst, comm,
				 (double)r->waited_ms / 1e3, cause);
		else if (r->link)
			/* The side that entered waits for the named one (the other end). */
			snprintf(summary, sizeof(summary),
				 "hang: the %s #%" PRIu64 " of rank %d %s rank %d on communicator %s "
				 "has waited %.0f s: communicator rank %d never %s: %s%s",
				 h0->comm_rank == r->src ? "receive" : "send", r->seq,
				 h0->comm_rank == r->src ? r->dst : r->src,
				 h0->comm_rank == r->src ? "from" : "to", h0->comm_rank, comm,
				 (double)r->waited_ms / 1e3, h0->comm_rank,
				 h0->comm_rank == r->src ? "sent it (ncclSend)"
							 : "posted its receive (ncclRecv)",
				 who, cause);
		else if (r->all_entered)
			snprintf(summary, sizeof(summary),
				 "hang: all %d ranks entered %s #%" PRIu64 " of communicator %s "
				 "%.0f s ago and none finished%s", r->nranks, sysom_nccl_op_name(r->op),
				 r->seq, comm, (double)r->waited_ms / 1e3, cause);
		else
			snprintf(summary, sizeof(summary),
				 "hang: %d of %d ranks have waited %.0f s in %s #%" PRIu64
				 " of communicator %s for %u rank(s) that never entered: %s%s%s",
				 r->entered, r->nranks, (double)r->waited_ms / 1e3,
				 sysom_nccl_op_name(r->op), r->seq, comm, r->nmissing, who,
				 r->nmissing > r->nnamed ? ", ..." : "", cause);
		if (stall)
			snprintf(action, sizeof(action),
				 "every rank returned from its collectives and began no other: see "
				 "where they wait (the off-CPU stacks in the report: a data loader, "
				 "storage, a lock); py-spy dump --pid %u or gdb -p %u on %s",
				 h0->pid, h0->pid, h0->host);
		else if (r->link && r->all_entered)
			snprintf(action, sizeof(action),
				 "both ends are inside the transfer: suspect the path between them (NIC, "
				 "switch port, NVLink/PCIe; NCCL_DEBUG=INFO, dmesg/Xid on the nodes)");
		else if (r->all_entered)
			snprintf(action, sizeof(action),
				 "every rank is inside the collective: suspect the network or the GPUs "
				 "(NCCL_DEBUG=INFO, NIC link state, dmesg/Xid on the nodes)");
		else if (h0->state == HANG_RANK_EXITED)
			snprintf(action, sizeof(action),
				 "rank %d's process (pid %u on %s) exited: read its log and exit status; "
				 "the job cannot continue without it", h0->rank, h0->pid, h0->host);
		else
			snprintf(action, sizeof(action),
				 "see what rank %d (pid %u on %s) is doing: its stacks and thread states "
				 "in the report; py-spy dump --pid %u or gdb -p %u on the node; a stopped "
				 "process shows state T in /proc/%u/status", h0->rank, h0->pid, h0->host,
				 h0->pid, h0->pid, h0->pid);
		report = diagnosis_hang_json(r, ev, nev);
		memset(f, 0, sizeof(*f));
		if (stall)
			snprintf(f->identity, sizeof(f->identity), "stall");
		else
			snprintf(f->identity, sizeof(f->identity), "hang comm=%s", comm);
		snprintf(f->kind, sizeof(f->kind), stall ? "stall" : "hang");
		f->rank = stall || r->all_entered || r->nmissing != 1 ? -1 : h0->rank;
		rc = finding_set(f, stall || r->all_entered || r->nmissing != 1 ? "" : h0->host, comm,
				 diagnosis_layer_name(DIAGNOSIS_LAYER_UNKNOWN),
				 m->alerting.severity(stall ? INCIDENT_STALL : INCIDENT_HANG,
						      DIAGNOSIS_LAYER_UNKNOWN, true),
				 summary, action, report);
		(*nfound)++;
	}
cleanup:
	json_decref(report);
	for (size_t i = 0; ev && i < nev; i++)
		hang_evidence_free(&ev[i]);
	free(ev);
	free(r);
	return rc;
}

/* ---- behaviour patterns ------------------------------------------------------------------- */

/* A short, stable identity: the function's name when it fits, else a hash of it. */
static void pattern_identity(char *out, size_t len, int32_t rank, const char *kind, const char *fn)
{
	char who[24];
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	if (rank >= 0)
		snprintf(who, sizeof(who), "rank=%d", rank);
	else
		snprintf(who, sizeof(who), "all");
	int n = snprintf(out, len, "pattern %s %s %s", who, kind, fn);
	if (n >= 0 && (size_t)n < len)
		return;
	for (const char *c = fn; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	snprintf(out, len, "pattern %s %s #%016" PRIx64, who, kind, h);
}

/* The layer a function's kind belongs to. */
static enum diagnosis_layer pattern_layer(const char *kind)
{
	return !strcmp(kind, "kernel") ? DIAGNOSIS_LAYER_GPU
	       : !strcmp(kind, "cpu")  ? DIAGNOSIS_LAYER_CPU
				       : DIAGNOSIS_LAYER_UNKNOWN;
}

/* A straggler of `rep` on `rank` whose diagnosis already names `fn`: its incident covers it.
 * (A straggler whose diagnosis names no function, e.g. "GPU time 1.4x ... concentrated in
 * specific kernels", still gets the pattern incident that names the kernel.) */
static bool straggler_covers(const struct straggler_report *rep, int32_t rank, const char *fn)
{
	for (size_t i = 0; rep && i < rep->nstragglers; i++) {
		const struct straggler_entry *e = &rep->stragglers[i];
		if (e->rank == rank && e->diagnosis && strstr(e->diagnosis->summary, fn))
			return true;
	}
	return false;
}

static double jnum(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

struct pattern_candidate {
	char identity[64];
	const json_t *item; /* a finding or a history change (borrowed from the document) */
	bool job_wide;
};

/* One pattern incident from a candidate that held for `periods` checks. */
static int finding_of_pattern(const struct monitor *m, const struct pattern_candidate *c,
			      const char *job, const struct job_settings *s, int64_t from_ms,
			      int64_t to_ms, uint32_t periods, const json_t *doc,
			      struct finding *f)
{
	const json_t *x = c->item;
	const char *fn = json_string_value(json_object_get(x, "function"));
	const char *kind = json_string_value(json_object_get(x, "kind"));
	const char *dim = json_string_value(json_object_get(x, "dimension"));
	const char *why = json_string_value(json_object_get(x, "why"));
	const char *host = json_string_value(json_object_get(x, "host"));
	bool mu = dim && !strcmp(dim, "mu");
	double cost = jnum(x, "cost");
	char summary[640], action[512], what[160];
	json_t *report = NULL;
	int rc = 0;

	memset(f, 0, sizeof(*f));
	snprintf(f->identity, sizeof(f->identity), "%.*s", (int)sizeof(f->identity) - 1, c->identity);
	snprintf(f->kind, sizeof(f->kind), "pattern");
	if (!strcmp(kind, "kernel"))
		snprintf(what, sizeof(what), "GPU kernel %s", fn);
	else if (!strcmp(kind, "cpu"))
		snprintf(what, sizeof(what), "CPU function %s", fn);
	else
		snprintf(what, sizeof(what), "%s call %s", kind, fn);
	if (c->job_wide) {
		double now = jnum(x, "now"), then = jnum(x, "then"), change = jnum(x, "change");
		bool is_new = json_is_true(json_object_get(x, "new"));
		f->rank = -1;
		if (is_new || !isfinite(change))
			snprintf(summary, sizeof(summary),
				 "every rank: %s is new against the job's own history: %s %.3g%s now, "
				 "none before; worth %.1f%% of the iteration", what,
				 mu ? "mean duration" : "share", mu ? now : 100 * now, mu ? " ms" : "%",
				 100 * cost);
		else
			snprintf(summary, sizeof(summary),
				 "every rank: %s changed against the job's own history: %s %.3g%s now "
				 "vs %.3g%s (%+.0f%%), worth %.1f%% of the iteration; no rank stands out",
				 what, mu ? "mean duration" : "share", mu ? now : 100 * now,
				 mu ? " ms" : "%", mu ? then : 100 * then, mu ? " ms" : "%",
				 100 * change, 100 * cost);
		snprintf(action, sizeof(action),
			 "find what changed for every rank in %s since the job's history (code, "
			 "configuration, input data, shared storage or service); sysomctl patterns "
			 "--job %s shows it", fn, job);
	} else {
		double value = jnum(x, "value"), median = jnum(x, "median"), z = jnum(x, "z");
		f->rank = (int32_t)json_integer_value(json_object_get(x, "rank"));
		snprintf(summary, sizeof(summary),
			 "rank %d: %s %s %.3g%s against %.3g%s on its peers (%.1f robust scales), "
			 "worth %.1f%% of its iteration: %s", f->rank, what,
			 mu ? "mean duration" : "share", mu ? value : 100 * value, mu ? " ms" : "%",
			 mu ? median : 100 * median, mu ? " ms" : "%", fabs(z), 100 * cost,
			 why ? why : "");
		snprintf(action, sizeof(action),
			 !strcmp(kind, "kernel")
				 ? "compare rank %d's GPU with its peers' (sysomctl gpu --job %s: "
				   "clocks, throttling, kernel inputs)"
				 : "compare rank %d's work in this function with its peers' (sysomctl "
				   "patterns --job %s; its flame graph with rank=)",
			 f->rank, job);
	}
	report = json_pack("{s:s,s:s,s:O,s:o,s:o,s:I,s:{s:f,s:f,s:f,s:I}}", "type", "pattern",
			   "scope", c->job_wide ? "job-history" : "peers", "deviation", x, "from",
			   render_json_time(from_ms * 1000000), "to",
			   render_json_time(to_ms * 1000000), "periods", (json_int_t)periods,
			   "thresholds", "k", s->pattern_k, "min_cost", s->pattern_min_cost,
			   "change", s->pattern_change, "hold", (json_int_t)s->pattern_hold);
	if (report && c->job_wide)
		rc = json_object_set(report, "history", json_object_get(doc, "history")) ? -ENOMEM : 0;
	if (!rc)
		rc = finding_set(f, host ? host : "", "", diagnosis_layer_name(pattern_layer(kind)),
				 m->alerting.severity(INCIDENT_PATTERN, pattern_layer(kind), false),
				 summary, action, report);
	json_decref(report);
	if (rc)
		memset(f, 0, sizeof(*f));
	return rc;
}

/* Is this deviation strong enough for an incident? Collectives are the straggler test's
 * business, point-to-point calls the pipeline analysis' (stages differ by role, so the peers'
 * median is no expectation for them). `samples`: the CPU samples behind the window's and the
 * history's shares (job-wide CPU changes must exceed pattern_k standard errors of them). */
static bool pattern_strong(const json_t *x, const struct job_settings *s, bool job_wide,
			   const double samples[2])
{
	const char *kind = json_string_value(json_object_get(x, "kind"));
	const char *dim = json_string_value(json_object_get(x, "dimension"));
	const char *fn = json_string_value(json_object_get(x, "function"));
	double cost = jnum(x, "cost");

	if (!kind || !dim || !fn || !strcmp(kind, "collective") || !strcmp(kind, "p2p") ||
	    (strcmp(dim, "beta") && strcmp(dim, "mu")) || !(cost >= s->pattern_min_cost))
		return false;
	/* An unsymbolised CPU leaf ("module+0x1234") is one instruction, not a function: its
	 * share moves with the sampling, and the function is named once symbols arrive. */
	if (!strcmp(kind, "cpu") && strstr(fn, "+0x"))
		return false;
	if (job_wide) {
		/* Only rises: shares add up to one, so what rose pushes every other share down,
		 * and a longer iteration lowers every unchanged function's share. */
		double change = jnum(x, "change");
		if (!(json_is_true(json_object_get(x, "new")) || !isfinite(change) ||
		      change >= s->pattern_change))
			return false;
		/* A sampled share: the rise must stand out of both stretches' sampling error (a
		 * function just outside the history's hottest ones counts as new: its rise from
		 * a few percent is mostly noise with few samples). */
		if (!strcmp(kind, "cpu") && !strcmp(dim, "beta")) {
			double now = jnum(x, "now"), then = jnum(x, "then");
			if (!isfinite(then))
				then = 0;
			if (!(samples[0] > 0))
				return false;
			double var = now * (1 - now) / samples[0] +
				     (samples[1] > 0 ? then * (1 - then) / samples[1] : 0);
			return now - then >= s->pattern_k * sqrt(fmax(var, 0));
		}
		return true;
	}
	return fabs(jnum(x, "z")) >= s->pattern_k && json_is_integer(json_object_get(x, "rank"));
}

/*
 * At most once per pattern_period: the job's behaviour patterns over the last pattern_window
 * (server/analysis/patterns.h) against the peers and against its stored baseline stretch.
 * Deviations that are strong (pattern_strong) and held for pattern_hold consecutive checks
 * become incidents of kind "pattern". `st` gets the state for the next check.
 */
static int pattern_check(struct monitor *m, const struct job_entry *je, const char *job,
			 const struct job_settings *s, const struct straggler_report *rep,
			 int64_t now, struct finding *found, size_t *nfound,
			 struct pattern_state *st)
{
	/* No further back than the job's lookback: what the other analyses no longer see (a job
	 * that ended, its incidents resolving) opens no pattern incident either. */
	struct diagnosis_scope scope = { .job = job,
					 .from_ms = now - (int64_t)(s->pattern_window_ms < s->lookback_ms
								     ? s->pattern_window_ms
								     : s->lookback_ms),
					 .to_ms = now };
	struct patterns_params p;
	struct pattern_candidate cand[MONITOR_PATTERN_MAX];
	size_t nc = 0, i;
	json_t *doc = NULL;
	int rc;

	*st = je->pattern;
	st->ran = false;
	if (!s->patterns || (je->pattern.due_ms && now < je->pattern.due_ms))
		return 0;
	uint64_t start = sysom_monotonic_ns() / SYSOM_NS_PER_US;
	patterns_params_default(&p);
	p.history_change = fmin(p.history_change, s->pattern_change);
	p.calls = false; /* collectives and p2p are not pattern incidents (pattern_strong) */
	rc = patterns_job(&m->ctx, &scope, &p, 0, 0, &doc);
	if (rc == -ENOENT) { /* no rank of the job known yet */
		rc = 0;
		goto cleanup;
	}
	if (rc)
		goto cleanup;
	const double samples[2] = {
		jnum(doc, "cpu_samples"), jnum(json_object_get(doc, "history"), "cpu_samples")
	};
	const json_t *findings = json_object_get(doc, "findings");
	const json_t *changes = json_object_get(json_object_get(doc, "history"), "changes");
	const json_t *x;
	json_array_foreach(findings, i, x) {
		if (nc == MONITOR_PATTERN_MAX)
			break;
		if (!pattern_strong(x, s, false, samples))
			continue;
		const char *fn = json_string_value(json_object_get(x, "function"));
		int32_t rank = (int32_t)json_integer_value(json_object_get(x, "rank"));
		if (straggler_covers(rep, rank, fn))
			continue;
		pattern_identity(cand[nc].identity, sizeof(cand[nc].identity), rank,
				 json_string_value(json_object_get(x, "kind")), fn);
		bool dup = false; /* one incident per (rank, function), its costliest dimension */
		for (size_t j = 0; j < nc && !dup; j++)
			dup = !strcmp(cand[j].identity, cand[nc].identity);
		if (dup)
			continue;
		cand[nc].item = x;
		cand[nc].job_wide = false;
		nc++;
	}
	json_array_foreach(changes, i, x) {
		if (nc == MONITOR_PATTERN_MAX)
			break;
		if (!pattern_strong(x, s, true, samples))
			continue;
		pattern_identity(cand[nc].identity, sizeof(cand[nc].identity), -1,
				 json_string_value(json_object_get(x, "kind")),
				 json_string_value(json_object_get(x, "function")));
		bool dup = false;
		for (size_t j = 0; j < nc && !dup; j++)
			dup = !strcmp(cand[j].identity, cand[nc].identity);
		if (dup)
			continue;
		cand[nc].item = x;
		cand[nc].job_wide = true;
		nc++;
	}
	/* Held: one more consecutive check than before; gone ones start over. */
	st->n = 0;
	for (i = 0; i < nc; i++) {
		uint32_t periods = 1;
		for (uint32_t j = 0; j < je->pattern.n; j++)
			if (!strcmp(je->pattern.held[j].identity, cand[i].identity))
				periods = je->pattern.held[j].periods + 1;
		st->held[st->n] = (struct pattern_held){ .periods = periods };
		memcpy(st->held[st->n].identity, cand[i].identity, sizeof(cand[i].identity));
		st->n++;
		if (periods < s->pattern_hold || *nfound == MONITOR_MAX_INCIDENTS)
			continue;
		if ((rc = finding_of_pattern(m, &cand[i], job, s, scope.from_ms, scope.to_ms,
					     periods, doc, &found[*nfound])))
			goto cleanup;
		(*nfound)++;
	}
cleanup:
	if (!rc) {
		st->ran = true;
		st->due_ms = now + s->pattern_period_ms;
		pthread_mutex_lock(&m->lock);
		m->stats.last_pattern_check_us = sysom_monotonic_ns() / SYSOM_NS_PER_US - start;
		pthread_mutex_unlock(&m->lock);
	}
	json_decref(doc);
	return rc;
}

/* ---- alerts -------------------------------------------------------------------------------- */

struct open_list {
	struct store_diagnosis *d;
	size_t n, cap;
};

static int open_take(void *arg, const struct store_diagnosis *d)
{
	struct open_list *l = arg;

	if (SYSOM_ARRAY_RESERVE(l->d, l->cap, l->n, 8))
		return -ENOMEM;
	struct store_diagnosis *c = &l->d[l->n];
	*c = *d;
	c->job = strdup(d->job);
	c->identity = strdup(d->identity);
	c->kind = strdup(d->kind);
	c->hostname = strdup(d->hostname);
	c->communicators = strdup(d->communicators);
	c->layer = strdup(d->layer);
	c->severity = strdup(d->severity);
	c->summary = strdup(d->summary);
	c->action = strdup(d->action);
	/* The report is not needed here, only a hang's or stall's cause class for the alert:
	 * `report` carries that ("class: detail"), or NULL. */
	c->report = NULL;
	l->n++;
	if (!c->job || !c->identity || !c->kind || !c->hostname || !c->communicators ||
	    !c->layer || !c->severity || !c->summary || !c->action)
		return -ENOMEM;
	if (d->report && (!strcmp(d->kind, "hang") || !strcmp(d->kind, "stall"))) {
		json_t *doc = json_loads(d->report, 0, NULL);
		const json_t *cz = json_object_get(doc, "cause");
		const char *cls = json_string_value(json_object_get(cz, "class"));
		const char *detail = json_string_value(json_object_get(cz, "detail"));
		if (cls && asprintf((char **)&c->report, "%s: %s", cls, detail ? detail : "") < 0)
			c->report = NULL;
		json_decref(doc);
	}
	return 0;
}

static void open_list_free(struct open_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		struct store_diagnosis *d = &l->d[i];
		free((char *)d->job);
		free((char *)d->identity);
		free((char *)d->kind);
		free((char *)d->hostname);
		free((char *)d->communicators);
		free((char *)d->layer);
		free((char *)d->severity);
		free((char *)d->summary);
		free((char *)d->action);
		free((char *)d->report);
	}
	free(l->d);
}

static enum incident_kind incident_kind_of(const char *kind)
{
	if (strcmp(kind, "straggler") == 0)
		return INCIDENT_STRAGGLER;
	if (strcmp(kind, "hang") == 0)
		return INCIDENT_HANG;
	if (strcmp(kind, "stall") == 0)
		return INCIDENT_STALL;
	if (strcmp(kind, "agent-lost") == 0)
		return INCIDENT_AGENT_LOST;
	if (strcmp(kind, "host-anomaly") == 0)
		return INCIDENT_HOST_ANOMALY;
	if (strcmp(kind, "pattern") == 0)
		return INCIDENT_PATTERN;
	return INCIDENT_REGRESSION;
}

/* Who a job's ranks belong to (for the alert labels "namespace", "pod", "container" and
 * "slurm_job"). */
#define POD_RANKS_MAX 4096
struct rank_pods {
	size_t n;
	struct rank_pod {
		int32_t rank;
		char *ns, *pod, *container, *slurm_job;
	} r[POD_RANKS_MAX];
};

static int rank_pod_take(void *arg, const struct store_job_rank *j)
{
	struct rank_pods *p = arg;
	struct rank_pod *r;

	const struct store_identity *id = &j->identity;
	char slurm[48] = "";

	if (j->rank < 0 || j->role == SYSOM_JOB_ROLE_WORKER || !id->known ||
	    (!id->pod_name[0] && !id->slurm_job) || p->n == POD_RANKS_MAX)
		return 0;
	if (id->slurm_job)
		snprintf(slurm, sizeof(slurm), "%" PRIu64 "%s%.15s", id->slurm_job,
			 id->slurm_step[0] ? "." : "", id->slurm_step);
	r = &p->r[p->n];
	r->rank = j->rank;
	r->ns = strdup(id->pod_namespace);
	r->pod = strdup(id->pod_name);
	r->container = strdup(id->container_name ? id->container_name : "");
	r->slurm_job = strdup(slurm);
	if (!r->ns || !r->pod || !r->container || !r->slurm_job) {
		free(r->ns);
		free(r->pod);
		free(r->container);
		free(r->slurm_job);
		return -ENOMEM;
	}
	p->n++;
	return 0;
}

static void rank_pods_free(struct rank_pods *p)
{
	for (size_t i = 0; p && i < p->n; i++) {
		free(p->r[i].ns);
		free(p->r[i].pod);
		free(p->r[i].container);
		free(p->r[i].slurm_job);
	}
	free(p);
}

static const struct rank_pod *rank_pod_find(const struct rank_pods *p, int32_t rank)
{
	for (size_t i = 0; p && rank >= 0 && i < p->n; i++)
		if (p->r[i].rank == rank)
			return &p->r[i];
	return NULL;
}

/* The job's open incidents, typed, are handed to the alert module, whose policy makes them
 * its alert set. An incident of a rank in a Kubernetes pod is labelled with the pod (a store
 * without identities, or a failing read, leaves the labels out rather than the alert). */
static int alerts_publish(struct monitor *m, const char *job, const struct open_list *open,
			  bool enabled, int64_t now)
{
	struct incident_summary *inc = calloc(open->n + 1, sizeof(*inc));
	struct rank_pods *pods = NULL;
	int rc;

	if (!inc)
		return -ENOMEM;
	for (size_t i = 0; i < open->n && !pods; i++) {
		if (open->d[i].rank < 0)
			continue;
		if (!(pods = calloc(1, sizeof(*pods)))) {
			free(inc);
			return -ENOMEM;
		}
		/* On an error, what was read so far labels what it can. */
		(void)store_job_ranks_list(m->ctx.store, job, POD_RANKS_MAX, rank_pod_take, pods);
	}
	for (size_t i = 0; i < open->n; i++) {
		const struct store_diagnosis *d = &open->d[i];
		const struct rank_pod *rp = rank_pod_find(pods, d->rank);
		inc[i] = (struct incident_summary){
			.pod_namespace = rp ? rp->ns : NULL,
			.pod = rp ? rp->pod : NULL,
			.container = rp ? rp->container : NULL,
			.slurm_job = rp ? rp->slurm_job : NULL,
			.id = d->id,
			.kind = incident_kind_of(d->kind),
			.rank = d->rank,
			.identity = d->identity,
			.hostname = d->hostname,
			.communicators = d->communicators,
			.layer = d->layer,
			.severity = d->severity,
			.summary = d->summary,
			.action = d->action,
			.cause = d->report, /* see open_take */
		};
	}
	rc = m->alerting.publish(m->alerting.arg, job, inc, open->n, enabled, m->public_url, now);
	rank_pods_free(pods);
	free(inc);
	return rc;
}

/* ---- evaluation ----------------------------------------------------------------------------- */

static struct job_entry *job_find(struct monitor *m, const char *job)
{
	for (size_t i = 0; i < m->njobs; i++)
		if (strcmp(m->jobs[i].job, job) == 0)
			return &m->jobs[i];
	return NULL;
}

/* Tracks `job` (locked); forgets the least recently fed job at the limit. */
static struct job_entry *job_track(struct monitor *m, const char *job, int64_t now)
{
	struct job_entry *je = job_find(m, job);

	if (je)
		return je;
	if (m->njobs == MONITOR_MAX_JOBS) {
		size_t oldest = 0;
		for (size_t i = 1; i < m->njobs; i++)
			if (m->jobs[i].last_batch_ms < m->jobs[oldest].last_batch_ms)
				oldest = i;
		live_job_drop(m->live, m->jobs[oldest].job);
		hang_tracker_job_drop(m->hang, m->jobs[oldest].job);
		free(m->jobs[oldest].job);
		m->jobs[oldest] = m->jobs[--m->njobs];
	}
	if (SYSOM_ARRAY_RESERVE(m->jobs, m->cap, m->njobs, 16))
		return NULL;
	je = &m->jobs[m->njobs];
	memset(je, 0, sizeof(*je));
	if (!(je->job = strdup(job)))
		return NULL;
	je->first_batch_ms = now;
	je->owned = !m->ownership.owns || m->ownership.owns(m->ownership.arg, job);
	m->njobs++;
	return je;
}

/* A job's window for the live instances (locked: called from live_batch_add). */
static uint32_t job_window(void *arg, const char *job)
{
	struct job_entry *je = job_find(arg, job);

	return je && je->window ? je->window : STRAGGLER_DEFAULT_WINDOW;
}

/* The live instances as the analysis's source, read under the lock. */
static int live_locked_source(void *arg, const struct diagnosis_scope *scope,
			      store_collective_fn fn, void *fn_arg)
{
	struct monitor *m = arg;
	int rc;

	pthread_mutex_lock(&m->lock);
	rc = live_source(m->live, scope, fn, fn_arg);
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* One evaluation of `job` (outside the lock; `je` is a snapshot of its entry). */
static int evaluate(struct monitor *m, const char *job, struct job_entry *je, int64_t now,
		    uint32_t *nopen, uint32_t *nstrag)
{
	struct job_settings s;
	struct diagnosis_scope scope = { .job = job };
	struct finding found[MONITOR_MAX_INCIDENTS];
	struct open_list open = { 0 };
	struct store_diagnosis_filter of = { .job = job, .from_ms = 0, .to_ms = INT64_MAX,
					     .open_only = true };
	size_t nfound = 0, nstragglers = 0;
	bool rising = false;
	struct straggler_report *rep = NULL;
	struct hang_outcome hang = { 0 };
	struct pattern_state pst;
	size_t i;
	int rc;

	job_settings_load(m, job, &s);
	pthread_mutex_lock(&m->lock);
	struct job_entry *live_je = job_find(m, job);
	if (live_je)
		live_je->window = s.diag.sp.window;
	scope.from_ms = now - s.lookback_ms;
	scope.to_ms = now;
	scope.skip_pipeline = !live_je || !live_je->p2p_seen_ms ||
			      live_je->p2p_seen_ms < scope.from_ms;
	pthread_mutex_unlock(&m->lock);
	/* Incremental: the instances ingest folded in memory; the store when there are none (a
	 * restart, a job over the memory budget). */
	rc = diagnosis_report_build(&m->ctx, &scope, &s.diag, live_locked_source, m, &rep);
	if (rc == -ENOENT)
		rc = diagnosis_report_build(&m->ctx, &scope, &s.diag, NULL, NULL, &rep);
	if (rc)
		goto cleanup;
	for (i = 0; i < rep->nstragglers; i++) {
		nstragglers++;
		if (nfound == MONITOR_MAX_INCIDENTS ||
		    (!s.alert_intermittent && !rep->stragglers[i].persistent))
			continue;
		if ((rc = finding_of_straggler(m, rep, i, &found[nfound])))
			goto cleanup;
		nfound++;
	}
	/* Pipeline stragglers: a slow stage (unless its rank is already named above) or link. */
	for (i = 0; i < rep->pipeline.nstages + rep->pipeline.nlinks; i++) {
		const struct pipeline_stage *st = i < rep->pipeline.nstages ? &rep->pipeline.stages[i]
									    : NULL;
		const struct pipeline_link *l = st ? NULL
						   : &rep->pipeline.links[i - rep->pipeline.nstages];
		bool dup = false;

		if ((st && !st->slow) || (l && !l->slow))
			continue;
		nstragglers++;
		for (size_t j = 0; st && j < nfound && !dup; j++)
			dup = st->job_rank >= 0 && found[j].rank == st->job_rank;
		if (dup || nfound == MONITOR_MAX_INCIDENTS)
			continue;
		if ((rc = finding_of_pipeline(m, rep, st, l, &found[nfound])))
			goto cleanup;
		nfound++;
	}
	if ((rc = hang_check(m, job, &s, now, found, &nfound, &hang)))
		goto cleanup;
	if ((rc = host_check(m, job, now, found, &nfound)))
		goto cleanup;
	/* Patterns while every rank waits (a hang, a stall) say nothing new. */
	pst = je->pattern;
	pst.ran = false;
	/* A failing pattern check (out of memory, a store error) costs only its own findings:
	 * the stragglers, hangs and regressions of this evaluation still count. */
	if (!hang.hung && pattern_check(m, je, job, &s, rep, now, found, &nfound, &pst)) {
		pst = je->pattern;
		pst.ran = false;
		pthread_mutex_lock(&m->lock);
		m->stats.pattern_errors++;
		pthread_mutex_unlock(&m->lock);
	}
	if (!nstragglers) {
		bool regressed = false;
		double iteration_ms = (double)rep->iteration_ns / 1e6;
		if ((rc = baseline_check(m, je, job, &s, iteration_ms, now, &found[nfound],
					 &regressed, &rising)))
			goto cleanup;
		nfound += regressed;
	}
	/* Incidents: found ones open or update; open ones not found for resolve_after resolve. */
	for (i = 0; i < nfound; i++) {
		struct finding *f = &found[i];
		struct store_diagnosis d = { .job = job, .identity = f->identity, .kind = f->kind,
					     .rank = f->rank, .hostname = f->hostname,
					     .communicators = f->communicators, .layer = f->layer,
					     .severity = f->severity, .summary = f->summary,
					     .action = f->action, .report = f->report,
					     .updated_ms = now };
		int64_t id;
		bool opened;
		if ((rc = store_diagnosis_upsert(m->ctx.store, &d, &id, &opened)))
			goto cleanup;
		if (opened) {
			event_emit(m, &(struct monitor_event){ .kind = MONITOR_INCIDENT_OPENED,
							       .job = job, .incident_id = id,
							       .text = f->summary });
			pthread_mutex_lock(&m->lock);
			m->stats.incidents_opened++;
			m->stats.hangs_opened += !strcmp(f->kind, "hang") || !strcmp(f->kind, "stall");
			m->stats.agents_lost_opened += strcmp(f->kind, "agent-lost") == 0;
			m->stats.patterns_opened += strcmp(f->kind, "pattern") == 0;
			pthread_mutex_unlock(&m->lock);
		}
	}
	if ((rc = store_diagnoses_list(m->ctx.store, &of, MONITOR_MAX_INCIDENTS, open_take, &open)))
		goto cleanup;
	for (i = 0; i < open.n; i++) {
		struct store_diagnosis *d = &open.d[i];
		bool seen = false;
		for (size_t j = 0; j < nfound && !seen; j++)
			seen = strcmp(found[j].identity, d->identity) == 0;
		/* A hang or a lost agent is over as soon as it no longer holds (progress resumed,
		 * the job ended, the node reports again). */
		bool prompt = !strcmp(d->kind, "hang") || !strcmp(d->kind, "stall") ||
			      !strcmp(d->kind, "agent-lost");
		/* A pattern incident is only re-found by a pattern check (one per pattern period):
		 * in between, it holds if the last check found it. */
		if (!pst.ran && s.patterns && !strcmp(d->kind, "pattern"))
			for (uint32_t j = 0; j < pst.n && !seen; j++)
				seen = pst.held[j].periods >= s.pattern_hold &&
				       !strcmp(pst.held[j].identity, d->identity);
		if (seen || (!prompt && now - d->updated_ms < (int64_t)s.resolve_after_ms))
			continue;
		if ((rc = store_diagnosis_resolve(m->ctx.store, d->id, now)) && rc != -ENOENT)
			goto cleanup;
		rc = 0;
		event_emit(m, &(struct monitor_event){ .kind = MONITOR_INCIDENT_RESOLVED, .job = job,
						       .incident_id = d->id, .text = d->identity });
		pthread_mutex_lock(&m->lock);
		m->stats.incidents_resolved++;
		pthread_mutex_unlock(&m->lock);
		open.d[i].id = 0; /* resolved: not an alert any more */
	}
	{
		struct open_list still = { 0 };
		for (i = 0; i < open.n; i++)
			if (open.d[i].id)
				still.n++;
		*nopen = (uint32_t)still.n;
		if (m->alerting.publish) {
			/* Compact the list to the ones still open. */
			size_t k = 0;
			for (i = 0; i < open.n; i++)
				if (open.d[i].id) {
					struct store_diagnosis t = open.d[k];
					open.d[k] = open.d[i];
					open.d[i] = t;
					k++;
				}
			size_t total = open.n;
			open.n = k;
			rc = alerts_publish(m, job, &open, s.alerts, now);
			open.n = total;
		}
	}
	*nstrag = (uint32_t)nstragglers;
	pthread_mutex_lock(&m->lock);
	struct job_entry *cur = job_find(m, job);
	if (cur) {
		cur->recovered = rep->recovered_communicators;
		cur->unanalysed = rep->unanalysed_communicators;
		cur->blind = rep->ngroups == 0 && (rep->skipped_instances > 0 ||
						   rep->unanalysed_communicators > 0);
		cur->regress_since_ms = rising ? (cur->regress_since_ms ? cur->regress_since_ms : now) : 0;
		cur->hang_due_ms = hang.next_check_ms;
		cur->hung = hang.hung;
		cur->agents_lost = hang.agents_lost;
		cur->pattern = pst;
	}
	if (pst.ran) {
		m->stats.pattern_checks++;
		m->stats.pattern_deviations += pst.n;
	}

	pthread_mutex_unlock(&m->lock);
cleanup:
	for (i = 0; i < nfound; i++)
		finding_free(&found[i]);
	open_list_free(&open);
	straggler_report_free(rep);
	return rc;
}

int monitor_evaluate(struct monitor *m, const char *job)
{
	int64_t now = m->now_ms();
	struct job_entry snap;
	uint32_t nopen = 0, nstrag = 0;
	uint64_t start = sysom_monotonic_ns() / SYSOM_NS_PER_US;
	int rc;

	pthread_mutex_lock(&m->lock);
	struct job_entry *je = job_track(m, job, now);
	if (!je) {
		pthread_mutex_unlock(&m->lock);
		return -ENOMEM;
	}
	je->dirty = false;
	je->last_eval_ms = now;
	snap = *je;
	pthread_mutex_unlock(&m->lock);

	rc = evaluate(m, job, &snap, now, &nopen, &nstrag);

	pthread_mutex_lock(&m->lock);
	if ((je = job_find(m, job)) && !rc) {
		je->has_open = nopen > 0;
		je->open = nopen;
		je->stragglers = nstrag;
	}
	m->stats.evaluations++;
	m->stats.evaluation_errors += rc != 0;
	m->stats.last_evaluation_us = sysom_monotonic_ns() / SYSOM_NS_PER_US - start;
	m->stats.jobs = m->njobs;
	pthread_mutex_unlock(&m->lock);
	if (rc)
		event_emit(m, &(struct monitor_event){ .kind = MONITOR_EVALUATION_FAILED, .job = job,
						       .error = rc });
	return rc;
}

/* ---- ownership (replicas) -------------------------------------------------------------------- */

struct job_names {
	char **v;
	size_t n, cap;
};

static void job_names_free(struct job_names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

static int job_name_add(struct job_names *l, const char *job)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], job) == 0)
			return 0;
	if (l->n >= MONITOR_MAX_JOBS)
		return 0;
	if (SYSOM_ARRAY_RESERVE(l->v, l->cap, l->n, 16) || !(l->v[l->n] = strdup(job)))
		return -ENOMEM;
	l->n++;
	return 0;
}

static int open_job_name(void *arg, const struct store_diagnosis *d)
{
	return job_name_add(arg, d->job);
}

/*
 * Checks which tracked jobs this server owns now (thread, unlocked): jobs it lost have their
 * alerts forgotten (the new owner sends them), jobs it gained are evaluated at once, and the
 * jobs with open incidents in the store are tracked, so the incidents of a job whose owner
 * died resolve here even if the job sends nothing more.
 */
static void ownership_refresh(struct monitor *m)
{
	struct store_diagnosis_filter of = { .from_ms = 0, .to_ms = INT64_MAX, .open_only = true };
	struct job_names open = { 0 }, lost = { 0 };
	int64_t now = m->now_ms();
	int rc;

	rc = store_diagnoses_list(m->ctx.store, &of, MONITOR_MAX_JOBS, open_job_name, &open);
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; !rc && i < open.n; i++) {
		bool known = job_find(m, open.v[i]) != NULL;
		struct job_entry *je = job_track(m, open.v[i], now);
		if (!je)
			continue;
		je->has_open = true;
		/* New here and this server's: another replica analysed it until now. */
		m->stats.jobs_taken_over += !known && je->owned;
	}
	for (size_t i = 0; i < m->njobs; i++) {
		struct job_entry *je = &m->jobs[i];
		bool owned = !m->ownership.owns || m->ownership.owns(m->ownership.arg, je->job);
		if (owned == je->owned)
			continue;
		je->owned = owned;
		if (owned) {
			/* Taken over: evaluate now (its alerts are sent from here on). */
			je->dirty = true;
			je->last_eval_ms = 0;
			m->stats.jobs_taken_over++;
		} else {
			m->stats.jobs_handed_over++;
			/* Its gauges are the new owner's to report, and its live state the new
			 * owner's to hold (should the job come back, it starts afresh). */
			je->stragglers = je->open = je->unanalysed = 0;
			je->hung = je->blind = false;
			live_job_drop(m->live, je->job);
			hang_tracker_job_drop(m->hang, je->job);
			job_name_add(&lost, je->job);
		}
	}
	pthread_mutex_unlock(&m->lock);
	if (m->alerting.forget)
		for (size_t i = 0; i < lost.n; i++)
			m->alerting.forget(m->alerting.arg, lost.v[i]);
	if (rc)
		event_emit(m, &(struct monitor_event){ .kind = MONITOR_EVALUATION_FAILED,
						       .job = "(open incidents)", .error = rc });
	job_names_free(&open);
	job_names_free(&lost);
}

void monitor_owners_changed(struct monitor *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->owners_changed = true;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
}

/* ---- the thread ------------------------------------------------------------------------------ */

static void *monitor_thread(void *arg)
{
	struct monitor *m = arg;

	pthread_mutex_lock(&m->lock);
	while (!m->stopping) {
		struct timespec until;
		char *due = NULL;
		int64_t now = m->now_ms();

		if (m->owners_changed) {
			m->owners_changed = false;
			pthread_mutex_unlock(&m->lock);
			ownership_refresh(m);
			pthread_mutex_lock(&m->lock);
			continue;
		}

		/* A job whose hang check is due first (a hang waits on nobody's evaluation), then
		 * one with new data, or open incidents that may need resolving. */
		for (size_t i = 0; i < m->njobs && !due; i++) {
			struct job_entry *je = &m->jobs[i];
			if (je->owned && je->hang_due_ms && now >= je->hang_due_ms &&
			    now - je->last_eval_ms >= (int64_t)m->interval_ms)
				due = strdup(je->job);
		}
		/* The one evaluated longest ago: when evaluations take longer than the interval
		 * (a loaded server), the first jobs in the list would otherwise be due every time
		 * and starve the others. */
		struct job_entry *oldest = NULL;
		for (size_t i = 0; i < m->njobs && !due; i++) {
			struct job_entry *je = &m->jobs[i];
			if (je->owned &&
			    (je->dirty || je->has_open ||
			     (je->hang_due_ms && now >= je->hang_due_ms)) &&
			    now - je->last_eval_ms >= (int64_t)m->interval_ms &&
			    (!oldest || je->last_eval_ms < oldest->last_eval_ms))
				oldest = je;
		}
		if (!due && oldest)
			due = strdup(oldest->job);
		if (due) {
			pthread_mutex_unlock(&m->lock);
			monitor_evaluate(m, due);
			free(due);
			pthread_mutex_lock(&m->lock);
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &until);
		uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)(m->interval_ms < 1000 ? m->interval_ms : 1000) * 1000000u;
		until.tv_sec += (time_t)(ns / 1000000000u);
		until.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&m->wake, &m->lock, &until);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

void monitor_batch_stored(struct monitor *m, const struct sysom_batch *b)
{
	int64_t now;

	if (!m)
		return;
	now = m->now_ms();
	pthread_mutex_lock(&m->lock);
	/* Every batch says its node is alive, and which processes it still has. */
	if (hang_tracker_note(m->hang, b, now))
		m->stats.hang_note_errors++;
	if (!b->job_rank_count) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	if (live_batch_add(m->live, b, job_window, m, &m->live_stats))
		m->live_stats.refused++; /* out of memory: part of this batch is missing */
	/* Point-to-point calls: the node's jobs get the pipeline pass (the live instances hold
	 * collectives only, so the pass reads the store: not for jobs that make none). */
	bool p2p = false;
	for (uint32_t i = 0; i < b->nccl_call_count && !p2p; i++)
		p2p = (b->nccl_calls[i].op == SYSOM_NCCL_SEND || b->nccl_calls[i].op == SYSOM_NCCL_RECV) &&
		      b->nccl_calls[i].comm_key;
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		const char *job = sysom_batch_string(b, b->job_ranks[i].job);
		struct job_entry *je;
		if (!job[0] || !(je = job_track(m, job, now)))
			continue;
		je->dirty = true;
		je->last_batch_ms = now;
		if (p2p)
			je->p2p_seen_ms = now;
	}
	m->stats.jobs = m->njobs;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
}

static int open_job(void *arg, const struct store_diagnosis *d)
{
	struct monitor *m = arg;
	struct job_entry *je = job_track(m, d->job, m->now_ms());

	if (je)
		je->has_open = true;
	m->open_at_start++;
	return je ? 0 : -ENOMEM;
}

int monitor_new(const struct diagnosis_ctx *ctx, const struct monitor_options *opts,
		struct monitor **out)
{
	struct monitor *m = calloc(1, sizeof(*m));
	struct store_diagnosis_filter of = { .from_ms = 0, .to_ms = INT64_MAX, .open_only = true };
	int rc;

	*out = NULL;
	if (!opts || !opts->alerting.severity) {
		free(m);
		return -EINVAL;
	}
	if (!m)
		return -ENOMEM;
	m->ctx = *ctx;
	m->alerting = opts->alerting;
	m->ownership = opts->ownership;
	m->interval_ms = opts && opts->interval_ms ? opts->interval_ms : MONITOR_DEFAULT_INTERVAL_MS;
	m->now_ms = opts && opts->now_ms ? opts->now_ms : sysom_realtime_ms;
	m->on_event = opts ? opts->on_event : NULL;
	m->event_arg = opts ? opts->event_arg : NULL;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->wake, NULL);
	if (opts && opts->public_url && opts->public_url[0]) {
		size_t len = strlen(opts->public_url);
		if (!(m->public_url = strdup(opts->public_url))) {
			rc = -ENOMEM;
			goto fail;
		}
		while (len > 0 && m->public_url[len - 1] == '/')
			m->public_url[--len] = '\0';
	}
	if ((rc = live_new(opts && opts->live_cells ? opts->live_cells : LIVE_DEFAULT_MAX_CELLS,
			   &m->live)) ||
	    (rc = hang_tracker_new(&m->hang)))
		goto fail;
	/* Jobs with open incidents are evaluated again, so a restart still resolves them. */
	if ((rc = store_diagnoses_list(ctx->store, &of, MONITOR_MAX_JOBS, open_job, m)))
		goto fail;
	if ((rc = -pthread_create(&m->thread, NULL, monitor_thread, m)))
		goto fail;
	m->thread_started = true;
	*out = m;
	return 0;
fail:
	monitor_free(m);
	return rc;
}

void monitor_free(struct monitor *m)
{
	if (!m)
		return;
	if (m->thread_started) {
		pthread_mutex_lock(&m->lock);
		m->stopping = true;
		pthread_cond_signal(&m->wake);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->thread, NULL);
	}
	for (size_t i = 0; i < m->njobs; i++)
		free(m->jobs[i].job);
	free(m->jobs);
	live_free(m->live);
	hang_tracker_free(m->hang);
	free(m->public_url);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->wake);
	free(m);
}

void monitor_stats_get(struct monitor *m, struct monitor_stats *out)
{
	pthread_mutex_lock(&m->lock);
	*out = m->stats;
	out->stragglers = 0;
	out->hung_jobs = 0;
	out->blind_jobs = 0;
	out->unanalysed_communicators = 0;
	out->jobs_owned = 0;
	for (size_t i = 0; i < m->njobs; i++) {
		out->stragglers += m->jobs[i].stragglers;
		out->hung_jobs += m->jobs[i].hung;
		out->blind_jobs += m->jobs[i].blind;
		out->unanalysed_communicators += m->jobs[i].unanalysed;
		out->jobs_owned += m->jobs[i].owned;
	}
	out->live_calls = m->live_stats.calls;
	out->live_skipped = m->live_stats.unknown_size + m->live_stats.refused + m->live_stats.stale;
	out->live_cells = m->live ? live_cells(m->live) : 0;
	out->open_incidents = m->open_at_start + m->stats.incidents_opened >
					      m->stats.incidents_resolved
				      ? m->open_at_start + m->stats.incidents_opened -
						m->stats.incidents_resolved
				      : 0;
	pthread_mutex_unlock(&m->lock);
}

void monitor_metrics_write(struct monitor *m, struct byte_buf *out)
{
	struct monitor_stats st;

	monitor_stats_get(m, &st);
	metrics_family_write(out, "sysom_analysis_evaluations_total", "counter",
			     "Job evaluations by the monitor (straggler detection, diagnosis, baseline).");
	metrics_sample_write(out, "sysom_analysis_evaluations_total", NULL, (double)st.evaluations);
	metrics_family_write(out, "sysom_analysis_evaluation_errors_total", "counter",
			     "Job evaluations that failed (store errors, out of memory).");
	metrics_sample_write(out, "sysom_analysis_evaluation_errors_total", NULL,
			     (double)st.evaluation_errors);
	metrics_family_write(out, "sysom_analysis_last_evaluation_seconds", "gauge",
			     "How long the last job evaluation took.");
	metrics_sample_write(out, "sysom_analysis_last_evaluation_seconds", NULL,
			     (double)st.last_evaluation_us / 1e6);
	metrics_family_write(out, "sysom_analysis_live_calls_total", "counter",
			     "Collective calls folded into the in-memory instances as batches arrived.");
	metrics_sample_write(out, "sysom_analysis_live_calls_total", NULL, (double)st.live_calls);
	metrics_family_write(out, "sysom_analysis_live_skipped_total", "counter",
			     "Collective calls not folded in: unknown communicator size, over the "
			     "memory budget, or older than the window.");
	metrics_sample_write(out, "sysom_analysis_live_skipped_total", NULL, (double)st.live_skipped);
	metrics_family_write(out, "sysom_analysis_live_cells", "gauge",
			     "(rank, instance) cells held in memory for the analysis (16 bytes each).");
	metrics_sample_write(out, "sysom_analysis_live_cells", NULL, (double)st.live_cells);
	metrics_family_write(out, "sysom_analysis_blind_jobs", "gauge",
			     "Jobs whose last evaluation saw collectives but could analyse no "
			     "communicator (init missed and no cross-rank match).");
	metrics_sample_write(out, "sysom_analysis_blind_jobs", NULL, (double)st.blind_jobs);
	metrics_family_write(out, "sysom_analysis_unanalysed_communicators", "gauge",
			     "Communicators of unknown identity that matched no other rank's calls, "
			     "over the jobs' last evaluations.");
	metrics_sample_write(out, "sysom_analysis_unanalysed_communicators", NULL,
			     (double)st.unanalysed_communicators);
	metrics_family_write(out, "sysom_diagnoses_opened_total", "counter",
			     "Incidents (stragglers, regressions) the monitor opened.");
	metrics_sample_write(out, "sysom_diagnoses_opened_total", NULL, (double)st.incidents_opened);
	metrics_family_write(out, "sysom_diagnoses_resolved_total", "counter",
			     "Incidents the monitor resolved.");
	metrics_sample_write(out, "sysom_diagnoses_resolved_total", NULL,
			     (double)st.incidents_resolved);
	metrics_family_write(out, "sysom_diagnoses_open", "gauge", "Incidents open now.");
	metrics_sample_write(out, "sysom_diagnoses_open", NULL, (double)st.open_incidents);
	metrics_family_write(out, "sysom_hangs_opened_total", "counter",
			     "Hang incidents opened: a collective instance waited past the job's hang "
			     "threshold for ranks that never entered (or none finished); and stalls: "
			     "no collective began on any communicator past it.");
	metrics_sample_write(out, "sysom_hangs_opened_total", NULL, (double)st.hangs_opened);
	metrics_family_write(out, "sysom_agents_lost_opened_total", "counter",
			     "Agent-lost incidents opened: a node with ranks of a job stopped reporting.");
	metrics_sample_write(out, "sysom_agents_lost_opened_total", NULL,
			     (double)st.agents_lost_opened);
	metrics_family_write(out, "sysom_hung_jobs", "gauge",
			     "Jobs whose last evaluation found a hang or a stall.");
	metrics_sample_write(out, "sysom_hung_jobs", NULL, (double)st.hung_jobs);
	metrics_family_write(out, "sysom_pattern_checks_total", "counter",
			     "Behaviour-pattern checks of a job (one per pattern period at most).");
	metrics_sample_write(out, "sysom_pattern_checks_total", NULL, (double)st.pattern_checks);
	metrics_family_write(out, "sysom_pattern_deviations_total", "counter",
			     "Strong pattern deviations those checks found, held long enough for an "
			     "incident or not yet.");
	metrics_sample_write(out, "sysom_pattern_deviations_total", NULL,
			     (double)st.pattern_deviations);
	metrics_family_write(out, "sysom_patterns_opened_total", "counter",
			     "Pattern incidents opened: a (rank, function) far from its peers, or every "
			     "rank's function far from the job's own history.");
	metrics_sample_write(out, "sysom_patterns_opened_total", NULL, (double)st.patterns_opened);
	metrics_family_write(out, "sysom_pattern_errors_total", "counter",
			     "Pattern checks that failed (the rest of their evaluation went on).");
	metrics_sample_write(out, "sysom_pattern_errors_total", NULL, (double)st.pattern_errors);
	metrics_family_write(out, "sysom_analysis_jobs_owned", "gauge",
			     "Jobs tracked whose analysis this server owns (all of them without "
			     "replicas).");
	metrics_sample_write(out, "sysom_analysis_jobs_owned", NULL, (double)st.jobs_owned);
	metrics_family_write(out, "sysom_analysis_jobs_handed_over_total", "counter",
			     "Jobs whose analysis moved from this replica to another.");
	metrics_sample_write(out, "sysom_analysis_jobs_handed_over_total", NULL,
			     (double)st.jobs_handed_over);
	metrics_family_write(out, "sysom_analysis_jobs_taken_over_total", "counter",
			     "Jobs whose analysis moved to this replica from another.");
	metrics_sample_write(out, "sysom_analysis_jobs_taken_over_total", NULL,
			     (double)st.jobs_taken_over);
	metrics_family_write(out, "sysom_pattern_last_check_seconds", "gauge",
			     "How long the last pattern check took (part of its job's evaluation).");
	metrics_sample_write(out, "sysom_pattern_last_check_seconds", NULL,
			     (double)st.last_pattern_check_us / 1e6);
}

void monitor_job_metrics_write(struct monitor *m, struct byte_buf *out)
{
	metrics_family_write(out, "sysom_job_stragglers", "gauge",
			     "Straggling ranks found by the job's last evaluation.");
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->njobs; i++) {
		const char *labels[] = { "job", m->jobs[i].job, NULL };
		if (m->jobs[i].last_eval_ms && m->jobs[i].owned)
			metrics_sample_write(out, "sysom_job_stragglers", labels,
					     (double)m->jobs[i].stragglers);
	}
	pthread_mutex_unlock(&m->lock);
	metrics_family_write(out, "sysom_job_hung", "gauge",
			     "1 when the job's last evaluation found a hang or a stall, else 0.");
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->njobs; i++) {
		const char *labels[] = { "job", m->jobs[i].job, NULL };
		if (m->jobs[i].last_eval_ms && m->jobs[i].owned)
			metrics_sample_write(out, "sysom_job_hung", labels, m->jobs[i].hung ? 1 : 0);
	}
	pthread_mutex_unlock(&m->lock);
	metrics_family_write(out, "sysom_job_recovered_communicators", "gauge",
			     "Communicators of the job whose init was missed, grouped across ranks "
			     "by their call sequences in its last evaluation.");
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->njobs; i++) {
		const char *labels[] = { "job", m->jobs[i].job, NULL };
		if (m->jobs[i].last_eval_ms && m->jobs[i].owned)
			metrics_sample_write(out, "sysom_job_recovered_communicators", labels,
					     (double)m->jobs[i].recovered);
	}
	pthread_mutex_unlock(&m->lock);
	metrics_family_write(out, "sysom_job_open_diagnoses", "gauge",
			     "Open incidents of the job after its last evaluation.");
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->njobs; i++) {
		const char *labels[] = { "job", m->jobs[i].job, NULL };
		if (m->jobs[i].last_eval_ms && m->jobs[i].owned)
			metrics_sample_write(out, "sysom_job_open_diagnoses", labels,
					     (double)m->jobs[i].open);
	}
	pthread_mutex_unlock(&m->lock);
}
