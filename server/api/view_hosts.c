/* SPDX-License-Identifier: Apache-2.0 */
/* GET /api/v1/jobs/{job}/hosts: every node's host anomaly score (server/analysis/hostanomaly.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/analysis/hostanomaly.h"
#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/query/params.h"

void api__job_hosts(struct api *api, const char *job, const struct http_request *req,
		    struct http_response *resp)
{
	struct hostanomaly h;
	struct query_filter q;
	int64_t now = api->now_ms();
	json_t *doc = NULL, *nodes = NULL;
	int rc;

	if (!query_filter_parse(req, now, &q, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job || q.f.comm) {
		http_response_error(resp, 400, "parameters 'node', 'pid', 'comm' and 'job' do not apply here");
		return;
	}
	/* "to" ends the judged windows; the history is the span before it (at most 10 min). */
	int64_t span = q.f.to_ms - q.f.from_ms;
	if (span <= 0 || span > HOSTANOMALY_SPAN_MS)
		span = HOSTANOMALY_SPAN_MS;
	rc = hostanomaly_job(api->store, job, q.f.to_ms, span, &h);
	if (rc == -ENOTSUP) {
		http_response_error(resp, 501, "this store keeps no host signals");
		return;
	}
	if (rc) {
		api__store_error(resp, rc);
		return;
	}
	if (!(doc = json_object()) || !(nodes = json_array()) ||
	    json_object_set_new(doc, "job", json_string(job)) ||
	    json_object_set_new(doc, "truncated", json_boolean(h.truncated)) ||
	    json_object_set_new(doc, "z_min", json_real(REVEAL_Z_MIN)) ||
	    json_object_set_new(doc, "nodes", nodes)) {
		rc = -ENOMEM;
		nodes = NULL;
		goto cleanup;
	}
	for (size_t i = 0; i < h.in.nnodes; i++) {
		json_t *n = hostanomaly_node_json(&h.scores[i]);
		if (!n || json_array_append_new(nodes, n)) {
			rc = -ENOMEM;
			goto cleanup;
		}
	}
cleanup:
	hostanomaly_free(&h);
	if (rc) {
		json_decref(doc);
		api__store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200, doc);
}
