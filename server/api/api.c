/* SPDX-License-Identifier: Apache-2.0 */
/* The API's context, the helpers its views share, and what it hands the analysis. */
#include "server/api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "server/analysis/diagnosis.h"
#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/store/store.h"
#include "server/query/params.h"

struct api *api_new(struct store *store, struct symbolizer *sym, struct auth *auth,
		    struct server_metrics *metrics, const struct api_options *opts)
{
	struct api *api = calloc(1, sizeof(*api));

	if (!api)
		return NULL;
	api->store = store;
	api->sym = sym;
	api->profiles = (struct query_profiles){ store, sym };
	api->auth = auth;
	api->metrics = metrics;
	api->now_ms = opts && opts->now_ms ? opts->now_ms : sysom_realtime_ms;
	api->symbols = opts ? opts->symbols : NULL;
	api->upstream = opts ? opts->upstream : NULL;
	api->alerts = opts ? opts->alerts : NULL;
	api->monitor = opts ? opts->monitor : NULL;
	api->ui = opts ? opts->ui : NULL;
	api->cluster = opts ? opts->cluster : NULL;
	atomic_init(&api->http, NULL);
	return api;
}

void api_free(struct api *api)
{
	free(api);
}

void api_http_server_set(struct api *api, struct http_server *srv)
{
	atomic_store(&api->http, srv);
}

int api_time_parse(const char *text, int64_t now_ms, int64_t *out_ms)
{
	return query_time_parse(text, now_ms, out_ms);
}

bool api__authorized(struct api *api, const struct http_request *req, unsigned scopes,
		     struct http_response *resp)
{
	return auth_request_allow(api->auth, req, scopes, resp);
}

unsigned api__method_scopes(const struct http_request *req)
{
	return strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0
		       ? AUTH_SCOPE_READ
		       : AUTH_SCOPE_ADMIN;
}

void api__store_error(struct http_response *resp, int rc)
{
	int status = rc == -EBUSY || rc == -ENOMEM ? 503 : 500;

	/* A backend without this query yet (ClickHouse): say so, never an empty answer. */
	if (rc == -ENOTSUP) {
		http_response_error(resp, 501, "this query is not implemented on the configured"
				    " store (ClickHouse) yet; SQLite has it");
		return;
	}
	http_response_error(resp, status, "storage error: %s", sysom_strerror(rc));
	if (rc == -EBUSY)
		http_response_header(resp, "Retry-After", "5");
}

json_t *api__json_hex_u64(uint64_t v)
{
	char text[24];

	snprintf(text, sizeof(text), "0x%" PRIx64, v);
	return json_string(text);
}

json_t *api__json_identity(const struct store_identity *id)
{
	if (!id->known)
		return json_null();
	return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "runtime",
			 render_json_string(id->runtime), "container_id",
			 render_json_string(id->container_id), "container",
			 render_json_string(id->container_name), "pod_uid",
			 render_json_string(id->pod_uid), "namespace",
			 render_json_string(id->pod_namespace), "pod",
			 render_json_string(id->pod_name), "slurm_job",
			 id->slurm_job ? json_integer((json_int_t)id->slurm_job) : json_null(),
			 "slurm_step", render_json_string(id->slurm_step), "unit",
			 render_json_string(id->unit));
}

json_t *api__json_int_or_null(int64_t v)
{
	return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

/* The diagnosis context's callbacks: the query module's profiles (arg: struct query_profiles). */
static int folded_cb(void *arg, const struct store_sample_filter *f, uint32_t limit,
		     struct byte_buf *out)
{
	return query_folded(arg, f, limit, QUERY_PROFILE_CPU, out);
}

/* GPU kernel time by launching stack as folded lines (the gpu-time flame graph's). */
static int gpu_time_folded_cb(void *arg, const struct store_sample_filter *f, uint32_t limit,
			      struct byte_buf *out)
{
	return query_folded(arg, f, limit, QUERY_PROFILE_GPU_TIME, out);
}

/* Blocked (off-CPU) time by stack, microseconds: the hang report's "where it waits". */
static int offcpu_folded_cb(void *arg, const struct store_sample_filter *f, uint32_t limit,
			    struct byte_buf *out)
{
	return query_folded(arg, f, limit, QUERY_PROFILE_OFFCPU, out);
}

void api_diagnosis_ctx(struct api *api, struct diagnosis_ctx *ctx)
{
	*ctx = (struct diagnosis_ctx){ .store = api->store, .profiles_arg = &api->profiles,
				       .folded = folded_cb, .gpu_time_folded = gpu_time_folded_cb,
				       .offcpu_folded = offcpu_folded_cb };
}
