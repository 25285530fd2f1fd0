/* SPDX-License-Identifier: Apache-2.0 */
/* Ingest handlers called directly: auth, encodings, limits, decoding errors, idempotency,
 * storage failures, and kernel symbol uploads; nothing is ever partially stored. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zstd.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/token.h"
#include "common/compress.h"
#include "common/hash.h"
#include "common/hex.h"
#include "common/wire/wire.h"
#include "tests/unit/server/harness.h"

struct state {
	struct harness *h;
	struct sysom_batch batch;
	struct byte_buf compressed; /* the fixture batch, zstd */
	struct byte_buf raw;        /* the same, not compressed */
	char key[96];
};

static int setup(void **state)
{
	struct state *s = calloc(1, sizeof(*s));
	struct fixture_spec spec = { .node = 9, .epoch = 0x1122334455667788ULL, .sequence = 41,
				     .window_start_ns = HARNESS_T0 };

	assert_non_null(s);
	s->h = harness_new(HARNESS_TOKEN, NULL);
	assert_non_null(s->h);
	assert_int_equal(fixture_batch_build(&s->batch, &spec), 0);
	assert_int_equal(fixture_batch_encode(&s->batch, true, &s->compressed), 0);
	assert_int_equal(fixture_batch_encode(&s->batch, false, &s->raw), 0);
	fixture_batch_key(&s->batch, s->key, sizeof(s->key));
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct state *s = *state;

	harness_free(s->h);
	sysom_batch_free(&s->batch);
	byte_buf_free(&s->compressed);
	byte_buf_free(&s->raw);
	free(s);
	return 0;
}

/* POSTs `body` with the given key (NULL: none), token (NULL: none), encoding (NULL: none). */
static int post(struct state *s, const void *body, size_t len, const char *key, const char *token,
		const char *encoding, struct http_response *resp, char **out)
{
	struct test_request t;

	request_init(&t, "POST", INGEST_PATH, NULL);
	if (token)
		request_token(&t, token);
	if (encoding)
		request_header(&t, "content-encoding", encoding);
	if (key)
		request_header(&t, "idempotency-key", key);
	request_body(&t, body, len);
	return call(ingest_batch_post, s->h->ingest, &t, resp, out);
}

static int post_fixture(struct state *s, struct http_response *resp, char **out)
{
	return post(s, s->compressed.data, s->compressed.len, s->key, HARNESS_TOKEN, "zstd", resp, out);
}

static uint64_t metric(const struct metrics_counter *c)
{
	return metrics_counter_get(c);
}

static int count_rows(void *arg, const struct store_stack_count *row)
{
	(void)row;
	(*(int *)arg)++;
	return 0;
}

static void expect_nothing_stored(struct state *s)
{
	assert_int_equal(harness_all_rows(s->h), 0);
}

static void test_valid_batch_stored(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	struct store_sample_filter f = { .from_ms = 0, .to_ms = INT64_MAX };
	uint64_t total = 0;
	int groups = 0;
	char *body;

	assert_int_equal(post_fixture(s, &resp, &body), 200);
	/* The batch format this server reads: agents send 1.7's fields only to such a server. */
	assert_non_null(response_header(&resp, SYSOM_WIRE_MINOR_HEADER));
	assert_int_equal(atoi(response_header(&resp, SYSOM_WIRE_MINOR_HEADER)), SYSOM_WIRE_MINOR);
	json_t *doc = json_loads(body, 0, NULL);
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "status")), "stored");
	assert_int_equal(json_integer_value(json_object_get(doc, "samples")), FIXTURE_SAMPLES);
	assert_int_equal(json_integer_value(json_object_get(doc, "sample_rows")), 4);
	json_decref(doc);
	free(body);
	/* Queryable. */
	assert_int_equal(store_stacks_aggregate(s->h->store, &f, 10, count_rows, &groups, &total), 0);
	assert_int_equal(total, FIXTURE_SAMPLES);
	assert_int_equal(groups, 4);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_STORED]), 1);
	assert_int_equal(metric(&s->h->metrics.samples_stored), FIXTURE_SAMPLES);
	assert_int_equal(metric(&s->h->metrics.bytes_compressed), s->compressed.len);
	assert_int_equal(metric(&s->h->metrics.bytes_decompressed), s->raw.len);

	/* Identity encoding (no Content-Encoding, or "identity") is accepted too. */
	struct fixture_spec spec = { .node = 9, .epoch = 0x1122334455667788ULL, .sequence = 42,
				     .window_start_ns = HARNESS_T0 + 30000000000ULL };
	struct sysom_batch b;
	struct byte_buf raw;
	char key[96];
	assert_int_equal(fixture_batch_build(&b, &spec), 0);
	assert_int_equal(fixture_batch_encode(&b, false, &raw), 0);
	fixture_batch_key(&b, key, sizeof(key));
	assert_int_equal(post(s, raw.data, raw.len, key, HARNESS_TOKEN, "identity", &resp, &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	assert_int_equal(harness_rows(s->h, "batches"), 2);
	byte_buf_free(&raw);
	sysom_batch_free(&b);
}

static void test_duplicate_counted_once(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	long long rows;
	char *body;

	assert_int_equal(post_fixture(s, &resp, &body), 200);
	free(body);
	rows = harness_all_rows(s->h);
	assert_int_equal(post_fixture(s, &resp, &body), 200);
	assert_string_equal(body, "{\"status\":\"duplicate\"}\n");
	free(body);
	assert_int_equal(harness_all_rows(s->h), rows);
	assert_int_equal(harness_rows(s->h, "samples"), 4);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_STORED]), 1);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_DUPLICATE]), 1);
	assert_int_equal(metric(&s->h->metrics.samples_stored), FIXTURE_SAMPLES);
}

