/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Views of the analysis: a job's stragglers and CPU waterline, the diagnoses the monitor opened
 * (JSON, or text via text.c), the alerts firing, per-job settings and baselines.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/alerts/alerts.h"
#include "server/cluster/cluster.h"
#include "server/analysis/diagnosis.h"
#include "server/analysis/patterns.h"
#include "server/analysis/settings.h"
#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/query/folded.h"
#include "server/query/params.h"
#include "server/query/profile.h"

/* An optional time parameter into *ms (untouched when absent); false with 400 answered. */
static bool time_param(const struct http_request *req, const char *name, int64_t now_ms,
		       int64_t *ms, struct http_response *resp)
{
	char text[QUERY_PARAM_MAX];
	bool present;

	if (!query_param(req, name, text, sizeof(text), &present, resp))
		return false;
	if (present && query_time_parse(text, now_ms, ms)) {
		http_response_error(resp, 400, "parameter '%s' is not a time", name);
		return false;
	}
	return true;
}

void api__job_patterns(struct api *api, const char *job, const struct http_request *req,
		       struct http_response *resp)
{
	struct diagnosis_ctx ctx;
	struct diagnosis_scope scope = { .job = job };
	struct patterns_params p;
	int64_t hist_from = 0, hist_to = 0, now = api->now_ms();
	uint32_t limit;
	bool has_limit;
	json_t *doc = NULL;
	struct query_filter q;
	int rc;

	api_diagnosis_ctx(api, &ctx);
	patterns_params_default(&p);
	limit = p.limit;
	if (!query_filter_parse(req, now, &q, resp) ||
	    !query_param_double(req, "k", 0.1, 100, &p.k, resp) ||
	    !query_param_double(req, "min_beta", 0, 1, &p.min_beta, resp) ||
	    !query_param_double(req, "rel_floor", 0, 10, &p.rel_floor, resp) ||
	    !query_param_double(req, "history_change", 0, 100, &p.history_change, resp) ||
	    !query_param_uint(req, "limit", 1, PATTERNS_MAX_LIMIT, &limit, &has_limit, resp) ||
	    !time_param(req, "history_from", now, &hist_from, resp) ||
	    !time_param(req, "history_to", now, &hist_to, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job || q.f.comm) {
		http_response_error(resp, 400, "parameters 'node', 'pid', 'comm' and 'job' do not apply here");
		return;
	}
	if ((hist_from || hist_to) && !(hist_from && hist_to && hist_from < hist_to)) {
		http_response_error(resp, 400,
				    "'history_from' and 'history_to' go together, 'history_from' first");
		return;
	}
	p.limit = limit;
	scope.from_ms = q.f.from_ms;
	scope.to_ms = q.f.to_ms;
	if ((rc = patterns_job(&ctx, &scope, &p, hist_from, hist_to, &doc)) == -ENOENT)
		http_response_error(resp, 404, "no rank of this job is known");
	else if (rc)
		api__store_error(resp, rc);
	else
		render_json_respond(resp, 200, doc);
}

void api__job_stragglers(struct api *api, const char *job, const struct http_request *req,
			   struct http_response *resp)
{
	struct diagnosis_ctx ctx;
	struct diagnosis_params p;
	struct diagnosis_scope scope = { .job = job };
	uint32_t diagnose_on = 1, window, min_ms;
	double floor_ms;
	bool has_diagnose, has_window, has_min;
	json_t *doc = NULL;
	struct query_filter q;
	int rc;

	api_diagnosis_ctx(api, &ctx);
	diagnosis_params_default(&p);
	window = p.sp.window;
	min_ms = (uint32_t)(p.sp.min_excess_ns / 1000000);
	floor_ms = (double)p.sp.scale_floor_ns / 1e6;
	if (!query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_uint(req, "window", 1, STRAGGLER_MAX_WINDOW, &window, &has_window, resp) ||
	    !query_param_uint(req, "min_excess_ms", 0, 600000, &min_ms, &has_min, resp) ||
	    !query_param_double(req, "k", 0.1, 100, &p.sp.k, resp) ||
	    !query_param_double(req, "persistent_fraction", 0, 1, &p.sp.persistent_fraction, resp) ||
	    !query_param_double(req, "scale_floor_ms", 0, 60000, &floor_ms, resp) ||
	    !query_param_double(req, "gpu_threshold", 1.01, 100, &p.gpu_threshold, resp) ||
	    !query_param_double(req, "cpu_min_pp", 0.1, 100, &p.cpu_min_pp, resp) ||
	    !query_param_uint(req, "diagnose", 0, 1, &diagnose_on, &has_diagnose, resp) ||
	    !query_param_comm_key(req, &scope.has_comm, &scope.comm, resp))
		return;
	/* `comm` is a communicator key here, not a process comm. */
	if (q.f.node || q.f.has_pid || q.f.job) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'job' do not apply here");
		return;
	}
	p.sp.window = window;
	p.sp.min_excess_ns = (uint64_t)min_ms * 1000000ull;
	p.sp.scale_floor_ns = (uint64_t)(floor_ms * 1e6);
	p.diagnose = diagnose_on != 0;
	scope.from_ms = q.f.from_ms;
	scope.to_ms = q.f.to_ms;
	if ((rc = diagnosis_stragglers(&ctx, &scope, &p, &doc)))
		api__store_error(resp, rc);
	else
		render_json_respond(resp, 200, doc);
}

