/* SPDX-License-Identifier: Apache-2.0 */
/* Query API: flame graphs (folded and JSON, filters, limits), time parsing, nodes, processes,
 * health, metrics, routes, UTF-8 sanitising. Handlers are called directly. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/http/render.h"
#include "tests/unit/server/harness.h"
#include "tests/unit/server/job_fixture.h"

#define KERNEL_HEX "abf9ec0ec5946600c90641cf5db998472fac410b"
#define T0_S 1700000000LL /* = 2023-11-14T22:13:20Z, the fixture window start */

#define LINE_PY_K "python3;python3.11+0x1000;libc.so.6+0x29d90;do_syscall_64_[k];do_one_[k]"
#define LINE_NCCL_K "nccl-proxy;do_syscall_64_[k];do_one_[k]"
#define LINE_NCCL_T "nccl-proxy;[truncated: depth limit];libc.so.6+0x1000;[anon]+0x7f0000001000"
#define LINE_PY "python3;python3.11+0x1000;libc.so.6+0x29d90"

static int setup(void **state)
{
	struct harness *h = harness_new(HARNESS_TOKEN, NULL);
	const char text[] = "1000 T _stext\n1100 t do_one\n2200 T do_syscall_64\n3000 T _etext\n";
	struct test_request t;
	struct http_response resp;
	char *body;

	assert_non_null(h);
	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 1, .epoch = 1,
									  .sequence = 1,
									  .window_start_ns = HARNESS_T0 }),
			 200);
	request_init(&t, "PUT", INGEST_KSYMS_PREFIX KERNEL_HEX, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_body(&t, text, strlen(text));
	assert_int_equal(call(ingest_ksyms_put, h->ingest, &t, &resp, &body), 200);
	free(body);
	*state = h;
	return 0;
}

static int teardown(void **state)
{
	harness_free(*state);
	return 0;
}

static int get(struct harness *h, http_handler_fn fn, const char *query, struct http_response *resp,
	       char **body)
{
	struct test_request t;

	request_init(&t, "GET", "/api/v1/x", query);
	request_token(&t, HARNESS_TOKEN);
	return call(fn, h->api, &t, resp, body);
}

static void expect_folded(struct harness *h, const char *query, const char *want)
{
	struct http_response resp;
	char *body;
	int status = get(h, api_flamegraph_get, query, &resp, &body);

	if (status != 200)
		fail_msg("%s: status %d: %s", query, status, body);
	assert_string_equal(resp.content_type, "text/plain; charset=utf-8");
	if (strcmp(body, want) != 0)
		fail_msg("query '%s'\n got:\n%s\nwant:\n%s", query, body, want);
	free(body);
}

static void test_folded(void **state)
{
	struct harness *h = *state;
	const char *all = LINE_PY_K " 10\n" LINE_NCCL_K " 5\n" LINE_NCCL_T " 4\n" LINE_PY " 3\n";

	/* Default: folded, the last hour. Root first, comm as root, kernel frames _[k], by count. */
	expect_folded(h, "", all);
	expect_folded(h, "format=folded", all);
	/* Filters: pid, comm (process comm or thread comm), node (hostname or id), time. */
	expect_folded(h, "pid=777", LINE_NCCL_K " 5\n" LINE_NCCL_T " 4\n");
	expect_folded(h, "comm=nccl-net", LINE_NCCL_K " 5\n" LINE_NCCL_T " 4\n");
	expect_folded(h, "comm=python3", LINE_PY_K " 10\n" LINE_PY " 3\n");
	expect_folded(h, "comm=pt_main_thread&pid=777", "");
	expect_folded(h, "node=node-1", all);
	expect_folded(h, "node=01010101010101010101010101010101", all);
	expect_folded(h, "node=0101010101010101010101010101010A", "");
	expect_folded(h, "node=other", "");
	expect_folded(h, "from=1700000007&to=1700000030", LINE_NCCL_K " 5\n" LINE_NCCL_T " 4\n");
	expect_folded(h, "from=2023-11-14T22:13:27Z&to=2023-11-14T23:13:50%2B01:00",
		      LINE_NCCL_K " 5\n" LINE_NCCL_T " 4\n");
	expect_folded(h, "to=1700000005", LINE_PY_K " 10\n" LINE_PY " 3\n");
	expect_folded(h, "from=-30m", "");
	expect_folded(h, "from=1700000000.001&to=1700000005.000", LINE_PY_K " 10\n" LINE_PY " 3\n");
	/* Limit keeps the largest stacks. */
	expect_folded(h, "limit=2", LINE_PY_K " 10\n" LINE_NCCL_K " 5\n");

	/* A second node with the same stacks: lines merge, counts add, stacks stored once. */
	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 2, .epoch = 1,
									  .sequence = 1, .hostname = "gpu-b",
									  .window_start_ns = HARNESS_T0 + 60000000000ULL }),
			 200);
	expect_folded(h, "", LINE_PY_K " 20\n" LINE_NCCL_K " 10\n" LINE_NCCL_T " 8\n" LINE_PY " 6\n");
	expect_folded(h, "node=gpu-b&pid=4242", LINE_PY_K " 10\n" LINE_PY " 3\n");
	assert_int_equal(harness_rows(h, "stacks"), 3);
}

static void test_json(void **state)
{
	struct harness *h = *state;
	struct http_response resp;
	json_error_t jerr;
	char *body;

	assert_int_equal(get(h, api_flamegraph_get, "format=json", &resp, &body), 200);
	assert_string_equal(resp.content_type, "application/json");
	json_t *doc = json_loads(body, 0, &jerr);
	if (!doc)
		fail_msg("invalid JSON: %s: %s", jerr.text, body);
	free(body);
	assert_int_equal(json_integer_value(json_object_get(doc, "total")), FIXTURE_SAMPLES);
	assert_string_equal(json_string_value(json_object_get(doc, "from")), "2023-11-14T22:13:20.000Z");
	assert_string_equal(json_string_value(json_object_get(doc, "to")), "2023-11-14T23:13:20.000Z");
	assert_true(json_is_false(json_object_get(doc, "truncated")));
	json_t *stacks = json_object_get(doc, "stacks");
	assert_int_equal(json_array_size(stacks), 4);

	json_t *first = json_array_get(stacks, 0);
	assert_int_equal(json_integer_value(json_object_get(first, "count")), 10);
	json_t *proc = json_object_get(first, "process");
	assert_string_equal(json_string_value(json_object_get(proc, "comm")), "python3");
	assert_int_equal(json_integer_value(json_object_get(proc, "pid")), FIXTURE_PID_PYTHON);
	assert_int_equal(json_integer_value(json_object_get(proc, "processes")), 1);
	json_t *frames = json_object_get(first, "frames");
	assert_int_equal(json_array_size(frames), 4);
	static const char *const names[] = { "python3.11+0x1000", "libc.so.6+0x29d90", "do_syscall_64",
					     "do_one" };
	static const char *const kinds[] = { "user", "user", "kernel", "kernel" };
	for (size_t i = 0; i < 4; i++) {
		json_t *f = json_array_get(frames, i);
		assert_string_equal(json_string_value(json_object_get(f, "name")), names[i]);
		assert_string_equal(json_string_value(json_object_get(f, "kind")), kinds[i]);
	}
	json_t *k = json_array_get(frames, 2);
	assert_string_equal(json_string_value(json_object_get(k, "object")), "[kernel.kallsyms]");
	assert_string_equal(json_string_value(json_object_get(k, "build_id")), KERNEL_HEX);
	assert_string_equal(json_string_value(json_object_get(k, "offset")), "0x2234");
	assert_string_equal(json_string_value(json_object_get(k, "symbol_offset")), "0x34");
	json_t *u = json_array_get(frames, 1);
	assert_string_equal(json_string_value(json_object_get(u, "object")),
			    "/usr/lib/x86_64-linux-gnu/libc.so.6");
	assert_string_equal(json_string_value(json_object_get(u, "offset")), "0x29d90");
	assert_null(json_object_get(u, "symbol_offset"));

	/* The truncated stack starts with an error frame. */
	json_t *third = json_array_get(stacks, 2);
	json_t *err = json_array_get(json_object_get(third, "frames"), 0);
	assert_string_equal(json_string_value(json_object_get(err, "kind")), "error");
	assert_string_equal(json_string_value(json_object_get(err, "name")), "[truncated: depth limit]");
	assert_null(json_object_get(err, "offset"));
	json_decref(doc);

	/* limit: fewer stacks, the total still counts everything, truncated says so. */
	assert_int_equal(get(h, api_flamegraph_get, "format=json&limit=1", &resp, &body), 200);
	doc = json_loads(body, 0, NULL);
	free(body);
	assert_non_null(doc);
	assert_int_equal(json_array_size(json_object_get(doc, "stacks")), 1);
	assert_int_equal(json_integer_value(json_object_get(doc, "total")), FIXTURE_SAMPLES);
	assert_true(json_is_true(json_object_get(doc, "truncated")));
	json_decref(doc);
}

