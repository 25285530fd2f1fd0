/* SPDX-License-Identifier: Apache-2.0 */
/* Profile and trace exports: GET /api/v1/flamegraph?format=pprof|speedscope (decoded back:
 * gunzip + the generated protobuf-c decoder, jansson) against the folded answer of the same
 * query, and GET /api/v1/jobs/{job}/trace (Chrome trace events). Handlers are called directly. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "server/query/export.h"
#include "server/query/profile.pb-c.h"
#include "tests/unit/server/harness.h"
#include "tests/unit/server/job_fixture.h"

#define KERNEL_HEX "abf9ec0ec5946600c90641cf5db998472fac410b"
#define PERIOD_NS (1000000000ull / 99) /* the fixture node samples at 99 Hz */

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

/* Runs a GET handler and keeps the body bytes (binary) in *body (free it), *len. */
static int get_bytes(struct harness *h, http_handler_fn fn, const char *path, const char *query,
		     struct http_response *resp, uint8_t **body, size_t *len)
{
	struct test_request t;

	request_init(&t, "GET", path, query);
	request_token(&t, HARNESS_TOKEN);
	response_init(resp);
	fn(h->api, &t.req, resp);
	*body = byte_buf_steal(&resp->body, len);
	return resp->status;
}

static char *get_text(struct harness *h, http_handler_fn fn, const char *path, const char *query,
		      int want_status)
{
	struct http_response resp;
	uint8_t *body;
	size_t len;
	int status = get_bytes(h, fn, path, query, &resp, &body, &len);
	char *text = calloc(1, len + 1);

	assert_non_null(text);
	if (len)
		memcpy(text, body, len);
	free(body);
	if (status != want_status)
		fail_msg("%s?%s: status %d (want %d): %s", path, query, status, want_status, text);
	return text;
}

/* A flame graph answer that must be valid JSON. */
static json_t *get_json_doc(struct harness *h, const char *query)
{
	char *text = get_text(h, api_flamegraph_get, "/api/v1/flamegraph", query, 200);
	json_error_t jerr;
	json_t *doc = json_loads(text, 0, &jerr);

	if (!doc)
		fail_msg("%s: invalid JSON (%s): %s", query, jerr.text, text);
	free(text);
	return doc;
}

/* gunzip + protobuf-c unpack of a pprof answer. */
static Perftools__Profiles__Profile *pprof_get(struct harness *h, const char *query,
					       size_t *compressed)
{
	struct http_response resp;
	uint8_t *body, *raw = NULL;
	size_t len, cap = 1 << 16;
	z_stream z = { 0 };
	int zrc;

	if (get_bytes(h, api_flamegraph_get, "/api/v1/flamegraph", query, &resp, &body, &len) != 200)
		fail_msg("%s: status %d", query, resp.status);
	assert_string_equal(resp.content_type, "application/octet-stream");
	assert_non_null(response_header(&resp, "Content-Disposition"));
	assert_non_null(strstr(response_header(&resp, "Content-Disposition"), "profile.pb.gz"));
	assert_true(len > 18 && body[0] == 0x1f && body[1] == 0x8b); /* gzip magic */
	if (compressed)
		*compressed = len;
	assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = body;
	z.avail_in = (uInt)len;
	do {
		raw = realloc(raw, cap);
		assert_non_null(raw);
		z.next_out = raw + z.total_out;
		z.avail_out = (uInt)(cap - z.total_out);
		zrc = inflate(&z, Z_NO_FLUSH);
		cap *= 2;
	} while (zrc == Z_OK || (zrc == Z_BUF_ERROR && z.avail_out == 0));
	assert_int_equal(zrc, Z_STREAM_END);
	assert_int_equal(z.avail_in, 0); /* one gzip member, nothing after it */
	Perftools__Profiles__Profile *p =
		perftools__profiles__profile__unpack(NULL, z.total_out, raw);
	inflateEnd(&z);
	free(raw);
	free(body);
	assert_non_null(p);
	return p;
}

static const char *str(const Perftools__Profiles__Profile *p, int64_t i)
{
	assert_true(i >= 0 && (size_t)i < p->n_string_table);
	return p->string_table[i];
}