/* GET /api/v1/jobs/{job}/waterline?comm=&from=&to=&k=&min_pp= */
void api__job_waterline(struct api *api, const char *job, const struct http_request *req,
			  struct http_response *resp)
{
	struct diagnosis_ctx ctx;
	struct diagnosis_scope scope = { .job = job };
	double k = DIAGNOSIS_WATERLINE_K, min_pp = DIAGNOSIS_WATERLINE_MIN_PP;
	json_t *doc = NULL;
	struct query_filter q;
	int rc;

	if (!query_filter_parse(req, api->now_ms(), &q, resp) || !query_param_double(req, "k", 0.1, 100, &k, resp) ||
	    !query_param_double(req, "min_pp", 0, 100, &min_pp, resp) ||
	    !query_param_comm_key(req, &scope.has_comm, &scope.comm, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'job' do not apply here");
		return;
	}
	api_diagnosis_ctx(api, &ctx);
	scope.from_ms = q.f.from_ms;
	scope.to_ms = q.f.to_ms;
	rc = diagnosis_waterline(&ctx, &scope, k, min_pp, &doc);
	if (rc == -E2BIG)
		http_response_error(resp, 413, "more than %d ranks to profile: name one communicator",
				    DIAGNOSIS_WATERLINE_MAX_RANKS);
	else if (rc)
		api__store_error(resp, rc);
	else
		render_json_respond(resp, 200, doc);
}

/* ---- diagnoses (incidents the monitor opened) -------------------------------------------- */

static json_t *diagnosis_json(const struct store_diagnosis *d, bool with_report)
{
	json_t *comms = json_array(), *o;
	const char *p = d->communicators;

	while (comms && p && *p) {
		const char *sp = strchr(p, ' ');
		size_t len = sp ? (size_t)(sp - p) : strlen(p);
		json_array_append_new(comms, json_stringn(p, len));
		p = sp ? sp + 1 : p + len;
	}
	o = json_pack("{s:I,s:o,s:s,s:s,s:o,s:o,s:o,s:s,s:s,s:o,s:o,s:s,s:o,s:o,s:o}", "id",
		      (json_int_t)d->id, "job", render_json_string(d->job), "kind", d->kind,
		      "status", d->resolved_ms ? "resolved" : "open", "rank",
		      api__json_int_or_null(d->rank), "hostname", render_json_string(d->hostname),
		      "communicators", comms ? comms : json_array(), "layer", d->layer, "severity",
		      d->severity, "summary", render_json_string(d->summary), "action",
		      render_json_string(d->action), "identity", d->identity, "opened",
		      render_json_time(d->opened_ms * 1000000), "updated",
		      render_json_time(d->updated_ms * 1000000), "resolved",
		      d->resolved_ms ? render_json_time(d->resolved_ms * 1000000) : json_null());
	if (o && with_report) {
		json_t *r = json_loads(d->report, 0, NULL);
		json_object_set_new(o, "report", r ? r : json_null());
	}
	return o;
}

static int diagnosis_list_add(void *arg, const struct store_diagnosis *d)
{
	json_t *o = diagnosis_json(d, false);

	return o && !json_array_append_new(arg, o) ? 0 : -ENOMEM;
}

struct diagnosis_one {
	json_t *doc;
	char *text;
};

static int diagnosis_take(void *arg, const struct store_diagnosis *d)
{
	struct byte_buf *text = ((void **)arg)[1];

	if (text) {
		api__diagnosis_text(d, text);
		return byte_buf_error(text);
	}
	json_t **doc = ((void **)arg)[0];
	return (*doc = diagnosis_json(d, true)) ? 0 : -ENOMEM;
}

/* GET /api/v1/diagnoses?job=&from=&to=&status=open|all&limit= and /api/v1/diagnoses/{id}
 * [?format=json|text]. */
void api_diagnoses_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	static const char prefix[] = "/api/v1/diagnoses/";
	struct api *api = ctx;
	struct store_diagnosis_filter f = { 0 };
	char status[16] = "all", format[16] = "json";
	uint32_t limit = API_DEFAULT_DIAGNOSIS_LIMIT;
	bool has, has_limit;
	json_t *list = NULL;
	struct query_filter q;
	int rc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp))
		return;
	if (strncmp(req->path, prefix, sizeof(prefix) - 1) == 0) {
		const char *id_text = req->path + sizeof(prefix) - 1;
		char *end;
		json_t *doc = NULL;
		void *args[2] = { &doc, NULL };
		errno = 0;
		long long id = strtoll(id_text, &end, 10);
		if (!id_text[0] || *end || errno || id <= 0) {
			http_response_error(resp, 400, "diagnosis id must be a positive integer");
			return;
		}
		if (!query_param(req, "format", format, sizeof(format), &has, resp))
			return;
		if (strcmp(format, "json") && strcmp(format, "text")) {
			http_response_error(resp, 400, "parameter 'format' must be json or text");
			return;
		}
		f.id = id;
		if (strcmp(format, "text") == 0) {
			resp->status = 200;
			snprintf(resp->content_type, sizeof(resp->content_type),
				 "text/plain; charset=utf-8");
			resp->body.len = 0;
			args[1] = &resp->body;
		}
		if ((rc = store_diagnoses_list(api->store, &f, 1, diagnosis_take, args))) {
			api__store_error(resp, rc);
			json_decref(doc);
			return;
		}
		if (args[1] ? resp->body.len == 0 : !doc) {
			http_response_error(resp, 404, "no diagnosis %lld", id);
			return;
		}
		if (!args[1])
			render_json_respond(resp, 200, doc);
		return;
	}
	if (!query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param(req, "status", status, sizeof(status), &has, resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_DIAGNOSIS_LIMIT, &limit, &has_limit, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.comm) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'comm' do not apply here");
		return;
	}
	if (strcmp(status, "all") && strcmp(status, "open")) {
		http_response_error(resp, 400, "parameter 'status' must be open or all");
		return;
	}
	f.job = q.f.job;
	f.from_ms = q.f.from_ms;
	f.to_ms = q.f.to_ms;
	f.open_only = strcmp(status, "open") == 0;
	if (!(list = json_array())) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_diagnoses_list(api->store, &f, limit, diagnosis_list_add, list))) {
		json_decref(list);
		api__store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200,
			    json_pack("{s:o,s:o,s:o}", "from", render_json_time(f.from_ms * 1000000),
				      "to", render_json_time(f.to_ms * 1000000), "diagnoses", list));
}