static void test_auth(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	char *body;

	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, NULL, "zstd", &resp,
			      &body), 401);
	assert_non_null(response_header(&resp, "WWW-Authenticate"));
	assert_non_null(strstr(response_header(&resp, "WWW-Authenticate"), "Bearer"));
	free(body);
	const char *wrong[] = { "s3cret-tokeN", "s3cret-token2", "s3cret", "", "x" };
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, wrong[i],
				      "zstd", &resp, &body), 401);
		free(body);
	}
	/* A non-Bearer scheme. */
	struct test_request t;
	request_init(&t, "POST", INGEST_PATH, NULL);
	request_header(&t, "authorization", "Basic czNjcmV0LXRva2Vu");
	request_header(&t, "idempotency-key", s->key);
	request_body(&t, s->compressed.data, s->compressed.len);
	assert_int_equal(call(ingest_batch_post, s->h->ingest, &t, &resp, &body), 401);
	free(body);
	expect_nothing_stored(s);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_UNAUTHORIZED]), 7);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_REJECTED]), 7);
	/* The token can be replaced at run time (SIGHUP). */
	assert_int_equal(auth_token_set(s->h->auth, "rotated"), 0);
	assert_int_equal(post_fixture(s, &resp, &body), 401);
	free(body);
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, "rotated", "zstd",
			      &resp, &body), 200);
	free(body);
}

/* Tokens of the scoped credentials installed by install_credentials. */
#define TOKEN_AGENT_9 "agent-node-9-token"      /* agent for the fixture's node (09...09) */
#define TOKEN_AGENT_OTHER "agent-node-7-token"  /* agent for node 07...07 */
#define TOKEN_READ "dashboard-token"
#define TOKEN_ADMIN "admin-token"
#define NODE_9 "09090909090909090909090909090909"

/* Installs agent, read and admin credentials next to the shared token. */
static void install_credentials(struct auth *a)
{
	assert_int_equal(harness_credentials(a, "agent node-9 " TOKEN_AGENT_9 " " NODE_9 "\n"
						"agent node-7 " TOKEN_AGENT_OTHER
						" 07070707070707070707070707070707,"
						"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a\n"
						"read grafana " TOKEN_READ "\n"
						"admin ops " TOKEN_ADMIN "\n"),
			 0);
}

/* An agent credential writes batches for its own nodes only; read credentials write none. */
static void test_credentials_scope_and_node(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	char *body;

	install_credentials(s->h->auth);
	/* Another node's agent: 403 before anything is looked up or stored. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, TOKEN_AGENT_OTHER,
			      "zstd", &resp, &body), 403);
	assert_non_null(strstr(body, "credential 'node-7' may not write batches for node " NODE_9));
	assert_null(response_header(&resp, "WWW-Authenticate"));
	free(body);
	/* A read credential may not post at all. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, TOKEN_READ, "zstd",
			      &resp, &body), 403);
	assert_non_null(strstr(body, "'grafana' (scope read)"));
	free(body);
	expect_nothing_stored(s);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_FORBIDDEN]), 2);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_REJECTED]), 2);
	/* A bad key is a 400 for any agent (the key is read before the node is checked). */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, "nonsense",
			      TOKEN_AGENT_OTHER, "zstd", &resp, &body), 400);
	free(body);
	/* No or an unknown token: 401 as before. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, "nope", "zstd",
			      &resp, &body), 401);
	free(body);
	/* The node's own agent: stored; its replay: duplicate. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, TOKEN_AGENT_9,
			      "zstd", &resp, &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, TOKEN_AGENT_9,
			      "zstd", &resp, &body), 200);
	assert_string_equal(body, "{\"status\":\"duplicate\"}\n");
	free(body);
	/* Another node's agent cannot even learn that the batch exists. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, TOKEN_AGENT_OTHER,
			      "zstd", &resp, &body), 403);
	free(body);
	/* Admin and the shared token write any node. */
	struct fixture_spec spec = { .node = 9, .epoch = 0x1122334455667788ULL, .sequence = 42,
				     .window_start_ns = HARNESS_T0 + 30000000000ULL };
	struct sysom_batch b;
	struct byte_buf z;
	char key[96];
	assert_int_equal(fixture_batch_build(&b, &spec), 0);
	assert_int_equal(fixture_batch_encode(&b, true, &z), 0);
	fixture_batch_key(&b, key, sizeof(key));
	assert_int_equal(post(s, z.data, z.len, key, TOKEN_ADMIN, "zstd", &resp, &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	byte_buf_free(&z);
	sysom_batch_free(&b);
	assert_int_equal(harness_rows(s->h, "batches"), 2);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_FORBIDDEN]), 3);
}

struct events {
	int forbidden, conflicts;
	struct ingest_event last;
	char credential[80];
};

