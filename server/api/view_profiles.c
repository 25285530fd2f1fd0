/* SPDX-License-Identifier: Apache-2.0 */
/* Views of profiles: GET /api/v1/flamegraph (folded or JSON) and /api/v1/flamegraph/diff. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/query/export.h"
#include "server/query/limits.h"
#include "server/query/params.h"
#include "server/query/profile.h"

static int json_emit(void *arg, const struct symbolized_frame *f, bool kernel_part)
{
	static const char *const kinds[] = { [SYMBOLIZED_USER] = "user",
					     [SYMBOLIZED_KERNEL] = "kernel",
					     [SYMBOLIZED_ERROR] = "error",
					     [SYMBOLIZED_GPU] = "gpu",
					     [SYMBOLIZED_PYTHON] = "python" };
	json_t *frames = arg;
	json_t *obj;

	(void)kernel_part;
	obj = json_pack("{s:o,s:s}", "name", render_json_string(f->name), "kind", kinds[f->kind]);
	if (obj && f->kind != SYMBOLIZED_ERROR && f->kind != SYMBOLIZED_GPU) {
		json_object_set_new(obj, "object", render_json_string(f->object));
		json_object_set_new(obj, "build_id", json_string(f->build_id));
		json_object_set_new(obj, "offset", api__json_hex_u64(f->offset));
		if (f->has_symbol_offset)
			json_object_set_new(obj, "symbol_offset", api__json_hex_u64(f->symbol_offset));
		if (f->inlined)
			json_object_set_new(obj, "inlined", json_true());
		if (f->jit)
			json_object_set_new(obj, "jit", json_true());
		if (f->file)
			json_object_set_new(obj, "file", render_json_string(f->file));
		if (f->file && f->line)
			json_object_set_new(obj, "line", json_integer((json_int_t)f->line));
	}
	return obj && !json_array_append_new(frames, obj) ? 0 : -ENOMEM;
}

static int json_render(const struct query_profile *fl, const struct query_filter *q,
		       enum query_profile_kind kind, json_t **out)
{
	static const char *const units[] = { [QUERY_PROFILE_CPU] = "samples",
					     [QUERY_PROFILE_GPU_LAUNCH] = "launches",
					     [QUERY_PROFILE_GPU_TIME] = "ns",
					     [QUERY_PROFILE_OFFCPU] = "us",
					     [QUERY_PROFILE_WALL] = "us" };
	json_t *stacks = json_array();
	uint64_t shown = 0, total;
	int rc = 0;

	if (!stacks)
		return -ENOMEM;
	for (size_t i = 0; i < query_profile_stack_count(fl); i++) {
		struct query_profile_stack g;

		query_profile_stack_get(fl, i, &g);
		json_t *frames = json_array();
		json_t *process = json_pack("{s:o,s:o,s:I}", "comm", render_json_string(g.comm), "pid",
					    g.pid >= 0 ? json_integer(g.pid) : json_null(),
					    "processes", (json_int_t)g.processes);
		json_t *stack = json_pack("{s:I,s:o,s:o}", "count", (json_int_t)g.count, "process",
					  process, "frames", frames);

		if (!stack || json_array_append_new(stacks, stack)) {
			rc = -ENOMEM;
			goto cleanup;
		}
		if ((rc = query_profile_frames(fl, i, json_emit, frames)))
			goto cleanup;
		shown += g.count;
	}
	total = query_profile_total(fl);
	*out = json_pack("{s:I,s:s,s:o,s:o,s:b,s:O}", "total",
			 (json_int_t)(total > INT64_MAX ? INT64_MAX : total), "unit",
			 units[kind], "from",
			 render_json_time(q->f.from_ms * 1000000), "to",
			 render_json_time(q->f.to_ms * 1000000), "truncated", shown < total,
			 "stacks", stacks);
	if (!*out)
		rc = -ENOMEM;
cleanup:
	json_decref(stacks);
	return rc;
}

/* The sampling rate shared by the nodes a filter names (every node without one); 0 when
 * they differ or none is known. */
struct rate_scan {
	const char *node; /* node id or hostname, or NULL */
	uint32_t hz;
	bool mixed;
};

static int rate_visit(void *arg, const struct store_node *n)
{
	struct rate_scan *r = arg;

	if (r->node && strcmp(r->node, n->node_id) != 0 && strcmp(r->node, n->hostname ? n->hostname : "") != 0)
		return 0;
	if (r->hz && r->hz != n->sample_hz)
		r->mixed = true;
	r->hz = n->sample_hz;
	return 0;
}

/* Encodes `fl` as pprof or speedscope into the response. */
static int export_render(struct api *api, const struct query_profile *fl, const struct query_filter *q,
			 enum query_profile_kind kind, bool pprof, struct http_response *resp)
{
	struct query_export_info info = { .kind = kind, .from_ns = q->f.from_ms * 1000000,
					   .to_ns = q->f.to_ms * 1000000 };
	struct rate_scan scan = { .node = q->f.node };
	int rc;

