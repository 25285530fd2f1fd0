/* SPDX-License-Identifier: Apache-2.0 */
/* GET /api/v1/jobs/{job}/trace: the job's NCCL calls per rank as Chrome trace event JSON. */
#include <errno.h>
#include <stdio.h>

#include "server/api/api_internal.h"
#include "server/query/export.h"
#include "server/query/limits.h"
#include "server/query/params.h"

static int trace_call(void *arg, const struct store_collective_call *c)
{
	/* -ENOSPC once full: stops the listing; the document says it is truncated. */
	return query_trace_add(arg, c);
}

/* The job's processes, so each is named by its rank in the job (a call's rank is the one in
 * its communicator). */
static int trace_rank(void *arg, const struct store_job_rank *r)
{
	return query_trace_process_add(arg, r->node_id, r->pid, r->rank, r->hostname);
}

void api__job_trace(struct api *api, const char *job, const struct http_request *req,
		    struct http_response *resp)
{
	struct store_collective_filter f = { .job = job };
	struct query_trace *t = NULL;
	struct query_filter q;
	uint32_t limit = QUERY_TRACE_DEFAULT_EVENTS;
	bool has_limit;
	int rc;

	if (!query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_comm_key(req, &f.has_comm, &f.comm, resp) ||
	    !query_param_uint(req, "limit", 1, QUERY_TRACE_MAX_EVENTS, &limit, &has_limit, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'job' do not apply here");
		return;
	}
	f.from_ns = q.f.from_ms > INT64_MAX / 1000000 ? INT64_MAX : q.f.from_ms * 1000000;
	f.to_ns = q.f.to_ms > INT64_MAX / 1000000 - 1 ? INT64_MAX : q.f.to_ms * 1000000 + 999999;
	if ((rc = query_trace_new(job, f.from_ns, q.f.to_ms * 1000000, limit, &t)))
		goto cleanup;
	if ((rc = store_job_ranks_list(api->store, job, QUERY_MAX_JOB_ROWS, trace_rank, t)))
		goto cleanup;
	/* Every instance has at least one call: limit + 1 instances cover limit + 1 calls. */
	rc = store_collectives_list(api->store, &f, limit + 1, trace_call, t);
	if (rc == -ENOSPC)
		rc = 0;
	if (rc)
		goto cleanup;
	resp->status = 200;
	snprintf(resp->content_type, sizeof(resp->content_type), "application/json");
	resp->body.len = 0;
	rc = query_trace_finish(t, &resp->body);
cleanup:
	if (rc)
		api__store_error(resp, rc);
	query_trace_free(t);
}