static void on_event(void *arg, const struct ingest_event *ev)
{
	struct events *e = arg;

	e->last = *ev;
	snprintf(e->credential, sizeof(e->credential), "%s", ev->credential);
	e->last.credential = e->last.peer = e->last.message = NULL; /* borrowed for the call */
	if (ev->kind == INGEST_EVENT_FORBIDDEN)
		e->forbidden++;
	else if (ev->kind == INGEST_EVENT_CONFLICT)
		e->conflicts++;
}

/* The same identity with other content: 409, counted and reported with both hashes, nothing
 * stored; the same content again (compressed or not) is still a duplicate. */
static void test_conflict(void **state)
{
	struct state *s = *state;
	struct events ev = { 0 };
	struct ingest_options io = { .on_event = on_event, .on_event_arg = &ev };
	struct ingest *in = ingest_new(s->h->store, s->h->auth, s->h->sym, &s->h->metrics, &io);
	struct fixture_spec other = { .node = 9, .epoch = 0x1122334455667788ULL, .sequence = 41,
				      .window_start_ns = HARNESS_T0 + 5000000000ULL };
	struct sysom_batch b;
	struct byte_buf z;
	struct http_response resp;
	struct test_request t;
	long long rows;
	char *body, want[40];
	json_t *doc;

	assert_non_null(in);
	install_credentials(s->h->auth);
	assert_int_equal(post_fixture(s, &resp, &body), 200);
	free(body);
	rows = harness_all_rows(s->h);
	/* Same identity (the key is the same), different content. */
	assert_int_equal(fixture_batch_build(&b, &other), 0);
	assert_int_equal(fixture_batch_encode(&b, true, &z), 0);
	request_init(&t, "POST", INGEST_PATH, NULL);
	request_token(&t, TOKEN_AGENT_9);
	request_header(&t, "content-encoding", "zstd");
	request_header(&t, "idempotency-key", s->key);
	request_body(&t, z.data, z.len);
	assert_int_equal(call(ingest_batch_post, in, &t, &resp, &body), 409);
	doc = json_loads(body, 0, NULL);
	assert_non_null(doc);
	snprintf(want, sizeof(want), "%016" PRIx64, sysom_hash64(s->raw.data, s->raw.len, 0));
	assert_string_equal(json_string_value(json_object_get(doc, "stored_hash")), want);
	assert_non_null(strstr(json_string_value(json_object_get(doc, "error")), want));
	json_decref(doc);
	free(body);
	assert_int_equal(harness_all_rows(s->h), rows);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_CONFLICT]), 1);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_REJECTED]), 1);
	assert_int_equal(metric(&s->h->metrics.batches[INGEST_DUPLICATE]), 0);
	assert_int_equal(ev.conflicts, 1);
	assert_string_equal(ev.credential, "node-9");
	assert_int_equal(ev.last.sequence, 41);
	assert_int_equal(ev.last.epoch, 0x1122334455667788ULL);
	assert_true(ev.last.stored_hash == sysom_hash64(s->raw.data, s->raw.len, 0));
	assert_true(ev.last.received_hash != ev.last.stored_hash);
	/* The stored batch's content again, plain this time: the same plain bytes, a duplicate. */
	assert_int_equal(post(s, s->raw.data, s->raw.len, s->key, TOKEN_AGENT_9, NULL, &resp, &body),
			 200);
	assert_string_equal(body, "{\"status\":\"duplicate\"}\n");
	free(body);
	/* A batch stored before content hashes existed (hash NULL) cannot be compared: duplicate. */
	{
		char path[256];
		sqlite3 *db = NULL;
		snprintf(path, sizeof(path), "%s/sysom.db", s->h->dir);
		assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
		sqlite3_busy_timeout(db, 5000);
		assert_int_equal(sqlite3_exec(db, "UPDATE batches SET content_hash = NULL", NULL, NULL,
					      NULL), SQLITE_OK);
		sqlite3_close(db);
	}
	assert_int_equal(call(ingest_batch_post, in, &t, &resp, &body), 200);
	assert_string_equal(body, "{\"status\":\"duplicate\"}\n");
	free(body);
	assert_int_equal(harness_all_rows(s->h), rows);
	assert_int_equal(ev.conflicts, 1);
	/* A refused node is reported too (with the credential's name, never its token). */
	request_init(&t, "POST", INGEST_PATH, NULL);
	request_token(&t, TOKEN_AGENT_OTHER);
	request_header(&t, "idempotency-key", s->key);
	request_body(&t, z.data, z.len);
	assert_int_equal(call(ingest_batch_post, in, &t, &resp, &body), 403);
	free(body);
	assert_int_equal(ev.forbidden, 1);
	assert_string_equal(ev.credential, "node-7");
	byte_buf_free(&z);
	sysom_batch_free(&b);
	ingest_free(in);
}