/* The entry with id `id` (ids are 1-based indexes, as written). */
#define BY_ID(p, field, wanted)                                                                 \
	({                                                                                      \
		uint64_t wanted_ = (wanted);                                                    \
		assert_true(wanted_ >= 1 && wanted_ <= (p)->n_##field);                         \
		assert_int_equal((p)->field[wanted_ - 1]->id, wanted_);                         \
		(p)->field[wanted_ - 1];                                                        \
	})

static int line_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rebuilds folded lines ("comm;root;...;leaf count", kernel frames _[k]) from a pprof profile
 * and from folded text, sorted, so the two answers can be compared. */
static char *sorted_lines(char *text)
{
	char *lines[64], *save = NULL, *out;
	size_t n = 0, len = 0;

	for (char *l = strtok_r(text, "\n", &save); l && n < 64; l = strtok_r(NULL, "\n", &save))
		lines[n++] = l;
	qsort(lines, n, sizeof(*lines), line_cmp);
	out = calloc(1, strlen(text) + n + 2 + 4096);
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(out + len, "%s\n", lines[i]);
	return out;
}

static char *pprof_folded(const Perftools__Profiles__Profile *p, uint64_t *total)
{
	struct byte_buf b = { 0 };
	char *text, *sorted;
	size_t len;

	*total = 0;
	for (size_t i = 0; i < p->n_sample; i++) {
		const Perftools__Profiles__Sample *s = p->sample[i];
		const char *comm = NULL;

		for (size_t k = 0; k < s->n_label; k++)
			if (strcmp(str(p, s->label[k]->key), "comm") == 0)
				comm = str(p, s->label[k]->str);
		assert_non_null(comm);
		byte_buf_printf(&b, "%s", comm);
		for (size_t k = s->n_location_id; k-- > 0;) { /* leaf first: walk back */
			const Perftools__Profiles__Location *l = BY_ID(p, location, s->location_id[k]);
			bool kernel = false;
			if (l->mapping_id) {
				const Perftools__Profiles__Mapping *m = BY_ID(p, mapping, l->mapping_id);
				kernel = strcmp(str(p, m->filename), "[kernel.kallsyms]") == 0;
			}
			for (size_t j = l->n_line; j-- > 0;) { /* caller last: walk back */
				const Perftools__Profiles__Function *f =
					BY_ID(p, function, l->line[j]->function_id);
				byte_buf_printf(&b, ";%s%s", str(p, f->name), kernel ? "_[k]" : "");
			}
		}
		byte_buf_printf(&b, " %" PRId64 "\n", s->value[0]);
		*total += (uint64_t)s->value[0];
	}
	byte_buf_append(&b, "", 1);
	assert_int_equal(byte_buf_error(&b), 0);
	text = (char *)byte_buf_steal(&b, &len);
	sorted = sorted_lines(text);
	free(text);
	return sorted;
}

/* The pprof answer of `query` carries the same stacks and counts as the folded one. */
static Perftools__Profiles__Profile *expect_pprof_matches_folded(struct harness *h,
								 const char *query)
{
	char q[256], *folded, *want, *got;
	uint64_t total;

	snprintf(q, sizeof(q), "%s&format=folded", query);
	folded = get_text(h, api_flamegraph_get, "/api/v1/flamegraph", q, 200);
	want = sorted_lines(folded);
	snprintf(q, sizeof(q), "%s&format=pprof", query);
	Perftools__Profiles__Profile *p = pprof_get(h, q, NULL);
	got = pprof_folded(p, &total);
	if (strcmp(got, want) != 0)
		fail_msg("%s: pprof\n%s\nfolded\n%s", query, got, want);
	free(folded);
	free(want);
	free(got);
	return p;
}

static void test_pprof_cpu(void **state)
{
	struct harness *h = *state;
	Perftools__Profiles__Profile *p = expect_pprof_matches_folded(h, "kind=cpu");
	uint64_t total = 0;

	assert_string_equal(str(p, 0), "");
	assert_int_equal(p->n_sample_type, 2);
	assert_string_equal(str(p, p->sample_type[0]->type), "samples");
	assert_string_equal(str(p, p->sample_type[0]->unit), "count");
	assert_string_equal(str(p, p->sample_type[1]->type), "cpu");
	assert_string_equal(str(p, p->sample_type[1]->unit), "nanoseconds");
	assert_non_null(p->period_type);
	assert_string_equal(str(p, p->period_type->unit), "nanoseconds");
	assert_int_equal(p->period, PERIOD_NS);
	assert_int_equal(p->time_nanos, HARNESS_T0);
	assert_int_equal(p->duration_nanos, 3600000000000LL);
	for (size_t i = 0; i < p->n_sample; i++) {
		assert_int_equal(p->sample[i]->n_value, 2);
		assert_int_equal(p->sample[i]->value[1], p->sample[i]->value[0] * (int64_t)PERIOD_NS);
		total += (uint64_t)p->sample[i]->value[0];
	}
	assert_int_equal(total, FIXTURE_SAMPLES);

	/* libc's frame: its mapping names the file and its Build ID; the address is the offset. */
	bool libc_seen = false, pid_seen = false;
	for (size_t i = 0; i < p->n_location; i++) {
		const Perftools__Profiles__Location *l = p->location[i];
		if (!l->mapping_id || l->address != 0x29d90)
			continue;
		const Perftools__Profiles__Mapping *m = BY_ID(p, mapping, l->mapping_id);
		assert_string_equal(str(p, m->filename), "/usr/lib/x86_64-linux-gnu/libc.so.6");
		assert_int_equal(strlen(str(p, m->build_id)), 40);
		assert_int_equal(m->memory_start, 0);
		assert_true(m->memory_limit > 0x29d90);
		libc_seen = true;
	}
	assert_true(libc_seen);
	for (size_t i = 0; i < p->n_sample; i++)
		for (size_t k = 0; k < p->sample[i]->n_label; k++)
			if (strcmp(str(p, p->sample[i]->label[k]->key), "pid") == 0 &&
			    p->sample[i]->label[k]->num == FIXTURE_PID_PYTHON)
				pid_seen = true;
	assert_true(pid_seen);
	/* Each resolved frame is one location, each name one function. */
	for (size_t i = 0; i < p->n_function; i++)
		for (size_t j = i + 1; j < p->n_function; j++)
			assert_false(p->function[i]->name == p->function[j]->name &&
				     p->function[i]->filename == p->function[j]->filename);
	perftools__profiles__profile__free_unpacked(p, NULL);

	/* Filters apply as to folded answers. */
	p = expect_pprof_matches_folded(h, "pid=777");
	assert_int_equal(p->n_sample, 2);
	perftools__profiles__profile__free_unpacked(p, NULL);
	p = expect_pprof_matches_folded(h, "limit=1");
	assert_int_equal(p->n_sample, 1);
	perftools__profiles__profile__free_unpacked(p, NULL);
	/* Nothing in range: a valid, empty profile. */
	p = expect_pprof_matches_folded(h, "from=-30m");
	assert_int_equal(p->n_sample, 0);
	assert_int_equal(p->n_sample_type, 2);
	perftools__profiles__profile__free_unpacked(p, NULL);
}

/* A thread name that is not UTF-8 becomes valid UTF-8 in every export (proto3 strings must be). */
static void test_pprof_utf8(void **state)
{
	struct harness *h = *state;
	Perftools__Profiles__Profile *p;
	bool seen = false;

	assert_int_equal(harness_post_fixture(h, &(struct fixture_spec){ .node = 3, .epoch = 1,
									  .sequence = 1, .python_comm = "py\xff\xfe",
									  .window_start_ns = HARNESS_T0 }),
			 200);
	p = expect_pprof_matches_folded(h, "node=node-3");
	for (size_t i = 0; i < p->n_string_table; i++) {
		seen |= strcmp(p->string_table[i], "py\xef\xbf\xbd\xef\xbf\xbd") == 0;
		assert_false(strchr(p->string_table[i], '\xff'));
	}
	assert_true(seen);
	perftools__profiles__profile__free_unpacked(p, NULL);
	json_t *doc = get_json_doc(h, "format=speedscope&node=node-3");
	json_decref(doc);
}

static void post_job(struct harness *h, uint8_t node, bool gpu_timing)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = "job-42", .first_rank = 4 * (node - 1), .local_ranks = 4,
			       .instances = 3, .skip_rank = -1, .launches = true,
			       .gpu_timing = gpu_timing, .slow_rank = -1, .late_rank = -1 };
	struct sysom_batch b;
	char *body = NULL;

	assert_int_equal(job_batch_build(&b, &js), 0);
	assert_int_equal(harness_post_batch(h, &b, &body), 200);
	free(body);
	sysom_batch_free(&b);
}