/* GET /api/v1/alerts?job=: what is firing now. */
void api_alerts_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	char job[QUERY_PARAM_MAX];
	bool has;
	json_t *list;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp) || !query_param(req, "job", job, sizeof(job), &has, resp))
		return;
	list = api->alerts ? alerts_active_json(api->alerts, has ? job : NULL) : json_array();
	if (!list) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	render_json_respond(resp, 200, json_pack("{s:o}", "alerts", list));
}

/* GET /api/v1/cluster?job=: the replicas sharing the store and, with job, its owner. */
void api_cluster_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	char job[QUERY_PARAM_MAX];
	bool has;
	json_t *doc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp) ||
	    !query_param(req, "job", job, sizeof(job), &has, resp))
		return;
	if (!(doc = cluster_json(api->cluster, has && job[0] ? job : NULL))) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	render_json_respond(resp, 200, doc);
}

/* ---- per-job settings and baselines --------------------------------------------------------- */

void api__job_settings_get(struct api *api, const char *job, const struct http_request *req,
			   struct http_response *resp)
{
	struct job_settings s;
	char *text = NULL, err[160];
	json_t *stored = NULL, *doc;
	int rc;

	(void)req;
	job_settings_default(&s);
	if ((rc = store_job_settings_get(api->store, job, &text))) {
		api__store_error(resp, rc);
		return;
	}
	if (text && (stored = json_loads(text, 0, NULL)))
		job_settings_apply(&s, stored, err, sizeof(err));
	free(text);
	doc = json_pack("{s:o,s:o,s:o}", "job", render_json_string(job), "settings",
			job_settings_json(&s), "overrides", stored ? stored : json_object());
	render_json_respond(resp, 200, doc);
}