static void test_bad_encodings(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	struct byte_buf bad = { 0 };
	char *body;

	/* Corrupt zstd: flip bytes in the middle of the frame. */
	byte_buf_append(&bad, s->compressed.data, s->compressed.len);
	for (size_t i = 8; i < bad.len; i += 7)
		bad.data[i] ^= 0x5a;
	assert_int_equal(post(s, bad.data, bad.len, s->key, HARNESS_TOKEN, "zstd", &resp, &body), 400);
	assert_non_null(strstr(body, "zstd"));
	free(body);
	/* Truncated zstd. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len / 2, s->key, HARNESS_TOKEN,
			      "zstd", &resp, &body), 400);
	free(body);
	/* Unsupported encoding. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, s->key, HARNESS_TOKEN, "gzip",
			      &resp, &body), 415);
	assert_non_null(strstr(body, "gzip"));
	free(body);
	/* Empty body. */
	assert_int_equal(post(s, NULL, 0, s->key, HARNESS_TOKEN, "zstd", &resp, &body), 400);
	free(body);
	byte_buf_free(&bad);
	expect_nothing_stored(s);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_DECOMPRESS]), 2);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_ENCODING]), 1);
}

/* 200 MiB of zeros, compressed by streaming so the test never holds them either. */
static void zero_bomb(struct byte_buf *out)
{
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	static const uint8_t zeros[1 << 20];
	uint8_t chunk[1 << 16];

	memset(out, 0, sizeof(*out));
	assert_non_null(cctx);
	ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
	for (int i = 0; i <= 200; i++) {
		ZSTD_inBuffer in = { zeros, i < 200 ? sizeof(zeros) : 0, 0 };
		ZSTD_EndDirective mode = i < 200 ? ZSTD_e_continue : ZSTD_e_end;
		size_t left;
		do {
			ZSTD_outBuffer ob = { chunk, sizeof(chunk), 0 };
			left = ZSTD_compressStream2(cctx, &ob, &in, mode);
			assert_false(ZSTD_isError(left));
			byte_buf_append(out, chunk, ob.pos);
		} while (mode == ZSTD_e_end ? left != 0 : in.pos < in.size);
	}
	ZSTD_freeCCtx(cctx);
	assert_int_equal(byte_buf_error(out), 0);
}

static long max_rss_kib(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
	return ru.ru_maxrss;
}

static void test_decompression_bomb(void **state)
{
	struct state *s = *state;
	struct ingest_options io = { .max_decompressed = 8u << 20 };
	struct ingest *limited = ingest_new(s->h->store, s->h->auth, s->h->sym, &s->h->metrics, &io);
	struct http_response resp;
	struct test_request t;
	struct byte_buf bomb;
	char *body;

	assert_non_null(limited);
	zero_bomb(&bomb);
	assert_true(bomb.len < (1u << 20)); /* small on the wire */
	long before = max_rss_kib();
	request_init(&t, "POST", INGEST_PATH, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-encoding", "zstd");
	request_header(&t, "idempotency-key", s->key);
	request_body(&t, bomb.data, bomb.len);
	assert_int_equal(call(ingest_batch_post, limited, &t, &resp, &body), 413);
	assert_non_null(strstr(body, "decompressed"));
	free(body);
	/* Decompression stopped at the limit: the peak grew by far less than the 200 MiB. */
	assert_true(max_rss_kib() - before < 64 * 1024);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_TOO_LARGE]), 1);
	/* The same bomb against the default 128 MiB limit is refused too. */
	assert_int_equal(post(s, bomb.data, bomb.len, s->key, HARNESS_TOKEN, "zstd", &resp, &body), 413);
	free(body);
	expect_nothing_stored(s);
	byte_buf_free(&bomb);
	ingest_free(limited);
}

static void test_malformed_batches(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	struct byte_buf z = { 0 };
	char *body;

	/* Truncated batch (valid zstd of a prefix): 400 with the decoder's message and offset. */
	assert_int_equal(sysom_zstd_compress(s->raw.data, s->raw.len - 10, 3, &z), 0);
	assert_int_equal(post(s, z.data, z.len, s->key, HARNESS_TOKEN, "zstd", &resp, &body), 400);
	json_t *doc = json_loads(body, 0, NULL);
	assert_non_null(doc);
	assert_non_null(strstr(json_string_value(json_object_get(doc, "error")), "malformed batch at byte"));
	assert_true(json_is_integer(json_object_get(doc, "offset")));
	json_decref(doc);
	free(body);
	byte_buf_free(&z);

	/* Not a batch at all. */
	assert_int_equal(post(s, "hello", 5, s->key, HARNESS_TOKEN, NULL, &resp, &body), 400);
	assert_non_null(strstr(body, "shorter than"));
	free(body);

	/* A sample row pointing at a process that does not exist. */
	struct byte_buf bad = { 0 };
	byte_buf_append(&bad, s->raw.data, s->raw.len);
	const uint8_t *entry = bad.data + SYSOM_WIRE_HEADER_SIZE + 6 * SYSOM_WIRE_SECTION_ENTRY_SIZE;
	assert_int_equal(load_le16(entry), SYSOM_SECTION_SAMPLES);
	store_le32(bad.data + load_le32(entry + 8), 99);
	assert_int_equal(post(s, bad.data, bad.len, s->key, HARNESS_TOKEN, NULL, &resp, &body), 400);
	assert_non_null(strstr(body, "process 99 out of range"));
	free(body);

	/* Another major version: 400 naming what is supported. */
	byte_buf_free(&bad);
	byte_buf_append(&bad, s->raw.data, s->raw.len);
	store_le16(bad.data + 4, 2);
	assert_int_equal(post(s, bad.data, bad.len, s->key, HARNESS_TOKEN, NULL, &resp, &body), 400);
	assert_non_null(strstr(body, "major version 2"));
	assert_non_null(strstr(body, "reads major version 1"));
	free(body);
	byte_buf_free(&bad);
	expect_nothing_stored(s);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_CORRUPT]), 3);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_VERSION]), 1);
}