static void test_pprof_gpu(void **state)
{
	struct harness *h = *state;
	Perftools__Profiles__Profile *p;

	post_job(h, 1, true);
	post_job(h, 2, true);
	p = expect_pprof_matches_folded(h, "kind=gpu-launch");
	assert_int_equal(p->n_sample_type, 1);
	assert_string_equal(str(p, p->sample_type[0]->type), "launches");
	assert_string_equal(str(p, p->sample_type[0]->unit), "count");
	bool kernel_seen = false;
	for (size_t i = 0; i < p->n_function; i++)
		kernel_seen |= strcmp(str(p, p->function[i]->name), "[gpu] " JOB_KERNEL) == 0;
	assert_true(kernel_seen);
	perftools__profiles__profile__free_unpacked(p, NULL);

	p = expect_pprof_matches_folded(h, "kind=gpu-time");
	assert_int_equal(p->n_sample_type, 1);
	assert_string_equal(str(p, p->sample_type[0]->type), "gpu_time");
	assert_string_equal(str(p, p->sample_type[0]->unit), "nanoseconds");
	assert_null(p->period_type);
	perftools__profiles__profile__free_unpacked(p, NULL);
}

static json_t *get_json(struct harness *h, http_handler_fn fn, const char *path, const char *query)
{
	char *text = get_text(h, fn, path, query, 200);
	json_error_t jerr;
	json_t *doc = json_loads(text, 0, &jerr);

	if (!doc)
		fail_msg("%s?%s: invalid JSON (%s): %s", path, query, jerr.text, text);
	free(text);
	return doc;
}

