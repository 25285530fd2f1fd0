/* SPDX-License-Identifier: Apache-2.0 */
/* Query API handlers (nodes, processes, flame graphs, health, metrics) and the route table. */
#ifndef SYSOM_SERVER_API_API_H
#define SYSOM_SERVER_API_API_H

#include <stddef.h>
#include <stdint.h>

#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/ingest/ingest.h"
#include "server/api/metrics.h"
#include "server/store/store.h"
#include "server/symbols/symbolize.h"
#include "server/symbols/symbols.h"
#include "server/symbols/upstream.h"

#define API_DEFAULT_RANGE_MS (3600 * 1000)  /* from/to default: the last hour */
#define API_DEFAULT_STACK_LIMIT 10000
#define API_MAX_STACK_LIMIT 100000
#define API_DEFAULT_PROCESS_LIMIT 10000
#define API_MAX_PROCESS_LIMIT 100000
#define API_DEFAULT_JOB_LIMIT 1000
#define API_MAX_JOB_LIMIT 100000
#define API_MAX_JOB_ID 1024             /* bytes of a job id in a path */
#define API_MAX_JOB_ROWS 100000         /* ranks, and (process, communicator) rows, per job */
#define API_DEFAULT_COLLECTIVE_LIMIT 1000
#define API_MAX_COLLECTIVE_LIMIT 10000
#define API_MAX_COLLECTIVE_CALLS 200000 /* per-rank calls in one collectives answer */
#define API_MAX_STRAGGLER_INSTANCES 20000 /* latest instances read per stragglers answer */
#define API_MAX_STRAGGLER_CELLS (1u << 23) /* window x ranks lateness values over all groups */
#define API_STRAGGLER_TOP_RANKS 16       /* ranks listed per group (most excess first) */
#define API_MAX_GPU_ROWS 500000        /* stored rows of each GPU kind read by one gpu answer */
#define API_JOBS_PREFIX "/api/v1/jobs/"
#define API_DEFAULT_DIAGNOSIS_LIMIT 100
#define API_MAX_DIAGNOSIS_LIMIT 10000
#define API_MAX_SETTINGS_BODY 4096      /* PUT /api/v1/jobs/{job}/settings */

struct alerts;
struct monitor;

struct api_options {
	/* Current time in ms since the Unix epoch (NULL: the real clock); tests pin it. */
	int64_t (*now_ms)(void);
	struct alerts *alerts;     /* optional (borrowed): GET /api/v1/alerts, alert metrics */
	struct monitor *monitor;   /* optional (borrowed): analysis metrics */
	struct symbols *symbols;   /* optional (borrowed): repository gauges in /metrics */
	struct upstream *upstream; /* optional (borrowed): upstream fetch counters in /metrics */
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

/*
 * Parses a time parameter: Unix seconds ("1700000000", "1700000000.25"), RFC 3339
 * ("2026-11-22T10:00:00Z", "2026-11-22T12:00:00.5+02:00"), "now", or a time relative to now
 * ("-30s", "-5m", "-1h", "-2d", "-500ms"). Writes ms since the Unix epoch to *out_ms.
 * Returns 0 or -EINVAL.
 */
int api_time_parse(const char *text, int64_t now_ms, int64_t *out_ms);

/* The symbolised CPU profile of the samples matching `f` as folded "stack count" lines
 * (at most `limit` stacks), appended to `out`. 0 or a negative errno. */
int api_folded(struct api *api, const struct store_sample_filter *f, uint32_t limit,
	       struct byte_buf *out);

/*
 * The CPU profiles of job ranks `a` and `b` (range: job, from, to) as folded "stack count_a
 * count_b" lines in byte order, appended to `out`. 0 or a negative errno.
 */
int api_diff_folded(struct api *api, const struct store_sample_filter *range, int32_t a, int32_t b,
		    uint32_t limit, struct byte_buf *out);

struct diagnosis_ctx;
/* What the analysis needs from the API layer (the store and symbolised profiles). */
void api_diagnosis_ctx(struct api *api, struct diagnosis_ctx *ctx);

/* GET /api/v1/nodes (ctx: struct api). */
void api_nodes_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/processes?node=&pid=&comm=&from=&to=&limit= */
void api_processes_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/flamegraph?node=&pid=&comm=&job=&from=&to=&format=folded|json&kind=cpu|gpu-launch&limit= */
void api_flamegraph_diff_get(void *ctx, const struct http_request *req, struct http_response *resp);
void api_flamegraph_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/jobs?limit= */
void api_jobs_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/jobs/{job} and /api/v1/jobs/{job}/collectives?comm=&op=&from=&to=&limit= */
void api_job_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* PUT /api/v1/jobs/{job}/settings, POST /api/v1/jobs/{job}/baseline */
void api_job_put(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/diagnoses?job=&from=&to=&status=&limit= and /api/v1/diagnoses/{id}?format= */
void api_diagnoses_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /api/v1/alerts?job= */
void api_alerts_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /healthz: 200 when the store answers, else 503. No authentication. */
void api_healthz_get(void *ctx, const struct http_request *req, struct http_response *resp);
/* GET /metrics: Prometheus text format 0.0.4. No authentication. */
void api_metrics_get(void *ctx, const struct http_request *req, struct http_response *resp);

/* Body limits of the routes that take a body (0: the defaults in ingest.h and symbols.h). */
struct api_route_limits {
	size_t ingest_max_body;   /* compressed batch */
	size_t ksyms_max_body;    /* compressed symbol table */
	size_t symbols_max_chunk; /* one chunk of a symbol file upload */
};

#define API_ROUTE_COUNT 20

/*
 * Fills `out` with the server's routes (ingest, kernel symbols, queries, health, metrics and,
 * with `symbols`, the symbol repository's upload API and debuginfod read side) and returns
 * how many (at most API_ROUTE_COUNT). The routes borrow `api`, `in` and `symbols`.
 */
size_t api_routes_build(struct api *api, struct ingest *in, struct symbols *symbols,
			const struct api_route_limits *limits, struct http_route out[API_ROUTE_COUNT]);

#endif
