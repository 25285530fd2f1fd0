/* SPDX-License-Identifier: Apache-2.0 */
/* Health and metrics: GET /healthz and GET /metrics (Prometheus text format 0.0.4). */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/metrics/metrics.h"
#include "server/symbols/symbols.h"
#include "server/symbols/upstream.h"

void api_healthz_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	int rc = store_ping(api->store);

	(void)req;
	if (rc)
		render_json_respond(resp, 503,
				    json_pack("{s:s,s:s}", "status", "unavailable", "error",
					      sysom_strerror(rc)));
	else
		render_json_respond(resp, 200, json_pack("{s:s}", "status", "ok"));
}

/*
 * Renders the agents' counters: one family per counter id, and in it one sample per node
 * (labels node and node_id) when `per_node`, else one sample summed over the nodes. The rows
 * come ordered by counter id.
 */
struct counter_render {
	struct byte_buf *out;
	bool per_node;
	int last_counter;
	double sum;          /* !per_node: the current counter's total so far */
	char family[96];
};

/* !per_node: writes the summed sample of the counter before the current one. */
static void counter_sum_flush(struct counter_render *r)
{
	if (!r->per_node && r->last_counter >= 0)
		metrics_sample_write(r->out, r->family, NULL, r->sum);
	r->sum = 0;
}

static int counter_write(void *arg, const struct store_counter_total *c)
{
	struct counter_render *r = arg;
	const char *labels[] = { "node", c->hostname, "node_id", c->node_id, NULL };

	if (c->counter != r->last_counter) {
		const char *name = sysom_counter_name(c->counter);
		char help[200];

		counter_sum_flush(r);
		if (name)
			snprintf(r->family, sizeof(r->family), "sysom_agent_%s_total", name);
		else
			snprintf(r->family, sizeof(r->family), "sysom_agent_counter_%u_total",
				 c->counter);
		snprintf(help, sizeof(help), "Agent counter %s (id %u) summed over stored batches%s.",
			 name ? name : "without a name", c->counter,
			 r->per_node ? "" : " and nodes (per node with a read credential)");
		metrics_family_write(r->out, r->family, "counter", help);
		r->last_counter = c->counter;
	}
	if (r->per_node)
		metrics_sample_write(r->out, r->family, labels, (double)c->total);
	else
		r->sum += (double)c->total;
	return byte_buf_error(r->out);
}

static void http_stats_write(struct byte_buf *out, const struct http_server_stats *st)
{
	static const struct {
		const char *name, *type, *help;
		size_t offset;
	} simple[] = {
		{ "sysom_http_connections_accepted_total", "counter", "Connections accepted.",
		  offsetof(struct http_server_stats, connections_accepted) },
		{ "sysom_http_connections_rejected_total", "counter",
		  "Connections refused: the connection table full and none evictable.",
		  offsetof(struct http_server_stats, connections_rejected) },
		{ "sysom_http_connections_open", "gauge", "Connections open now.",
		  offsetof(struct http_server_stats, connections_open) },
		{ "sysom_http_requests_total", "counter", "Requests received.",
		  offsetof(struct http_server_stats, requests) },
		{ "sysom_http_received_bytes_total", "counter", "Bytes received.",
		  offsetof(struct http_server_stats, bytes_received) },
		{ "sysom_http_sent_bytes_total", "counter", "Bytes sent.",
		  offsetof(struct http_server_stats, bytes_sent) },
		{ "sysom_http_parse_errors_total", "counter", "Malformed requests.",
		  offsetof(struct http_server_stats, parse_errors) },
		{ "sysom_http_limit_rejections_total", "counter",
		  "Requests refused by the transport's limits (408, 413, 431, 503).",
		  offsetof(struct http_server_stats, limit_rejections) },
		{ "sysom_http_connections_evicted_total", "counter",
		  "Connections closed to make room for a new one (untrusted first).",
		  offsetof(struct http_server_stats, connections_evicted) },
		{ "sysom_http_peer_rejections_total", "counter",
		  "Connections refused over --max-connections-per-peer.",
		  offsetof(struct http_server_stats, peer_rejections) },
		{ "sysom_http_first_byte_timeouts_total", "counter",
		  "Connections closed because no request began within --first-byte-timeout.",
		  offsetof(struct http_server_stats, first_byte_timeouts) },
		{ "sysom_http_header_timeouts_total", "counter",
		  "Requests answered 408 because their head did not arrive within --header-timeout.",
		  offsetof(struct http_server_stats, header_timeouts) },
		{ "sysom_http_connections_trusted", "gauge",
		  "Open connections that made an authenticated request.",
		  offsetof(struct http_server_stats, connections_trusted) },
		{ "sysom_http_early_rejections_total", "counter",
		  "Uploads answered 503 right after their head, the body not read (server busy).",
		  offsetof(struct http_server_stats, early_rejections) },
		{ "sysom_http_discarded_bytes_total", "counter",
		  "Bytes read and thrown away by closing connections (refused requests' bodies).",
		  offsetof(struct http_server_stats, discarded_bytes) },
		{ "sysom_http_refused_before_body_total", "counter",
		  "Requests with a body answered right after their head (503, 413, 417, 401), "
		  "the body not read.",
		  offsetof(struct http_server_stats, refused_before_body) },
		{ "sysom_http_refused_body_bytes_total", "counter",
		  "Body bytes of those that peers sent anyway, read and thrown away.",
		  offsetof(struct http_server_stats, refused_body_bytes) },
		{ "sysom_http_monitoring_requests_total", "counter",
		  "Requests to /healthz and /metrics, handled on the monitoring thread.",
		  offsetof(struct http_server_stats, monitoring_requests) },
	};
	const uint64_t classes[] = { st->responses_2xx, st->responses_3xx, st->responses_4xx,
				     st->responses_5xx };
	static const char *const class_names[] = { "2xx", "3xx", "4xx", "5xx" };

	for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++) {
		uint64_t v;

		memcpy(&v, (const char *)st + simple[i].offset, sizeof(v));
		metrics_family_write(out, simple[i].name, simple[i].type, simple[i].help);
		metrics_sample_write(out, simple[i].name, NULL, (double)v);
	}
	metrics_family_write(out, "sysom_http_responses_total", "counter",
			     "Responses sent, by status class.");
	for (size_t i = 0; i < 4; i++) {
		const char *labels[] = { "class", class_names[i], NULL };
		metrics_sample_write(out, "sysom_http_responses_total", labels, (double)classes[i]);
	}
}

