/* SPDX-License-Identifier: Apache-2.0 */
/* Ingest under a decode memory budget: batches and kernel symbol tables reserve before they
 * allocate and give everything back; a full budget answers 503 with Retry-After (after a
 * bounded wait), and the retry is stored; a waiting upload goes on once memory is freed; one
 * that needs more than the whole budget gets 413; the /metrics families. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/clock.h"
#include "common/compress.h"
#include "common/membudget.h"
#include "tests/unit/server/harness.h"

#define KERNEL_HEX "abf9ec0ec5946600c90641cf5db998472fac410b"

struct state {
	struct membudget *budget;
	struct harness *h;
	struct sysom_batch batch;
	struct byte_buf compressed, raw;
	char key[96];
};

/* A harness whose ingest reserves from a budget of `capacity` bytes, waiting `wait_ms`. */
static struct state *state_new(uint64_t capacity, uint32_t wait_ms)
{
	struct state *s = calloc(1, sizeof(*s));
	struct membudget_options mo = { .capacity = capacity, .max_wait_ms = wait_ms };
	struct fixture_spec spec = { .node = 3, .epoch = 0x55, .sequence = 1,
				     .window_start_ns = HARNESS_T0 };

	assert_non_null(s);
	assert_int_equal(membudget_new(&mo, &s->budget), 0);
	struct ingest_options io = { .memory_budget = s->budget };
	s->h = harness_new(HARNESS_TOKEN, &io);
	assert_non_null(s->h);
	assert_int_equal(fixture_batch_build(&s->batch, &spec), 0);
	assert_int_equal(fixture_batch_encode(&s->batch, true, &s->compressed), 0);
	assert_int_equal(fixture_batch_encode(&s->batch, false, &s->raw), 0);
	fixture_batch_key(&s->batch, s->key, sizeof(s->key));
	return s;
}

static void state_free(struct state *s)
{
	struct membudget_stats st;

	harness_free(s->h);
	membudget_stats_get(s->budget, &st);
	assert_int_equal(st.reserved, 0); /* every path gave its reservation back */
	membudget_free(s->budget);
	sysom_batch_free(&s->batch);
	byte_buf_free(&s->compressed);
	byte_buf_free(&s->raw);
	free(s);
}

static struct membudget_stats stats(struct state *s)
{
	struct membudget_stats st;

	membudget_stats_get(s->budget, &st);
	return st;
}

static int post(struct state *s, const void *body, size_t len, const char *encoding,
		struct http_response *resp, char **out)
{
	struct test_request t;

	request_init(&t, "POST", INGEST_PATH, NULL);
	request_token(&t, HARNESS_TOKEN);
	if (encoding)
		request_header(&t, "content-encoding", encoding);
	request_header(&t, "idempotency-key", s->key);
	request_body(&t, body, len);
	return call(ingest_batch_post, s->h->ingest, &t, resp, out);
}

static int post_fixture(struct state *s, struct http_response *resp, char **out)
{
	return post(s, s->compressed.data, s->compressed.len, "zstd", resp, out);
}