/* PUT /api/v1/jobs/{job}/settings: a JSON object of overrides (replacing the previous ones;
 * {} restores the defaults). */
void api__job_settings_put(struct api *api, const char *job, const struct http_request *req,
			     struct http_response *resp)
{
	struct job_settings s;
	json_error_t jerr;
	char err[160];
	json_t *obj = req->body ? json_loadb((const char *)req->body, req->body_len, 0, &jerr) : NULL;
	char *text = NULL;
	int rc;

	job_settings_default(&s);
	if (!obj) {
		http_response_error(resp, 400, "body must be a JSON object of settings");
		return;
	}
	if (job_settings_apply(&s, obj, err, sizeof(err))) {
		http_response_error(resp, 400, "%s", err);
		json_decref(obj);
		return;
	}
	text = json_object_size(obj) ? json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (json_object_size(obj) && !text)
		rc = -ENOMEM;
	else
		rc = store_job_settings_put(api->store, job, text, api->now_ms());
	free(text);
	json_decref(obj);
	if (rc)
		api__store_error(resp, rc);
	else
		api__job_settings_get(api, job, req, resp);
}

static int baseline_json(void *arg, const struct store_baseline *b)
{
	json_t **doc = arg;

	*doc = json_pack("{s:o,s:o,s:o,s:f,s:I,s:s,s:o}", "job", render_json_string(b->job), "from",
			 render_json_time(b->from_ms * 1000000), "to",
			 render_json_time(b->to_ms * 1000000), "iteration_ms",
			 (double)b->iteration_ns / 1e6, "samples", (json_int_t)b->samples, "source",
			 b->source, "created", render_json_time(b->created_ms * 1000000));
	return *doc ? 0 : -ENOMEM;
}

/* GET: the job's baseline; POST ?from=&to=: the profile and iteration time of that range
 * become the baseline. */
void api__job_baseline(struct api *api, const char *job, const struct http_request *req,
			 struct http_response *resp)
{
	struct byte_buf profile = { 0 };
	json_t *doc = NULL;
	struct straggler_report *strag = NULL;
	struct query_filter q;
	int rc;

	if (strcmp(req->method, "POST") == 0) {
		struct diagnosis_ctx ctx;
		struct diagnosis_params p;
		struct diagnosis_scope scope = { .job = job };
		struct store_sample_filter f = { .job = job };
		if (!query_filter_parse(req, api->now_ms(), &q, resp))
			return;
		api_diagnosis_ctx(api, &ctx);
		diagnosis_params_default(&p);
		p.diagnose = false;
		scope.from_ms = f.from_ms = q.f.from_ms;
		scope.to_ms = f.to_ms = q.f.to_ms;
		if ((rc = diagnosis_report_build(&ctx, &scope, &p, NULL, NULL, &strag)) ||
		    (rc = query_folded(&api->profiles, &f, 20000, QUERY_PROFILE_CPU, &profile)))
			goto cleanup;
		uint64_t samples = folded_samples(&profile);
		byte_buf_put_u8(&profile, 0);
		if ((rc = byte_buf_error(&profile)))
			goto cleanup;
		struct store_baseline b = {
			.job = job, .from_ms = f.from_ms, .to_ms = f.to_ms,
			.created_ms = api->now_ms(), .source = "api",
			.iteration_ns = (uint64_t)((double)strag->iteration_ns / 1e6 * 1e6),
			.profile = (const char *)profile.data,
			.samples = samples,
		};
		if (b.samples == 0) {
			http_response_error(resp, 409, "no CPU samples of job '%s' in that range", job);
			goto cleanup;
		}
		if ((rc = store_baseline_put(api->store, &b)))
			goto cleanup;
	}
	rc = store_baseline_get(api->store, job, baseline_json, &doc);
	if (rc == -ENOENT) {
		rc = 0;
		http_response_error(resp, 404, "job '%s' has no baseline", job);
		goto cleanup;
	}
	if (!rc)
		render_json_respond(resp, 200, doc);
cleanup:
	if (rc)
		api__store_error(resp, rc);
	straggler_report_free(strag);
	byte_buf_free(&profile);
}
