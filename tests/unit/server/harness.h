/* SPDX-License-Identifier: Apache-2.0 */
/* Server test harness (header-only: server tests only): a store in a temp dir with the
 * handlers' contexts, and requests built by hand and passed straight to the handlers. */
#ifndef SYSOM_TESTS_UNIT_SERVER_HARNESS_H
#define SYSOM_TESTS_UNIT_SERVER_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sqlite3.h>

#include "common/hex.h"
#include "server/api/api.h"
#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/ingest/ingest.h"
#include "server/metrics/metrics.h"
#include "server/store/store.h"
#include "server/symbols/symbolize.h"
#include "tests/support/batch_fixture.h"

#define HARNESS_TOKEN "s3cret-token"
#define HARNESS_T0 1700000000000000000ULL /* fixture window start, ns */
#define HARNESS_NOW_MS (1700000000000LL + 3600 * 1000) /* the API's "now": 1 h after T0 */

struct harness {
	char dir[128];
	struct store *store;
	struct auth *auth;
	struct symbolizer *sym;
	struct server_metrics metrics;
	struct ingest *ingest;
	struct api *api;
};

static inline int64_t harness_now_ms(void)
{
	return HARNESS_NOW_MS;
}

/* Returns NULL on failure (the caller asserts). `token` NULL: no authentication. */
static inline struct harness *harness_new(const char *token, const struct ingest_options *io)
{
	struct harness *h = calloc(1, sizeof(*h));
	struct api_options ao = { .now_ms = harness_now_ms };
	char err[256];

	if (!h || fixture_tmpdir_make(h->dir, sizeof(h->dir)) ||
	    store_sqlite_open(h->dir, NULL, &h->store, err, sizeof(err)))
		return NULL;
	server_metrics_init(&h->metrics);
	h->auth = auth_new();
	h->sym = symbolizer_new(h->store, 0, 0);
	if (!h->auth || !h->sym || auth_token_set(h->auth, token))
		return NULL;
	h->ingest = ingest_new(h->store, h->auth, h->sym, &h->metrics, io);
	h->api = api_new(h->store, h->sym, h->auth, &h->metrics, &ao);
	return h->ingest && h->api ? h : NULL;
}

static inline void harness_free(struct harness *h)
{
	if (!h)
		return;
	api_free(h->api);
	ingest_free(h->ingest);
	symbolizer_free(h->sym);
	auth_free(h->auth);
	store_close(h->store);
	fixture_tmpdir_remove(h->dir);
	free(h);
}

/*
 * Installs a credentials set in `a` from lines "SCOPE NAME TOKEN [NODES]" where TOKEN is the
 * token itself (replaced by its sha256: spec, as an operator's file would hold). Returns 0,
 * or the parse error (its message printed).
 */
static inline int harness_credentials(struct auth *a, const char *lines)
{
	struct auth_credentials *set = NULL;
	struct auth_credentials_error err;
	char text[4096], *copy = strdup(lines), *save = NULL;
	size_t len = 0;
	int rc;

	if (!copy)
		return -1;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char scope[16], name[80], token[128], nodes[1024] = "", hex[65];
		uint8_t h[32];
		if (sscanf(line, "%15s %79s %127s %1023s", scope, name, token, nodes) < 3 ||
		    auth_token_sha256(token, strlen(token), h))
			break;
		sysom_hex_encode(h, sizeof(h), hex, sizeof(hex));
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s %s sha256:%s %s\n", scope,
					name, hex, nodes);
	}
	free(copy);
	rc = auth_credentials_parse(text, len, &set, &err);
	if (rc)
		fprintf(stderr, "harness_credentials: line %zu: %s\n", err.line, err.message);
	else if ((rc = auth_credentials_set(a, set, NULL)))
		auth_credentials_free(set);
	return rc;
}

/* A request as the transport would hand it over. */
struct test_request {
	struct http_request req;
	struct http_header headers[8];
	char auth[128];
};