static void expect_status(struct harness *h, http_handler_fn fn, const char *query, int status,
			  const char *fragment)
{
	struct http_response resp;
	char *body;
	int got = get(h, fn, query, &resp, &body);

	if (got != status || (fragment && !strstr(body, fragment)))
		fail_msg("'%s': %d %s (want %d, '%s')", query, got, body, status, fragment);
	free(body);
}

static void test_bad_parameters(void **state)
{
	struct harness *h = *state;

	expect_status(h, api_flamegraph_get, "from=1700000010&to=1700000000", 400, "after");
	expect_status(h, api_flamegraph_get, "from=yesterday", 400, "invalid time 'yesterday'");
	expect_status(h, api_flamegraph_get, "to=2023-13-01T00:00:00Z", 400, "'to'");
	expect_status(h, api_flamegraph_get, "limit=0", 400, "limit");
	expect_status(h, api_flamegraph_get, "limit=100001", 400, "limit");
	expect_status(h, api_flamegraph_get, "limit=ten", 400, "limit");
	expect_status(h, api_flamegraph_get, "format=svg", 400, "format");
	expect_status(h, api_flamegraph_get, "pid=-1", 400, "pid");
	expect_status(h, api_flamegraph_get, "pid=4294967296", 400, "pid");
	expect_status(h, api_flamegraph_get, "comm=%zz", 400, "percent-encoded");
	expect_status(h, api_processes_get, "from=now&to=-1h", 400, "after");
	expect_status(h, api_processes_get, "limit=0", 400, "limit");
	/* Every query needs the token when one is configured; health and metrics do not. */
	struct test_request t;
	struct http_response resp;
	char *body;
	http_handler_fn guarded[] = { api_nodes_get, api_processes_get, api_flamegraph_get };
	for (size_t i = 0; i < 3; i++) {
		request_init(&t, "GET", "/api/v1/x", "");
		assert_int_equal(call(guarded[i], h->api, &t, &resp, &body), 401);
		assert_non_null(response_header(&resp, "WWW-Authenticate"));
		free(body);
	}
	request_init(&t, "GET", "/healthz", "");
	assert_int_equal(call(api_healthz_get, h->api, &t, &resp, &body), 200);
	assert_string_equal(body, "{\"status\":\"ok\"}\n");
	free(body);
}

static void test_time_parse(void **state)
{
	const int64_t now = 1800000000123LL;
	static const struct {
		const char *text;
		int64_t ms;
	} ok[] = {
		{ "now", now },
		{ "1700000000", 1700000000000LL },
		{ "1700000000.5", 1700000000500LL },
		{ "1700000000.123456", 1700000000123LL },
		{ "0", 0 },
		{ "2026-11-22T10:00:00Z", 1795341600000LL },
		{ "2026-11-22t10:00:00z", 1795341600000LL },
		{ "2026-11-22 10:00:00Z", 1795341600000LL },
		{ "2026-11-22T10:00:00.25Z", 1795341600250LL },
		{ "2026-11-22T12:00:00+02:00", 1795341600000LL },
		{ "2026-11-22T04:30:00-05:30", 1795341600000LL },
		{ "2024-02-29T00:00:00Z", 1709164800000LL },
		{ "-30s", now - 30000 },
		{ "-5m", now - 300000 },
		{ "-1h", now - 3600000 },
		{ "-2d", now - 2 * 86400000LL },
		{ "-500ms", now - 500 },
		{ "-90", now - 90000 },
	};
	static const char *const bad[] = {
		"", "yesterday", "-", "-x", "--5m", "-5y", "+5m", "1.", ".5", "1700000000x",
		"1234567890123", "2026-11-22", "2026-11-22T10:00:00", "2026-11-22T10:00Z",
		"2026-13-01T00:00:00Z", "2025-02-29T00:00:00Z", "2026-11-22T24:00:00Z",
		"2026-11-22T10:00:00+2:00", "1969-12-31T23:59:59Z", "2026-11-22T10:00:00.Z",
	};
	int64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = -1;
		if (api_time_parse(ok[i].text, now, &v) || v != ok[i].ms)
			fail_msg("'%s': %lld, want %lld", ok[i].text, (long long)v, (long long)ok[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (api_time_parse(bad[i], now, &v) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
}

static void test_nodes(void **state)
{
	struct harness *h = *state;
	struct http_response resp;
	char *body;

	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 1, .epoch = 1,
									  .sequence = 2,
									  .window_start_ns = HARNESS_T0 + 30000000000ULL }),
			 200);
	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 2, .epoch = 5,
									  .sequence = 9, .hostname = "a-first",
									  .window_start_ns = HARNESS_T0 }),
			 200);
	assert_int_equal(get(h, api_nodes_get, "", &resp, &body), 200);
	json_t *doc = json_loads(body, 0, NULL);
	free(body);
	assert_non_null(doc);
	json_t *nodes = json_object_get(doc, "nodes");
	assert_int_equal(json_array_size(nodes), 2);
	json_t *a = json_array_get(nodes, 0), *b = json_array_get(nodes, 1); /* by hostname */
	assert_string_equal(json_string_value(json_object_get(a, "hostname")), "a-first");
	assert_string_equal(json_string_value(json_object_get(a, "node_id")),
			    "02020202020202020202020202020202");
	assert_int_equal(json_integer_value(json_object_get(a, "batches")), 1);
	assert_int_equal(json_integer_value(json_object_get(a, "last_sequence")), 9);
	assert_string_equal(json_string_value(json_object_get(a, "last_epoch")), "0000000000000005");
	assert_string_equal(json_string_value(json_object_get(b, "hostname")), "node-1");
	assert_int_equal(json_integer_value(json_object_get(b, "batches")), 2);
	assert_int_equal(json_integer_value(json_object_get(b, "last_sequence")), 2);
	assert_string_equal(json_string_value(json_object_get(b, "kernel_release")), "6.1.0-18-amd64");
	assert_string_equal(json_string_value(json_object_get(b, "agent_version")), "sysom-agent test");
	assert_int_equal(json_integer_value(json_object_get(b, "sample_hz")), 99);
	assert_non_null(strstr(json_string_value(json_object_get(b, "last_seen")), "Z"));
	assert_non_null(json_string_value(json_object_get(b, "first_seen")));
	json_decref(doc);
}

static void test_processes(void **state)
{
	struct harness *h = *state;
	struct http_response resp;
	char *body;

	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 2, .epoch = 1,
									  .sequence = 1, .hostname = "gpu-b",
									  .window_start_ns = HARNESS_T0 }),
			 200);
	assert_int_equal(get(h, api_processes_get, "node=node-1", &resp, &body), 200);
	json_t *doc = json_loads(body, 0, NULL);
	free(body);
	assert_non_null(doc);
	json_t *list = json_object_get(doc, "processes");
	assert_int_equal(json_array_size(list), 2);
	json_t *p = json_array_get(list, 0);
	assert_int_equal(json_integer_value(json_object_get(p, "pid")), FIXTURE_PID_PYTHON);
	assert_int_equal(json_integer_value(json_object_get(p, "samples")), 13);
	assert_string_equal(json_string_value(json_object_get(p, "comm")), "python3");
	assert_string_equal(json_string_value(json_object_get(p, "cmdline")), "python3 train.py");
	assert_string_equal(json_string_value(json_object_get(p, "hostname")), "node-1");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "samples")), 9);
	json_decref(doc);
	/* Both nodes, one page of one, and a range with nothing. */
	assert_int_equal(get(h, api_processes_get, "limit=1", &resp, &body), 200);
	doc = json_loads(body, 0, NULL);
	free(body);
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 1);
	json_decref(doc);
	assert_int_equal(get(h, api_processes_get, "", &resp, &body), 200);
	doc = json_loads(body, 0, NULL);
	free(body);
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 4);
	json_decref(doc);
	assert_int_equal(get(h, api_processes_get, "from=-10m", &resp, &body), 200);
	assert_non_null(strstr(body, "\"processes\":[]"));
	free(body);
}

