/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of the API module share: the context and the helpers every view uses. */
#ifndef SYSOM_SERVER_API_API_INTERNAL_H
#define SYSOM_SERVER_API_API_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "server/api/api.h"
#include "server/query/profile.h"

struct api {
	struct store *store;
	struct symbolizer *sym;
	struct query_profiles profiles; /* the store and symbolizer above */
	struct auth *auth;
	struct server_metrics *metrics;
	struct symbols *symbols;
	struct upstream *upstream;
	int64_t (*now_ms)(void);
	_Atomic(struct http_server *) http;
	struct alerts *alerts;
	struct monitor *monitor;
	struct http_static *ui;
	struct cluster *cluster;
};

/*
 * True when the request's credential has one of `scopes` (enum auth_scope; admin always
 * qualifies); otherwise answers 401 (no valid token) or 403 (scope) and returns false.
 */
bool api__authorized(struct api *api, const struct http_request *req, unsigned scopes,
		     struct http_response *resp);

/* The scope a request under the query API needs by its method: read for GET and HEAD, admin
 * for the writes (PUT settings, POST baseline). */
unsigned api__method_scopes(const struct http_request *req);

/* Answers a storage error `rc` (negative errno): 503 when busy or out of memory, else 500. */
void api__store_error(struct http_response *resp, int rc);
/* One GPU health window as JSON (view_gpu_health.c), or NULL without memory. */
json_t *api__gpu_health_json(const struct store_gpu_health *g);

/* "0x<hex>" of v as a JSON string; NULL when out of memory. */
json_t *api__json_hex_u64(uint64_t v);

/* v as a JSON integer, or null when negative (unknown); NULL when out of memory. */
json_t *api__json_int_or_null(int64_t v);

/* A process's identity as the JSON object docs/http-api.md describes, or null when unknown. */
struct store_identity;
json_t *api__json_identity(const struct store_identity *id);

/* Appends the plain-text report of diagnosis `d` (text.c). */
void api__diagnosis_text(const struct store_diagnosis *d, struct byte_buf *out);

/*
 * The views under /api/v1/jobs/{job}: `job` is the decoded id from the path (at most
 * API_MAX_JOB_ID bytes); the route (routes.c) has checked the credential
 * (read for GET, admin for PUT and POST).
 */
typedef void (*api__job_view_fn)(struct api *api, const char *job, const struct http_request *req,
				 struct http_response *resp);
void api__job_detail(struct api *api, const char *job, const struct http_request *req,
		     struct http_response *resp);
void api__job_collectives(struct api *api, const char *job, const struct http_request *req,
			  struct http_response *resp);
void api__job_gpu(struct api *api, const char *job, const struct http_request *req,
		  struct http_response *resp);
void api__job_stragglers(struct api *api, const char *job, const struct http_request *req,
			 struct http_response *resp);
void api__job_hosts(struct api *api, const char *job, const struct http_request *req,
		    struct http_response *resp);
void api__job_patterns(struct api *api, const char *job, const struct http_request *req,
		       struct http_response *resp);
void api__job_waterline(struct api *api, const char *job, const struct http_request *req,
			struct http_response *resp);
void api__job_settings_get(struct api *api, const char *job, const struct http_request *req,
			   struct http_response *resp);
void api__job_settings_put(struct api *api, const char *job, const struct http_request *req,
			   struct http_response *resp);
void api__job_baseline(struct api *api, const char *job, const struct http_request *req,
		       struct http_response *resp);
void api__job_trace(struct api *api, const char *job, const struct http_request *req,
		    struct http_response *resp);

#endif
