/* SPDX-License-Identifier: Apache-2.0 */
/* The analysis's typed results as JSON (server/analysis/diagnosis_render.h). */
#include "server/analysis/diagnosis_render.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/analysis/gpuhealth.h"
#include "server/http/render.h"

static json_t *real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *gpu_hw_json(const struct diagnosis_gpu_hw *h);

static json_t *gpu_json(const struct diagnosis_gpu *g)
{
	json_t *kernels = json_array(), *out;

	if (!g->present || !kernels) {
		json_decref(kernels);
		return json_null();
	}
	for (size_t i = 0; i < g->nkernels; i++) {
		const struct diagnosis_kernel *k = &g->kernels[i];
		json_t *stacks = json_array();
		for (size_t j = 0; stacks && j < k->nstacks; j++)
			json_array_append_new(stacks, json_pack("{s:s,s:I,s:f}", "stack",
								k->stacks[j].stack, "gpu_ns",
								(json_int_t)k->stacks[j].gpu_ns,
								"share", k->stacks[j].share));
		json_array_append_new(kernels,
				      json_pack("{s:s,s:I,s:f,s:f,s:f,s:o,s:b,s:o}", "name", k->name,
						"count", (json_int_t)k->count, "mean_ns", k->mean_ns,
						"healthy_median_ns", k->healthy_ns, "ratio",
						k->mean_ns / k->healthy_ns, "slow_share",
						real_or_null(k->slow_share), "intermittent",
						layers_gpu_intermittent(k->slow_share), "launch_stacks",
						stacks));
	}
	out = json_pack("{s:s,s:f,s:o,s:o}", "verdict", layers_gpu_verdict_name(g->verdict),
			"slowdown", g->slowdown, "kernels", kernels, "hardware", gpu_hw_json(&g->hw));
	return out ? out : json_null();
}

static json_t *hw_u32(uint32_t v)
{
	return v == SYSOM_GPU_UNKNOWN ? json_null() : json_integer((json_int_t)v);
}

/* The straggler's GPU as NVML saw it (null: no GPU health for its node). */
static json_t *gpu_hw_json(const struct diagnosis_gpu_hw *h)
{
	json_t *o;

	if (!h->present)
		return json_null();
	o = json_pack("{s:b,s:b,s:s,s:I,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
		      "s:I,s:I,s:I}",
		      "confirmed", h->confirmed, "matched_by_local_rank", h->by_local_rank,
		      "picked_by", gpuhealth_picked_name(h->picked_by), "device",
		      (json_int_t)h->device, "uuid", h->uuid, "pci_bus_id", h->pci_bus_id, "name",
		      h->name, "reasons", h->reasons, "cause", h->cause, "windows",
		      (json_int_t)h->windows, "samples", (json_int_t)h->samples, "slowdown_samples",
		      (json_int_t)h->slowdown_samples, "sm_clock_min_mhz", hw_u32(h->sm_clock_min),
		      "sm_clock_max_mhz", hw_u32(h->sm_clock_max), "temp_max_c", hw_u32(h->temp_max),
		      "temp_slowdown_c", hw_u32(h->temp_slowdown), "power_max_mw",
		      hw_u32(h->power_max_mw), "power_limit_mw", hw_u32(h->power_limit_mw),
		      "ecc_uncorrected",
		      h->ecc_uncorrected == SYSOM_GPU_UNKNOWN64 || h->ecc_uncorrected > INT64_MAX
			      ? json_null()
			      : json_integer((json_int_t)h->ecc_uncorrected),
		      "retired_dbe", (json_int_t)h->retired_dbe, "xid_count", (json_int_t)h->xid_count,
		      "xid_last", (json_int_t)h->xid_last);
	return o ? o : json_null();
}

