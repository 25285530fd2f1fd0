/* SPDX-License-Identifier: Apache-2.0 */
/* Views of nodes, processes and training jobs: /api/v1/nodes, /processes, /jobs, /jobs/{job}. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/query/limits.h"
#include "server/query/params.h"

static int node_to_json(void *arg, const struct store_node *n)
{
	char epoch[17];
	json_t *obj;

	snprintf(epoch, sizeof(epoch), "%016" PRIx64, n->last_epoch);
	obj = json_pack("{s:s,s:o,s:o,s:o,s:o,s:s,s:I,s:I,s:I,s:o,s:o,s:I,s:s,s:I}", "node_id",
			n->node_id, "hostname", render_json_string(n->hostname), "kernel_release",
			render_json_string(n->kernel_release), "machine",
			render_json_string(n->machine), "agent_version",
			render_json_string(n->agent_version), "boot_id", n->boot_id, "sample_hz",
			(json_int_t)n->sample_hz, "sample_rate_ppm", (json_int_t)n->sample_rate_ppm,
			"online_cpus", (json_int_t)n->online_cpus, "first_seen",
			render_json_time(n->first_seen_ns), "last_seen",
			render_json_time(n->last_seen_ns), "batches", (json_int_t)n->batches,
			"last_epoch", epoch, "last_sequence",
			(json_int_t)(n->last_sequence > INT64_MAX ? INT64_MAX : n->last_sequence));
	return obj && !json_array_append_new(arg, obj) ? 0 : -ENOMEM;
}

void api_nodes_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	json_t *nodes;
	int rc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp))
		return;
	nodes = json_array();
	if (!nodes) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_nodes_list(api->store, node_to_json, nodes))) {
		json_decref(nodes);
		api__store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200, json_pack("{s:o}", "nodes", nodes));
}

static int process_to_json(void *arg, const struct store_process *p)
{
	json_t *obj = json_pack(
		"{s:s,s:o,s:I,s:I,s:o,s:o,s:o,s:I,s:f,s:o,s:o,s:I}", "node_id", p->node_id, "hostname",
		render_json_string(p->hostname), "pid", (json_int_t)p->pid, "ppid", (json_int_t)p->ppid,
		"comm", render_json_string(p->comm), "exe", render_json_string(p->exe), "cmdline",
		render_json_string(p->cmdline), "generation", (json_int_t)p->generation,
		"start_time_since_boot", (double)(p->start_time_ns / 1000000) / 1000.0, "first_seen",
		render_json_time(p->first_seen_ns), "last_seen", render_json_time(p->last_seen_ns),
		"samples", (json_int_t)(p->samples > INT64_MAX ? INT64_MAX : p->samples));

	if (obj && json_object_set_new(obj, "identity", api__json_identity(&p->identity))) {
		json_decref(obj);
		return -ENOMEM;
	}
	return obj && !json_array_append_new(arg, obj) ? 0 : -ENOMEM;
}

void api_processes_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct query_filter q;
	uint32_t limit = API_DEFAULT_PROCESS_LIMIT;
	bool has_limit;
	json_t *list;
	int rc;

	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp) || !query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_PROCESS_LIMIT, &limit, &has_limit, resp))
		return;
	list = json_array();
	if (!list) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_processes_list(api->store, &q.f, limit, process_to_json, list))) {
		json_decref(list);
		api__store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200,
			    json_pack("{s:o,s:o,s:o}", "from", render_json_time(q.f.from_ms * 1000000),
				      "to", render_json_time(q.f.to_ms * 1000000), "processes", list));
}

/* ---- training jobs ------------------------------------------------------------------------- */

/* How a rank's job was learnt. Agents send a job taken from the cgroup as source environment
 * with job_id_source "slurm cgroup" or "pod name" (so that older servers accept the batch);
 * source 3 is the same, for agents that know every server reads it. */
