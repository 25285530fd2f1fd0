/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The route table: every query route of the API, by method and path pattern, with its view
 * and body limit. api_routes_build composes the server's table from it, the ingest module's
 * routes and the symbol repository's; docs/http-api.md lists the same routes.
 */
#include <stdio.h>
#include <string.h>

#include "server/api/api_internal.h"
#include "server/http/static.h"
#include "server/ingest/ingest.h"
#include "server/symbols/symbols.h"

#define JOB_PATH API_JOBS_PREFIX "{job}"

/* Checks the credential (read for GET, admin for writes), takes the job id from the path and
 * runs the view. */
static void job_route(void *ctx, const struct http_request *req, struct http_response *resp,
		      api__job_view_fn view)
{
	static const char prefix[] = API_JOBS_PREFIX;
	struct api *api = ctx;
	char job[API_MAX_JOB_ID + 1];
	const char *rest;
	size_t len;

	if (!api__authorized(api, req, api__method_scopes(req), resp))
		return;
	rest = strncmp(req->path, prefix, sizeof(prefix) - 1) == 0 ? req->path + sizeof(prefix) - 1
								    : "";
	len = strcspn(rest, "/");
	if (len == 0 || len > API_MAX_JOB_ID) {
		http_response_error(resp, len ? 400 : 404, len ? "job id longer than %d bytes"
							     : "missing job id", API_MAX_JOB_ID);
		return;
	}
	memcpy(job, rest, len);
	job[len] = '\0';
	view(api, job, req, resp);
}

#define JOB_HANDLER(name, view)                                                                  \
	static void name(void *ctx, const struct http_request *req, struct http_response *resp) \
	{                                                                                        \
		job_route(ctx, req, resp, view);                                                 \
	}

JOB_HANDLER(job_detail_get, api__job_detail)
JOB_HANDLER(job_collectives_get, api__job_collectives)
JOB_HANDLER(job_gpu_get, api__job_gpu)
JOB_HANDLER(job_stragglers_get, api__job_stragglers)
JOB_HANDLER(job_waterline_get, api__job_waterline)
JOB_HANDLER(job_patterns_get, api__job_patterns)
JOB_HANDLER(job_hosts_get, api__job_hosts)
JOB_HANDLER(job_settings_get, api__job_settings_get)
JOB_HANDLER(job_settings_put, api__job_settings_put)
JOB_HANDLER(job_baseline, api__job_baseline)
JOB_HANDLER(job_trace_get, api__job_trace)

/* Every query route (ctx: struct api, set when the table is used). */
static const struct http_route query_routes[] = {
	{ "GET", "/api/v1/nodes", false, api_nodes_get, NULL, 0, 0 },
	{ "GET", "/api/v1/nodes/", true, api_node_get, NULL, 0, 0 }, /* /nodes/{node}/gpus */
	{ "GET", "/api/v1/processes", false, api_processes_get, NULL, 0, 0 },
	{ "GET", "/api/v1/flamegraph", false, api_flamegraph_get, NULL, 0, 0 },
	{ "GET", "/api/v1/flamegraph/diff", false, api_flamegraph_diff_get, NULL, 0, 0 },
	{ "GET", "/api/v1/jobs", false, api_jobs_get, NULL, 0, 0 },
	{ "GET", JOB_PATH, false, job_detail_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/collectives", false, job_collectives_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/gpu", false, job_gpu_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/stragglers", false, job_stragglers_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/waterline", false, job_waterline_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/patterns", false, job_patterns_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/hosts", false, job_hosts_get, NULL, 0, 0 },
	{ "GET", JOB_PATH "/settings", false, job_settings_get, NULL, 0, 0 },
	{ "PUT", JOB_PATH "/settings", false, job_settings_put, NULL, API_MAX_SETTINGS_BODY, 0 },
	{ "GET", JOB_PATH "/baseline", false, job_baseline, NULL, 0, 0 },
	{ "POST", JOB_PATH "/baseline", false, job_baseline, NULL, 0, 0 }, /* parameters only */
	{ "GET", "/api/v1/diagnoses", false, api_diagnoses_get, NULL, 0, 0 },
	{ "GET", "/api/v1/diagnoses/", true, api_diagnoses_get, NULL, 0, 0 }, /* /diagnoses/{id} */
	{ "GET", "/api/v1/alerts", false, api_alerts_get, NULL, 0, 0 },
	{ "GET", "/api/v1/cluster", false, api_cluster_get, NULL, 0, 0 },
	{ "GET", "/healthz", false, api_healthz_get, NULL, 0, HTTP_ROUTE_MONITORING },
	{ "GET", "/metrics", false, api_metrics_get, NULL, 0, HTTP_ROUTE_MONITORING },
	{ "GET", JOB_PATH "/trace", false, job_trace_get, NULL, 0, 0 },
};