static json_t *cpu_json(const struct diagnosis_cpu *c)
{
	json_t *fns = json_array(), *stacks = json_array(), *out;

	if (!c->present || !fns || !stacks) {
		json_decref(fns);
		json_decref(stacks);
		return json_null();
	}
	for (size_t i = 0; i < c->nfunctions; i++) {
		const struct diagnosis_cpu_function *f = &c->functions[i];
		json_array_append_new(fns, json_pack("{s:s,s:f,s:f,s:f,s:o,s:o,s:o,s:o}", "function",
						     f->function,
						     "straggler_pct", 100 * f->straggler_fraction,
						     "healthy_pct", 100 * f->healthy_fraction,
						     "delta_pp",
						     100 * (f->straggler_fraction - f->healthy_fraction),
						     "z", real_or_null(f->z), "time_z",
						     real_or_null(f->time_z), "straggler_cpu_s",
						     real_or_null(f->straggler_cpu_s), "healthy_cpu_s",
						     real_or_null(f->healthy_cpu_s)));
	}
	for (size_t i = 0; i < c->nstacks; i++)
		json_array_append_new(stacks, json_pack("{s:s,s:f,s:f}", "stack", c->stacks[i].stack,
							"straggler_pct",
							100 * c->stacks[i].straggler_fraction,
							"healthy_pct",
							100 * c->stacks[i].healthy_fraction));
	out = json_pack("{s:i,s:I,s:I,s:b,s:o,s:o}", "compared_with_rank", c->compared_with_rank,
			"straggler_samples", (json_int_t)c->straggler_samples, "healthy_samples",
			(json_int_t)c->healthy_samples, "enough_samples", c->enough_samples,
			"functions", fns, "top_stacks", stacks);
	return out ? out : json_null();
}

static json_t *os_json(const struct diagnosis_os *o)
{
	json_t *signals, *load, *irqs, *out;

	if (o->state == DIAGNOSIS_OS_ABSENT)
		return json_null();
	if (o->state == DIAGNOSIS_OS_NO_DATA)
		return json_pack("{s:s}", "verdict", "no-data");
	signals = json_array();
	load = json_array();
	irqs = json_array();
	for (int i = 0; signals && i < OS_NSIG; i++) {
		const struct os_signal_cmp *s = &o->signals[i];
		json_array_append_new(signals,
				      json_pack("{s:s,s:s,s:f,s:o,s:b}", "signal", s->name, "unit",
						s->unit, "straggler", s->straggler, "healthy_median",
						isnan(s->healthy) ? json_null() : json_real(s->healthy),
						"implicated", s->implicated));
	}
	for (size_t i = 0; load && i < o->ncpu_load; i++) {
		const struct diagnosis_os_cpu *c = &o->cpu_load[i];
		json_t *vec = c->softirqs_present ? json_object() : NULL;
		for (int v = 0; vec && v < SYSOM_SOFTIRQ_COUNT; v++)
			if (c->softirq[v].present)
				json_object_set_new(vec, sysom_softirq_name((uint32_t)v),
						    json_pack("{s:f,s:f}", "per_s", c->softirq[v].per_s,
							      "ms_per_s", c->softirq[v].ms_per_s));
		json_array_append_new(load, json_pack("{s:i,s:f,s:f,s:f,s:o}", "cpu", (int)c->cpu,
						      "busy_pct", c->busy_pct, "hardirq_ms_per_s",
						      c->hardirq_ms_per_s, "hardirq_per_s",
						      c->hardirq_per_s, "softirqs",
						      vec ? vec : json_null()));
	}
	for (size_t i = 0; irqs && i < o->nirqs; i++)
		json_array_append_new(irqs, json_pack("{s:i,s:s,s:i,s:f,s:f}", "irq",
						      (int)o->irqs[i].irq, "name", o->irqs[i].name,
						      "cpu", (int)o->irqs[i].cpu, "per_s",
						      o->irqs[i].per_s, "ms_per_s", o->irqs[i].ms_per_s));
	if (!signals || !load || !irqs) {
		json_decref(signals);
		json_decref(load);
		json_decref(irqs);
		return json_null();
	}
	json_t *host = o->host_anomalous
			       ? json_pack("{s:s,s:f,s:f,s:s}", "node_id", o->host_node, "score",
					   o->host_score, "threshold", o->host_threshold, "deviations",
					   o->host_deviations)
			       : json_null();
	out = json_pack("{s:s,s:s,s:f,s:I,s:I,s:o,s:o,s:o,s:b,s:o}", "verdict",
			o->top >= 0 ? "implicated" : "normal", "cpus", o->cpus, "runq_p99_us",
			o->runq_p99_us, "oncpu_ms", (json_int_t)o->oncpu_ms, "runq_waits",
			(json_int_t)o->runq_waits, "signals", signals, "cpu_load", load, "irqs", irqs,
			"truncated", o->truncated, "host_anomaly", host ? host : json_null());
	return out ? out : json_null();
}