static void test_metrics(void **state)
{
	struct harness *h = *state;
	struct http_response resp;
	char *body;

	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 1, .epoch = 1,
									  .sequence = 1,
									  .window_start_ns = HARNESS_T0 }),
			 200); /* a duplicate */
	assert_int_equal(get(h, api_metrics_get, "", &resp, &body), 200);
	assert_string_equal(resp.content_type, "text/plain; version=0.0.4; charset=utf-8");
	static const char *const want[] = {
		"# TYPE sysom_ingest_batches_total counter\n",
		"sysom_ingest_batches_total{result=\"stored\"} 1\n",
		"sysom_ingest_batches_total{result=\"duplicate\"} 1\n",
		"sysom_ingest_batches_total{result=\"rejected\"} 0\n",
		"sysom_ingest_samples_total 22\n",
		"sysom_ingest_bytes_total{stage=\"compressed\"} ",
		"sysom_ingest_errors_total{reason=\"storage_full\"} 0\n",
		"# TYPE sysom_ingest_duration_seconds histogram\n",
		"sysom_ingest_duration_seconds_bucket{le=\"0.001\"} ",
		"sysom_ingest_duration_seconds_bucket{le=\"+Inf\"} 2\n",
		"sysom_ingest_duration_seconds_count 2\n",
		"sysom_kernel_symbol_uploads_total{result=\"stored\"} 1\n",
		"# TYPE sysom_store_size_bytes gauge\n",
		"# TYPE sysom_agent_ticks_total counter\n",
		"sysom_agent_ticks_total{node=\"node-1\",node_id=\"01010101010101010101010101010101\"} 990\n",
		"sysom_agent_samples_total{node=\"node-1\",node_id=\"01010101010101010101010101010101\"} 22\n",
		"sysom_build_info{version=",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strstr(body, want[i]))
			fail_msg("metrics lack '%s':\n%s", want[i], body);
	/* Each family is declared once (its samples are contiguous). */
	static const char *const families[] = { "# TYPE sysom_agent_ticks_total ",
						"# TYPE sysom_ingest_errors_total ",
						"# TYPE sysom_http_requests_total " };
	for (size_t i = 0; i < 2; i++) {
		const char *first = strstr(body, families[i]);
		assert_non_null(first);
		assert_null(strstr(first + 1, families[i]));
	}
	/* Without a transport (not started here) there are no sysom_http_* families. */
	assert_null(strstr(body, families[2]));
	free(body);
}

#define TOKEN_AGENT "agent-node-1"
#define TOKEN_READ "dashboard"
#define TOKEN_ADMIN "operator"

/* Calls a handler with `token` (NULL: none); returns the status, frees the body unless `out`. */
static int call_as(struct harness *h, http_handler_fn fn, void *ctx, const char *method,
		   const char *path, const char *token, const char *body, char **out)
{
	struct test_request t;
	struct http_response resp;
	char *got = NULL;
	int status;

	request_init(&t, method, path, "");
	if (token)
		request_token(&t, token);
	if (body)
		request_body(&t, body, strlen(body));
	status = call(fn, ctx ? ctx : h->api, &t, &resp, &got);
	if (out)
		*out = got;
	else
		free(got);
	return status;
}

/* Read credentials get every GET and no write; agent credentials no query; admin everything. */
static void test_scopes(void **state)
{
	struct harness *h = *state;
	static const struct {
		http_handler_fn fn;
		const char *method, *path;
		const char *body;
		int agent, read, admin; /* statuses */
	} cases[] = {
		{ api_nodes_get, "GET", "/api/v1/nodes", NULL, 403, 200, 200 },
		{ api_processes_get, "GET", "/api/v1/processes", NULL, 403, 200, 200 },
		{ api_flamegraph_get, "GET", "/api/v1/flamegraph", NULL, 403, 200, 200 },
		{ api_jobs_get, "GET", "/api/v1/jobs", NULL, 403, 200, 200 },
		{ api_diagnoses_get, "GET", "/api/v1/diagnoses", NULL, 403, 200, 200 },
		{ api_job_get, "GET", "/api/v1/jobs/job-9/settings", NULL, 403, 200, 200 },
		{ api_job_put, "PUT", "/api/v1/jobs/job-9/settings", "{\"k\":4}", 403, 403, 200 },
		{ api_job_put, "POST", "/api/v1/jobs/job-9/baseline", NULL, 403, 403, 0 },
		{ ingest_batch_post, "POST", INGEST_PATH, NULL, 400, 403, 400 }, /* no key: 400 */
	};
	char *body;

	assert_int_equal(harness_credentials(h->auth, "agent node-1 " TOKEN_AGENT
						 " 01010101010101010101010101010101\n"
						 "read grafana " TOKEN_READ "\n"
						 "admin ops " TOKEN_ADMIN "\n"),
			 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *tokens[] = { TOKEN_AGENT, TOKEN_READ, TOKEN_ADMIN };
		const int want[] = { cases[i].agent, cases[i].read, cases[i].admin };
		void *ctx = cases[i].fn == ingest_batch_post ? (void *)h->ingest : NULL;
		for (int k = 0; k < 3; k++) {
			int got = call_as(h, cases[i].fn, ctx, cases[i].method, cases[i].path, tokens[k],
					  cases[i].body, &body);
			/* 0: anything past authorization (the view's own answer) */
			if (want[k] ? got != want[k] : got == 401 || got == 403)
				fail_msg("%s %s as %s: %d %s (want %d)", cases[i].method, cases[i].path,
					 tokens[k], got, body, want[k]);
			if (got == 403)
				assert_non_null(strstr(body, k == 0 ? "'node-1'" : "'grafana'"));
			free(body);
		}
		/* No token, or an unknown one: 401. */
		assert_int_equal(call_as(h, cases[i].fn, ctx, cases[i].method, cases[i].path, NULL,
					 cases[i].body, NULL), 401);
		assert_int_equal(call_as(h, cases[i].fn, ctx, cases[i].method, cases[i].path, "nope",
					 cases[i].body, NULL), 401);
	}
	/* The shared token keeps every scope. */
	assert_int_equal(call_as(h, api_job_put, NULL, "PUT", "/api/v1/jobs/job-9/settings",
				 HARNESS_TOKEN, "{\"k\":5}", NULL), 200);
	/* Only admin wrote: the read credential sees the admin's last value. */
	assert_int_equal(call_as(h, api_job_get, NULL, "GET", "/api/v1/jobs/job-9/settings",
				 TOKEN_READ, NULL, &body), 200);
	assert_non_null(strstr(body, "\"k\":5"));
	free(body);
}

/* /metrics: without a token (or with an agent's) no hostname, node id or job id, the agent
 * counters summed; with read or admin, per node; a wrong token 401. */
static void test_metrics_scopes(void **state)
{
	struct harness *h = *state;
	const char *node_series = "sysom_agent_ticks_total{node=\"node-1\",node_id=\"01010101010101010101010101010101\"} 990\n";
	char *body;

	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 2, .epoch = 1,
									  .sequence = 1, .hostname = "gpu-b",
									  .window_start_ns = HARNESS_T0 }),
			 200);
	assert_int_equal(harness_credentials(h->auth, "agent node-1 " TOKEN_AGENT
						 " 01010101010101010101010101010101\n"
						 "read grafana " TOKEN_READ "\n"
						 "admin ops " TOKEN_ADMIN "\n"),
			 0);
	const char *aggregate_as[] = { NULL, TOKEN_AGENT };
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(call_as(h, api_metrics_get, NULL, "GET", "/metrics", aggregate_as[i],
					 NULL, &body), 200);
		assert_null(strstr(body, "node-1"));
		assert_null(strstr(body, "gpu-b"));
		assert_null(strstr(body, "0101010101010101"));
		assert_null(strstr(body, "0202020202020202"));
		assert_null(strstr(body, "node_id="));
		assert_null(strstr(body, "job="));
		/* Two nodes of 990 ticks each: the sum, unlabelled, once. */
		assert_non_null(strstr(body, "\nsysom_agent_ticks_total 1980\n"));
		assert_non_null(strstr(body, "\nsysom_agent_samples_total 44\n"));
		assert_non_null(strstr(body, "sysom_ingest_batches_total{result=\"stored\"} 2\n"));
		free(body);
	}
	const char *detailed_as[] = { TOKEN_READ, TOKEN_ADMIN, HARNESS_TOKEN };
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(call_as(h, api_metrics_get, NULL, "GET", "/metrics", detailed_as[i],
					 NULL, &body), 200);
		assert_non_null(strstr(body, node_series));
		assert_non_null(strstr(body, "sysom_agent_ticks_total{node=\"gpu-b\""));
		assert_null(strstr(body, "\nsysom_agent_ticks_total 1980\n"));
		free(body);
	}
	assert_int_equal(call_as(h, api_metrics_get, NULL, "GET", "/metrics", "wrong", NULL, &body),
			 401);
	free(body);
	/* Without authentication configured, everything (as before credentials existed). */
	assert_int_equal(auth_token_set(h->auth, NULL), 0);
	assert_int_equal(auth_credentials_set(h->auth, NULL, NULL), 0);
	assert_int_equal(call_as(h, api_metrics_get, NULL, "GET", "/metrics", NULL, NULL, &body), 200);
	assert_non_null(strstr(body, node_series));
	free(body);
}