static void test_speedscope(void **state)
{
	struct harness *h = *state;
	json_t *doc = get_json(h, api_flamegraph_get, "/api/v1/flamegraph", "format=speedscope");
	json_t *frames = json_object_get(json_object_get(doc, "shared"), "frames");
	json_t *prof = json_array_get(json_object_get(doc, "profiles"), 0);
	json_t *samples = json_object_get(prof, "samples"), *weights = json_object_get(prof, "weights");
	json_int_t total = 0;
	static const char *const want[] = { "python3", "python3.11+0x1000", "libc.so.6+0x29d90",
					    "do_syscall_64", "do_one" };
	size_t i;
	json_t *v;

	assert_string_equal(json_string_value(json_object_get(doc, "$schema")),
			    "https://www.speedscope.app/file-format-schema.json");
	assert_string_equal(json_string_value(json_object_get(prof, "type")), "sampled");
	assert_string_equal(json_string_value(json_object_get(prof, "unit")), "none");
	assert_int_equal(json_array_size(samples), 4);
	assert_int_equal(json_array_size(weights), 4);
	json_array_foreach(weights, i, v)
		total += json_integer_value(v);
	assert_int_equal(total, FIXTURE_SAMPLES);
	assert_int_equal(json_integer_value(json_object_get(prof, "startValue")), 0);
	assert_int_equal(json_integer_value(json_object_get(prof, "endValue")), FIXTURE_SAMPLES);
	/* The heaviest stack, root first, names resolved through the shared frames. */
	json_t *first = json_array_get(samples, 0);
	assert_int_equal(json_integer_value(json_array_get(weights, 0)), 10);
	assert_int_equal(json_array_size(first), 5);
	json_array_foreach(first, i, v) {
		json_int_t idx = json_integer_value(v);
		assert_true(idx >= 0 && (size_t)idx < json_array_size(frames));
		json_t *f = json_array_get(frames, (size_t)idx);
		assert_string_equal(json_string_value(json_object_get(f, "name")), want[i]);
	}
	/* Frames are shared: no two alike. */
	json_array_foreach(frames, i, v)
		for (size_t j = i + 1; j < json_array_size(frames); j++)
			assert_false(json_equal(v, json_array_get(frames, j)));
	json_t *libc = json_array_get(frames, (size_t)json_integer_value(json_array_get(first, 2)));
	assert_string_equal(json_string_value(json_object_get(libc, "file")),
			    "/usr/lib/x86_64-linux-gnu/libc.so.6");
	json_decref(doc);

	doc = get_json(h, api_flamegraph_get, "/api/v1/flamegraph", "format=speedscope&from=-30m");
	prof = json_array_get(json_object_get(doc, "profiles"), 0);
	assert_int_equal(json_array_size(json_object_get(prof, "samples")), 0);
	assert_int_equal(json_integer_value(json_object_get(prof, "endValue")), 0);
	json_decref(doc);

	char *err = get_text(h, api_flamegraph_get, "/api/v1/flamegraph", "format=svg", 400);
	assert_non_null(strstr(err, "pprof or speedscope"));
	free(err);
}