json_t *diagnosis_json(const struct diagnosis *d)
{
	return json_pack("{s:s,s:s,s:s,s:o,s:o,s:o}", "layer", diagnosis_layer_name(d->layer),
			 "summary", d->summary, "action", d->action, "gpu", gpu_json(&d->gpu), "cpu",
			 cpu_json(&d->cpu), "os", os_json(&d->os));
}

json_t *diagnosis_straggler_json(const struct straggler_entry *e)
{
	json_t *comms = json_array(), *out;

	for (size_t i = 0; comms && i < e->ncommunicators; i++)
		json_array_append_new(comms, render_json_key(e->communicators[i]));
	out = json_pack("{s:i,s:I,s:s,s:o,s:s,s:f}", "rank", e->rank, "pid", (json_int_t)e->pid,
			"hostname", e->hostname, "communicators", comms, "persistence",
			straggler_verdict_name(e->persistent ? STRAGGLER_PERSISTENT
							     : STRAGGLER_INTERMITTENT),
			"max_excess_ms", e->max_excess_ms);
	if (out && json_object_set_new(out, "pod",
				       e->pod ? json_pack("{s:s,s:s}", "namespace",
							  e->pod_namespace ? e->pod_namespace : "",
							  "name", e->pod)
					      : json_null())) {
		json_decref(out);
		return NULL;
	}
	if (out && e->diagnosed) {
		json_t *dg = e->diagnosis ? diagnosis_json(e->diagnosis) : NULL;
		json_object_set_new(out, "diagnosis", dg ? dg : json_null());
	}
	return out;
}

static json_t *rank_json(const struct straggler_rank_report *t)
{
	const struct straggler_rank *r = &t->stats;
	const char *verdict = straggler_verdict_name(r->verdict);

	return json_pack("{s:i,s:I,s:s,s:f,s:f,s:f,s:f,s:o,s:f,s:f,s:I,s:b,s:o}", "rank", r->rank,
			 "pid", (json_int_t)t->pid, "hostname", t->hostname, "mean_lateness_ms",
			 r->mean_lateness_ns / 1e6, "trimmed_lateness_ms", r->trimmed_lateness_ns / 1e6,
			 "quantile_lateness_ms", r->quantile_lateness_ns / 1e6, "excess_ms", r->excess_ns / 1e6, "z",
			 real_or_null(r->z), "flagged_fraction", r->flagged_fraction,
			 "last_to_enter_fraction", r->last_fraction, "missing",
			 (json_int_t)r->missing, "straggler", r->straggler, "persistence",
			 verdict ? json_string(verdict) : json_null());
}

static json_t *group_json(const struct straggler_group_report *g)
{
	json_t *names = json_array(), *top = json_array();

	for (size_t i = 0; names && i < g->nstragglers; i++)
		json_array_append_new(names, json_integer(g->stragglers[i]));
	for (size_t i = 0; top && i < g->ntop; i++)
		json_array_append_new(top, rank_json(&g->top[i]));
	return json_pack("{s:o,s:i,s:I,s:I,s:I,s:f,s:o,s:o}", "comm", render_json_key(g->comm),
			 "nranks", g->nranks, "window", (json_int_t)g->window, "instances",
			 (json_int_t)g->instances, "incomplete", (json_int_t)g->incomplete,
			 "period_ms", (double)g->period_ns / 1e6, "stragglers", names, "ranks", top);
}

static json_t *params_json(const struct diagnosis_params *p)
{
	return json_pack("{s:f,s:I,s:I,s:f,s:f,s:f,s:f}", "k", p->sp.k, "window",
			 (json_int_t)p->sp.window, "min_excess_ms",
			 (json_int_t)(p->sp.min_excess_ns / 1000000), "persistent_fraction",
			 p->sp.persistent_fraction, "scale_floor_ms",
			 (double)p->sp.scale_floor_ns / 1e6, "gpu_threshold", p->gpu_threshold, "cpu_min_pp",
			 p->cpu_min_pp);
}

static json_t *groups_json(const struct straggler_report *r)
{
	json_t *groups = json_array();

	for (size_t i = 0; groups && i < r->ngroups; i++) {
		json_t *g = group_json(&r->groups[i]);
		if (!g || json_array_append_new(groups, g)) {
			json_decref(groups);
			return NULL;
		}
	}
	return groups;
}

/* ms, or null when `known` is false (no GPU timing). */
static json_t *ms_or_null(bool known, double ns)
{
	return known ? json_real(ns / 1e6) : json_null();
}