static void test_routes(void **state)
{
	struct harness *h = *state;
	struct http_route routes[API_ROUTE_COUNT];
	size_t n = api_routes_build(h->api, h->ingest, NULL, NULL, routes);
	int seen = 0;

	/* Without the symbol repository its four routes are left out (test_symbols has them). */
	assert_int_equal(n, API_ROUTE_COUNT - 4);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(routes[i].path, "/api/v1/ingest") == 0) {
			assert_string_equal(routes[i].method, "POST");
			assert_int_equal(routes[i].max_body, 16u << 20);
			seen |= 1;
		} else if (strcmp(routes[i].path, "/api/v1/kernel-symbols/") == 0) {
			assert_true(routes[i].prefix);
			assert_int_equal(routes[i].max_body,
					 strcmp(routes[i].method, "PUT") == 0 ? 64u << 20 : 0);
			seen |= strcmp(routes[i].method, "PUT") == 0 ? 2 : 4;
		} else if (strcmp(routes[i].path, "/api/v1/cluster/feed") == 0) {
			/* A replica's forwarded batch: the ingest limit. */
			assert_string_equal(routes[i].method, "POST");
			assert_int_equal(routes[i].max_body, 16u << 20);
			seen |= 64;
		} else if (strcmp(routes[i].path, API_JOBS_PREFIX) == 0 &&
			   strcmp(routes[i].method, "PUT") == 0) {
			assert_int_equal(routes[i].max_body, API_MAX_SETTINGS_BODY); /* settings */
			seen |= 16;
		} else if (strcmp(routes[i].path, API_JOBS_PREFIX) == 0 &&
			   strcmp(routes[i].method, "POST") == 0) {
			assert_int_equal(routes[i].max_body, 0); /* baseline: parameters only */
			seen |= 32;
		} else {
			assert_string_equal(routes[i].method, "GET");
			assert_int_equal(routes[i].max_body, 0);
			seen |= 8;
		}
	}
	assert_int_equal(seen, 127);
	struct api_route_limits lim = { .ingest_max_body = 1000, .ksyms_max_body = 2000 };
	api_routes_build(h->api, h->ingest, NULL, &lim, routes);
	assert_int_equal(routes[0].max_body, 1000);
	assert_int_equal(routes[1].max_body, 2000);
}

static void test_utf8(void **state)
{
	struct harness *h = *state;
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "plain", "plain" },
		{ "caf\xc3\xa9", "caf\xc3\xa9" },
		{ "\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80!" },
		{ "a\xffz", "a\xef\xbf\xbdz" },
		{ "\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd" },                 /* overlong NUL */
		{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
		{ "\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "end\xe2\x82", "end\xef\xbf\xbd\xef\xbf\xbd" },            /* truncated */
	};
	struct http_response resp;
	char *body;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct byte_buf b = { 0 };
		render_utf8_append(&b, cases[i].in, strlen(cases[i].in));
		byte_buf_append(&b, "", 1);
		assert_string_equal((const char *)b.data, cases[i].out);
		byte_buf_free(&b);
	}
	/* Agent strings with bad bytes come out as valid JSON and folded text. */
	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 5, .epoch = 1,
									  .sequence = 1, .hostname = "bad\xfehost",
									  .python_comm = "py;th\xff",
									  .window_start_ns = HARNESS_T0 }),
			 200);
	assert_int_equal(get(h, api_nodes_get, "", &resp, &body), 200);
	json_t *doc = json_loads(body, 0, NULL);
	assert_non_null(doc);
	json_decref(doc);
	assert_non_null(strstr(body, "bad\xef\xbf\xbdhost"));
	free(body);
	assert_int_equal(get(h, api_flamegraph_get, "node=05050505050505050505050505050505&pid=4242",
			     &resp, &body), 200);
	static const char want[] = "py:th\xef\xbf\xbd;python3.11+0x1000";
	assert_memory_equal(body, want, sizeof(want) - 1);
	free(body);
	assert_int_equal(get(h, api_flamegraph_get, "format=json&comm=py%3Bth%FF", &resp, &body), 200);
	doc = json_loads(body, 0, NULL);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(doc, "total")), 13);
	json_decref(doc);
	free(body);
}


/* ---- training jobs ---- */

/* Builds the job batch of `js` and posts it; ingest must answer 200 with `want` in its body. */
static void post_spec(struct harness *h, const struct job_spec *js, const char *want)
{
	struct sysom_batch b;
	char *body = NULL;

	assert_int_equal(job_batch_build(&b, js), 0);
	assert_int_equal(harness_post_batch(h, &b, &body), 200);
	if (!strstr(body, want))
		fail_msg("ingest answered %s (want %s)", body, want);
	free(body);
	sysom_batch_free(&b);
}

static void post_job(struct harness *h, uint8_t node, int skip_rank, const char *want)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-42", .first_rank = 4 * (node - 1), .local_ranks = 4,
			       .instances = 3, .skip_rank = skip_rank, .launches = true };

	post_spec(h, &js, want);
}

static json_t *get_json(struct harness *h, http_handler_fn fn, const char *path, const char *query)
{
	struct test_request t;
	struct http_response resp;
	char *body;
	json_t *doc;

	request_init(&t, "GET", path, query);
	request_token(&t, HARNESS_TOKEN);
	if (call(fn, h->api, &t, &resp, &body) != 200)
		fail_msg("%s?%s: %d %s", path, query, resp.status, body);
	doc = json_loads(body, 0, NULL);
	if (!doc)
		fail_msg("%s: invalid JSON %s", path, body);
	free(body);
	return doc;
}

static json_t *collectives(struct harness *h, const char *query)
{
	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/collectives", query);
	json_t *inst = json_incref(json_object_get(doc, "instances"));

	json_decref(doc);
	return inst;
}

static void test_jobs(void **state)
{
	struct harness *h = *state;

	post_job(h, 1, -1, "\"stored\"");
	post_job(h, 2, -1, "\"stored\"");
	post_job(h, 1, -1, "\"duplicate\"");

	json_t *doc = get_json(h, api_jobs_get, "/api/v1/jobs", "");
	json_t *jobs = json_object_get(doc, "jobs");
	assert_int_equal(json_array_size(jobs), 1);
	json_t *j = json_array_get(jobs, 0);
	assert_string_equal(json_string_value(json_object_get(j, "job")), "job-42");
	assert_int_equal(json_integer_value(json_object_get(j, "world_size")), 8);
	assert_int_equal(json_integer_value(json_object_get(j, "ranks")), 8);
	assert_int_equal(json_integer_value(json_object_get(j, "nodes")), 2);
	assert_string_equal(json_string_value(json_object_get(j, "first_seen")),
			    "2023-11-14T22:13:20.000Z");
	json_decref(doc);

	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42", "");
	assert_int_equal(json_integer_value(json_object_get(doc, "world_size")), 8);
	json_t *ranks = json_object_get(doc, "ranks");
	assert_int_equal(json_array_size(ranks), 8);
	json_t *r5 = json_array_get(ranks, 5);
	assert_int_equal(json_integer_value(json_object_get(r5, "rank")), 5);
	assert_int_equal(json_integer_value(json_object_get(r5, "local_rank")), 1);
	assert_int_equal(json_integer_value(json_object_get(r5, "pid")), JOB_PID(5));
	assert_string_equal(json_string_value(json_object_get(r5, "hostname")), "node-2");
	assert_string_equal(json_string_value(json_object_get(r5, "node_id")),
			    "02020202020202020202020202020202");
	assert_string_equal(json_string_value(json_object_get(r5, "source")), "environment");
	assert_string_equal(json_string_value(json_object_get(r5, "groups")), "tp=1,dp=2");
	json_t *nodes = json_object_get(doc, "nodes");
	assert_int_equal(json_array_size(nodes), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, 0), "hostname")),
			    "node-1");
	assert_int_equal(json_array_size(json_object_get(json_array_get(nodes, 1), "ranks")), 4);
	json_t *comms = json_object_get(doc, "communicators");
	assert_int_equal(json_array_size(comms), 5);
	json_t *world = json_array_get(comms, 0);
	assert_string_equal(json_string_value(json_object_get(world, "key")), "0000000000000abc");
	assert_int_equal(json_integer_value(json_object_get(world, "nranks")), 8);
	assert_int_equal(json_integer_value(json_object_get(world, "ranks_seen")), 8);
	assert_true(json_is_null(json_object_get(world, "parent_key")));
	assert_string_equal(json_string_value(json_object_get(world, "key_source")), "unique_id");
	json_t *m3 = json_array_get(json_object_get(world, "ranks"), 3);
	assert_int_equal(json_integer_value(json_object_get(m3, "rank")), 3);
	assert_int_equal(json_integer_value(json_object_get(m3, "pid")), JOB_PID(3));
	json_t *tp = json_array_get(comms, 1);
	assert_string_equal(json_string_value(json_object_get(tp, "key")), "0000000000007000");
	assert_string_equal(json_string_value(json_object_get(tp, "parent_key")), "0000000000000abc");
	assert_int_equal(json_integer_value(json_object_get(tp, "split_color")), 0);
	assert_int_equal(json_integer_value(json_object_get(tp, "ranks_seen")), 2);
	assert_string_equal(json_string_value(json_object_get(tp, "key_source")), "split");
	json_t *groups = json_object_get(doc, "groups");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(groups, "tp"), "1")), 4);
	assert_int_equal(json_object_size(json_object_get(groups, "dp")), 4);
	json_decref(doc);

	/* Three AllReduce instances, complete, 8 ranks each, ordered by entry. */
	json_t *inst = collectives(h, "");
	assert_int_equal(json_array_size(inst), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *x = json_array_get(inst, i);
		assert_string_equal(json_string_value(json_object_get(x, "op")), "AllReduce");
		assert_int_equal(json_integer_value(json_object_get(x, "seq")), (json_int_t)i);
		assert_string_equal(json_string_value(json_object_get(x, "comm")), "0000000000000abc");
		assert_int_equal(json_integer_value(json_object_get(x, "bytes")), 4096);
		assert_int_equal(json_integer_value(json_object_get(x, "count")), 1024);
		assert_int_equal(json_integer_value(json_object_get(x, "nranks")), 8);
		assert_int_equal(json_integer_value(json_object_get(x, "ranks_seen")), 8);
		assert_true(json_is_true(json_object_get(x, "complete")));
		assert_int_equal(json_integer_value(json_object_get(x, "skew_ns")), 7000000);
		json_t *calls = json_object_get(x, "calls");
		assert_int_equal(json_array_size(calls), 8);
		json_t *c7 = json_array_get(calls, 7);
		assert_int_equal(json_integer_value(json_object_get(c7, "rank")), 7);
		assert_int_equal(json_integer_value(json_object_get(c7, "entry_delay_ns")), 7000000);
		assert_int_equal(json_integer_value(json_object_get(c7, "duration_ns")), 13000000);
		assert_int_equal(json_integer_value(json_object_get(c7, "entry_ns")),
				 (json_int_t)(HARNESS_T0 + (i + 1) * 1000000000ULL + 7000000));
		assert_string_equal(json_string_value(json_object_get(c7, "hostname")), "node-2");
	}
	json_decref(inst);
	/* Filters: communicator (any case, 0x), op (any case), time, limit. */
	static const struct {
		const char *query;
		size_t n;
	} cases[] = {
		{ "comm=abc", 3 },	{ "comm=0xABC", 3 },	  { "comm=7000", 0 },
		{ "op=allreduce", 3 },	{ "op=Broadcast", 0 },	  { "from=1700000001.5", 2 },
		{ "to=1700000001.5", 1 }, { "limit=2", 2 },	  { "from=-10m", 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		inst = collectives(h, cases[i].query);
		if (json_array_size(inst) != cases[i].n)
			fail_msg("%s: %zu instances, want %zu", cases[i].query, json_array_size(inst),
				 cases[i].n);
		json_decref(inst);
	}
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/collectives", "limit=2");
	assert_true(json_is_true(json_object_get(doc, "truncated")));
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/collectives", "limit=3");
	assert_true(json_is_false(json_object_get(doc, "truncated")));
	json_decref(doc);
}