static void test_idempotency_key(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	char *body;

	/* Missing. */
	assert_int_equal(post(s, s->compressed.data, s->compressed.len, NULL, HARNESS_TOKEN, "zstd",
			      &resp, &body), 400);
	assert_non_null(strstr(body, "missing Idempotency-Key"));
	free(body);
	/* Malformed. */
	const char *bad[] = { "abc", "09090909090909090909090909090909:1122334455667788:",
			      "09090909090909090909090909090909:1122334455667788:4x",
			      "0909090909090909090909090909090g:1122334455667788:41",
			      "09090909090909090909090909090909-1122334455667788-41",
			      "09090909090909090909090909090909:1122334455667788:99999999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(post(s, s->compressed.data, s->compressed.len, bad[i], HARNESS_TOKEN,
				      "zstd", &resp, &body), 400);
		assert_non_null(strstr(body, "malformed Idempotency-Key"));
		free(body);
	}
	/* Well formed but not this batch's: other sequence, epoch, node. */
	const char *other[] = { "09090909090909090909090909090909:1122334455667788:42",
				"09090909090909090909090909090909:1122334455667789:41",
				"08090909090909090909090909090909:1122334455667788:41" };
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		assert_int_equal(post(s, s->compressed.data, s->compressed.len, other[i],
				      HARNESS_TOKEN, "zstd", &resp, &body), 400);
		assert_non_null(strstr(body, "does not match"));
		assert_non_null(strstr(body, s->key));
		free(body);
	}
	expect_nothing_stored(s);
	/* The right key still works after all that. */
	assert_int_equal(post_fixture(s, &resp, &body), 200);
	free(body);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_KEY_MISMATCH]), 3);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_BAD_REQUEST]), 1 + 6);
}