/* Which clock named a slow stage: "host" (also when both did), "gpu" (its GPU compute alone),
 * null when not slow. */
static json_t *stage_clock(const struct pipeline_stage *st)
{
	return st->host_slow ? json_string("host") : st->gpu_slow ? json_string("gpu") : json_null();
}

static json_t *pipeline_stage_json(const struct pipeline_stage *st,
				   const struct pipeline_stage_where *w)
{
	char comm[32];
	json_t *out;

	snprintf(comm, sizeof(comm), "%016" PRIx64, st->comm);
	out = json_pack("{s:s,s:i,s:i,s:I,s:o,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:b,s:b}", "communicator",
			comm, "stage", (int)st->rank, "job_rank", (int)st->job_rank, "pid",
			(json_int_t)st->pid, "hostname", render_json_string(w ? w->hostname : NULL),
			"sends", (json_int_t)st->sends, "recvs", (json_int_t)st->recvs,
			"microbatches", (json_int_t)st->microbatches, "busy_ms", st->busy_ns / 1e6,
			"recv_wait_ms", st->recv_wait_ns / 1e6, "excess_ms", st->excess_ns / 1e6, "z",
			st->z, "judged", st->judged, "slow", st->slow);
	/* The GPU clock (null where the stage's process has no GPU timing / was not judged). */
	if (out &&
	    json_object_update_new(out, json_pack("{s:o,s:b,s:b,s:o,s:I,s:o,s:o,s:b}", "clock",
						  stage_clock(st), "host_slow", st->host_slow,
						  "gpu_slow", st->gpu_slow, "gpu_busy_ms",
						  ms_or_null(st->gpu_timed, st->gpu_busy_ns),
						  "gpu_microbatches",
						  (json_int_t)(st->gpu_microbatches > INT64_MAX
							       ? INT64_MAX
							       : st->gpu_microbatches),
						  "gpu_excess_ms",
						  ms_or_null(st->gpu_judged, st->gpu_excess_ns),
						  "gpu_z",
						  st->gpu_judged ? json_real(st->gpu_z) : json_null(),
						  "gpu_judged", st->gpu_judged))) {
		json_decref(out);
		return NULL;
	}
	/* A slow stage's rank, diagnosed like a collective straggler (null when it failed). */
	if (out && w && w->diagnosed) {
		json_t *dg = w->diagnosis ? diagnosis_json(w->diagnosis) : NULL;
		json_object_set_new(out, "diagnosis", dg ? dg : json_null());
	}
	return out;
}

static json_t *pipeline_link_json(const struct pipeline_link *l,
				  const struct pipeline_link_where *w)
{
	char comm[32];

	snprintf(comm, sizeof(comm), "%016" PRIx64, l->comm);
	return json_pack("{s:s,s:i,s:i,s:i,s:i,s:o,s:o,s:I,s:f,s:f,s:f,s:f,s:b,s:b,s:o,s:I}",
			 "communicator", comm, "src", (int)l->src, "dst", (int)l->dst,
			 "src_job_rank", (int)l->src_job_rank, "dst_job_rank", (int)l->dst_job_rank,
			 "src_host", render_json_string(w ? w->src_host : NULL), "dst_host",
			 render_json_string(w ? w->dst_host : NULL), "transfers",
			 (json_int_t)l->transfers, "wait_ms", l->wait_ns / 1e6, "transfer_ms",
			 l->transfer_ns / 1e6, "excess_ms", l->excess_ns / 1e6, "z", l->z, "judged",
			 l->judged, "slow", l->slow, "gpu_transfer_ms",
			 ms_or_null(l->gpu_timed, l->gpu_transfer_ns), "gpu_transfers",
			 (json_int_t)(l->gpu_transfers > INT64_MAX ? INT64_MAX : l->gpu_transfers));
}

/* Bounded: at most PIPELINE_RENDER_MAX stages and links each (slow ones first). */
#define PIPELINE_RENDER_MAX 256