/* The symbol repository's families: symbolization results, repository and upload gauges,
 * upstream fetches. */
/* The kernel symbol tables and what --max-kernel-symbols evicted. */
static void kernel_symbols_metrics_write(struct api *api, struct byte_buf *out)
{
	struct store_ksyms_usage u;

	if (store_ksyms_usage_get(api->store, &u))
		return;
	metrics_gauge_write(out, "sysom_kernel_symbol_tables",
			    "Kernel and module symbol tables stored.", u.tables);
	metrics_gauge_write(out, "sysom_kernel_symbols",
			    "Symbols in all kernel symbol tables (--max-kernel-symbols bounds them).",
			    u.rows);
	metrics_total_write(out, "sysom_kernel_symbol_tables_evicted_total",
			    "Kernel symbol tables evicted, least recently used first, to make room"
			    " under --max-kernel-symbols (since the server started).",
			    u.evicted_tables);
}

static void symbols_metrics_write(struct api *api, const struct symbolizer_stats *ss,
				  struct byte_buf *out)
{
	static const char *const results[] = { "named", "no_symbols", "gap" };
	const uint64_t counts[] = { ss->repo_named, ss->repo_missing, ss->repo_gaps };
	uint64_t n;

	metrics_family_write(out, "sysom_symbolization_user_frames_total", "counter",
			     "User frames resolved through the symbol repository (cache misses), by"
			     " result: named, no_symbols (no symbol file: file+offset), gap (no"
			     " function covers the address: file+offset).");
	for (size_t i = 0; i < 3; i++) {
		const char *labels[] = { "result", results[i], NULL };
		metrics_sample_write(out, "sysom_symbolization_user_frames_total", labels,
				     (double)counts[i]);
	}
	metrics_family_write(out, "sysom_symbol_cache_invalidations_total", "counter",
			     "Build IDs whose cached frames were dropped because a file arrived.");
	metrics_sample_write(out, "sysom_symbol_cache_invalidations_total", NULL,
			     (double)ss->invalidations);
	if (api->symbols) {
		if (symbols_build_ids_count(api->symbols, &n) == 0) {
			metrics_family_write(out, "sysom_symbol_repository_build_ids", "gauge",
					     "Build IDs the symbol repository holds files of.");
			metrics_sample_write(out, "sysom_symbol_repository_build_ids", NULL, (double)n);
		}
		metrics_family_write(out, "sysom_symbol_upload_sessions", "gauge",
				     "Partial symbol file uploads in progress.");
		metrics_sample_write(out, "sysom_symbol_upload_sessions", NULL,
				     (double)symbols_sessions_count(api->symbols));
		metrics_gauge_write(out, "sysom_symbol_upload_reserved_bytes",
				    "Bytes partial symbol file uploads reserve (their declared sizes).",
				    symbols_reserved_bytes(api->symbols));
	}
	if (api->upstream) {
		struct upstream_stats us;
		upstream_stats_get(api->upstream, &us);
		static const char *const fetch_results[] = { "installed", "not_found", "failed",
							     "dropped" };
		const uint64_t fetch_counts[] = { us.fetched, us.not_found, us.failed, us.dropped };
		metrics_family_write(out, "sysom_debuginfod_upstream_total", "counter",
				     "Upstream debuginfod work: files installed, Build IDs upstream"
				     " lacked, failed fetches, requests dropped (queue full).");
		for (size_t i = 0; i < 4; i++) {
			const char *labels[] = { "result", fetch_results[i], NULL };
			metrics_sample_write(out, "sysom_debuginfod_upstream_total", labels,
					     (double)fetch_counts[i]);
		}
		metrics_family_write(out, "sysom_debuginfod_upstream_queued", "gauge",
				     "Build IDs waiting for an upstream fetch.");
		metrics_sample_write(out, "sysom_debuginfod_upstream_queued", NULL, (double)us.queued);
	}
}