static const char *job_source_name(uint8_t source, const char *job_id_source)
{
	switch (source) {
	case SYSOM_JOB_FROM_ENVIRONMENT:
		if (job_id_source &&
		    (!strcmp(job_id_source, SYSOM_JOB_ID_SOURCE_SLURM_CGROUP) ||
		     !strcmp(job_id_source, SYSOM_JOB_ID_SOURCE_POD_NAME)))
			return "cgroup";
		return "environment";
	case SYSOM_JOB_FROM_REGISTRATION:
		return "registration";
	case SYSOM_JOB_FROM_CGROUP:
		return "cgroup";
	}
	return "unknown";
}

static const char *key_source_name(uint8_t source)
{
	switch (source) {
	case SYSOM_COMM_KEY_UNIQUE_ID:
		return "unique_id";
	case SYSOM_COMM_KEY_SPLIT:
		return "split";
	case SYSOM_COMM_KEY_COMM_HASH:
		return "comm_hash";
	case SYSOM_COMM_KEY_LOCAL:
		return "local";
	}
	return "unknown";
}

static int job_to_json(void *arg, const struct store_job *j)
{
	json_t *obj = json_pack("{s:o,s:o,s:I,s:I,s:I,s:o,s:o}", "job", render_json_string(j->job),
				"world_size", api__json_int_or_null(j->world_size), "ranks",
				(json_int_t)j->ranks, "processes", (json_int_t)j->processes, "nodes",
				(json_int_t)j->nodes, "first_seen", render_json_time(j->first_seen_ns),
				"last_seen", render_json_time(j->last_seen_ns));

	return obj && !json_array_append_new(arg, obj) ? 0 : -ENOMEM;
}

void api_jobs_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	uint32_t limit = API_DEFAULT_JOB_LIMIT;
	struct query_filter q;
	bool has_limit;
	json_t *jobs;
	int rc;

	memset(&q, 0, sizeof(q));
	if (!api__authorized(api, req, AUTH_SCOPE_READ, resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_JOB_LIMIT, &limit, &has_limit, resp) ||
	    !query_identity_parse(req, &q, resp))
		return;
	if (!(jobs = json_array())) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	rc = store_filter_has_identity(&q.f)
		     ? store_jobs_list_identity(api->store, &q.f, limit, job_to_json, jobs)
		     : store_jobs_list(api->store, limit, job_to_json, jobs);
	if (rc) {
		json_decref(jobs);
		api__store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200, json_pack("{s:o}", "jobs", jobs));
}

/* What GET /api/v1/jobs/{job} collects. */
struct job_doc {
	json_t *ranks;      /* array */
	json_t *nodes;      /* array, in order of first appearance (ranks are sorted) */
	json_t *node_index; /* node id → index in nodes */
	json_t *groups;     /* group name → { value → ranks } */
	json_t *comms;      /* array */
	json_t *workers;    /* array: processes of role worker (DataLoader workers), not ranks */
	json_t *comm;       /* the communicator being filled (borrowed from comms) */
	uint64_t comm_key;
	int32_t last_rank;  /* last rank added to comm (rows are sorted by rank) */
	int32_t world_size;
	size_t rank_rows, comm_rows;
};