#define QUERY_ROUTE_COUNT (sizeof(query_routes) / sizeof(query_routes[0]))

void api_job_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	static const char prefix[] = API_JOBS_PREFIX;
	struct api *api = ctx;
	struct http_route routes[QUERY_ROUTE_COUNT];
	const struct http_route *r;
	const char *rest;
	size_t len;
	bool known;

	if (!api__authorized(api, req, api__method_scopes(req), resp))
		return;
	memcpy(routes, query_routes, sizeof(routes));
	for (size_t i = 0; i < QUERY_ROUTE_COUNT; i++)
		routes[i].ctx = api;
	r = http_route_find(routes, QUERY_ROUTE_COUNT, req->method, req->path, &known);
	if (r) {
		r->handler(r->ctx, req, resp);
		return;
	}
	rest = strncmp(req->path, prefix, sizeof(prefix) - 1) == 0 ? req->path + sizeof(prefix) - 1
								    : "";
	len = strcspn(rest, "/");
	if (len == 0 || len > API_MAX_JOB_ID)
		http_response_error(resp, len ? 400 : 404, len ? "job id longer than %d bytes"
							     : "missing job id", API_MAX_JOB_ID);
	else if (known)
		http_response_error(resp, 405, "method %s not allowed here", req->method);
	else
		http_response_error(resp, 404, "no such resource under job '%.*s'", (int)len, rest);
}

void api_job_put(void *ctx, const struct http_request *req, struct http_response *resp)
{
	api_job_get(ctx, req, resp);
}

size_t api_routes_build(struct api *api, struct ingest *in, struct symbols *symbols,
			const struct api_route_limits *limits, struct http_route out[API_ROUTE_COUNT])
{
	size_t chunk_max = limits && limits->symbols_max_chunk ? limits->symbols_max_chunk
							       : SYMBOLS_DEFAULT_MAX_CHUNK;
	const struct http_route symbols_routes[] = {
		{ "POST", SYMBOLS_MISSING_PATH, false, symbols_missing_post, symbols,
		  SYMBOLS_MISSING_MAX_BODY, 0 },
		{ "PUT", SYMBOLS_PREFIX, true, symbols_put, symbols, chunk_max, HTTP_ROUTE_DECODES },
		{ "GET", SYMBOLS_PREFIX, true, symbols_get, symbols, 0, 0 },
		{ "GET", DEBUGINFOD_PREFIX, true, symbols_debuginfod_get, symbols, 0, 0 },
	};
	/*
	 * The transport takes the table's GET routes one by one; PUT and POST under a job go to
	 * api_job_get's dispatch through the same table (the body limit is the largest of
	 * theirs), and so do GET paths under a job that no route has (404 after the token).
	 */
	const struct http_route job_fallbacks[] = {
		{ "GET", API_JOBS_PREFIX, true, api_job_get, api, 0, 0 },
		{ "PUT", API_JOBS_PREFIX, true, api_job_put, api, API_MAX_SETTINGS_BODY, 0 },
		{ "POST", API_JOBS_PREFIX, true, api_job_put, api, 0, 0 },
	};
	size_t n = ingest_routes_get(in, limits ? limits->ingest_max_body : 0,
				     limits ? limits->ksyms_max_body : 0, out);

	for (size_t i = 0; i < QUERY_ROUTE_COUNT; i++) {
		if (strcmp(query_routes[i].method, "GET") != 0)
			continue;
		out[n] = query_routes[i];
		out[n++].ctx = api;
	}
	/* The web UI (no token: its files hold no data; the page sends the token to the API). */
	out[n++] = (struct http_route){ "GET", "/", false, http_static_redirect, NULL, 0, 0 };
	out[n++] = (struct http_route){ "GET", "/ui", false, http_static_redirect, NULL, 0, 0 };
	out[n++] = (struct http_route){ "GET", HTTP_STATIC_PREFIX, true, http_static_get, api->ui, 0, 0 };
	memcpy(&out[n], job_fallbacks, sizeof(job_fallbacks));
	n += sizeof(job_fallbacks) / sizeof(job_fallbacks[0]);
	if (symbols) {
		memcpy(&out[n], symbols_routes, sizeof(symbols_routes));
		n += sizeof(symbols_routes) / sizeof(symbols_routes[0]);
	}
	return n;
}