json_t *diagnosis_pipeline_json(const struct straggler_report *r)
{
	const struct pipeline_result *p = &r->pipeline;
	json_t *stages = json_array(), *links = json_array();
	size_t ns = 0, nl = 0;

	if (!r->pipeline_checked) {
		json_decref(stages);
		json_decref(links);
		return json_null();
	}
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; stages && i < p->nstages && ns < PIPELINE_RENDER_MAX; i++)
			if (p->stages[i].slow == (pass == 0)) {
				ns++;
				if (json_array_append_new(stages, pipeline_stage_json(
						&p->stages[i], r->stage_where ? &r->stage_where[i] : NULL)))
					goto fail;
			}
		for (size_t i = 0; links && i < p->nlinks && nl < PIPELINE_RENDER_MAX; i++)
			if (p->links[i].slow == (pass == 0)) {
				nl++;
				if (json_array_append_new(links, pipeline_link_json(
						&p->links[i], r->link_where ? &r->link_where[i] : NULL)))
					goto fail;
			}
	}
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:o,s:o}",
			 "calls", (json_int_t)p->calls, "invalid", (json_int_t)p->invalid,
			 "dropped", (json_int_t)p->dropped, "transfers", (json_int_t)p->transfers,
			 "unmatched_sends", (json_int_t)p->unmatched_sends, "unmatched_recvs",
			 (json_int_t)p->unmatched_recvs, "duplicates", (json_int_t)p->duplicates,
			 "slow_stages", (json_int_t)p->slow_stages, "slow_links",
			 (json_int_t)p->slow_links, "gpu_stages", (json_int_t)p->gpu_stages,
			 "gpu_slow_stages", (json_int_t)p->gpu_slow_stages, "gpu_invalid",
			 (json_int_t)(p->gpu_invalid > INT64_MAX ? INT64_MAX : p->gpu_invalid),
			 "gpu_ambiguous", (json_int_t)p->gpu_ambiguous, "gpu_incomplete",
			 p->gpu_incomplete, "stages", stages, "links", links);
fail:
	json_decref(stages);
	json_decref(links);
	return NULL;
}

json_t *diagnosis_report_json(const struct straggler_report *r)
{
	json_t *list = json_array();

	for (size_t i = 0; list && i < r->nstragglers; i++) {
		json_t *e = diagnosis_straggler_json(&r->stragglers[i]);
		if (!e || json_array_append_new(list, e)) {
			json_decref(list);
			return NULL;
		}
	}
	return json_pack("{s:o,s:o,s:o,s:o,s:b,s:I,s:I,s:I,s:f,s:o,s:o,s:o}", "job",
			 render_json_string(r->job),
			 "from", render_json_time(r->from_ms * 1000000), "to",
			 render_json_time(r->to_ms * 1000000), "params", params_json(&r->params),
			 "truncated", r->truncated, "skipped_instances",
			 (json_int_t)r->skipped_instances, "recovered_communicators",
			 (json_int_t)r->recovered_communicators, "unanalysed_communicators",
			 (json_int_t)r->unanalysed_communicators, "iteration_ms",
			 (double)r->iteration_ns / 1e6, "stragglers", list, "communicators",
			 groups_json(r), "pipeline", diagnosis_pipeline_json(r));
}

json_t *diagnosis_straggler_incident_json(const struct straggler_report *r, size_t straggler)
{
	return json_pack("{s:o,s:o,s:f,s:o}", "straggler",
			 diagnosis_straggler_json(&r->stragglers[straggler]), "params",
			 params_json(&r->params), "iteration_ms", (double)r->iteration_ns / 1e6,
			 "communicators", groups_json(r));
}

json_t *diagnosis_regression_json(const struct regression *g)
{
	json_t *fns = json_array();

	for (size_t i = 0; fns && i < g->nfunctions; i++) {
		const struct regression_function *f = &g->functions[i];
		json_array_append_new(fns, json_pack("{s:s,s:f,s:f,s:f}", "function", f->function,
						     "current_pct", 100 * f->current_fraction,
						     "baseline_pct", 100 * f->baseline_fraction,
						     "delta_pp",
						     100 * (f->current_fraction - f->baseline_fraction)));
	}
	return json_pack("{s:f,s:f,s:f,s:{s:I,s:I,s:I},s:I,s:I,s:f,s:o}", "iteration_ms",
			 g->iteration_ms, "baseline_iteration_ms", g->baseline_iteration_ms, "rise",
			 g->rise, "baseline", "from_ms", (json_int_t)g->baseline_from_ms, "to_ms",
			 (json_int_t)g->baseline_to_ms, "samples", (json_int_t)g->baseline_samples,
			 "current_samples", (json_int_t)g->current_samples, "window_ms",
			 (json_int_t)g->window_ms, "delta_pp", g->delta_pp, "functions", fns);
}