/* The complete events of a trace document, checked for shape. */
static size_t trace_events(json_t *doc, json_t **names)
{
	json_t *events = json_object_get(doc, "traceEvents"), *e;
	size_t i, complete = 0;

	*names = json_object();
	json_array_foreach(events, i, e) {
		const char *ph = json_string_value(json_object_get(e, "ph"));
		assert_non_null(ph);
		assert_true(json_is_integer(json_object_get(e, "pid")));
		assert_true(json_is_integer(json_object_get(e, "tid")));
		if (strcmp(ph, "M") == 0) {
			const char *what = json_string_value(json_object_get(e, "name"));
			if (strcmp(what, "process_name") == 0)
				json_object_set(*names, json_string_value(json_object_get(
								json_object_get(e, "args"), "name")),
						json_true());
			continue;
		}
		assert_string_equal(ph, "X");
		assert_string_equal(json_string_value(json_object_get(e, "name")), "AllReduce");
		assert_true(json_is_number(json_object_get(e, "ts")));
		assert_true(json_number_value(json_object_get(e, "dur")) > 0);
		json_t *args = json_object_get(e, "args");
		assert_int_equal(json_integer_value(json_object_get(args, "bytes")), 4096);
		assert_string_equal(json_string_value(json_object_get(args, "comm")),
				    "0000000000000abc");
		assert_non_null(json_string_value(json_object_get(args, "instance")));
		complete++;
	}
	return complete;
}

static void test_trace(void **state)
{
	struct harness *h = *state;
	json_t *doc, *names;
	char *err;

	post_job(h, 1, false);
	post_job(h, 2, false);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/trace", "");
	/* 8 ranks x 3 AllReduce instances; one process per rank. */
	assert_int_equal(trace_events(doc, &names), 24);
	assert_int_equal(json_object_size(names), 8);
	assert_non_null(json_object_get(names, "rank 5 (node-2 pid 5005)"));
	json_t *other = json_object_get(doc, "otherData");
	assert_true(json_is_false(json_object_get(other, "truncated")));
	assert_int_equal(json_integer_value(json_object_get(other, "events")), 24);
	assert_string_equal(json_string_value(json_object_get(other, "job")), "job-42");
	json_decref(names);
	json_decref(doc);

	/* Bounded: the first 5 calls, and it says so. */
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/trace", "limit=5");
	assert_int_equal(trace_events(doc, &names), 5);
	assert_true(json_is_true(json_object_get(json_object_get(doc, "otherData"), "truncated")));
	json_decref(names);
	json_decref(doc);

	/* Exactly as many as there are: not truncated. */
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/trace", "limit=24");
	assert_int_equal(trace_events(doc, &names), 24);
	assert_true(json_is_false(json_object_get(json_object_get(doc, "otherData"), "truncated")));
	json_decref(names);
	json_decref(doc);

	/* Another range, another communicator, another job: nothing. */
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/trace", "from=-30m");
	assert_int_equal(trace_events(doc, &names), 0);
	json_decref(names);
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-42/trace", "comm=0x123");
	assert_int_equal(trace_events(doc, &names), 0);
	json_decref(names);
	json_decref(doc);
	doc = get_json(h, api_job_get, "/api/v1/jobs/job-7/trace", "");
	assert_int_equal(trace_events(doc, &names), 0);
	json_decref(names);
	json_decref(doc);

	err = get_text(h, api_job_get, "/api/v1/jobs/job-42/trace", "limit=0", 400);
	free(err);
	err = get_text(h, api_job_get, "/api/v1/jobs/job-42/trace", "limit=200001", 400);
	free(err);
	err = get_text(h, api_job_get, "/api/v1/jobs/job-42/trace", "node=node-1", 400);
	free(err);
}