static void test_collectives_missing_rank(void **state)
{
	struct harness *h = *state;

	post_job(h, 1, -1, "\"stored\"");
	post_job(h, 2, 5, "\"stored\"");
	json_t *inst = collectives(h, "");
	assert_int_equal(json_array_size(inst), 3);
	json_t *x = json_array_get(inst, 1);
	assert_int_equal(json_integer_value(json_object_get(x, "seq")), 1);
	assert_int_equal(json_integer_value(json_object_get(x, "ranks_seen")), 7);
	assert_true(json_is_false(json_object_get(x, "complete")));
	assert_int_equal(json_array_size(json_object_get(x, "calls")), 7);
	assert_true(json_is_true(json_object_get(json_array_get(inst, 0), "complete")));
	assert_true(json_is_true(json_object_get(json_array_get(inst, 2), "complete")));
	json_decref(inst);
}

static void test_gpu_flamegraph(void **state)
{
	struct harness *h = *state;
	const char *line_k = "python3;python3.11+0x1000;libc.so.6+0x29d90;[gpu] " JOB_KERNEL;
	const char *line_u = "python3;python3.11+0x1000;libc.so.6+0x29d90;[gpu] 0xdead";
	char want[512];

	post_job(h, 1, -1, "\"stored\"");
	post_job(h, 2, -1, "\"stored\"");
	post_job(h, 2, -1, "\"duplicate\"");
	snprintf(want, sizeof(want), "%s 80\n%s 16\npython3;[gpu] memcpyKernel 8\n", line_k, line_u);
	expect_folded(h, "kind=gpu-launch", want);
	expect_folded(h, "kind=gpu-launch&job=job-42", want);
	expect_folded(h, "kind=gpu-launch&job=job-7", "");
	snprintf(want, sizeof(want), "%s 40\n%s 8\npython3;[gpu] memcpyKernel 4\n", line_k, line_u);
	expect_folded(h, "kind=gpu-launch&node=node-2", want);
	snprintf(want, sizeof(want), "%s 10\n%s 2\npython3;[gpu] memcpyKernel 1\n", line_k, line_u);
	expect_folded(h, "kind=gpu-launch&pid=5003", want);
	snprintf(want, sizeof(want), "%s 80\n", line_k);
	expect_folded(h, "kind=gpu-launch&limit=1", want);
	/* Launches are stamped with their window's end (T0 + 30 s). */
	expect_folded(h, "kind=gpu-launch&to=1700000029", "");
	/* The CPU profile stays the default (the job batches carry the fixture's samples too:
	 * three batches in all); job= filters it too. */
	expect_folded(h, "kind=cpu&pid=777", LINE_NCCL_K " 15\n" LINE_NCCL_T " 12\n");
	expect_folded(h, "job=job-42", "");

	json_t *doc = get_json(h, api_flamegraph_get, "/api/v1/flamegraph", "kind=gpu-launch&format=json");
	assert_int_equal(json_integer_value(json_object_get(doc, "total")), 8 * 13);
	json_t *first = json_array_get(json_object_get(doc, "stacks"), 0);
	assert_int_equal(json_integer_value(json_object_get(first, "count")), 80);
	json_t *frames = json_object_get(first, "frames");
	assert_int_equal(json_array_size(frames), 3);
	json_t *leaf = json_array_get(frames, 2);
	assert_string_equal(json_string_value(json_object_get(leaf, "name")), "[gpu] " JOB_KERNEL);
	assert_string_equal(json_string_value(json_object_get(leaf, "kind")), "gpu");
	assert_null(json_object_get(leaf, "offset"));
	assert_true(json_is_null(json_object_get(json_object_get(first, "process"), "pid")));
	json_decref(doc);
}

static void expect_job_status(struct harness *h, const char *path, const char *query, int status,
			      const char *fragment)
{
	struct test_request t;
	struct http_response resp;
	char *body;
	int got;

	request_init(&t, "GET", path, query);
	request_token(&t, HARNESS_TOKEN);
	got = call(strcmp(path, "/api/v1/jobs") == 0 ? api_jobs_get : api_job_get, h->api, &t,
		   &resp, &body);
	if (got != status || (fragment && !strstr(body, fragment)))
		fail_msg("%s?%s: %d %s (want %d, '%s')", path, query, got, body, status, fragment);
	assert_non_null(strstr(body, "{\"error\":"));
	free(body);
}

/* DataLoader workers of rank 1 (JOB_RANKS role worker): the job lists each rank once, the
 * workers apart and under their rank; the job list still counts 4 ranks; a rank-filtered
 * profile query would include them (they carry rank 1's numbers). */