/* ---- hangs ------------------------------------------------------------------------------- */

static json_t *stacks_json(const struct hang_stack *st, size_t n, const char *unit)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_pack("{s:s,s:I}", "stack", st[i].stack, unit,
						   (json_int_t)st[i].weight));
	return a ? a : json_null();
}

static json_t *evidence_json(const struct hang_rank *hr, const struct hang_evidence *ev)
{
	json_t *o = json_pack("{s:i,s:i,s:I,s:s,s:s,s:b,s:I,s:I,s:I}", "rank", hr->rank,
			      "comm_rank", hr->comm_rank, "pid", (json_int_t)hr->pid, "hostname",
			      hr->host, "state", hang_rank_state_name(hr->state), "entered_any",
			      hr->entered_any, "last_seq", (json_int_t)hr->last_seq,
			      "last_entry_ms", (json_int_t)hr->last_entry_ms, "node_last_batch_ms",
			      (json_int_t)hr->node_last_ms);
	json_t *threads;

	if (!o)
		return NULL;
	/* Who the process belongs to, as a straggler's "pod" (and its container), and its Slurm
	 * job: null when unknown. */
	const struct hang_rank_identity *id = &hr->identity;
	json_object_set_new(o, "pod",
			    id->pod[0] ? json_pack("{s:s,s:s,s:o}", "namespace", id->pod_namespace,
						   "name", id->pod, "container",
						   id->container[0] ? json_string(id->container)
								    : json_null())
				       : json_null());
	json_object_set_new(o, "slurm_job",
			    id->slurm_job ? json_integer((json_int_t)id->slurm_job) : json_null());
	json_object_set_new(o, "slurm_step",
			    id->slurm_job && id->slurm_step[0] ? json_string(id->slurm_step)
							       : json_null());
	json_object_set_new(o, "process_exists",
			    hr->state == HANG_RANK_AGENT_LOST ? json_null()
							      : json_boolean(hr->state != HANG_RANK_EXITED));
	if (!ev)
		return o;
	json_object_set_new(o, "cause", json_pack("{s:s,s:s}", "class",
						  hang_cause_name(ev->cause.cls), "detail",
						  ev->cause.detail));
	json_object_set_new(o, "oncpu_samples", json_integer((json_int_t)ev->oncpu_samples));
	json_object_set_new(o, "oncpu_stacks", stacks_json(ev->oncpu, ev->noncpu, "samples"));
	json_object_set_new(o, "offcpu_stacks", ev->offcpu_present
							? stacks_json(ev->offcpu, ev->noffcpu, "us")
							: json_null());
	if (!ev->threads_present) {
		json_object_set_new(o, "threads", json_null());
		return o;
	}
	threads = json_array();
	for (size_t i = 0; threads && i < ev->nthreads; i++) {
		const struct hang_thread *t = &ev->threads[i];
		json_array_append_new(threads,
				      json_pack("{s:I,s:s,s:f,s:I,s:I,s:s}", "tid", (json_int_t)t->tid,
						"comm", t->comm, "oncpu_ms", (double)t->oncpu_ns / 1e6,
						"voluntary_switches", (json_int_t)t->voluntary_switches,
						"involuntary_switches",
						(json_int_t)t->involuntary_switches, "state",
						t->oncpu_ns ? "ran" : "no CPU time"));
	}
	json_object_set_new(o, "threads", threads ? threads : json_null());
	json_object_set_new(o, "threads_total", json_integer(ev->threads_total));
	return o;
}