/* Adds "name=value,name=value" to the group table (malformed or oversized parts skipped). */
static int groups_add(json_t *groups, const char *text)
{
	const char *p = text;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		char name[128], value[128];

		if (eq && eq > p && (size_t)(eq - p) < sizeof(name) &&
		    len - (size_t)(eq - p) - 1 < sizeof(value)) {
			json_t *values, *n;

			memcpy(name, p, (size_t)(eq - p));
			name[eq - p] = '\0';
			memcpy(value, eq + 1, len - (size_t)(eq - p) - 1);
			value[len - (size_t)(eq - p) - 1] = '\0';
			if (!(values = json_object_get(groups, name))) {
				if (!(values = json_object()) || json_object_set_new(groups, name, values))
					return -ENOMEM;
			}
			n = json_object_get(values, value);
			if (json_object_set_new(values, value,
						json_integer(n ? json_integer_value(n) + 1 : 1)))
				return -ENOMEM;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int job_rank_to_json(void *arg, const struct store_job_rank *r)
{
	struct job_doc *d = arg;
	json_t *obj, *idx, *node;

	if (++d->rank_rows > QUERY_MAX_JOB_ROWS)
		return 0; /* the caller says truncated */
	if (r->world_size > d->world_size)
		d->world_size = r->world_size;
	if (r->role == SYSOM_JOB_ROLE_WORKER) {
		/* A worker carries its rank's numbers; it is listed apart (and under its rank's
		 * "workers"), never as another process of the rank. */
		obj = json_pack("{s:o,s:I,s:s,s:o,s:I,s:o,s:o,s:o}", "rank",
				api__json_int_or_null(r->rank), "rank_pid", (json_int_t)r->rank_pid,
				"node_id", r->node_id, "hostname", render_json_string(r->hostname),
				"pid", (json_int_t)r->pid, "comm", render_json_string(r->comm),
				"first_seen", render_json_time(r->first_seen_ns), "last_seen",
				render_json_time(r->last_seen_ns));
		return obj && !json_array_append_new(d->workers, obj) ? 0 : -ENOMEM;
	}
	obj = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:I,s:o,s:s,s:o,s:o,s:o,s:o,s:o}", "rank",
			api__json_int_or_null(r->rank), "local_rank", api__json_int_or_null(r->local_rank),
			"gpu_device", api__json_int_or_null(r->gpu_device),
			"world_size", api__json_int_or_null(r->world_size), "local_world_size",
			api__json_int_or_null(r->local_world_size), "group_rank",
			api__json_int_or_null(r->group_rank), "node_id", r->node_id, "hostname",
			render_json_string(r->hostname), "pid", (json_int_t)r->pid, "comm",
			render_json_string(r->comm), "source", job_source_name(r->source, r->job_id_source),
			"job_id_source", render_json_string(r->job_id_source), "master",
			render_json_string(r->master), "groups", render_json_string(r->groups),
			"first_seen", render_json_time(r->first_seen_ns), "last_seen",
			render_json_time(r->last_seen_ns));
	if (obj && (json_object_set_new(obj, "identity", api__json_identity(&r->identity)) ||
		    json_object_set_new(obj, "workers", json_array()))) {
		json_decref(obj);
		return -ENOMEM;
	}
	if (!obj || json_array_append_new(d->ranks, obj))
		return -ENOMEM;
	if (!(idx = json_object_get(d->node_index, r->node_id))) {
		node = json_pack("{s:s,s:o,s:[]}", "node_id", r->node_id, "hostname",
				 render_json_string(r->hostname), "ranks");
		if (!node || json_array_append_new(d->nodes, node) ||
		    json_object_set_new(d->node_index, r->node_id,
					json_integer((json_int_t)json_array_size(d->nodes) - 1)))
			return -ENOMEM;
	} else {
		node = json_array_get(d->nodes, (size_t)json_integer_value(idx));
	}
	if (r->rank >= 0 && json_array_append_new(json_object_get(node, "ranks"),
						  json_integer(r->rank)))
		return -ENOMEM;
	return groups_add(d->groups, r->groups);
}