	if (kind == QUERY_PROFILE_CPU) {
		if ((rc = store_nodes_list(api->store, rate_visit, &scan)))
			return rc;
		info.sample_hz = scan.mixed ? 0 : scan.hz;
	}
	resp->status = 200;
	resp->body.len = 0;
	if (pprof) {
		if ((rc = query_pprof_encode(fl, &info, &resp->body)))
			return rc;
		snprintf(resp->content_type, sizeof(resp->content_type), "application/octet-stream");
		http_response_header(resp, "Content-Disposition", "attachment; filename=\"profile.pb.gz\"");
		return 0;
	}
	snprintf(resp->content_type, sizeof(resp->content_type), "application/json");
	return query_speedscope_render(fl, &info, &resp->body);
}

void api_flamegraph_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct query_profile *fl = NULL;
	struct query_filter q;
	char format[16] = "folded", kind[16] = "cpu";
	uint32_t limit = QUERY_DEFAULT_STACK_LIMIT, rank = 0;
	bool has_limit, has_format, has_kind, has_rank, json, pprof, speedscope;
	enum query_profile_kind fk;
	json_t *doc = NULL;
	int rc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp) || !query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_STACK_LIMIT, &limit, &has_limit, resp) ||
	    !query_param(req, "format", format, sizeof(format), &has_format, resp) ||
	    !query_param_uint(req, "rank", 0, INT32_MAX, &rank, &has_rank, resp))
		return;
	if (has_rank && !q.f.job) {
		http_response_error(resp, 400, "parameter 'rank' needs 'job'");
		return;
	}
	q.f.has_rank = has_rank;
	q.f.rank = (int32_t)rank;
	json = strcmp(format, "json") == 0;
	pprof = strcmp(format, "pprof") == 0;
	speedscope = strcmp(format, "speedscope") == 0;
	if (!json && !pprof && !speedscope && strcmp(format, "folded") != 0) {
		http_response_error(resp, 400,
				    "parameter 'format' must be folded, json, pprof or speedscope");
		return;
	}
	if (!query_param(req, "kind", kind, sizeof(kind), &has_kind, resp))
		return;
	if (strcmp(kind, "cpu") == 0) {
		fk = QUERY_PROFILE_CPU;
	} else if (strcmp(kind, "gpu-launch") == 0) {
		fk = QUERY_PROFILE_GPU_LAUNCH;
	} else if (strcmp(kind, "gpu-time") == 0) {
		fk = QUERY_PROFILE_GPU_TIME;
	} else if (strcmp(kind, "off-cpu") == 0) {
		fk = QUERY_PROFILE_OFFCPU;
	} else if (strcmp(kind, "wall") == 0) {
		fk = QUERY_PROFILE_WALL;
	} else {
		http_response_error(resp, 400, "parameter 'kind' must be cpu, gpu-launch, gpu-time, "
					       "off-cpu or wall");
		return;
	}
	/* Wall-clock time adds up per thread group: several processes' would exceed the range. */
	if (fk == QUERY_PROFILE_WALL && !q.f.has_pid && !(q.f.job && q.f.has_rank)) {
		http_response_error(resp, 400, "kind=wall needs one process: 'pid', or 'job' and "
					       "'rank'");
		return;
	}
	if ((rc = query_profile_build(&api->profiles, &q.f, limit, fk, &fl)))
		goto cleanup;
	if (pprof || speedscope) {
		rc = export_render(api, fl, &q, fk, pprof, resp);
	} else if (json) {
		if ((rc = json_render(fl, &q, fk, &doc)))
			goto cleanup;
		render_json_respond(resp, 200, doc);
	} else {
		resp->status = 200;
		snprintf(resp->content_type, sizeof(resp->content_type), "text/plain; charset=utf-8");
		resp->body.len = 0;
		rc = query_profile_folded(fl, &resp->body);
	}
cleanup:
	if (rc)
		api__store_error(resp, rc);
	query_profile_free(fl);
}
/*
 * GET /api/v1/flamegraph/diff?job=J&a=RANK&b=RANK&from=&to=&limit=: the CPU profiles of two
 * ranks of a job as one folded file "stack count_a count_b" (the input of difffolded-style
 * differential flame graphs), stacks in byte order.
 */
void api_flamegraph_diff_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct query_filter q;
	uint32_t ranks[2], limit = QUERY_DEFAULT_STACK_LIMIT;
	bool has[2], has_limit;
	int rc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp) || !query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_uint(req, "a", 0, INT32_MAX, &ranks[0], &has[0], resp) ||
	    !query_param_uint(req, "b", 0, INT32_MAX, &ranks[1], &has[1], resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_STACK_LIMIT, &limit, &has_limit, resp))
		return;
	if (!q.f.job || !has[0] || !has[1]) {
		http_response_error(resp, 400, "parameters 'job', 'a' and 'b' (two ranks) are required");
		return;
	}
	resp->status = 200;
	snprintf(resp->content_type, sizeof(resp->content_type), "text/plain; charset=utf-8");
	resp->body.len = 0;
	if ((rc = query_diff_folded(&api->profiles, &q.f, (int32_t)ranks[0], (int32_t)ranks[1], limit, &resp->body)))
		api__store_error(resp, rc);
}