json_t *diagnosis_hang_json(const struct hang_result *r, const struct hang_evidence *ev,
			    size_t nev)
{
	char comm[24];
	json_t *ranks = json_array(), *doc;

	for (size_t i = 0; ranks && i < r->nnamed; i++)
		json_array_append_new(ranks, evidence_json(&r->ranks[i], i < nev ? &ev[i] : NULL));
	snprintf(comm, sizeof(comm), "%016" PRIx64, r->comm);
	/* A stall's instance is the newest one any rank began (nobody began the next). */
	doc = json_pack("{s:{s:s,s:s,s:I,s:i,s:i,s:b,s:I,s:I,s:I,s:f},s:I,s:o}", "instance",
			 "comm", comm, "op", sysom_nccl_op_name(r->op), "seq", (json_int_t)r->seq,
			 "nranks", r->nranks, "entered", r->entered, "all_entered",
			 r->all_entered, "since_ms", (json_int_t)r->since_ms, "waited_ms",
			 (json_int_t)r->waited_ms, "threshold_ms", (json_int_t)r->threshold_ms,
			 "interval_ms", r->interval_ms, "missing", (json_int_t)r->nmissing,
			 "ranks", ranks);
	if (!doc)
		return NULL;
	json_object_set_new(doc, "verdict", json_string(r->verdict == HANG_STALL ? "stall"
										   : "hang"));
	/* A point-to-point transfer: the link's sender and receiver (communicator ranks). */
	json_object_set_new(json_object_get(doc, "instance"), "link",
			    r->link ? json_pack("{s:i,s:i}", "src", r->src, "dst", r->dst)
				    : json_null());
	/* The cause of the first named rank (the one the summary and the alert name). */
	json_object_set_new(doc, "cause", nev ? json_pack("{s:s,s:s}", "class",
							   hang_cause_name(ev[0].cause.cls),
							   "detail", ev[0].cause.detail)
					      : json_null());
	return doc;
}

json_t *diagnosis_agent_lost_json(const struct hang_lost_node *n)
{
	json_t *ranks = json_array();

	for (uint32_t i = 0; ranks && i < n->nranks && i < HANG_MAX_NAMED; i++)
		json_array_append_new(ranks, json_integer(n->ranks[i]));
	return json_pack("{s:{s:s,s:I,s:I,s:o}}", "agent_lost", "hostname", n->host,
			 "last_batch_ms", (json_int_t)n->last_ms, "processes",
			 (json_int_t)n->nranks, "ranks", ranks);
}

static void text_frames(struct byte_buf *out, const char *stack)
{
	for (const char *f = stack; f && *f;) {
		const char *semi = strchr(f, ';');
		size_t flen = semi ? (size_t)(semi - f) : strlen(f);
		byte_buf_printf(out, "        %.*s\n", (int)flen, f);
		f = semi ? semi + 1 : NULL;
	}
}

static const char *jstr(const json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));
	return v ? v : "";
}