static int job_comm_to_json(void *arg, const struct store_job_communicator *c)
{
	struct job_doc *d = arg;
	json_t *member;

	if (++d->comm_rows > QUERY_MAX_JOB_ROWS)
		return 0;
	if (!d->comm || c->key != d->comm_key) {
		d->comm = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:b,s:I,s:[]}", "key",
				    render_json_key(c->key), "nranks", api__json_int_or_null(c->nranks),
				    "parent_key", c->parent_key ? render_json_key(c->parent_key) : json_null(),
				    "split_color", api__json_int_or_null(c->split_color), "split_ordinal",
				    c->split_ordinal ? json_integer(c->split_ordinal) : json_null(),
				    "comm_hash", c->comm_hash ? render_json_key(c->comm_hash) : json_null(),
				    "key_source", key_source_name(c->key_source), "created",
				    c->created_ns > 0 ? render_json_time(c->created_ns) : json_null(),
				    "destroyed", c->destroyed, "ranks_seen", (json_int_t)0, "ranks");
		if (!d->comm || json_array_append_new(d->comms, d->comm))
			return -ENOMEM;
		d->comm_key = c->key;
		d->last_rank = -1;
	} else {
		json_t *n = json_object_get(d->comm, "nranks");
		if (c->nranks > 0 && (!json_is_integer(n) || json_integer_value(n) < c->nranks))
			json_object_set_new(d->comm, "nranks", json_integer(c->nranks));
		if (c->destroyed)
			json_object_set_new(d->comm, "destroyed", json_true());
	}
	if (c->rank >= 0 && c->rank != d->last_rank) {
		json_t *seen = json_object_get(d->comm, "ranks_seen");
		json_integer_set(seen, json_integer_value(seen) + 1);
		d->last_rank = c->rank;
	}
	member = json_pack("{s:o,s:o,s:s,s:o,s:I,s:b}", "rank", api__json_int_or_null(c->rank),
			   "job_rank", api__json_int_or_null(c->job_rank), "node_id", c->node_id,
			   "hostname", render_json_string(c->hostname), "pid", (json_int_t)c->pid,
			   "destroyed", c->destroyed);
	return member && !json_array_append_new(json_object_get(d->comm, "ranks"), member) ? 0
												: -ENOMEM;
}

/* Each worker's pid into its rank's "workers" (same node, the rank process's pid). */
static int attach_workers(struct job_doc *d)
{
	size_t i, k;
	json_t *w, *r;

	json_array_foreach(d->workers, i, w) {
		const char *node = json_string_value(json_object_get(w, "node_id"));
		json_int_t rank_pid = json_integer_value(json_object_get(w, "rank_pid"));

		json_array_foreach(d->ranks, k, r) {
			if (json_integer_value(json_object_get(r, "pid")) != rank_pid || !node ||
			    strcmp(node, json_string_value(json_object_get(r, "node_id"))))
				continue;
			if (json_array_append(json_object_get(r, "workers"), json_object_get(w, "pid")))
				return -ENOMEM;
			break;
		}
	}
	return 0;
}

void api__job_detail(struct api *api, const char *job, const struct http_request *req,
		     struct http_response *resp)
{
	struct job_doc d = { .world_size = -1 };
	json_t *doc = NULL;
	int rc = -ENOMEM;

	(void)req;
	d.ranks = json_array();
	d.nodes = json_array();
	d.node_index = json_object();
	d.groups = json_object();
	d.comms = json_array();
	d.workers = json_array();
	if (!d.ranks || !d.nodes || !d.node_index || !d.groups || !d.comms || !d.workers)
		goto cleanup;
	if ((rc = store_job_ranks_list(api->store, job, QUERY_MAX_JOB_ROWS + 1, job_rank_to_json, &d)))
		goto cleanup;
	if (d.rank_rows == 0) {
		http_response_error(resp, 404, "no job '%s'", job);
		goto cleanup;
	}
	if ((rc = store_job_communicators_list(api->store, job, QUERY_MAX_JOB_ROWS + 1,
					       job_comm_to_json, &d)))
		goto cleanup;
	if ((rc = attach_workers(&d)))
		goto cleanup;
	doc = json_pack("{s:o,s:o,s:I,s:O,s:O,s:O,s:O,s:O,s:b}", "job", render_json_string(job),
			"world_size", api__json_int_or_null(d.world_size), "processes",
			(json_int_t)(d.rank_rows > QUERY_MAX_JOB_ROWS ? QUERY_MAX_JOB_ROWS : d.rank_rows),
			"ranks", d.ranks, "workers", d.workers, "nodes", d.nodes, "communicators",
			d.comms, "groups", d.groups, "truncated",
			d.rank_rows > QUERY_MAX_JOB_ROWS || d.comm_rows > QUERY_MAX_JOB_ROWS);
	rc = doc ? 0 : -ENOMEM;
	if (!rc)
		render_json_respond(resp, 200, doc);
cleanup:
	if (rc)
		api__store_error(resp, rc);
	json_decref(d.ranks);
	json_decref(d.nodes);
	json_decref(d.node_index);
	json_decref(d.groups);
	json_decref(d.comms);
	json_decref(d.workers);
}