static void test_job_workers(void **state)
{
	struct harness *h = *state;
	struct job_spec js = { .base = { .node = 1, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-42", .first_rank = 0, .local_ranks = 4, .instances = 1,
			       .skip_rank = -1 };
	struct sysom_batch b;
	char *body = NULL;

	assert_int_equal(job_batch_build(&b, &js), 0);
	const struct sysom_job_rank base = b.job_ranks[1]; /* rank 1 */
	assert_int_equal(base.rank, 1);
	for (uint32_t i = 0; i < 2; i++) {
		struct sysom_process p = b.processes[base.process];
		uint32_t proc;

		p.tgid = JOB_PID(1) + 100 + i;
		p.ppid = JOB_PID(1);
		assert_int_equal(sysom_batch_add_process(&b, &p, &proc), 0);
		struct sysom_job_rank w = base;
		w.process = proc;
		w.role = SYSOM_JOB_ROLE_WORKER;
		w.rank_pid = JOB_PID(1);
		assert_int_equal(sysom_batch_set_job_rank(&b, &w), 0);
	}
	assert_int_equal(harness_post_batch(h, &b, &body), 200);
	free(body);
	sysom_batch_free(&b);

	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/job-42", "");
	json_t *ranks = json_object_get(doc, "ranks"), *workers = json_object_get(doc, "workers");
	assert_int_equal(json_array_size(ranks), 4);
	assert_int_equal(json_integer_value(json_object_get(doc, "processes")), 6);
	for (size_t i = 0; i < 4; i++) {
		json_t *r = json_array_get(ranks, i);
		assert_int_equal(json_integer_value(json_object_get(r, "rank")), (json_int_t)i);
		assert_int_equal(json_integer_value(json_object_get(r, "pid")), JOB_PID(i));
		json_t *rw = json_object_get(r, "workers");
		assert_int_equal(json_array_size(rw), i == 1 ? 2 : 0);
		if (i == 1) {
			assert_int_equal(json_integer_value(json_array_get(rw, 0)), JOB_PID(1) + 100);
			assert_int_equal(json_integer_value(json_array_get(rw, 1)), JOB_PID(1) + 101);
		}
	}
	assert_int_equal(json_array_size(workers), 2);
	json_t *w0 = json_array_get(workers, 0);
	assert_int_equal(json_integer_value(json_object_get(w0, "rank")), 1);
	assert_int_equal(json_integer_value(json_object_get(w0, "rank_pid")), JOB_PID(1));
	assert_int_equal(json_integer_value(json_object_get(w0, "pid")), JOB_PID(1) + 100);
	assert_int_equal(json_array_size(json_object_get(json_array_get(json_object_get(doc, "nodes"),
									 0), "ranks")), 4);
	json_decref(doc);

	doc = get_json(h, api_jobs_get, "/api/v1/jobs", "");
	json_t *j = json_array_get(json_object_get(doc, "jobs"), 0);
	assert_int_equal(json_integer_value(json_object_get(j, "ranks")), 4);
	json_decref(doc);
}

static void test_job_bad_parameters(void **state)
{
	struct harness *h = *state;
	const char *coll = "/api/v1/jobs/job-42/collectives";
	char longpath[1200];

	post_job(h, 1, -1, "\"stored\"");
	expect_job_status(h, coll, "comm=xyz", 400, "'comm'");
	expect_job_status(h, coll, "comm=", 400, "'comm'");
	expect_job_status(h, coll, "comm=0x", 400, "'comm'");
	expect_job_status(h, coll, "comm=12345678901234567", 400, "'comm'");
	expect_job_status(h, coll, "comm=-1", 400, "'comm'");
	expect_job_status(h, coll, "op=Bogus", 400, "'op'");
	expect_job_status(h, coll, "op=CommInitRank", 400, "'op'");
	expect_job_status(h, coll, "op=GroupStart", 400, "'op'");
	expect_job_status(h, coll, "from=1700000010&to=1700000000", 400, "after");
	expect_job_status(h, coll, "from=soon", 400, "invalid time");
	expect_job_status(h, coll, "limit=0", 400, "limit");
	expect_job_status(h, coll, "limit=10001", 400, "limit");
	expect_job_status(h, coll, "node=node-1", 400, "do not apply");
	expect_job_status(h, coll, "op=%zz", 400, "percent-encoded");
	expect_job_status(h, "/api/v1/jobs", "limit=0", 400, "limit");
	expect_job_status(h, "/api/v1/jobs", "limit=100001", 400, "limit");
	expect_job_status(h, "/api/v1/jobs/job-7", "", 404, "no job 'job-7'");
	expect_job_status(h, "/api/v1/jobs/", "", 404, "missing job id");
	expect_job_status(h, "/api/v1/jobs/job-42/other", "", 404, "no such resource");
	snprintf(longpath, sizeof(longpath), "/api/v1/jobs/%01100d", 7);
	expect_job_status(h, longpath, "", 400, "longer");
	expect_status(h, api_flamegraph_get, "kind=gpu", 400, "'kind'");
	expect_status(h, api_flamegraph_get, "kind=gpu-times", 400, "gpu-time");
	/* An unknown job's collectives are an empty list. */
	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/job-7/collectives", "");
	assert_int_equal(json_array_size(json_object_get(doc, "instances")), 0);
	json_decref(doc);
	/* The token is required. */
	struct test_request t;
	struct http_response resp;
	char *body;
	request_init(&t, "GET", "/api/v1/jobs", "");
	assert_int_equal(call(api_jobs_get, h->api, &t, &resp, &body), 401);
	free(body);
	request_init(&t, "GET", coll, "");
	assert_int_equal(call(api_job_get, h->api, &t, &resp, &body), 401);
	free(body);
}

/* ---- GPU-side timing ---- */

static void post_gpu_job(struct harness *h, uint8_t node, uint64_t sequence, const char *want)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = sequence,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-42", .first_rank = 4 * (node - 1), .local_ranks = 4,
			       .instances = 3, .skip_rank = -1, .launches = true,
			       .gpu_timing = true, .slow_rank = 3 };

	post_spec(h, &js, want);
}

static json_t *gpu_process(json_t *doc, int rank)
{
	size_t i;
	json_t *p;

	json_array_foreach(json_object_get(doc, "processes"), i, p)
		if (json_integer_value(json_object_get(p, "rank")) == rank)
			return p;
	fail_msg("rank %d missing", rank);
	return NULL;
}

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_number(v))
		fail_msg("'%s' is not a number", key);
	return json_number_value(v);
}

static void test_job_gpu(void **state)
{
	struct harness *h = *state;
	const uint64_t fast = 10 * 100000 + 5000 + 4000, slow = 10 * 200000 + 5000 + 4000;

	post_gpu_job(h, 1, 2, "\"stored\"");
	post_gpu_job(h, 2, 2, "\"stored\"");
	post_gpu_job(h, 2, 2, "\"duplicate\""); /* stored once */
	post_gpu_job(h, 1, 3, "\"stored\"");    /* a second window of node 1: rows add up */

	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/gpu", "");
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 8);
	assert_false(json_is_true(json_object_get(doc, "truncated")));
	json_t *r3 = gpu_process(doc, 3), *r5 = gpu_process(doc, 5);
	assert_int_equal(num(r3, "gpu_kernel_ns"), 2 * slow); /* node 1: two windows */
	assert_int_equal(num(r5, "gpu_kernel_ns"), fast);
	assert_int_equal(num(r5, "kernel_executions"), 15);
	assert_int_equal(num(r5, "pid"), JOB_PID(5));
	/* Kernels by GPU time, largest first, with their histogram. */
	json_t *k = json_array_get(json_object_get(r5, "kernels"), 0);
	assert_string_equal(json_string_value(json_object_get(k, "name")), JOB_KERNEL);
	assert_int_equal(num(k, "count"), 10);
	assert_int_equal(num(k, "mean_ns"), 100000);
	assert_int_equal(num(json_object_get(r3, "kernels") ? json_array_get(json_object_get(r3, "kernels"), 0) : NULL, "count"), 20);
	json_t *hist = json_object_get(k, "histogram");
	assert_int_equal(json_array_size(hist), SYSOM_GPU_HIST_BUCKETS);
	assert_int_equal(json_integer_value(json_array_get(hist, sysom_gpu_hist_bucket(100000))), 10);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(r5, "kernels"), 2), "name")),
			    JOB_UNLAUNCHED);
	/* The slow rank stands out against the median. */
	json_t *summary = json_object_get(doc, "summary");
	assert_int_equal(num(summary, "processes_with_gpu_time"), 8);
	/* Node 1 (ranks 0-3) has two windows: 4 x fast, 3 x 2 fast, 2 slow. */
	const double median = (fast + 2.0 * fast) / 2;
	assert_true(fabs(num(summary, "median_gpu_kernel_ns") - median) < 1e-6);
	assert_true(fabs(num(r3, "gpu_time_ratio_to_median") - 2 * slow / median) < 1e-9);
	assert_true(fabs(num(r5, "gpu_time_ratio_to_median") - fast / median) < 1e-9);
	/* Collectives: GPU time and algorithm bandwidth. */
	json_t *c = json_array_get(json_object_get(r5, "collectives"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "func")), "AllReduce");
	assert_string_equal(json_string_value(json_object_get(c, "comm_id")), "0000000000000abc");
	assert_string_equal(json_string_value(json_object_get(c, "comm_name")), "world");
	assert_true(json_is_null(json_object_get(c, "peer")));
	assert_int_equal(num(c, "count"), 3);
	json_t *g = json_object_get(c, "gpu");
	assert_int_equal(num(g, "mean_ns"), 20000);
	assert_true(fabs(num(g, "algbw_gbps") - 4096.0 / 20000) < 1e-9);
	assert_int_equal(num(json_object_get(c, "span"), "mean_ns"), 30000);
	assert_int_equal(num(json_array_get(json_object_get(r3, "collectives"), 0), "count"), 6);
	/* Links: the least-squares fit over every transfer recovers latency and bandwidth, also
	 * after two windows' statistics were added. */
	json_t *l = json_array_get(json_object_get(r3, "links"), 0);
	assert_int_equal(num(l, "peer"), 4);
	assert_int_equal(num(l, "transfers"), 4);
	json_t *fit = json_object_get(l, "fit");
	assert_true(fabs(num(fit, "latency_ns") - 5000) < 1e-6);
	assert_true(fabs(num(fit, "bandwidth_gbps") - 12.5) < 1e-9);
	assert_true(fabs(num(fit, "r2") - 1) < 1e-9);
	assert_int_equal(num(json_object_get(l, "min_fit"), "points"), 2);
	json_decref(doc);

	/* rank= and the time range filter. */
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/gpu", "rank=6");
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 1);
	assert_int_equal(num(gpu_process(doc, 6), "gpu_kernel_ns"), fast);
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/gpu", "to=1700000029");
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 0);
	assert_int_equal(num(json_object_get(doc, "summary"), "median_gpu_kernel_ns"), 0);
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-7/gpu", "");
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 0);
	json_decref(doc);

	/* Processes with NCCL profiles but no kernel rows (no CUPTI library loaded). */
	struct job_spec js = { .base = { .node = 3, .epoch = 1, .sequence = 1,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-9", .first_rank = 0, .local_ranks = 2, .instances = 1,
			       .skip_rank = -1, .gpu_timing = true, .slow_rank = -1 };
	struct sysom_batch b;
	char *body = NULL;
	assert_int_equal(job_batch_build(&b, &js), 0);
	b.gpu_kernel_count = 0;
	assert_int_equal(harness_post_batch(h, &b, &body), 200);
	free(body);
	sysom_batch_free(&b);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-9/gpu", "");
	assert_int_equal(json_array_size(json_object_get(doc, "processes")), 2);
	r5 = gpu_process(doc, 1);
	assert_int_equal(json_array_size(json_object_get(r5, "kernels")), 0);
	assert_int_equal(json_array_size(json_object_get(r5, "collectives")), 1);
	assert_true(json_is_null(json_object_get(r5, "gpu_time_ratio_to_median")));
	assert_int_equal(num(json_object_get(doc, "summary"), "processes_with_gpu_time"), 0);
	json_decref(doc);

	expect_job_status(h, "/api/v1/jobs/job-42/gpu", "rank=-1", 400, "'rank'");
	expect_job_status(h, "/api/v1/jobs/job-42/gpu", "rank=x", 400, "'rank'");
	expect_job_status(h, "/api/v1/jobs/job-42/gpu", "node=node-1", 400, "do not apply");
	expect_job_status(h, "/api/v1/jobs/job-42/gpu", "from=1700000010&to=1700000000", 400,
			  "after");
}

