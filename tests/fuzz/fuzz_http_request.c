/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: arbitrary bytes through the HTTP transport's request state machine, no socket. */
// fuzz-sources: server/http/http.c server/http/http_message.c server/http/router.c
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "server/http/http.h"
#include "server/http/http_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads everything the transport hands over (ASan catches a dangling pointer) and answers. */
static void echo(void *ctx, const struct http_request *req, struct http_response *resp)
{
	char value[32];
	size_t total = 0;
	int a = http_query_param(req, "a", value, sizeof(value));
	const char *h = http_request_header(req, "x-test");

	(void)ctx;
	for (size_t i = 0; i < req->header_count; i++)
		total += strlen(req->headers[i].name) + strlen(req->headers[i].value);
	for (size_t i = 0; i < req->body_len; i++)
		total += req->body[i];
	if (a == -EINVAL) {
		http_response_error(resp, 400, "bad query %s", req->query);
		return;
	}
	byte_buf_printf(&resp->body, "{\"method\":\"%s\",\"path\":\"%s\",\"a\":%d,\"n\":%zu}",
			req->method, req->path, a, total + strlen(req->peer));
	if (h)
		http_response_header(resp, "X-Echo", h);
	/* A body starting with 's' picks the status: invalid ones must become 500. */
	if (req->body_len >= 2 && req->body[0] == 's')
		resp->status = req->body[1] * 3;
	/* A body starting with 't' sets the content type from the peer's bytes (CR, LF...). */
	if (req->body_len >= 2 && req->body[0] == 't') {
		char ctype[32];
		size_t n = req->body_len - 1 < sizeof(ctype) - 1 ? req->body_len - 1 : sizeof(ctype) - 1;
		memcpy(ctype, req->body + 1, n);
		ctype[n] = '\0';
		http_response_text(resp, 201, ctype, "text", 4);
		http_response_header(resp, ctype, ctype);
	}
}

static const struct http_route routes[] = {
	{ .method = "GET", .path = "/echo", .handler = echo, .max_body = 0 },
	{ .method = "POST", .path = "/echo", .handler = echo, .max_body = 128 },
	{ .method = "GET", .path = "/files/", .prefix = true, .handler = echo },
	{ .method = "PUT", .path = "/files/", .prefix = true, .handler = echo, .max_body = 64 },
	{ .method = "HEAD", .path = "/head", .handler = echo },
};

/* Admission by the head: a request carrying "X-Deny" is refused with 401 (flags bit 1 on). */
static bool admit(void *arg, const struct http_route *route, const struct http_request *req,
		  struct http_response *resp)
{
	(void)arg;
	(void)route;
	if (req->body || req->body_len)
		abort();
	if (!http_request_header(req, "x-deny"))
		return true;
	http_response_error(resp, 401, "denied");
	return false;
}

/*
 * Input: byte 0 picks the size of the pieces the rest is fed in (1..256, exercising every
 * split point), byte 1 bit 0 fires the timer at the end, bit 1 installs the admit callback;
 * the rest is the peer's bytes.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_server_options opts = { .max_header_bytes = 1024, .max_headers = 16 };
	struct byte_buf out = { 0 };
	struct http_conn *c;

	if (size < 2)
		return 0;
	size_t piece = (size_t)data[0] + 1;
	uint8_t flags = data[1];
	data += 2;
	size -= 2;
	if (flags & 2)
		opts.admit = admit;
	c = http__conn_new(&opts, routes, sizeof(routes) / sizeof(routes[0]), &out);
	if (!c)
		abort();
	int closed = 0;
	for (size_t off = 0; off < size && !closed; off += piece) {
		size_t n = size - off < piece ? size - off : piece;
		closed = http__conn_feed(c, data + off, n);
	}
	if (!closed && (flags & 1))
		closed = http__conn_expire(c);
	/* Whatever came out is a sequence of responses. */
	if (out.len && (out.len < 9 || memcmp(out.data, "HTTP/1.1 ", 9) != 0))
		abort();
	http__conn_free(c);
	byte_buf_free(&out);
	return 0;
}