static void test_disk_full_then_retry(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	struct fixture_spec spec = { .node = 9, .epoch = 0x1122334455667788ULL, .sequence = 41,
				     .window_start_ns = HARNESS_T0, .extra_stacks = 20000 };
	struct sysom_batch big;
	struct byte_buf z;
	char key[96], *body;

	assert_int_equal(fixture_batch_build(&big, &spec), 0);
	assert_int_equal(fixture_batch_encode(&big, true, &z), 0);
	fixture_batch_key(&big, key, sizeof(key));
	assert_int_equal(store_size_limit_set(s->h->store, 64 * 1024), 0);
	assert_int_equal(post(s, z.data, z.len, key, HARNESS_TOKEN, "zstd", &resp, &body), 507);
	assert_non_null(response_header(&resp, "Retry-After"));
	assert_non_null(response_header(&resp, SYSOM_WIRE_MINOR_HEADER)); /* errors too */
	free(body);
	expect_nothing_stored(s);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_STORAGE_FULL]), 1);
	/* Space is freed; the agent retries the same batch and it is stored whole. */
	assert_int_equal(store_size_limit_set(s->h->store, 0), 0);
	assert_int_equal(post(s, z.data, z.len, key, HARNESS_TOKEN, "zstd", &resp, &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	assert_int_equal(harness_rows(s->h, "samples"), 4 + 20000);
	byte_buf_free(&z);
	sysom_batch_free(&big);
}

static void test_sample_count_limit(void **state)
{
	struct state *s = *state;
	struct http_response resp;
	struct byte_buf raw;
	char *body;

	s->batch.samples[0].count = (1ULL << 32) + 1;
	assert_int_equal(fixture_batch_encode(&s->batch, false, &raw), 0);
	assert_int_equal(post(s, raw.data, raw.len, s->key, HARNESS_TOKEN, NULL, &resp, &body), 400);
	assert_non_null(strstr(body, "exceeds the limit"));
	free(body);
	byte_buf_free(&raw);
	expect_nothing_stored(s);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void test_token_file(void **state)
{
	struct state *s = *state;
	char path[256], err[256], *token = NULL;
	bool world = true;

	snprintf(path, sizeof(path), "%s/token", s->h->dir);
	write_file(path, "  s3cret-token \nsecond line\n", 0600);
	assert_int_equal(sysom_token_file_read(path, &token, &world, err, sizeof(err)), 0);
	assert_string_equal(token, "s3cret-token");
	assert_false(world);
	free(token);
	write_file(path, "tok", 0644);
	assert_int_equal(sysom_token_file_read(path, &token, &world, err, sizeof(err)), 0);
	assert_string_equal(token, "tok");
	assert_true(world);
	free(token);
	token = NULL;
	const char *bad[] = { "", "  \n", "two words\n", "tab\there\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(path, bad[i], 0600);
		assert_int_equal(sysom_token_file_read(path, &token, &world, err, sizeof(err)),
				 -SYSOM_ECONFIG);
		assert_null(token);
		assert_non_null(strstr(err, path));
	}
	assert_int_equal(sysom_token_file_read(s->h->dir, &token, &world, err, sizeof(err)),
			 -SYSOM_ECONFIG);
	unlink(path);
	assert_int_equal(sysom_token_file_read(path, &token, &world, err, sizeof(err)), -ENOENT);
	assert_null(token);
}

/* ---- kernel symbols ------------------------------------------------------------------------ */

#define KERNEL_HEX "abf9ec0ec5946600c90641cf5db998472fac410b"

static int ksyms(struct state *s, const char *method, const char *hex, const void *body, size_t len,
		 const char *encoding, const char *token, struct http_response *resp, char **out)
{
	struct test_request t;
	char path[256];

	snprintf(path, sizeof(path), "%s%s", INGEST_KSYMS_PREFIX, hex);
	request_init(&t, method, path, NULL);
	if (token)
		request_token(&t, token);
	if (encoding)
		request_header(&t, "content-encoding", encoding);
	request_body(&t, body, len);
	return call(strcmp(method, "PUT") == 0 ? ingest_ksyms_put : ingest_ksyms_get, s->h->ingest,
		    &t, resp, out);
}

static void test_kernel_symbols_upload(void **state)
{
	struct state *s = *state;
	const char text[] = "1000 T _stext\n1100 t do_one\n2200 T do_syscall_64\n3000 T _etext\n";
	struct http_response resp;
	struct byte_buf z = { 0 };
	char *body;

	assert_int_equal(sysom_zstd_compress(text, strlen(text), 3, &z), 0);
	assert_int_equal(ksyms(s, "GET", KERNEL_HEX, NULL, 0, NULL, HARNESS_TOKEN, &resp, &body), 404);
	free(body);
	assert_int_equal(ksyms(s, "PUT", KERNEL_HEX, z.data, z.len, "zstd", NULL, &resp, &body), 401);
	free(body);
	assert_int_equal(ksyms(s, "GET", KERNEL_HEX, NULL, 0, NULL, NULL, &resp, &body), 401);
	free(body);
	assert_int_equal(ksyms(s, "PUT", KERNEL_HEX, z.data, z.len, "zstd", HARNESS_TOKEN, &resp, &body), 200);
	assert_string_equal(body, "{\"build_id\":\"" KERNEL_HEX "\",\"symbols\":4,\"status\":\"stored\"}\n");
	free(body);
	assert_int_equal(ksyms(s, "GET", KERNEL_HEX, NULL, 0, NULL, HARNESS_TOKEN, &resp, &body), 200);
	assert_string_equal(body, "{\"build_id\":\"" KERNEL_HEX "\",\"symbols\":4}\n");
	free(body);
	/* Scopes: any agent uploads (tables are keyed by Build ID, not node); read may look. */
	install_credentials(s->h->auth);
	assert_int_equal(ksyms(s, "PUT", KERNEL_HEX, z.data, z.len, "zstd", TOKEN_READ, &resp, &body),
			 403);
	free(body);
	assert_int_equal(ksyms(s, "PUT", KERNEL_HEX, z.data, z.len, "zstd", TOKEN_AGENT_OTHER, &resp,
			       &body), 200);
	free(body);
	assert_int_equal(ksyms(s, "GET", KERNEL_HEX, NULL, 0, NULL, TOKEN_READ, &resp, &body), 200);
	free(body);
	assert_int_equal(ksyms(s, "GET", KERNEL_HEX, NULL, 0, NULL, TOKEN_AGENT_9, &resp, &body), 200);
	free(body);
	/* Upper-case hex names the same table; a re-upload changes nothing. */
	assert_int_equal(ksyms(s, "PUT", "ABF9EC0EC5946600C90641CF5DB998472FAC410B", text, 14, NULL,
			       HARNESS_TOKEN, &resp, &body), 200);
	assert_non_null(strstr(body, "\"unchanged\""));
	assert_non_null(strstr(body, "\"symbols\":4"));
	free(body);
	assert_int_equal(harness_rows(s->h, "kernel_symbols"), 4);
	assert_int_equal(metric(&s->h->metrics.ksym_uploads[INGEST_STORED]), 1);
	assert_int_equal(metric(&s->h->metrics.ksym_uploads[INGEST_DUPLICATE]), 2); /* agent's too */
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_FORBIDDEN]), 1);
	byte_buf_free(&z);

	/* Malformed: 400 naming the line; nothing stored. */
	const char bad[] = "1000 T ok\n\nzz T broken\n";
	assert_int_equal(ksyms(s, "PUT", "0102030405", bad, strlen(bad), NULL, HARNESS_TOKEN, &resp,
			       &body), 400);
	json_t *doc = json_loads(body, 0, NULL);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(doc, "line")), 3);
	assert_non_null(strstr(json_string_value(json_object_get(doc, "error")), "line 3"));
	json_decref(doc);
	free(body);
	assert_int_equal(ksyms(s, "GET", "0102030405", NULL, 0, NULL, HARNESS_TOKEN, &resp, &body), 404);
	free(body);
	/* Invalid build IDs in the path. */
	const char *ids[] = { "", "abc", "0102030", "zz0102030405", KERNEL_HEX KERNEL_HEX KERNEL_HEX KERNEL_HEX };
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		assert_int_equal(ksyms(s, "GET", ids[i], NULL, 0, NULL, HARNESS_TOKEN, &resp, &body), 400);
		free(body);
	}
	assert_int_equal(harness_rows(s->h, "kernel_symbol_tables"), 1);
}