void api_metrics_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct http_server *srv = atomic_load(&api->http);
	struct byte_buf out = { 0 };
	struct counter_render cr = { .out = &out, .last_counter = -1 };
	struct symbolizer_stats ss;
	struct auth_decision who;
	uint64_t size;
	struct store_insert_groups groups;
	int rc;

	/*
	 * Open to scrapers without a token, but then without series per node or job (hostnames,
	 * node ids, job ids): those need a read (or admin) credential, or no authentication
	 * configured at all. A token that is presented must be valid.
	 */
	if (auth_request_identify(api->auth, req, &who) != AUTH_ALLOWED && who.token_presented) {
		auth_respond(resp, &who);
		return;
	}
	cr.per_node = who.result == AUTH_ALLOWED &&
		      (who.scopes & (AUTH_SCOPE_READ | AUTH_SCOPE_ADMIN)) != 0;
	{
		const char *labels[] = { "version", SYSOM_VERSION, NULL };
		metrics_family_write(&out, "sysom_build_info", "gauge", "Build of this sysom-server.");
		metrics_sample_write(&out, "sysom_build_info", labels, 1);
	}
	server_metrics_write(api->metrics, &out);
	if ((rc = store_size_get(api->store, &size)) == 0) {
		metrics_family_write(&out, "sysom_store_size_bytes", "gauge",
				     "Bytes the store occupies on disk.");
		metrics_sample_write(&out, "sysom_store_size_bytes", NULL, (double)size);
	}
	if (store_insert_groups_get(api->store, &groups) == 0) {
		metrics_family_write(&out, "sysom_store_insert_groups_total", "counter",
				     "Group inserts into ClickHouse (one INSERT per table for the "
				     "batches stored together).");
		metrics_sample_write(&out, "sysom_store_insert_groups_total", NULL,
				     (double)groups.groups);
		metrics_family_write(&out, "sysom_store_grouped_batches_total", "counter",
				     "Batches those group inserts carried.");
		metrics_sample_write(&out, "sysom_store_grouped_batches_total", NULL,
				     (double)groups.batches);
	}
	kernel_symbols_metrics_write(api, &out);
	symbolizer_stats_get(api->sym, &ss);
	metrics_family_write(&out, "sysom_symbol_cache_lookups_total", "counter",
			     "Symbolizer cache lookups, by result.");
	{
		const char *hit[] = { "result", "hit", NULL }, *miss[] = { "result", "miss", NULL };
		metrics_sample_write(&out, "sysom_symbol_cache_lookups_total", hit, (double)ss.hits);
		metrics_sample_write(&out, "sysom_symbol_cache_lookups_total", miss, (double)ss.misses);
	}
	metrics_family_write(&out, "sysom_symbol_cache_entries", "gauge", "Frames cached.");
	metrics_sample_write(&out, "sysom_symbol_cache_entries", NULL, (double)ss.entries);
	symbols_metrics_write(api, &ss, &out);
	if (srv) {
		struct http_server_stats st;
		http_server_stats(srv, &st);
		http_stats_write(&out, &st);
	}
	if (cr.per_node)
		server_metrics_detail_write(api->metrics, &out);
	rc = store_counters_list(api->store, counter_write, &cr);
	if (!rc) {
		counter_sum_flush(&cr);
		rc = byte_buf_error(&out);
	}
	if (rc) {
		byte_buf_free(&out);
		api__store_error(resp, rc);
		return;
	}
	http_response_text(resp, 200, "text/plain; version=0.0.4; charset=utf-8",
			   out.len ? (const char *)out.data : "", out.len);
	byte_buf_free(&out);
}