/* GPU time by launching stack: each kernel's time goes to the stacks that launched it; time
 * of kernels never seen launched stays visible under "[no launch stack]". */
static void test_gpu_time_flamegraph(void **state)
{
	struct harness *h = *state;
	const char *stack = "python3;python3.11+0x1000;libc.so.6+0x29d90;";
	char want[1024];

	post_gpu_job(h, 1, 2, "\"stored\"");
	snprintf(want, sizeof(want),
		 "%s[gpu] " JOB_KERNEL " 1000000\npython3;[gpu] memcpyKernel 5000\n"
		 "python3;[no launch stack];[gpu] " JOB_UNLAUNCHED " 4000\n", stack);
	expect_folded(h, "kind=gpu-time&pid=5002", want);
	snprintf(want, sizeof(want), "%s[gpu] " JOB_KERNEL " 2000000\n", stack);
	expect_folded(h, "kind=gpu-time&pid=5003&limit=1", want);
	expect_folded(h, "kind=gpu-time&job=job-7", "");

	json_t *doc = get_json(h, api_flamegraph_get, "/api/v1/flamegraph",
			       "kind=gpu-time&format=json");
	assert_string_equal(json_string_value(json_object_get(doc, "unit")), "ns");
	assert_int_equal(num(doc, "total"), 3 * 1009000 + 2009000);
	json_decref(doc);
	doc = get_json(h, api_flamegraph_get, "/api/v1/flamegraph", "kind=gpu-launch&format=json");
	assert_string_equal(json_string_value(json_object_get(doc, "unit")), "launches");
	json_decref(doc);
}

/* ---- stragglers ---- */

static void post_late_job(struct harness *h, uint8_t node, int late_rank, int late_ms)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-42", .first_rank = 4 * (node - 1), .local_ranks = 4,
			       .instances = 12, .skip_rank = -1, .late_rank = late_rank,
			       .late_ms = late_ms };

	post_spec(h, &js, "\"stored\"");
}

static void test_stragglers(void **state)
{
	struct harness *h = *state;

	/* Every rank enters `rank` ms after the instance starts (the fixture's schedule); rank 5
	 * enters 30 ms later still, so the 7 others wait for it in every all-reduce. */
	post_late_job(h, 1, 5, 30);
	post_late_job(h, 2, 5, 30);
	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/stragglers", "");
	json_t *comms = json_object_get(doc, "communicators");
	assert_int_equal(json_array_size(comms), 1); /* only the world communicator has calls */
	json_t *c = json_array_get(comms, 0);
	assert_string_equal(json_string_value(json_object_get(c, "comm")), "0000000000000abc");
	assert_int_equal(num(c, "nranks"), 8);
	assert_int_equal(num(c, "instances"), 12);
	assert_int_equal(num(c, "incomplete"), 0);
	assert_int_equal(json_array_size(json_object_get(c, "stragglers")), 1);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(c, "stragglers"), 0)), 5);
	json_t *top = json_array_get(json_object_get(c, "ranks"), 0);
	assert_int_equal(num(top, "rank"), 5);
	assert_int_equal(num(top, "pid"), JOB_PID(5));
	assert_string_equal(json_string_value(json_object_get(top, "persistence")), "persistent");
	/* Its lateness against the first entry: 35 ms; the others' (0-4, 6, 7 ms) median is 3. */
	assert_true(fabs(num(top, "mean_lateness_ms") - 35) < 1e-6);
	assert_true(fabs(num(top, "trimmed_lateness_ms") - 35) < 1e-6);
	assert_true(fabs(num(top, "excess_ms") - 32) < 1e-6);
	assert_true(fabs(num(top, "last_to_enter_fraction") - 1) < 1e-9);
	assert_true(json_is_true(json_object_get(top, "straggler")));
	/* Rank 7 (7 ms, the schedule's latest) is not a straggler. */
	json_t *second = json_array_get(json_object_get(c, "ranks"), 1);
	assert_int_equal(num(second, "rank"), 7);
	assert_false(json_is_true(json_object_get(second, "straggler")));
	json_t *job_list = json_object_get(doc, "stragglers");
	assert_int_equal(json_array_size(job_list), 1);
	assert_int_equal(num(json_array_get(job_list, 0), "rank"), 5);
	json_decref(doc);

	/* Thresholds are per request: a floor above 32 ms clears it; k is validated. */
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/stragglers", "min_excess_ms=40");
	assert_int_equal(json_array_size(json_object_get(doc, "stragglers")), 0);
	assert_int_equal(num(json_object_get(doc, "params"), "min_excess_ms"), 40);
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/stragglers", "window=4&k=3");
	c = json_array_get(json_object_get(doc, "communicators"), 0);
	assert_int_equal(num(c, "instances"), 4);
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/stragglers", "comm=0xfff");
	assert_int_equal(json_array_size(json_object_get(doc, "communicators")), 0);
	json_decref(doc);
	expect_job_status(h, "/api/v1/jobs/job-42/stragglers", "k=0", 400, "'k'");
	expect_job_status(h, "/api/v1/jobs/job-42/stragglers", "k=nan", 400, "'k'");
	expect_job_status(h, "/api/v1/jobs/job-42/stragglers", "window=0", 400, "'window'");
	expect_job_status(h, "/api/v1/jobs/job-42/stragglers", "comm=xyz", 400, "'comm'");
	expect_job_status(h, "/api/v1/jobs/job-42/stragglers", "pid=3", 400, "do not apply");
}