static int put_ksyms(struct state *s, const void *body, size_t len, struct http_response *resp,
		     char **out)
{
	struct test_request t;

	request_init(&t, "PUT", INGEST_KSYMS_PREFIX KERNEL_HEX, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-encoding", "zstd");
	request_body(&t, body, len);
	return call(ingest_ksyms_put, s->h->ingest, &t, resp, out);
}

static void test_batch_reserves_then_gives_back(void **state)
{
	struct state *s = state_new(64u << 20, 0);
	struct http_response resp;
	char *body;

	(void)state;
	assert_int_equal(post_fixture(s, &resp, &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	struct membudget_stats st = stats(s);
	assert_int_equal(st.reserved, 0);
	/* At its peak it held at least the plain bytes and what the decoder allocates. */
	assert_true(st.reserved_peak >= s->raw.len + sysom_batch_decode_memory(s->raw.data,
									       s->raw.len, NULL));
	assert_true(st.grants >= 3); /* zstd context, output buffer, decoder */
	assert_int_equal(st.timeouts, 0);
	/* Identity bodies reserve the decoder's memory too. */
	s->key[strlen(s->key) - 1] = '2';
	s->batch.sequence = 2;
	byte_buf_free(&s->raw);
	assert_int_equal(fixture_batch_encode(&s->batch, false, &s->raw), 0);
	assert_int_equal(post(s, s->raw.data, s->raw.len, NULL, &resp, &body), 200);
	free(body);
	assert_true(stats(s).grants > st.grants);
	state_free(s);
}

static void test_full_budget_answers_503_then_retry_stored(void **state)
{
	struct state *s = state_new(8u << 20, 50);
	struct membudget_hold other;
	struct http_response resp;
	char *body;

	(void)state;
	membudget_hold_init(&other, s->budget);
	assert_int_equal(membudget_hold_resize(&other, 8u << 20), 0); /* another upload has it all */
	uint64_t t0 = sysom_monotonic_ns();
	assert_int_equal(post_fixture(s, &resp, &body), 503);
	assert_true(sysom_monotonic_ns() - t0 >= 50 * SYSOM_NS_PER_MS); /* it waited first */
	assert_string_equal(response_header(&resp, "Retry-After"), "2");
	assert_non_null(strstr(body, "decode memory"));
	free(body);
	assert_int_equal(harness_all_rows(s->h), 0);
	assert_int_equal(metrics_counter_get(&s->h->metrics.errors[INGEST_ERR_MEMORY_BUSY]), 1);
	assert_int_equal(metrics_counter_get(&s->h->metrics.batches[INGEST_REJECTED]), 1);
	struct membudget_stats st = stats(s);
	assert_int_equal(st.waits, 1);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.reserved, 8u << 20); /* the refused request kept nothing */
	/* Identity bodies and kernel symbols are refused the same way. */
	assert_int_equal(post(s, s->raw.data, s->raw.len, "identity", &resp, &body), 503);
	free(body);
	const char text[] = "1000 T _stext\n2000 T _etext\n";
	struct byte_buf z = { 0 };
	assert_int_equal(sysom_zstd_compress(text, strlen(text), 3, &z), 0);
	assert_int_equal(put_ksyms(s, z.data, z.len, &resp, &body), 503);
	assert_string_equal(response_header(&resp, "Retry-After"), "2");
	free(body);
	assert_int_equal(metrics_counter_get(&s->h->metrics.ksym_uploads[INGEST_REJECTED]), 1);
	/* The agent's retry, once the memory is free, is stored. */
	membudget_hold_release(&other);
	assert_int_equal(post_fixture(s, &resp, &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	assert_int_equal(put_ksyms(s, z.data, z.len, &resp, &body), 200);
	free(body);
	assert_int_equal(harness_rows(s->h, "kernel_symbols"), 2);
	byte_buf_free(&z);
	state_free(s);
}

struct poster {
	pthread_t thread;
	struct state *s;
	int status;
};

static void *poster_main(void *arg)
{
	struct poster *p = arg;
	struct http_response resp;
	char *body = NULL;

	p->status = post_fixture(p->s, &resp, &body);
	free(body);
	return NULL;
}

static void test_waiting_upload_goes_on_when_memory_is_freed(void **state)
{
	struct state *s = state_new(8u << 20, 30000);
	struct membudget_hold other;
	struct poster p = { .s = s, .status = -1 };
	uint64_t deadline = sysom_monotonic_ns() + 10 * SYSOM_NS_PER_S;

	(void)state;
	membudget_hold_init(&other, s->budget);
	assert_int_equal(membudget_hold_resize(&other, 8u << 20), 0);
	assert_int_equal(pthread_create(&p.thread, NULL, poster_main, &p), 0);
	while (stats(s).waiting != 1) { /* the handler is waiting for memory */
		assert_true(sysom_monotonic_ns() < deadline);
		sched_yield();
	}
	membudget_hold_release(&other);
	assert_int_equal(pthread_join(p.thread, NULL), 0);
	assert_int_equal(p.status, 200);
	assert_int_equal(stats(s).timeouts, 0);
	assert_true(harness_rows(s->h, "batches") == 1);
	state_free(s);
}

static void test_more_than_the_whole_budget_answers_413(void **state)
{
	struct state *s = state_new(1u << 20, 1000);
	const size_t n = 2u << 20;
	uint8_t *zeros = calloc(1, n);
	struct byte_buf z = { 0 };
	struct http_response resp;
	char *body;

	(void)state;
	assert_non_null(zeros);
	/* 2 MiB decompressed (within --max-ingest-decompressed) can never fit 1 MiB. */
	assert_int_equal(sysom_zstd_compress(zeros, n, 3, &z), 0);
	uint64_t t0 = sysom_monotonic_ns();
	assert_int_equal(post(s, z.data, z.len, "zstd", &resp, &body), 413);
	assert_true(sysom_monotonic_ns() - t0 < 900 * SYSOM_NS_PER_MS); /* no waiting for it */
	assert_non_null(strstr(body, "whole decode memory budget"));
	assert_null(response_header(&resp, "Retry-After"));
	free(body);
	assert_int_equal(stats(s).oversized, 1);
	assert_int_equal(metrics_counter_get(&s->h->metrics.errors[INGEST_ERR_TOO_LARGE]), 1);
	/* An ordinary batch still fits. */
	assert_int_equal(post_fixture(s, &resp, &body), 200);
	free(body);
	byte_buf_free(&z);
	free(zeros);
	state_free(s);
}

static void test_metrics_families(void **state)
{
	struct state *s = state_new(8u << 20, 0);
	struct membudget_hold other;
	struct http_response resp;
	struct byte_buf out = { 0 };
	char *body;

	(void)state;
	membudget_hold_init(&other, s->budget);
	assert_int_equal(membudget_hold_resize(&other, 8u << 20), 0);
	assert_int_equal(post_fixture(s, &resp, &body), 503);
	free(body);
	ingest_memory_metrics_write(s->budget, &out);
	byte_buf_put_u8(&out, 0);
	const char *text = (const char *)out.data;
	assert_non_null(strstr(text, "# TYPE sysom_decode_memory_budget_bytes gauge\n"
				     "sysom_decode_memory_budget_bytes 8388608\n"));
	assert_non_null(strstr(text, "\nsysom_decode_memory_reserved_bytes 8388608\n"));
	assert_non_null(strstr(text, "\nsysom_decode_memory_reserved_peak_bytes 8388608\n"));
	assert_non_null(strstr(text, "\nsysom_decode_memory_waiting 0\n"));
	assert_non_null(strstr(text, "# TYPE sysom_decode_memory_timeouts_total counter\n"
				     "sysom_decode_memory_timeouts_total 1\n"));
	assert_non_null(strstr(text, "\nsysom_decode_memory_waits_total 0\n"));
	assert_non_null(strstr(text, "\nsysom_decode_memory_oversized_total 0\n"));
	membudget_hold_release(&other);
	byte_buf_free(&out);
	state_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_reserves_then_gives_back),
		cmocka_unit_test(test_full_budget_answers_503_then_retry_stored),
		cmocka_unit_test(test_waiting_upload_goes_on_when_memory_is_freed),
		cmocka_unit_test(test_more_than_the_whole_budget_answers_413),
		cmocka_unit_test(test_metrics_families),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
