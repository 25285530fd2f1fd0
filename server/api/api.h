/* SPDX-License-Identifier: Apache-2.0 */
/* The query API: its context, the views' HTTP handlers and the server's route table. */
#ifndef SYSOM_SERVER_API_API_H
#define SYSOM_SERVER_API_API_H

#include <stddef.h>
#include <stdint.h>

#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/metrics/metrics.h"
#include "server/store/store.h"
#include "server/symbols/symbolize.h"

/* Defaults and bounds of the views' own parameters (what the store reads: query/limits.h). */
#define API_MAX_STACK_LIMIT 100000
#define API_DEFAULT_PROCESS_LIMIT 10000
#define API_MAX_PROCESS_LIMIT 100000
#define API_DEFAULT_JOB_LIMIT 1000
#define API_MAX_JOB_LIMIT 100000
#define API_MAX_JOB_ID 1024             /* bytes of a job id in a path */
#define API_DEFAULT_COLLECTIVE_LIMIT 1000
#define API_MAX_COLLECTIVE_LIMIT 10000
#define API_MAX_COLLECTIVE_CALLS 200000 /* per-rank calls in one collectives answer */
#define API_JOBS_PREFIX "/api/v1/jobs/"
#define API_DEFAULT_DIAGNOSIS_LIMIT 100
#define API_MAX_DIAGNOSIS_LIMIT 10000
#define API_MAX_SETTINGS_BODY 4096      /* PUT /api/v1/jobs/{job}/settings */

struct alerts;
struct ingest;
struct monitor;
struct symbols;
struct upstream;
struct http_static;

struct api_options {
	/* Current time in ms since the Unix epoch (NULL: the real clock); tests pin it. */
	int64_t (*now_ms)(void);
	struct alerts *alerts;     /* optional (borrowed): GET /api/v1/alerts, alert metrics */
	struct monitor *monitor;   /* optional (borrowed): analysis metrics */
	struct symbols *symbols;   /* optional (borrowed): repository gauges in /metrics */
	struct upstream *upstream; /* optional (borrowed): upstream fetch counters in /metrics */
	struct http_static *ui;    /* optional (borrowed): the web UI's files under /ui/ (NULL:
				      /ui/ answers 404 saying the UI is not installed) */
	struct cluster *cluster;   /* optional (borrowed): the replicas (GET /api/v1/cluster) */
};

struct api;

/*
 * Creates the query handlers' context over borrowed objects that must outlive it; `opts` may
 * be NULL. Returns NULL when out of memory.
 */
struct api *api_new(struct store *store, struct symbolizer *sym, struct auth *auth,
		    struct server_metrics *metrics, const struct api_options *opts);

/* Frees it; accepts NULL. */
void api_free(struct api *api);

/*
 * Lets /metrics include the transport's counters (NULL: none). Call after http_server_start
 * and with NULL before the server is freed. Thread-safe.
 */
void api_http_server_set(struct api *api, struct http_server *srv);

/* query_time_parse (server/query/params.h), for the API's callers. */
int api_time_parse(const char *text, int64_t now_ms, int64_t *out_ms);

struct diagnosis_ctx;
/* What the analysis reads through the API's context: the store and the symbolised profiles
 * of server/query/profile.h. */
void api_diagnosis_ctx(struct api *api, struct diagnosis_ctx *ctx);

/* GET /api/v1/nodes (ctx: struct api). */
void api_nodes_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/nodes/{node}/gpus: the node's GPU health windows (from, to, limit). */
void api_node_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/processes?node=&pid=&comm=&from=&to=&limit= */
void api_processes_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/flamegraph?node=&pid=&comm=&job=&from=&to=&format=folded|json&kind=cpu|gpu-launch&limit= */
void api_flamegraph_diff_get(void *ctx, const struct http_request *req, struct http_response *resp);
void api_flamegraph_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/jobs?limit= */
void api_jobs_get(void *ctx, const struct http_request *req, struct http_response *resp);
/*
 * Any request under /api/v1/jobs/{job}: dispatched through the route table (routes.c) to the
 * view of its method and path; 401 without a valid token, 403 for a credential without the
 * scope (read for GET, admin for PUT and POST), 404 for an unknown resource, 405 for a
 * known one with another method. The server routes PUT and POST there (GET routes are in the
 * table one by one).
 */
void api_job_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* The same as api_job_get (PUT /api/v1/jobs/{job}/settings, POST /api/v1/jobs/{job}/baseline). */
void api_job_put(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/diagnoses?job=&from=&to=&status=&limit= and /api/v1/diagnoses/{id}?format= */
void api_diagnoses_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/alerts?job= */
void api_alerts_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/cluster?job=: the live replicas, this one, forwarding, and job's owner. */
void api_cluster_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /healthz: 200 when the store answers, else 503. No authentication. */
void api_healthz_get(void *ctx, const struct http_request *req, struct http_response *resp);
/*
 * GET /metrics: Prometheus text format 0.0.4. No token needed; the series per node (agent
 * counters) and per job come only with a read or admin credential or without authentication
 * configured, otherwise the agent counters are summed over nodes. A presented token that is
 * not valid gets 401.
 */
void api_metrics_get(void *ctx, const struct http_request *req, struct http_response *resp);

/* Body limits of the routes that take a body (0: the defaults in ingest.h and symbols.h). */
struct api_route_limits {
	size_t ingest_max_body;   /* compressed batch */
	size_t ksyms_max_body;    /* compressed symbol table */
	size_t symbols_max_chunk; /* one chunk of a symbol file upload */
};

/* 4 ingest (with the cluster feed) + 22 query GET (with /cluster) + 3 web UI (/, /ui, /ui/...)
 * + 3 under jobs + 4 symbol repository */
#define API_ROUTE_COUNT 36

/*
 * Fills `out` with the server's routes, in matching order: the agent-facing ones of `in`
 * (ingest_routes_get), the query routes of the API's table, health, metrics, the web UI's
 * static files (server/http/static.h) and, with
 * `symbols`, the symbol repository's upload API and debuginfod read side (the last four).
 * Returns how many (at most API_ROUTE_COUNT). The routes borrow `api`, `in` and `symbols`.
 */
size_t api_routes_build(struct api *api, struct ingest *in, struct symbols *symbols,
			const struct api_route_limits *limits, struct http_route out[API_ROUTE_COUNT]);

#endif
