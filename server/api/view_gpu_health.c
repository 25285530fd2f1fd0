/* SPDX-License-Identifier: Apache-2.0 */
/* GPU health of a node: GET /api/v1/nodes/{node}/gpus (wire 1.6 GPU_HEALTH windows). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/query/params.h"

#define API_NODES_PREFIX "/api/v1/nodes/"
#define API_MAX_GPU_WINDOWS 100000 /* rows answered at most */
#define API_DEFAULT_GPU_WINDOWS 1000

static json_t *u32_or_null(uint32_t v)
{
	return v == SYSOM_GPU_UNKNOWN ? json_null() : json_integer((json_int_t)v);
}

static json_t *u64_or_null(uint64_t v)
{
	return v == SYSOM_GPU_UNKNOWN64 || v > INT64_MAX ? json_null() : json_integer((json_int_t)v);
}

json_t *api__gpu_health_json(const struct store_gpu_health *g)
{
	const struct sysom_gpu_health *h = &g->h;
	char reasons[256] = "";
	json_t *o;

	if (h->reasons_any != SYSOM_GPU_UNKNOWN64)
		sysom_gpu_reasons_format(h->reasons_any, reasons, sizeof(reasons));
	o = json_pack("{s:s,s:o,s:o,s:o,s:I,s:o,s:o,s:o,s:I,s:I,s:o,s:o,s:s}", "node_id", g->node_id,
		      "hostname", render_json_string(g->hostname), "window_start",
		      render_json_time(g->window_start_ns), "window_end",
		      render_json_time(g->window_end_ns), "device", (json_int_t)h->device, "uuid",
		      render_json_string(g->uuid), "pci_bus_id", render_json_string(g->pci_bus_id),
		      "name", render_json_string(g->name), "samples", (json_int_t)h->samples,
		      "slowdown_samples", (json_int_t)h->slowdown_samples, "reasons_any",
		      u64_or_null(h->reasons_any), "reasons_last", u64_or_null(h->reasons_last),
		      "reasons", reasons);
	if (!o)
		return NULL;
	struct {
		const char *key;
		json_t *v;
	} f[] = {
		{ "sm_clock_min_mhz", u32_or_null(h->sm_clock_min) },
		{ "sm_clock_last_mhz", u32_or_null(h->sm_clock_last) },
		{ "sm_clock_max_mhz", u32_or_null(h->sm_clock_max) },
		{ "mem_clock_last_mhz", u32_or_null(h->mem_clock_last) },
		{ "mem_clock_max_mhz", u32_or_null(h->mem_clock_max) },
		{ "temp_max_c", u32_or_null(h->temp_max) },
		{ "temp_last_c", u32_or_null(h->temp_last) },
		{ "temp_slowdown_c", u32_or_null(h->temp_slowdown) },
		{ "temp_shutdown_c", u32_or_null(h->temp_shutdown) },
		{ "power_max_mw", u32_or_null(h->power_max_mw) },
		{ "power_last_mw", u32_or_null(h->power_last_mw) },
		{ "power_limit_mw", u32_or_null(h->power_limit_mw) },
		{ "util_gpu_pct", u32_or_null(h->util_gpu) },
		{ "util_mem_pct", u32_or_null(h->util_mem) },
		{ "ecc_volatile_corrected", u64_or_null(h->ecc_corrected) },
		{ "ecc_volatile_uncorrected", u64_or_null(h->ecc_uncorrected) },
		{ h->flags & SYSOM_GPU_REMAPPED_ROWS ? "remapped_rows_correctable" : "retired_pages_sbe",
		  u32_or_null(h->retired_sbe) },
		{ h->flags & SYSOM_GPU_REMAPPED_ROWS ? "remapped_rows_uncorrectable"
						     : "retired_pages_dbe",
		  u32_or_null(h->retired_dbe) },
		{ "retire_pending", json_boolean(h->flags & SYSOM_GPU_RETIRE_PENDING) },
		{ "remap_failed", json_boolean(h->flags & SYSOM_GPU_REMAP_FAILED) },
		{ "pcie_replays", u32_or_null(h->pcie_replays) },
		{ "nvlink_errors", u64_or_null(h->nvlink_errors) },
		{ "xid_count", json_integer((json_int_t)h->xid_count) },
		{ "xid_last", json_integer((json_int_t)h->xid_last) },
	};
	int bad = 0;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		bad |= json_object_set_new(o, f[i].key, f[i].v);
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int gpu_to_json(void *arg, const struct store_gpu_health *g)
{
	json_t *o = api__gpu_health_json(g);

	return o && !json_array_append_new(arg, o) ? 0 : -ENOMEM;
}

void api_node_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	const char *rest = req->path + strlen(API_NODES_PREFIX);
	size_t len = strcspn(rest, "/");
	char node[QUERY_PARAM_MAX];
	struct query_filter q;
	uint32_t limit = API_DEFAULT_GPU_WINDOWS;
	bool has_limit;
	json_t *list;
	int rc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp))
		return;
	if (strncmp(req->path, API_NODES_PREFIX, strlen(API_NODES_PREFIX)) || len == 0) {
		http_response_error(resp, 404, "missing node");
		return;
	}
	if (len >= sizeof(node)) {
		http_response_error(resp, 400, "node longer than %zu bytes", sizeof(node) - 1);
		return;
	}
	if (strcmp(rest + len, "/gpus")) {
		http_response_error(resp, 404, "no such resource under node '%.*s'", (int)len, rest);
		return;
	}
	memcpy(node, rest, len);
	node[len] = '\0';
	if (!query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_GPU_WINDOWS, &limit, &has_limit, resp))
		return;
	if (!(list = json_array())) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_gpu_health_list(api->store, node, q.f.from_ms, q.f.to_ms, limit, gpu_to_json,
					list))) {
		json_decref(list);
		api__store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200,
			    json_pack("{s:s,s:o,s:o,s:o}", "node", node, "from",
				      render_json_time(q.f.from_ms * 1000000), "to",
				      render_json_time(q.f.to_ms * 1000000), "gpus", list));
}