/* The trace writer alone: times relative to the origin (also before it), exact to the ns,
 * strings escaped, the event bound. */
static void test_trace_writer(void **state)
{
	struct query_trace *t;
	struct byte_buf out = { 0 };
	struct store_collective_call c = { .comm_key = 0x1234, .seq = 7, .op = SYSOM_NCCL_ALL_REDUCE,
					   .first_entry_ns = 998500, .nranks = 2, .rank = 1,
					   .entry_ns = 998500, .exit_ns = 1002501, .count = 4,
					   .bytes = 16, .peer = -1, .pid = 10, .tid = 11,
					   .node_id = "0101", .hostname = "a\"b\\\n" };
	json_t *doc, *e;

	(void)state;
	assert_int_equal(query_trace_new("j\"1", 1000000, 2000000, 2, &t), 0);
	/* pid 10 is rank 3 of the job (rank 1 in this communicator); pid 12 is unknown. */
	assert_int_equal(query_trace_process_add(t, "0101", 10, 3, "a\"b\\\n"), 0);
	assert_int_equal(query_trace_add(t, &c), 0);
	c.rank = 0;
	c.pid = 12;
	c.entry_ns = 1000001;
	assert_int_equal(query_trace_add(t, &c), 0);
	assert_int_equal(query_trace_add(t, &c), -ENOSPC);
	assert_int_equal(query_trace_events(t), 2);
	assert_int_equal(query_trace_finish(t, &out), 0);
	query_trace_free(t);
	byte_buf_append(&out, "", 1);
	doc = json_loads((const char *)out.data, 0, NULL);
	if (!doc)
		fail_msg("invalid JSON: %s", (const char *)out.data);
	json_t *events = json_object_get(doc, "traceEvents");
	size_t i, n = 0;
	json_array_foreach(events, i, e) {
		if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0)
			continue;
		if (n++ == 0) {
			assert_float_equal(json_number_value(json_object_get(e, "ts")), -1.5, 1e-9);
			assert_float_equal(json_number_value(json_object_get(e, "dur")), 4.001, 1e-9);
			assert_int_equal(json_integer_value(json_object_get(e, "pid")), 1);
		} else {
			assert_float_equal(json_number_value(json_object_get(e, "ts")), 0.001, 1e-9);
			assert_int_equal(json_integer_value(json_object_get(e, "pid")), 2);
		}
		assert_int_equal(json_integer_value(json_object_get(e, "tid")), 1);
		assert_string_equal(json_string_value(json_object_get(json_object_get(e, "args"),
								       "instance")),
				    "0000000000001234/AllReduce/7");
	}
	assert_int_equal(n, 2);
	json_t *pname = json_object_get(json_object_get(json_array_get(events, 0), "args"), "name");
	assert_string_equal(json_string_value(pname), "rank 3 (a\"b\\\n pid 10)");
	size_t unknown = 0;
	json_array_foreach(events, i, e) {
		json_t *args = json_object_get(e, "args");
		if (strcmp(json_string_value(json_object_get(e, "name")), "process_name") == 0 &&
		    json_integer_value(json_object_get(e, "pid")) == 2) {
			assert_string_equal(json_string_value(json_object_get(args, "name")),
					    "rank ? (a\"b\\\n pid 12)");
			unknown++;
		}
		if (json_integer_value(json_object_get(e, "pid")) == 1 &&
		    json_object_get(args, "peer")) {
			assert_int_equal(json_integer_value(json_object_get(args, "rank")), 1);
			assert_true(json_is_null(json_object_get(args, "peer")));
		}
	}
	assert_int_equal(unknown, 1);
	json_t *other = json_object_get(doc, "otherData");
	assert_string_equal(json_string_value(json_object_get(other, "job")), "j\"1");
	assert_true(json_is_true(json_object_get(other, "truncated")));
	json_decref(doc);
	byte_buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pprof_cpu, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pprof_gpu, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pprof_utf8, setup, teardown),
		cmocka_unit_test_setup_teardown(test_speedscope, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trace, setup, teardown),
		cmocka_unit_test(test_trace_writer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