static json_int_t jint(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

void diagnosis_hang_text(const json_t *report, struct byte_buf *out)
{
	const json_t *inst = json_object_get(report, "instance"), *lost, *r, *v, *x;
	size_t i, j;

	if ((lost = json_object_get(report, "agent_lost"))) {
		byte_buf_printf(out, "\nnode %s: no batch since %" JSON_INTEGER_FORMAT
				" ms since the epoch; it listed %" JSON_INTEGER_FORMAT
				" process(es) of the job, ranks:", jstr(lost, "hostname"),
				jint(lost, "last_batch_ms"), jint(lost, "processes"));
		json_array_foreach(json_object_get(lost, "ranks"), i, v)
			byte_buf_printf(out, " %" JSON_INTEGER_FORMAT, json_integer_value(v));
		byte_buf_printf(out, "\n");
		return;
	}
	if (!inst)
		return;
	if (!strcmp(jstr(report, "verdict"), "stall") && json_is_object(json_object_get(inst, "link")))
		byte_buf_printf(out, "\nstall: no collective or transfer began on any communicator for "
				"%.1f s (threshold %.1f s, usual spacing %.1f ms); the newest: transfer #%"
				JSON_INTEGER_FORMAT " from rank %" JSON_INTEGER_FORMAT " to rank %"
				JSON_INTEGER_FORMAT " on communicator %s\n",
				(double)jint(inst, "waited_ms") / 1e3,
				(double)jint(inst, "threshold_ms") / 1e3,
				json_number_value(json_object_get(inst, "interval_ms")), jint(inst, "seq"),
				jint(json_object_get(inst, "link"), "src"),
				jint(json_object_get(inst, "link"), "dst"), jstr(inst, "comm"));
	else if (!strcmp(jstr(report, "verdict"), "stall"))
		byte_buf_printf(out, "\nstall: no collective began on any communicator for %.1f s "
				"(threshold %.1f s, usual spacing %.1f ms); the newest: %s #%"
				JSON_INTEGER_FORMAT " on communicator %s\n",
				(double)jint(inst, "waited_ms") / 1e3,
				(double)jint(inst, "threshold_ms") / 1e3,
				json_number_value(json_object_get(inst, "interval_ms")),
				jstr(inst, "op"), jint(inst, "seq"), jstr(inst, "comm"));
	else if (json_is_object(json_object_get(inst, "link")))
		byte_buf_printf(out, "\ntransfer #%" JSON_INTEGER_FORMAT " from rank %" JSON_INTEGER_FORMAT
			" to rank %" JSON_INTEGER_FORMAT " on communicator %s: %s, waiting %.1f s "
			"(threshold %.1f s, usual spacing %.1f ms)\n",
			jint(inst, "seq"), jint(json_object_get(inst, "link"), "src"),
			jint(json_object_get(inst, "link"), "dst"), jstr(inst, "comm"),
			json_is_true(json_object_get(inst, "all_entered"))
				? "both ends entered, neither finished"
				: "one end entered, the other did not",
			(double)jint(inst, "waited_ms") / 1e3, (double)jint(inst, "threshold_ms") / 1e3,
			json_number_value(json_object_get(inst, "interval_ms")));
	else
		byte_buf_printf(out, "\n%s #%" JSON_INTEGER_FORMAT " on communicator %s: %" JSON_INTEGER_FORMAT
			" of %" JSON_INTEGER_FORMAT " ranks entered%s, waiting %.1f s (threshold %.1f s, "
			"usual spacing %.1f ms)\n",
			jstr(inst, "op"), jint(inst, "seq"), jstr(inst, "comm"), jint(inst, "entered"),
			jint(inst, "nranks"),
			json_is_true(json_object_get(inst, "all_entered")) ? ", none finished" : "",
			(double)jint(inst, "waited_ms") / 1e3, (double)jint(inst, "threshold_ms") / 1e3,
			json_number_value(json_object_get(inst, "interval_ms")));
	json_array_foreach(json_object_get(report, "ranks"), i, r) {
		const json_t *pe = json_object_get(r, "process_exists");
		const json_t *pod = json_object_get(r, "pod");
		char owner[700] = "";
		if (json_is_object(pod)) {
			const char *c = jstr(pod, "container");
			snprintf(owner, sizeof(owner), ", pod %s/%s%s%s", jstr(pod, "namespace"),
				 jstr(pod, "name"), *c ? " container " : "", c);
		}
		if (json_is_integer(json_object_get(r, "slurm_job"))) {
			size_t n = strlen(owner);
			const char *step = jstr(r, "slurm_step");
			snprintf(owner + n, sizeof(owner) - n, ", slurm job %" JSON_INTEGER_FORMAT "%s%s",
				 jint(r, "slurm_job"), *step ? "." : "", step);
		}
		byte_buf_printf(out, "\nrank %" JSON_INTEGER_FORMAT " (communicator rank %" JSON_INTEGER_FORMAT
				", %s, pid %" JSON_INTEGER_FORMAT "%s): %s; process %s\n",
				jint(r, "rank"), jint(r, "comm_rank"), jstr(r, "hostname"), jint(r, "pid"),
				owner, jstr(r, "state"),
				json_is_null(pe) ? "unknown (agent lost)"
						 : json_is_true(pe) ? "exists" : "gone");
		if ((x = json_object_get(r, "cause")))
			byte_buf_printf(out, "  cause: %s (%s)\n", jstr(x, "class"),
					jstr(x, "detail"));
		if ((x = json_object_get(r, "threads")) && json_is_array(x)) {
			if (!json_array_size(x))
				byte_buf_printf(out, "  threads: none ran in the latest window (stopped, "
						     "or blocked without waking)\n");
			json_array_foreach(x, j, v)
				byte_buf_printf(out, "  thread %" JSON_INTEGER_FORMAT " %-16s %8.1f ms on CPU, "
						"%" JSON_INTEGER_FORMAT " voluntary switches\n",
						jint(v, "tid"), jstr(v, "comm"),
						json_number_value(json_object_get(v, "oncpu_ms")),
						jint(v, "voluntary_switches"));
		}
		json_array_foreach(json_object_get(r, "oncpu_stacks"), j, v) {
			byte_buf_printf(out, "  on-CPU stack (%" JSON_INTEGER_FORMAT " samples):\n",
					jint(v, "samples"));
			text_frames(out, jstr(v, "stack"));
		}
		json_array_foreach(json_object_get(r, "offcpu_stacks"), j, v) {
			byte_buf_printf(out, "  off-CPU stack (%" JSON_INTEGER_FORMAT " us blocked):\n",
					jint(v, "us"));
			text_frames(out, jstr(v, "stack"));
		}
	}
}