static void test_kernel_symbols_limits(void **state)
{
	struct state *s = *state;
	struct ingest_options io = { .max_ksym_lines = 3, .max_ksyms_decompressed = 64 };
	struct ingest *small = ingest_new(s->h->store, s->h->auth, NULL, &s->h->metrics, &io);
	const char four[] = "1 T a\n2 T b\n3 T c\n4 T d\n";
	struct http_response resp;
	struct test_request t;
	struct byte_buf z = { 0 };
	char big[200], *body;

	assert_non_null(small);
	request_init(&t, "PUT", INGEST_KSYMS_PREFIX "0102030405", NULL);
	request_token(&t, HARNESS_TOKEN);
	request_body(&t, four, strlen(four));
	assert_int_equal(call(ingest_ksyms_put, small, &t, &resp, &body), 413);
	assert_non_null(strstr(body, "more than 3 lines"));
	free(body);
	memset(big, 'a', sizeof(big));
	assert_int_equal(sysom_zstd_compress(big, sizeof(big), 3, &z), 0);
	request_header(&t, "content-encoding", "zstd");
	request_body(&t, z.data, z.len);
	assert_int_equal(call(ingest_ksyms_put, small, &t, &resp, &body), 413);
	free(body);
	assert_int_equal(harness_rows(s->h, "kernel_symbol_tables"), 0);
	byte_buf_free(&z);
	ingest_free(small);
}