/* Two ranks' CPU profiles in one folded file, "stack a b". */
static void test_flamegraph_diff(void **state)
{
	struct harness *h = *state;
	struct job_spec js = { .base = { .node = 1, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-42", .first_rank = 0, .local_ranks = 4, .instances = 1,
			       .skip_rank = -1, .samples = true, .hot_rank = 2 };
	struct http_response resp;
	char *body = NULL;

	post_spec(h, &js, "\"stored\"");
	assert_int_equal(get(h, api_flamegraph_diff_get, "job=job-42&a=1&b=2", &resp, &body), 200);
	assert_string_equal(resp.content_type, "text/plain; charset=utf-8");
	assert_string_equal(body, "python3;python3.11+0x1000;libc.so.6+0x29d90 10 10\n"
				  "python3;python3.11+0x1000;libc.so.6+0x29d90;python3.11+0x2000 0 30\n");
	free(body);
	/* An unknown rank has an empty side. */
	assert_int_equal(get(h, api_flamegraph_diff_get, "job=job-42&a=2&b=9", &resp, &body), 200);
	assert_string_equal(body, "python3;python3.11+0x1000;libc.so.6+0x29d90 10 0\n"
				  "python3;python3.11+0x1000;libc.so.6+0x29d90;python3.11+0x2000 30 0\n");
	free(body);
	expect_status(h, api_flamegraph_diff_get, "a=1&b=2", 400, "'job'");
	expect_status(h, api_flamegraph_diff_get, "job=job-42&a=1", 400, "'b'");
	expect_status(h, api_flamegraph_diff_get, "job=job-42&a=x&b=1", 400, "'a'");
}

/* CPU waterline: per communicator, the rank whose share of a function stands above the
 * others' mean + k sigma is flagged with that function. */
static void test_waterline(void **state)
{
	struct harness *h = *state;
	struct job_spec js = { .base = { .node = 1, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "wl", .first_rank = 0, .local_ranks = 4, .instances = 1,
			       .skip_rank = -1, .samples = true, .hot_rank = 2 };

	for (int w = 0; w < 5; w++) { /* 5 windows: 50 samples on each rank, 200 on rank 2 */
		js.base.sequence = 20 + (uint64_t)w;
		post_spec(h, &js, "\"stored\"");
	}
	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/wl/waterline", "");
	json_t *c = json_array_get(json_object_get(doc, "communicators"), 0);
	assert_non_null(c);
	assert_int_equal(num(c, "ranks_analysed"), 4);
	json_t *f = json_array_get(json_object_get(c, "flags"), 0);
	assert_non_null(f);
	assert_int_equal(num(f, "rank"), 2);
	assert_string_equal(json_string_value(json_object_get(f, "function")), "python3.11+0x2000");
	assert_true(fabs(num(f, "pct") - 75) < 1e-9);
	assert_true(fabs(num(f, "mean_pct")) < 1e-9); /* the other ranks never run it */
	/* Functions every rank runs alike are not flagged. */
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(c, "flags"), i, x)
		assert_int_equal(num(x, "rank"), 2);
	json_decref(doc);
	expect_job_status(h, "/api/v1/jobs/wl/waterline", "k=0", 400, "'k'");
	expect_job_status(h, "/api/v1/jobs/wl/waterline", "pid=1", 400, "do not apply");
}

/* The layered verdict of a straggler: GPU (uniform or kernel-specific), else CPU. */
static json_t *first_diagnosis(struct harness *h, const char *job)
{
	char path[128];

	snprintf(path, sizeof(path), "/api/v1/jobs/%s/stragglers", job);
	json_t *doc = get_json(h, api_job_get, path, "");
	json_t *list = json_object_get(doc, "stragglers");
	if (json_array_size(list) != 1)
		fail_msg("%s: %zu stragglers", job, json_array_size(list));
	json_t *dg = json_incref(json_object_get(json_array_get(list, 0), "diagnosis"));
	json_decref(doc);
	return dg;
}

static void test_straggler_diagnosis(void **state)
{
	struct harness *h = *state;
	struct job_spec js = { .base = { .node = 1, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "uniform", .first_rank = 0, .local_ranks = 8, .instances = 12,
			       .skip_rank = -1, .gpu_timing = true, .slow_rank = 3, .slow_all = true,
			       .late_rank = 3, .late_ms = 30, .samples = true, .hot_rank = -1 };

	size_t i;
	json_t *x;

	/* Every kernel of rank 3 twice as long: a uniform GPU slowdown. */
	post_spec(h, &js, "\"stored\"");
	json_t *dg = first_diagnosis(h, "uniform");
	assert_string_equal(json_string_value(json_object_get(dg, "layer")), "gpu");
	json_t *gpu = json_object_get(dg, "gpu");
	assert_string_equal(json_string_value(json_object_get(gpu, "verdict")), "uniform");
	assert_true(fabs(num(gpu, "slowdown") - 2) < 1e-9);
	json_t *k0 = json_array_get(json_object_get(gpu, "kernels"), 0);
	assert_string_equal(json_string_value(json_object_get(k0, "name")), JOB_KERNEL);
	assert_true(fabs(num(k0, "ratio") - 2) < 1e-9);
	assert_non_null(strstr(json_string_value(json_object_get(dg, "action")), "nvidia-smi"));
	json_decref(dg);

	/* Only JOB_KERNEL slower (memcpy and the unlaunched kernel as on the others). */
	/* Each job on its own node: processes (node, pid, start) are not shared between jobs. */
	js.job = "specific";
	js.slow_all = false;
	js.launches = true;
	js.base.node = 2;
	post_spec(h, &js, "\"stored\"");
	dg = first_diagnosis(h, "specific");
	assert_string_equal(json_string_value(json_object_get(dg, "layer")), "gpu");
	gpu = json_object_get(dg, "gpu");
	assert_string_equal(json_string_value(json_object_get(gpu, "verdict")), "kernel-specific");
	assert_true(num(gpu, "slowdown") > 1.9);
	/* The slower kernel with the stack that launched it on the straggler (all its time). */
	k0 = json_array_get(json_object_get(gpu, "kernels"), 0);
	assert_string_equal(json_string_value(json_object_get(k0, "name")), JOB_KERNEL);
	json_t *ls = json_object_get(k0, "launch_stacks");
	assert_int_equal(json_array_size(ls), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(ls, 0), "stack")),
			    "python3;python3.11+0x1000;libc.so.6+0x29d90");
	assert_true(fabs(num(json_array_get(ls, 0), "share") - 1) < 1e-9);
	assert_true(num(json_array_get(ls, 0), "gpu_ns") > 0);
	/* A kernel never seen launched has no stack to show. */
	json_array_foreach(json_object_get(gpu, "kernels"), i, x)
		if (strcmp(json_string_value(json_object_get(x, "name")), JOB_UNLAUNCHED) == 0)
			assert_int_equal(json_array_size(json_object_get(x, "launch_stacks")), 0);
	json_decref(dg);
	js.launches = false;

	/* No GPU difference; rank 5's CPU samples are 75% in a function the others never run. */
	js.job = "cpu";
	js.gpu_timing = false;
	js.late_rank = 5;
	js.hot_rank = 5;
	js.base.node = 3;
	for (int w = 0; w < 5; w++) { /* 5 windows: 50 samples on a healthy rank, 200 on rank 5 */
		js.base.sequence = 10 + (uint64_t)w;
		post_spec(h, &js, "\"stored\"");
	}
	dg = first_diagnosis(h, "cpu");
	assert_string_equal(json_string_value(json_object_get(dg, "layer")), "cpu");
	assert_string_equal(json_string_value(json_object_get(json_object_get(dg, "gpu"), "verdict")),
			    "no-data");
	json_t *cpu = json_object_get(dg, "cpu");
	json_t *f0 = json_array_get(json_object_get(cpu, "functions"), 0);
	assert_string_equal(json_string_value(json_object_get(f0, "function")), "python3.11+0x2000");
	assert_true(fabs(num(f0, "delta_pp") - 75) < 1e-9);
	/* With the full stack through it. */
	json_t *st0 = json_array_get(json_object_get(cpu, "top_stacks"), 0);
	assert_string_equal(json_string_value(json_object_get(st0, "stack")),
			    "python3;python3.11+0x1000;libc.so.6+0x29d90;python3.11+0x2000");
	assert_true(fabs(num(st0, "straggler_pct") - 75) < 1e-9);
	assert_true(fabs(num(f0, "straggler_pct") - 75) < 1e-9);
	assert_int_equal(json_array_size(json_object_get(cpu, "functions")), 1);
	assert_int_equal(num(cpu, "straggler_samples"), 200);
	assert_true(json_is_true(json_object_get(cpu, "enough_samples")));
	json_decref(dg);

	/* Late with nothing else different (one window: too few samples to compare CPU profiles,
	 * and no OS signals recorded): no layer is named, and the summary says the OS data are
	 * missing. */
	js.job = "plain";
	js.hot_rank = -1;
	js.base.node = 4;
	post_spec(h, &js, "\"stored\"");
	dg = first_diagnosis(h, "plain");
	assert_string_equal(json_string_value(json_object_get(dg, "layer")), "unknown");
	assert_non_null(strstr(json_string_value(json_object_get(dg, "summary")),
			       "no OS signals were recorded"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(dg, "os"), "verdict")),
			    "no-data");
	json_decref(dg);

	/* diagnose=0 leaves it out. */
	json_t *doc = get_json(h, api_job_get, "/api/v1/jobs/plain/stragglers", "diagnose=0");
	assert_null(json_object_get(json_array_get(json_object_get(doc, "stragglers"), 0),
				    "diagnosis"));
	json_decref(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_folded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_gpu, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_time_flamegraph, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stragglers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flamegraph_diff, setup, teardown),
		cmocka_unit_test_setup_teardown(test_straggler_diagnosis, setup, teardown),
		cmocka_unit_test_setup_teardown(test_waterline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_parameters, setup, teardown),
		cmocka_unit_test(test_time_parse),
		cmocka_unit_test_setup_teardown(test_nodes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_processes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scopes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics_scopes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_utf8, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jobs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_workers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_collectives_missing_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_flamegraph, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_bad_parameters, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