static inline void request_init(struct test_request *t, const char *method, const char *path,
				const char *query)
{
	memset(t, 0, sizeof(*t));
	t->req.method = method;
	t->req.path = path;
	t->req.query = query ? query : "";
	t->req.headers = t->headers;
	t->req.peer = "127.0.0.1:40000";
}

/* Adds a header (name lower-cased as the transport does). */
static inline void request_header(struct test_request *t, const char *name, const char *value)
{
	if (t->req.header_count < 8)
		t->headers[t->req.header_count++] = (struct http_header){ name, value };
}

static inline void request_token(struct test_request *t, const char *token)
{
	snprintf(t->auth, sizeof(t->auth), "Bearer %s", token);
	request_header(t, "authorization", t->auth);
}

static inline void request_body(struct test_request *t, const void *data, size_t len)
{
	t->req.body = data;
	t->req.body_len = len;
}

static inline void response_init(struct http_response *resp)
{
	memset(resp, 0, sizeof(*resp));
	resp->status = 200;
	snprintf(resp->content_type, sizeof(resp->content_type), "application/json");
}

/* Runs a handler; returns the status and leaves the body NUL-terminated in *body (free it). */
static inline int call(http_handler_fn fn, void *ctx, const struct test_request *t,
		       struct http_response *resp, char **body)
{
	response_init(resp);
	fn(ctx, &t->req, resp);
	/* The body is not NUL-terminated: copy it into one that is. */
	*body = calloc(1, resp->body.len + 1);
	if (*body && resp->body.len)
		memcpy(*body, resp->body.data, resp->body.len);
	byte_buf_free(&resp->body);
	return resp->status;
}

/* The value of an extra response header, or NULL. */
static inline const char *response_header(const struct http_response *resp, const char *name)
{
	for (size_t i = 0; i < resp->extra_header_count; i++)
		if (strcasecmp(resp->extra_headers[i].name, name) == 0)
			return resp->extra_headers[i].value;
	return NULL;
}

/* Rows of a table, read with a separate connection as another process would. */
static inline long long harness_rows(const struct harness *h, const char *table)
{
	char path[256], sql[128];
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	long long n = -1;

	snprintf(path, sizeof(path), "%s/sysom.db", h->dir);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* Sum of the row counts of every table a batch writes. */
static inline long long harness_all_rows(const struct harness *h)
{
	static const char *const tables[] = { "nodes", "batches", "objects", "processes",
					      "stacks", "samples", "node_counters", "job_ranks",
					      "communicators", "nccl_call_chunks", "launches" };
	long long sum = 0;

	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		sum += harness_rows(h, tables[i]);
	return sum;
}

/* Posts a built batch (compressed) with the right key and token; returns the status and,
 * when `out` is not NULL, the response body (free it). */
static inline int harness_post_batch(struct harness *h, const struct sysom_batch *b, char **out)
{
	struct byte_buf buf;
	struct test_request t;
	struct http_response resp;
	char key[96], *body = NULL;
	int status = -1;

	if (!fixture_batch_encode(b, true, &buf)) {
		fixture_batch_key(b, key, sizeof(key));
		request_init(&t, "POST", INGEST_PATH, NULL);
		request_token(&t, HARNESS_TOKEN);
		request_header(&t, "content-encoding", "zstd");
		request_header(&t, "idempotency-key", key);
		request_body(&t, buf.data, buf.len);
		status = call(ingest_batch_post, h->ingest, &t, &resp, &body);
		byte_buf_free(&buf);
	}
	if (out)
		*out = body;
	else
		free(body);
	return status;
}

/* Posts a fixture batch (compressed) with the right key and token; returns the status. */
static inline int harness_post_fixture(struct harness *h, const struct fixture_spec *spec)
{
	struct sysom_batch b;
	int status = -1;

	if (fixture_batch_build(&b, spec))
		return -1;
	status = harness_post_batch(h, &b, NULL);
	sysom_batch_free(&b);
	return status;
}

#endif