/* Uploads `text` as build ID `hex` through `in`; returns the status. */
static int ksyms_put_via(struct ingest *in, const char *hex, const char *text, char *retry_after,
			 size_t ralen, char **body)
{
	struct http_response resp;
	struct test_request t;
	char path[256];

	snprintf(path, sizeof(path), "%s%s", INGEST_KSYMS_PREFIX, hex);
	request_init(&t, "PUT", path, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_body(&t, text, strlen(text));
	int status = call(ingest_ksyms_put, in, &t, &resp, body);
	const char *ra = response_header(&resp, "Retry-After");
	snprintf(retry_after, ralen, "%s", ra ? ra : "");
	return status;
}

/* Under --max-kernel-symbols: a new table evicts one not in use, or when every table is in use
 * the upload is refused with 507 and Retry-After (waiting helps only if tables fall out of
 * use); a table larger than the limit alone is 413. */
static void test_kernel_symbols_total_bound(void **state)
{
	struct state *s = *state;
	const char three[] = "1000 T a\n2000 T b\n3000 T c\n";
	const char two[] = "1000 T a\n2000 T b\n";
	struct store_sqlite_options in_use = { .max_kernel_symbols = 5 };
	struct store_sqlite_options idle = { .max_kernel_symbols = 5, .kernel_symbols_in_use_ns = 1 };
	struct store *store = NULL;
	char dir[128], err[256], ra[32], *body;

	/* Every table counts as in use for a day after its upload. */
	assert_int_equal(fixture_tmpdir_make(dir, sizeof(dir)), 0);
	assert_int_equal(store_sqlite_open(dir, &in_use, &store, err, sizeof(err)), 0);
	struct ingest *in = ingest_new(store, s->h->auth, NULL, &s->h->metrics, NULL);
	assert_non_null(in);
	assert_int_equal(ksyms_put_via(in, "0a0a0a0a0a0a", three, ra, sizeof(ra), &body), 200);
	free(body);
	assert_int_equal(ksyms_put_via(in, "0b0b0b0b0b0b", three, ra, sizeof(ra), &body), 507);
	assert_non_null(strstr(body, "kernel symbol tables are full: 1 tables hold 3 of 5"));
	assert_non_null(strstr(body, "within the last 86400 s"));
	long wait_s = strtol(ra, NULL, 10);
	assert_true(wait_s > 86000 && wait_s <= 86401);
	free(body);
	assert_int_equal(metric(&s->h->metrics.errors[INGEST_ERR_STORAGE_FULL]), 1);
	assert_int_equal(ksyms_put_via(in, "0c0c0c0c0c0c", "1 T a\n2 T b\n3 T c\n4 T d\n5 T e\n6 T f\n",
				       ra, sizeof(ra), &body), 413);
	assert_non_null(strstr(body, "6 symbols exceed the limit of 5 kernel symbols"));
	free(body);
	assert_int_equal(ksyms_put_via(in, "0d0d0d0d0d0d", two, ra, sizeof(ra), &body), 200);
	free(body);
	ingest_free(in);
	store_close(store);

	/* With tables out of use as soon as they are stored, the least recently used goes. */
	assert_int_equal(store_sqlite_open(dir, &idle, &store, err, sizeof(err)), 0);
	in = ingest_new(store, s->h->auth, NULL, &s->h->metrics, NULL);
	assert_non_null(in);
	assert_int_equal(ksyms_put_via(in, "0b0b0b0b0b0b", three, ra, sizeof(ra), &body), 200);
	assert_non_null(strstr(body, "\"stored\""));
	free(body);
	struct store_ksyms_usage u;
	assert_int_equal(store_ksyms_usage_get(store, &u), 0);
	assert_int_equal(u.tables, 2);
	assert_int_equal(u.rows, 5);
	assert_int_equal(u.evicted_tables, 1);
	assert_int_equal(ksyms_put_via(in, "0a0a0a0a0a0a", two, ra, sizeof(ra), &body), 200);
	free(body);
	assert_int_equal(store_ksyms_usage_get(store, &u), 0);
	assert_int_equal(u.evicted_tables, 2); /* 0d (older) went, then 5 - 3 + 2 fits */
	ingest_free(in);
	store_close(store);
	fixture_tmpdir_remove(dir);
}

/* ---- replicas: the stored body goes to on_stored; a forwarded batch feeds, never stores ---- */

struct feed_seen {
	int stored, fed;
	size_t body_len;
	bool zstd;
	char key[96];
	uint64_t fed_sequence;
};

static void on_stored_body(void *arg, const struct sysom_batch *b, const struct ingest_body *body)
{
	struct feed_seen *f = arg;

	(void)b;
	f->stored++;
	f->body_len = body->len;
	f->zstd = body->zstd;
	snprintf(f->key, sizeof(f->key), "%s", body->idempotency_key ? body->idempotency_key : "");
}

static void on_fed_batch(void *arg, const struct sysom_batch *b)
{
	struct feed_seen *f = arg;

	f->fed++;
	f->fed_sequence = b->sequence;
}

static int feed(struct ingest *in, struct state *s, const char *key, const char *token,
		struct http_response *resp, char **out)
{
	struct test_request t;

	request_init(&t, "POST", INGEST_FEED_PATH, NULL);
	if (token)
		request_token(&t, token);
	request_header(&t, "content-encoding", "zstd");
	if (key)
		request_header(&t, "idempotency-key", key);
	request_body(&t, s->compressed.data, s->compressed.len);
	return call(ingest_feed_post, in, &t, resp, out);
}

static void test_feed(void **state)
{
	struct state *s = *state;
	struct feed_seen f = { 0 };
	struct ingest_options io = { .on_stored = on_stored_body, .on_fed = on_fed_batch,
				     .on_stored_arg = &f };
	struct ingest *in = ingest_new(s->h->store, s->h->auth, s->h->sym, &s->h->metrics, &io);
	struct http_response resp;
	struct test_request t;
	char *body, other_key[96];

	assert_non_null(in);
	install_credentials(s->h->auth);
	/* Fed: decoded and handed over, nothing stored. */
	assert_int_equal(feed(in, s, s->key, TOKEN_ADMIN, &resp, &body), 200);
	assert_non_null(strstr(body, "\"fed\""));
	free(body);
	assert_int_equal(f.fed, 1);
	assert_int_equal(f.fed_sequence, 41);
	assert_int_equal(f.stored, 0);
	expect_nothing_stored(s);
	/* The shared token may feed too; an agent credential (even for the batch's own node) and
	 * a read credential may not; no token: 401. */
	assert_int_equal(feed(in, s, s->key, HARNESS_TOKEN, &resp, &body), 200);
	free(body);
	assert_int_equal(feed(in, s, s->key, TOKEN_AGENT_9, &resp, &body), 403);
	free(body);
	assert_int_equal(feed(in, s, s->key, TOKEN_READ, &resp, &body), 403);
	free(body);
	assert_int_equal(feed(in, s, s->key, NULL, &resp, &body), 401);
	free(body);
	/* A key that is not the batch's: 400, not fed. */
	snprintf(other_key, sizeof(other_key), "%s", s->key);
	other_key[strlen(other_key) - 1] = other_key[strlen(other_key) - 1] == '1' ? '2' : '1';
	assert_int_equal(feed(in, s, other_key, TOKEN_ADMIN, &resp, &body), 400);
	free(body);
	assert_int_equal(feed(in, s, NULL, TOKEN_ADMIN, &resp, &body), 400);
	free(body);
	assert_int_equal(f.fed, 2);
	expect_nothing_stored(s);

	/* A stored batch reaches on_stored with its body as posted (for forwarding). */
	request_init(&t, "POST", INGEST_PATH, NULL);
	request_token(&t, HARNESS_TOKEN);
	request_header(&t, "content-encoding", "zstd");
	request_header(&t, "idempotency-key", s->key);
	request_body(&t, s->compressed.data, s->compressed.len);
	assert_int_equal(call(ingest_batch_post, in, &t, &resp, &body), 200);
	free(body);
	assert_int_equal(f.stored, 1);
	assert_int_equal(f.body_len, s->compressed.len);
	assert_true(f.zstd);
	assert_string_equal(f.key, s->key);
	ingest_free(in);

	/* A server that is not a replica (no on_fed): 404. */
	assert_int_equal(feed(s->h->ingest, s, s->key, TOKEN_ADMIN, &resp, &body), 404);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* First, while the peak RSS is still low. */
		cmocka_unit_test_setup_teardown(test_decompression_bomb, setup, teardown),
		cmocka_unit_test_setup_teardown(test_valid_batch_stored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_counted_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credentials_scope_and_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conflict, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_encodings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_batches, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idempotency_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_full_then_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sample_count_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_symbols_upload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_symbols_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_symbols_total_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_feed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
