/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP transport over real sockets: routing, keep-alive, pipelining, limits, timeouts, stop,
 * connection fairness (eviction order, per-peer limit, first-byte and head deadlines). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "server/http/http.h"
#include "server/http/http_internal.h"

#define WAIT_SECONDS 5 /* upper bound on every wait; tests normally finish far sooner */

/* What the echo handler saw last (under fixture.mu). */
struct seen {
	int calls;
	char method[16];
	char path[256];
	char query[256];
	char a[64];
	int a_rc;
	char xtest[128];
	char first_header[64];
	size_t header_count;
	bool body_null;
	char body[1024];
	size_t body_len;
	char peer[64];
};

/* Holds the /block handler until opened. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int entered;
	bool open;
};

struct fixture {
	pthread_t thread;
	uv_loop_t loop;
	uv_async_t stop_async;
	uv_check_t tick;        /* signals cv after every loop iteration: waits re-check then */
	struct http_server *srv;
	uint16_t port;
	struct http_server_options opts;
	struct http_route routes[12];
	size_t nroutes;
	char file_path[256];    /* what /file serves ("" until a test sets it) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, stop_seen, done_called;
	int loop_close_rc;
	char err[256];
	struct seen seen;
	struct gate gate;
};

/* ---------------------------------------------------------------------------------------- */
/* Handlers (worker threads) */

static void copy_str(char *dst, size_t dstlen, const char *src)
{
	snprintf(dst, dstlen, "%s", src ? src : "(null)");
}

/* Records the request and answers "METHOD PATH a" (a = query parameter or "-"). */
static void echo_handler(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct fixture *f = ctx;
	char a[64];
	int rc = http_query_param(req, "a", a, sizeof(a));

	pthread_mutex_lock(&f->mu);
	struct seen *s = &f->seen;
	s->calls++;
	copy_str(s->method, sizeof(s->method), req->method);
	copy_str(s->path, sizeof(s->path), req->path);
	copy_str(s->query, sizeof(s->query), req->query);
	copy_str(s->a, sizeof(s->a), rc >= 0 ? a : "");
	s->a_rc = rc;
	copy_str(s->xtest, sizeof(s->xtest), http_request_header(req, "x-test"));
	copy_str(s->first_header, sizeof(s->first_header),
		 req->header_count ? req->headers[0].name : "");
	s->header_count = req->header_count;
	s->body_null = req->body == NULL;
	s->body_len = req->body_len < sizeof(s->body) - 1 ? req->body_len : sizeof(s->body) - 1;
	if (req->body)
		memcpy(s->body, req->body, s->body_len);
	s->body[s->body_len] = '\0';
	copy_str(s->peer, sizeof(s->peer), req->peer);
	pthread_mutex_unlock(&f->mu);
	byte_buf_printf(&resp->body, "%s %s %s", req->method, req->path, rc >= 0 ? a : "-");
}

/* Stands for a handler whose authentication check passed. */
static void auth_handler(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	http_request_mark_authenticated(req);
	http_response_text(resp, 200, "text/plain", "trusted", 7);
}

static void created_handler(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	http_response_text(resp, 201, "text/plain", "made", 4);
	http_response_header(resp, "X-Custom", "yes");
	http_response_header(resp, "X-Evil", "a\r\nInjected: 1");
}

static void nocontent_handler(void *ctx, const struct http_request *req,
			      struct http_response *resp)
{
	(void)ctx;
	(void)req;
	resp->status = 204;
}

/*
 * Serves f->file_path as a file body: ?len=N announces N bytes (default: the file's size),
 * ?off=N starts there, ?fail=1 sets the file body and then answers an error instead (the
 * file must still be closed).
 */
static void file_handler(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct fixture *f = ctx;
	char value[32];
	struct stat st;
	uint64_t off = 0, len;
	int fd = open(f->file_path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) != 0) {
		http_response_error(resp, 404, "no file");
		if (fd >= 0)
			close(fd);
		return;
	}
	len = (uint64_t)st.st_size;
	if (http_query_param(req, "off", value, sizeof(value)) > 0) {
		off = strtoull(value, NULL, 10);
		len -= off;
	}
	if (http_query_param(req, "len", value, sizeof(value)) > 0)
		len = strtoull(value, NULL, 10);
	http_response_file(resp, 200, "application/octet-stream", fd, off, len);
	http_response_header(resp, "X-File", "yes");
	if (http_query_param(req, "fail", value, sizeof(value)) > 0)
		http_response_error(resp, 500, "changed my mind");
}

static void block_handler(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct gate *g = &((struct fixture *)ctx)->gate;

	(void)req;
	pthread_mutex_lock(&g->mu);
	g->entered++;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	http_response_text(resp, 200, "text/plain", "released", 8);
}

/* ---------------------------------------------------------------------------------------- */
/* The server thread */

static void on_server_done(void *arg)
{
	struct fixture *f = arg;

	pthread_mutex_lock(&f->mu);
	f->done_called = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	uv_close((uv_handle_t *)&f->stop_async, NULL);
}

static void on_stop_async(uv_async_t *a)
{
	struct fixture *f = a->data;

	uv_close((uv_handle_t *)&f->tick, NULL);
	http_server_stop(f->srv, on_server_done, f);
	pthread_mutex_lock(&f->mu);
	f->stop_seen = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void on_tick(uv_check_t *t)
{
	struct fixture *f = t->data;

	pthread_mutex_lock(&f->mu);
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void *server_main(void *arg)
{
	struct fixture *f = arg;

	uv_loop_init(&f->loop);
	uv_async_init(&f->loop, &f->stop_async, on_stop_async);
	f->stop_async.data = f;
	uv_check_init(&f->loop, &f->tick);
	f->tick.data = f;
	uv_check_start(&f->tick, on_tick);
	f->srv = http_server_start(&f->loop, &f->opts, f->routes, f->nroutes, f->err,
				   sizeof(f->err));
	if (!f->srv) {
		uv_close((uv_handle_t *)&f->stop_async, NULL);
		uv_close((uv_handle_t *)&f->tick, NULL);
	}
	pthread_mutex_lock(&f->mu);
	f->started = true;
	if (f->srv)
		f->port = http_server_port(f->srv);
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	f->loop_close_rc = uv_loop_close(&f->loop);
	return NULL;
}

static void deadline_in(struct timespec *ts, int seconds)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += seconds;
}

/* Starts a server on 127.0.0.1:0 (or opts->host) with the standard routes. */
static struct fixture *server_start(const struct http_server_options *opts)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct timespec deadline;

	assert_non_null(f);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	pthread_mutex_init(&f->gate.mu, NULL);
	pthread_cond_init(&f->gate.cv, NULL);
	if (opts)
		f->opts = *opts;
	if (!f->opts.host)
		f->opts.host = "127.0.0.1";
	const struct http_route routes[] = {
		{ "GET", "/echo", false, echo_handler, f, 0, 0 },
		{ "POST", "/echo", false, echo_handler, f, 1024, 0 },
		{ "GET", "/files/", true, echo_handler, f, 0, 0 },
		{ "POST", "/upload", false, echo_handler, f, 16, 0 },
		{ "GET", "/block", false, block_handler, f, 0, 0 },
		{ "GET", "/created", false, created_handler, f, 0, 0 },
		{ "GET", "/nocontent", false, nocontent_handler, f, 0, 0 },
		{ "GET", "/file", false, file_handler, f, 0, 0 },
		{ "GET", "/auth", false, auth_handler, f, 0, 0 },
		{ "POST", "/decode", false, echo_handler, f, 1024, HTTP_ROUTE_DECODES },
		{ "GET", "/monitor", false, echo_handler, f, 0, HTTP_ROUTE_MONITORING },
		{ "GET", "/mblock", false, block_handler, f, 0, HTTP_ROUTE_MONITORING },
	};
	memcpy(f->routes, routes, sizeof(routes));
	f->nroutes = sizeof(routes) / sizeof(routes[0]);
	assert_int_equal(pthread_create(&f->thread, NULL, server_main, f), 0);
	deadline_in(&deadline, WAIT_SECONDS);
	pthread_mutex_lock(&f->mu);
	while (!f->started && pthread_cond_timedwait(&f->cv, &f->mu, &deadline) == 0)
		;
	pthread_mutex_unlock(&f->mu);
	assert_true(f->started);
	if (!f->srv)
		fail_msg("server did not start: %s", f->err);
	assert_int_not_equal(f->port, 0);
	return f;
}

static void server_request_stop(struct fixture *f)
{
	uv_async_send(&f->stop_async);
}

/* Waits for the server thread (after server_request_stop) and frees the fixture. */
static void server_join(struct fixture *f)
{
	assert_int_equal(pthread_join(f->thread, NULL), 0);
	assert_true(f->done_called);
	assert_int_equal(f->loop_close_rc, 0); /* every handle closed */
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->gate.mu);
	pthread_cond_destroy(&f->gate.cv);
	free(f);
}

static void server_stop(struct fixture *f)
{
	server_request_stop(f);
	server_join(f);
}

static struct http_server_stats stats_of(struct fixture *f)
{
	struct http_server_stats s;

	http_server_stats(f->srv, &s);
	return s;
}

static uint64_t stat_field(const struct http_server_stats *s, size_t offset)
{
	uint64_t v;

	memcpy(&v, (const char *)s + offset, sizeof(v));
	return v;
}

/* Waits (re-checking after every loop iteration) until the counter at `offset` is `want`. */
static void wait_stat(struct fixture *f, size_t offset, uint64_t want)
{
	struct timespec deadline;
	struct http_server_stats s;

	deadline_in(&deadline, WAIT_SECONDS);
	pthread_mutex_lock(&f->mu);
	for (;;) {
		http_server_stats(f->srv, &s);
		if (stat_field(&s, offset) == want ||
		    pthread_cond_timedwait(&f->cv, &f->mu, &deadline) != 0)
			break;
	}
	http_server_stats(f->srv, &s);
	pthread_mutex_unlock(&f->mu);
	assert_int_equal(stat_field(&s, offset), want);
}

#define WAIT_STAT(f, field, want) wait_stat((f), offsetof(struct http_server_stats, field), (want))

/* Waits until connections_open is `want`. */
static void wait_open_connections(struct fixture *f, uint64_t want)
{
	WAIT_STAT(f, connections_open, want);
}

static void gate_wait_entered(struct fixture *f, int n)
{
	struct timespec deadline;

	deadline_in(&deadline, WAIT_SECONDS);
	pthread_mutex_lock(&f->gate.mu);
	while (f->gate.entered < n &&
	       pthread_cond_timedwait(&f->gate.cv, &f->gate.mu, &deadline) == 0)
		;
	int entered = f->gate.entered;
	pthread_mutex_unlock(&f->gate.mu);
	assert_int_equal(entered, n);
}

static void gate_open(struct fixture *f)
{
	pthread_mutex_lock(&f->gate.mu);
	f->gate.open = true;
	pthread_cond_broadcast(&f->gate.cv);
	pthread_mutex_unlock(&f->gate.mu);
}

static struct seen seen_of(struct fixture *f)
{
	pthread_mutex_lock(&f->mu);
	struct seen s = f->seen;
	pthread_mutex_unlock(&f->mu);
	return s;
}

/* ---------------------------------------------------------------------------------------- */
/* A blocking test client */

struct client {
	int fd;
	size_t len;            /* bytes buffered, not consumed */
	uint64_t total_read;   /* every byte received */
	uint64_t total_sent;
	char buf[1 << 18];
};

struct reply {
	int status;
	char head[8192];
	char body[65536];
	size_t body_len;
	long content_length; /* -1 when absent */
};

static struct client *client_open_family(int family, uint16_t port)
{
	struct client *c = calloc(1, sizeof(*c));
	struct timeval tv = { .tv_sec = WAIT_SECONDS };
	struct sockaddr_storage ss;
	socklen_t sslen;

	assert_non_null(c);
	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		a6->sin6_addr = in6addr_loopback;
		sslen = sizeof(*a6);
	} else {
		struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sslen = sizeof(*a4);
	}
	c->fd = socket(family, SOCK_STREAM, 0);
	assert_true(c->fd >= 0);
	assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(connect(c->fd, (struct sockaddr *)&ss, sslen), 0);
	return c;
}

static struct client *client_open(struct fixture *f)
{
	return client_open_family(AF_INET, f->port);
}

/* An IPv4 client whose source address is `source` (any of 127/8 is loopback on Linux). */
static struct client *client_open_from(struct fixture *f, const char *source)
{
	struct client *c = calloc(1, sizeof(*c));
	struct timeval tv = { .tv_sec = WAIT_SECONDS };
	struct sockaddr_in from = { .sin_family = AF_INET };
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(f->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	assert_non_null(c);
	assert_int_equal(inet_pton(AF_INET, source, &from.sin_addr), 1);
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(c->fd >= 0);
	assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(bind(c->fd, (struct sockaddr *)&from, sizeof(from)), 0);
	assert_int_equal(connect(c->fd, (struct sockaddr *)&to, sizeof(to)), 0);
	return c;
}

static void client_close(struct client *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c);
}

/* Closes with a reset (SO_LINGER 0): the peer sees ECONNRESET, not EOF. */
static void client_abort(struct client *c)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	client_close(c);
}

static void client_send(struct client *c, const void *data, size_t len)
{
	const char *p = data;

	while (len) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		assert_true(n > 0);
		p += n;
		len -= (size_t)n;
		c->total_sent += (uint64_t)n;
	}
}

__attribute__((format(printf, 2, 3))) static void client_sendf(struct client *c,
								const char *fmt, ...)
{
	char text[8192];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < sizeof(text));
	client_send(c, text, (size_t)n);
}

/* Receives more bytes; false on EOF, reset or timeout. */
static bool client_fill(struct client *c)
{
	ssize_t n;

	if (c->len == sizeof(c->buf))
		return false;
	do
		n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return false;
	c->len += (size_t)n;
	c->total_read += (uint64_t)n;
	return true;
}

static bool reply_header(const struct reply *r, const char *name, char *out, size_t outlen)
{
	const char *line = strstr(r->head, "\r\n");
	size_t nlen = strlen(name);

	while (line && line[2] != '\r') {
		line += 2;
		const char *eol = strstr(line, "\r\n");
		if (!eol)
			return false;
		if ((size_t)(eol - line) > nlen && strncasecmp(line, name, nlen) == 0 &&
		    line[nlen] == ':') {
			const char *v = line + nlen + 1;
			while (*v == ' ')
				v++;
			snprintf(out, outlen, "%.*s", (int)(eol - v), v);
			return true;
		}
		line = eol;
	}
	return false;
}

/* Reads one response (no body for HEAD); false when the connection ends first. */
static bool client_read_reply(struct client *c, struct reply *r, bool head_request)
{
	char *end;
	char value[64];

	memset(r, 0, sizeof(*r));
	while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
		if (!client_fill(c))
			return false;
	size_t hlen = (size_t)(end - c->buf) + 4;
	assert_true(hlen < sizeof(r->head));
	memcpy(r->head, c->buf, hlen);
	r->head[hlen] = '\0';
	assert_int_equal(sscanf(r->head, "HTTP/1.1 %d ", &r->status), 1);
	r->content_length = -1;
	if (reply_header(r, "Content-Length", value, sizeof(value)))
		r->content_length = atol(value);
	size_t blen = head_request || r->content_length < 0 ? 0 : (size_t)r->content_length;
	assert_true(blen < sizeof(r->body));
	while (c->len < hlen + blen)
		if (!client_fill(c))
			return false;
	memcpy(r->body, c->buf + hlen, blen);
	r->body[blen] = '\0';
	r->body_len = blen;
	memmove(c->buf, c->buf + hlen + blen, c->len - hlen - blen);
	c->len -= hlen + blen;
	return true;
}

/* True when the server closed the connection (EOF or reset) with no further bytes. */
static bool client_sees_close(struct client *c)
{
	char byte;
	ssize_t n;

	if (c->len)
		return false;
	do
		n = recv(c->fd, &byte, 1, 0);
	while (n < 0 && errno == EINTR);
	if (n == 0 || (n < 0 && errno == ECONNRESET))
		return true;
	return false;
}

/* True when nothing (no byte, no close) arrives from the server within `ms`. */
static bool client_quiet_for(struct client *c, int ms)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN };

	return c->len == 0 && poll(&pfd, 1, ms) == 0;
}

static uint64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct reply *reply_new(void)
{
	struct reply *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	return r;
}

static void expect_header(const struct reply *r, const char *name, const char *want)
{
	char value[256];

	if (!reply_header(r, name, value, sizeof(value)))
		fail_msg("header %s missing in:\n%s", name, r->head);
	assert_string_equal(value, want);
}

static bool has_header(const struct reply *r, const char *name)
{
	char value[256];

	return reply_header(r, name, value, sizeof(value));
}

/* Every response carries Date and (except 204) a Content-Length matching its body. */
static void expect_framing(const struct reply *r, bool head_request)
{
	assert_true(has_header(r, "Date"));
	if (r->status == 204) {
		assert_false(has_header(r, "Content-Length"));
		return;
	}
	assert_true(r->content_length >= 0);
	if (!head_request)
		assert_int_equal((size_t)r->content_length, r->body_len);
}

/* ---------------------------------------------------------------------------------------- */
/* Tests */

static void test_get_post_round_trip(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	struct seen s;

	client_sendf(c, "GET /echo?a=hello%%20world&b=2 HTTP/1.1\r\nHost: test\r\n"
			"X-Test:   padded value  \r\nX-Mixed-CASE: v\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	expect_framing(r, false);
	expect_header(r, "Content-Type", "application/json");
	assert_false(has_header(r, "Connection"));
	assert_string_equal(r->body, "GET /echo hello world");
	s = seen_of(f);
	assert_string_equal(s.method, "GET");
	assert_string_equal(s.path, "/echo");
	assert_string_equal(s.query, "a=hello%20world&b=2");
	assert_string_equal(s.a, "hello world");
	assert_string_equal(s.xtest, "padded value");
	assert_string_equal(s.first_header, "host");
	assert_int_equal(s.header_count, 3);
	assert_true(s.body_null);
	assert_int_equal(s.body_len, 0);
	assert_true(strncmp(s.peer, "127.0.0.1:", 10) == 0);

	client_sendf(c, "POST /echo?a=1 HTTP/1.1\r\nHost: test\r\nContent-Length: 7\r\n\r\npayload");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "POST /echo 1");
	s = seen_of(f);
	assert_string_equal(s.method, "POST");
	assert_false(s.body_null);
	assert_int_equal(s.body_len, 7);
	assert_string_equal(s.body, "payload");

	/* Percent-decoded path, prefix route, query absent. */
	client_sendf(c, "GET /files/a%%20b%%2Fc HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	s = seen_of(f);
	assert_string_equal(s.path, "/files/a b/c");
	assert_string_equal(s.query, "");
	assert_int_equal(s.a_rc, -ENOENT);

	/* Status, content type and extra headers from the handler; CR/LF values dropped. */
	client_sendf(c, "GET /created HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 201);
	expect_framing(r, false);
	expect_header(r, "Content-Type", "text/plain");
	expect_header(r, "X-Custom", "yes");
	assert_false(has_header(r, "X-Evil"));
	assert_false(has_header(r, "Injected"));
	assert_string_equal(r->body, "made");

	/* 204 has no body and no Content-Length; the connection goes on. */
	client_sendf(c, "GET /nocontent HTTP/1.1\r\n\r\nGET /echo?a=after HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 204);
	expect_framing(r, false);
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo after");

	/* Absolute-form target. */
	client_sendf(c, "GET http://test/echo?a=abs HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo abs");

	free(r);
	client_close(c);
	server_stop(f);
}

static void test_keep_alive(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	for (int i = 0; i < 2; i++) {
		client_sendf(c, "GET /echo?a=%d HTTP/1.1\r\nHost: t\r\n\r\n", i);
		assert_true(client_read_reply(c, r, false));
		assert_int_equal(r->status, 200);
		assert_false(has_header(r, "Connection"));
		char want[32];
		snprintf(want, sizeof(want), "GET /echo %d", i);
		assert_string_equal(r->body, want);
	}
	/* Connection: close is honoured. */
	client_sendf(c, "GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);

	/* HTTP/1.0 closes unless keep-alive is asked for. */
	c = client_open(f);
	client_sendf(c, "GET /echo HTTP/1.0\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);

	c = client_open(f);
	client_sendf(c, "GET /echo?a=x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	expect_header(r, "Connection", "keep-alive");
	client_sendf(c, "GET /echo?a=y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo y");
	client_close(c);

	wait_open_connections(f, 0);
	assert_int_equal(stats_of(f).connections_accepted, 3);
	free(r);
	server_stop(f);
}

static void test_pipelined(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	/* Three requests in one segment, a body in the middle one; answers come in order. */
	client_sendf(c, "GET /echo?a=1 HTTP/1.1\r\n\r\n"
			"POST /echo?a=2 HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody"
			"GET /echo?a=3 HTTP/1.1\r\n\r\n"
			"HEAD /echo?a=4 HTTP/1.1\r\n\r\n"
			"GET /nope HTTP/1.1\r\n\r\n"
			"GET /echo?a=6 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo 1");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "POST /echo 2");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo 3");
	assert_true(client_read_reply(c, r, true));
	assert_int_equal(r->status, 200);
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 404);
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo 6");
	assert_int_equal(c->len, 0);
	assert_int_equal(stats_of(f).requests, 6);
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_head(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(c, "HEAD /echo?a=x HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, true));
	assert_int_equal(r->status, 200);
	expect_framing(r, true);
	/* The length of the body a GET would carry; the handler saw HEAD. */
	assert_int_equal(r->content_length, (long)strlen("HEAD /echo x"));
	assert_string_equal(seen_of(f).method, "HEAD");
	/* No body bytes followed: the next response starts right away. */
	client_sendf(c, "GET /echo?a=next HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "GET /echo next");
	/* HEAD on an unknown path: 404 without a body. */
	client_sendf(c, "HEAD /nope HTTP/1.1\r\n\r\nGET /echo?a=z HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, true));
	assert_int_equal(r->status, 404);
	assert_true(r->content_length > 0);
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo z");
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_not_found_and_method_not_allowed(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(c, "GET /nope HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 404);
	expect_framing(r, false);
	expect_header(r, "Content-Type", "application/json");
	assert_non_null(strstr(r->body, "\"error\""));
	assert_false(has_header(r, "Connection"));

	client_sendf(c, "DELETE /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 405);
	expect_header(r, "Allow", "GET, POST, HEAD");
	assert_false(has_header(r, "Connection"));

	client_sendf(c, "POST /files/x HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 405);
	expect_header(r, "Allow", "GET, HEAD");

	/* Still usable after those. */
	client_sendf(c, "GET /echo?a=ok HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo ok");

	/* With a body the request is not read: answer, then close. */
	client_sendf(c, "POST /nope HTTP/1.1\r\nContent-Length: 3\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 404);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	assert_int_equal(seen_of(f).calls, 1);
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_content_length_over_limit_before_body(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	/* The body is never sent: the answer cannot depend on it. */
	client_sendf(c, "POST /upload HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 413);
	expect_framing(r, false);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);

	/* A GET route allows no body at all. */
	c = client_open(f);
	client_sendf(c, "GET /echo HTTP/1.1\r\nContent-Length: 1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 413);
	assert_true(client_sees_close(c));
	client_close(c);

	assert_int_equal(seen_of(f).calls, 0);
	assert_int_equal(stats_of(f).limit_rejections, 2);
	free(r);
	server_stop(f);
}

static void test_expect_continue(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(c, "POST /upload HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 100);
	assert_string_equal(r->head, "HTTP/1.1 100 Continue\r\n\r\n");
	client_sendf(c, "hello");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "hello");

	/* Over the limit: 413 instead of 100, and the connection ends. */
	client_sendf(c, "POST /upload HTTP/1.1\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 413);
	assert_true(client_sees_close(c));
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_chunked(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(c, "POST /upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "hello world");

	/* 10 + 10 bytes against a 16-byte limit: 413 as soon as the second chunk arrives. */
	client_sendf(c, "POST /upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			"a\r\n0123456789\r\na\r\n0123456789\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 413);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);

	/* A coding other than plain chunked would reach the handler undecoded: 501. */
	c = client_open(f);
	client_sendf(c, "POST /upload HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
			"0\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 501);
	assert_true(client_sees_close(c));
	assert_int_equal(seen_of(f).calls, 1);
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_header_limits(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	size_t big = 70000;
	char *filler = malloc(big + 1);

	/* One 70 kB header against the 64 KiB default. */
	assert_non_null(filler);
	memset(filler, 'a', big);
	filler[big] = '\0';
	client_sendf(c, "GET /echo HTTP/1.1\r\nX-Big: ");
	client_send(c, filler, big);
	client_sendf(c, "\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 431);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);
	free(filler);

	/* Exactly 100 headers pass, 101 do not. */
	for (int count = 100; count <= 101; count++) {
		c = client_open(f);
		client_sendf(c, "GET /echo HTTP/1.1\r\n");
		for (int i = 0; i < count; i++)
			client_sendf(c, "X-H%d: v\r\n", i);
		client_sendf(c, "\r\n");
		assert_true(client_read_reply(c, r, false));
		if (count == 100) {
			assert_int_equal(r->status, 200);
			assert_int_equal(seen_of(f).header_count, 100);
		} else {
			assert_int_equal(r->status, 431);
			assert_true(client_sees_close(c));
		}
		client_close(c);
	}
	assert_int_equal(stats_of(f).limit_rejections, 2);
	free(r);
	server_stop(f);
}

static void test_small_header_limit(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_header_bytes = 64 };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	/* 20 + 42 + 2 bytes: exactly 64 passes, one more byte of header does not. */
	client_sendf(c, "GET /echo HTTP/1.1\r\nX-Test: 12345678901234567890123456789012\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	client_sendf(c, "GET /echo HTTP/1.1\r\nX-Test: 123456789012345678901234567890123\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 431);
	assert_true(client_sees_close(c));
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_slowloris_gets_408(void **state)
{
	(void)state;
	struct http_server_options opts = { .request_timeout_ms = 200 };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	/* The head never ends: the server answers 408 on its own (the read waits for it). */
	client_sendf(c, "GET /echo HTTP/1.1\r\nHost: slow\r\nX-Test: ");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 408);
	expect_framing(r, false);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);

	/* A body that stops short. */
	c = client_open(f);
	client_sendf(c, "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 408);
	assert_true(client_sees_close(c));
	client_close(c);

	assert_int_equal(seen_of(f).calls, 0);
	assert_int_equal(stats_of(f).limit_rejections, 2);
	free(r);
	server_stop(f);
}

static void test_idle_close(void **state)
{
	(void)state;
	struct http_server_options opts = { .idle_timeout_ms = 200 };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(c, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_false(has_header(r, "Connection"));
	/* Nothing more is sent: the server closes silently. */
	assert_true(client_sees_close(c));
	wait_open_connections(f, 0);
	client_close(c);

	/* A connection that never sends anything is closed too, without a response. */
	c = client_open(f);
	assert_true(client_sees_close(c));
	client_close(c);
	assert_int_equal(stats_of(f).requests, 1);
	free(r);
	server_stop(f);
}

static void test_max_connections(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_connections = 1 };
	struct fixture *f = server_start(&opts);
	struct client *a = client_open(f), *b, *c;
	struct reply *r = reply_new();

	/* A's handler runs: A cannot be evicted, so B is refused. */
	client_sendf(a, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);
	b = client_open(f);
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 503);
	expect_framing(r, false);
	expect_header(r, "Connection", "close");
	expect_header(r, "Retry-After", "1");
	assert_non_null(strstr(r->body, "too many connections"));
	assert_true(client_sees_close(b));
	client_close(b);

	struct http_server_stats s = stats_of(f);
	assert_int_equal(s.connections_rejected, 1);
	assert_int_equal(s.connections_accepted, 1);
	assert_int_equal(s.connections_open, 1);
	assert_int_equal(s.connections_evicted, 0);

	/* Answered, A waits for its next request, untrusted: C takes its place. */
	gate_open(f);
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 200);
	c = client_open(f);
	client_sendf(c, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_true(client_sees_close(a));
	s = stats_of(f);
	assert_int_equal(s.connections_evicted, 1);
	assert_int_equal(s.connections_rejected, 1);
	assert_int_equal(s.connections_open, 1);
	client_close(a);
	client_close(c);
	free(r);
	server_stop(f);
}

/*
 * A full table evicts, in order: untrusted connections waiting for a request (longest
 * waiting first), untrusted ones part-way through a request (longest silent first), and
 * trusted ones only when no untrusted one is left.
 */
static void test_eviction_order(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_connections = 3 };
	struct fixture *f = server_start(&opts);
	struct client *t = client_open(f), *p, *w, *n1, *n2, *n3;
	struct reply *r = reply_new();
	static const char partial[] = "GET /echo HTTP/1.1\r\nX-Test: ";
	uint64_t received;

	client_sendf(t, "GET /auth HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(t, r, false));
	assert_string_equal(r->body, "trusted");
	WAIT_STAT(f, connections_trusted, 1);
	received = stats_of(f).bytes_received;
	p = client_open(f);
	client_sendf(p, "%s", partial);
	received += strlen(partial);
	WAIT_STAT(f, bytes_received, received);
	w = client_open(f);
	wait_open_connections(f, 3);

	/* The waiting one goes first. */
	n1 = client_open(f);
	WAIT_STAT(f, connections_evicted, 1);
	assert_true(client_sees_close(w));
	assert_true(client_quiet_for(p, 0));
	assert_true(client_quiet_for(t, 0));

	/* N1 starts a request after P: P has been silent longer and goes next. */
	client_sendf(n1, "GET /echo?a=n1 HTTP/1.1\r\n");
	received += strlen("GET /echo?a=n1 HTTP/1.1\r\n");
	WAIT_STAT(f, bytes_received, received);
	n2 = client_open(f);
	WAIT_STAT(f, connections_evicted, 2);
	assert_true(client_sees_close(p));
	assert_true(client_quiet_for(n1, 0));

	/* A waiting connection goes before a partial one, however new it is. */
	n3 = client_open(f);
	WAIT_STAT(f, connections_evicted, 3);
	assert_true(client_sees_close(n2));
	assert_true(client_quiet_for(n1, 0));
	assert_true(client_quiet_for(t, 0));

	/* The survivors are served. */
	client_sendf(n1, "\r\n");
	assert_true(client_read_reply(n1, r, false));
	assert_string_equal(r->body, "GET /echo n1");
	client_sendf(t, "GET /echo?a=t HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(t, r, false));
	assert_string_equal(r->body, "GET /echo t");
	struct http_server_stats s = stats_of(f);
	assert_int_equal(s.connections_rejected, 0);
	assert_int_equal(s.connections_open, 3);
	assert_int_equal(s.connections_trusted, 1);
	client_close(t);
	client_close(p);
	client_close(w);
	client_close(n1);
	client_close(n2);
	client_close(n3);
	free(r);
	server_stop(f);
}

/* Trusted connections idle between requests go last, longest idle first; one in the middle
 * of a request never goes. */
static void test_eviction_trusted_last(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_connections = 2 };
	struct fixture *f = server_start(&opts);
	struct client *a = client_open(f), *b = client_open(f), *c, *d, *e;
	struct reply *r = reply_new();

	client_sendf(a, "GET /auth HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(a, r, false));
	client_sendf(b, "GET /auth HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	WAIT_STAT(f, connections_trusted, 2);

	/* Nothing untrusted to take: A, idle longest, makes room. */
	c = client_open(f);
	WAIT_STAT(f, connections_evicted, 1);
	assert_true(client_sees_close(a));
	assert_true(client_quiet_for(b, 0));
	assert_int_equal(stats_of(f).connections_trusted, 1);

	/* The untrusted newcomer goes before trusted B. */
	d = client_open(f);
	WAIT_STAT(f, connections_evicted, 2);
	assert_true(client_sees_close(c));
	assert_true(client_quiet_for(b, 0));

	/* B part-way through a request and D's handler running: nothing may go, E is refused. */
	uint64_t received = stats_of(f).bytes_received;
	client_sendf(b, "GET /echo?a=b HTTP/1.1\r\n");
	received += strlen("GET /echo?a=b HTTP/1.1\r\n");
	WAIT_STAT(f, bytes_received, received);
	client_sendf(d, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);
	e = client_open(f);
	assert_true(client_read_reply(e, r, false));
	assert_int_equal(r->status, 503);
	assert_true(client_sees_close(e));
	assert_int_equal(stats_of(f).connections_rejected, 1);
	assert_int_equal(stats_of(f).connections_evicted, 2);
	client_sendf(b, "\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_string_equal(r->body, "GET /echo b");
	gate_open(f);
	assert_true(client_read_reply(d, r, false));
	assert_string_equal(r->body, "released");
	client_close(a);
	client_close(b);
	client_close(c);
	client_close(d);
	client_close(e);
	free(r);
	server_stop(f);
}

/* Untrusted connections per address are limited; trusted ones do not count. */
static void test_per_peer_limit(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_connections_per_peer = 2 };
	struct fixture *f = server_start(&opts);
	struct client *a1 = client_open_from(f, "127.0.0.1"), *a2, *a3, *a4, *b1;
	struct reply *r = reply_new();

	a2 = client_open_from(f, "127.0.0.1");
	wait_open_connections(f, 2);
	a3 = client_open_from(f, "127.0.0.1");
	assert_true(client_read_reply(a3, r, false));
	assert_int_equal(r->status, 503);
	assert_non_null(strstr(r->body, "too many connections from this address"));
	expect_header(r, "Retry-After", "1");
	assert_true(client_sees_close(a3));
	struct http_server_stats s = stats_of(f);
	assert_int_equal(s.peer_rejections, 1);
	assert_int_equal(s.connections_rejected, 0);
	assert_int_equal(s.connections_open, 2);

	/* Another address has its own count. */
	b1 = client_open_from(f, "127.0.0.2");
	client_sendf(b1, "GET /echo?a=b1 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(b1, r, false));
	assert_int_equal(r->status, 200);
	assert_non_null(strstr(seen_of(f).peer, "127.0.0.2"));

	/* A1 authenticates: it no longer counts, so 127.0.0.1 may open another. */
	client_sendf(a1, "GET /auth HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(a1, r, false));
	WAIT_STAT(f, connections_trusted, 1);
	a4 = client_open_from(f, "127.0.0.1");
	client_sendf(a4, "GET /echo?a=a4 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(a4, r, false));
	assert_int_equal(r->status, 200);
	assert_int_equal(stats_of(f).peer_rejections, 1);

	/* A connection that closes gives its place back. */
	client_close(a2);
	wait_open_connections(f, 3);
	a2 = client_open_from(f, "127.0.0.1");
	client_sendf(a2, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(a2, r, false));
	assert_int_equal(r->status, 200);
	assert_int_equal(stats_of(f).peer_rejections, 1);
	client_close(a1);
	client_close(a2);
	client_close(a3);
	client_close(a4);
	client_close(b1);
	free(r);
	server_stop(f);
}

static void test_peer_key(void **state)
{
	(void)state;
	uint8_t k1[HTTP_PEER_KEY_LEN], k2[HTTP_PEER_KEY_LEN];
	struct sockaddr_in a4 = { .sin_family = AF_INET };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 };
	struct sockaddr sa = { .sa_family = AF_UNIX };

	/* IPv4, and the same address IPv4-mapped from a dual-stack listener. */
	assert_int_equal(inet_pton(AF_INET, "192.0.2.7", &a4.sin_addr), 1);
	assert_int_equal(http__peer_key((struct sockaddr *)&a4, k1), 0);
	assert_int_equal(inet_pton(AF_INET6, "::ffff:192.0.2.7", &a6.sin6_addr), 1);
	assert_int_equal(http__peer_key((struct sockaddr *)&a6, k2), 0);
	assert_memory_equal(k1, k2, HTTP_PEER_KEY_LEN);
	assert_int_equal(inet_pton(AF_INET, "192.0.2.8", &a4.sin_addr), 1);
	assert_int_equal(http__peer_key((struct sockaddr *)&a4, k1), 0);
	assert_memory_not_equal(k1, k2, HTTP_PEER_KEY_LEN);

	/* IPv6: one /64 is one peer. */
	assert_int_equal(inet_pton(AF_INET6, "2001:db8:1:2::1", &a6.sin6_addr), 1);
	assert_int_equal(http__peer_key((struct sockaddr *)&a6, k1), 0);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8:1:2:ffff:eeee:dddd:cccc", &a6.sin6_addr), 1);
	assert_int_equal(http__peer_key((struct sockaddr *)&a6, k2), 0);
	assert_memory_equal(k1, k2, HTTP_PEER_KEY_LEN);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8:1:3::1", &a6.sin6_addr), 1);
	assert_int_equal(http__peer_key((struct sockaddr *)&a6, k2), 0);
	assert_memory_not_equal(k1, k2, HTTP_PEER_KEY_LEN);

	assert_int_equal(http__peer_key(&sa, k1), -EAFNOSUPPORT);
}

/*
 * A new connection must begin a request within the first-byte timeout, and so must an
 * untrusted one between requests; a trusted one keeps the idle timeout (keep-alive reuse).
 */
static void test_first_byte_timeout(void **state)
{
	(void)state;
	struct http_server_options opts = { .first_byte_timeout_ms = 150 };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	uint64_t start = monotonic_ms();

	assert_true(client_sees_close(c));
	uint64_t waited = monotonic_ms() - start;
	assert_true(waited >= 140 && waited < 3000); /* the idle timeout is 60 s */
	assert_int_equal(stats_of(f).first_byte_timeouts, 1);
	assert_int_equal(stats_of(f).requests, 0);
	client_close(c);

	/* Untrusted after a request: the same short wait. */
	c = client_open(f);
	client_sendf(c, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	start = monotonic_ms();
	assert_true(client_sees_close(c));
	assert_true(monotonic_ms() - start < 3000);
	assert_int_equal(stats_of(f).first_byte_timeouts, 2);
	client_close(c);

	/* Trusted: still open at four times the first-byte timeout, and reused. */
	c = client_open(f);
	client_sendf(c, "GET /auth HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_true(client_quiet_for(c, 600));
	client_sendf(c, "GET /echo?a=again HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo again");
	assert_int_equal(stats_of(f).first_byte_timeouts, 2);
	client_close(c);
	free(r);
	server_stop(f);
}

/* A head trickled in (slowloris) gets 408 at the head deadline, not the request timeout;
 * a body is bounded by the request timeout only. */
static void test_header_timeout(void **state)
{
	(void)state;
	struct http_server_options opts = { .header_timeout_ms = 200 };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	uint64_t start = monotonic_ms();

	/* A header line every 50 ms: bytes keep coming, the deadline does not move. */
	client_sendf(c, "GET /echo HTTP/1.1\r\n");
	for (int i = 0; client_quiet_for(c, 50); i++) {
		assert_true(i < 60); /* 3 s */
		client_sendf(c, "X-Slow-%d: y\r\n", i);
	}
	assert_true(client_read_reply(c, r, false));
	uint64_t waited = monotonic_ms() - start;
	assert_int_equal(r->status, 408);
	assert_non_null(strstr(r->body, "headers not complete within 200 ms"));
	assert_true(waited >= 190 && waited < 2000); /* the request timeout is 30 s */
	assert_true(client_sees_close(c));
	client_close(c);
	struct http_server_stats s = stats_of(f);
	assert_int_equal(s.header_timeouts, 1);
	assert_int_equal(s.limit_rejections, 1);

	/* The head in time, the body slower than the head deadline: served. */
	c = client_open(f);
	client_sendf(c, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\n12");
	assert_true(client_quiet_for(c, 400));
	client_sendf(c, "345");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "12345");
	assert_int_equal(stats_of(f).header_timeouts, 1);
	client_close(c);
	free(r);
	server_stop(f);
}

static void mark_handler(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)resp;
	http_request_mark_authenticated(req);
}

/* Detached connections: the mark reaches the connection; a request built elsewhere is
 * ignored. */
static void test_mark_authenticated_detached(void **state)
{
	(void)state;
	static const struct http_route routes[] = {
		{ "GET", "/open", false, nocontent_handler, NULL, 0, 0 },
		{ "GET", "/mark", false, mark_handler, NULL, 0, 0 },
	};
	struct byte_buf out = { 0 };
	struct http_conn *c = http__conn_new(NULL, routes, 2, &out);
	struct http_request loose = { .method = "GET", .path = "/" };
	static const char open_req[] = "GET /open HTTP/1.1\r\n\r\n";
	static const char mark_req[] = "GET /mark HTTP/1.1\r\n\r\n";

	assert_non_null(c);
	assert_int_equal(http__conn_feed(c, open_req, strlen(open_req)), 0);
	assert_false(http__conn_trusted(c));
	assert_int_equal(http__conn_feed(c, mark_req, strlen(mark_req)), 0);
	assert_true(http__conn_trusted(c));
	assert_int_equal(http__conn_feed(c, open_req, strlen(open_req)), 0);
	assert_true(http__conn_trusted(c));
	http_request_mark_authenticated(&loose);
	http_request_mark_authenticated(NULL);
	http__conn_free(c);
	byte_buf_free(&out);
}

static void test_max_inflight(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_inflight = 1 };
	struct fixture *f = server_start(&opts);
	struct client *a = client_open(f), *b = client_open(f);
	struct reply *r = reply_new();

	client_sendf(a, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);
	client_sendf(b, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 503);
	expect_header(r, "Retry-After", "1");
	assert_false(has_header(r, "Connection")); /* the request was read whole: B stays */

	gate_open(f);
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "released");

	client_sendf(b, "GET /echo?a=again HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "GET /echo again");
	assert_int_equal(stats_of(f).limit_rejections, 1);
	free(r);
	client_close(a);
	client_close(b);
	server_stop(f);
}

/*
 * A 100 Continue holds a handler slot until the body is handled: with one slot, the admitted
 * upload's body is handled although another request came between its 100 and its body (that
 * one is refused at its head instead); a peer that leaves after its 100, or whose body breaks
 * a limit, gives the slot back.
 */
static void test_continue_holds_slot(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_inflight = 1 };
	struct fixture *f = server_start(&opts);
	struct client *a = client_open(f), *b = client_open(f);
	struct reply *r = reply_new();

	client_sendf(a, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 100);
	/* Between A's 100 and its body: B's request, GET or upload, finds no slot. */
	client_sendf(b, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 503);
	client_sendf(b, "POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 503);
	assert_true(client_sees_close(b));
	client_close(b);
	client_sendf(a, "hello");
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "hello");

	/* A peer that leaves after its 100 gives the slot back... */
	b = client_open(f);
	client_sendf(b, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 100);
	client_close(b);
	/* ... and so does a body over the route's limit (chunked: refused as it arrives). */
	b = client_open(f);
	client_sendf(b, "POST /upload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
			"Expect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 100);
	client_sendf(b, "14\r\n01234567890123456789\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 413);
	client_close(b);
	/* The one slot is free again (the close is seen by the loop first: retry briefly). */
	int status = 0;
	for (int i = 0; i < 200 && status != 200; i++) {
		b = client_open(f);
		client_sendf(b, "GET /echo HTTP/1.1\r\n\r\n");
		assert_true(client_read_reply(b, r, false));
		status = r->status;
		client_close(b);
		if (status != 200)
			usleep(10000);
	}
	assert_int_equal(status, 200);
	assert_int_equal(seen_of(f).calls, 2);
	free(r);
	client_close(a);
	server_stop(f);
}

/* What the server's busy callback answers (set by the test, read on the loop thread). */
static atomic_bool decode_busy;

static bool busy_cb(void *arg)
{
	(void)arg;
	return atomic_load(&decode_busy);
}

/*
 * Over the in-flight budget, a request with a body is refused right after its head: 503 with
 * Retry-After and Connection: close arrives although the body was never sent, the handler is
 * not called, and no 100 Continue precedes it.
 */
static void test_early_refusal_inflight(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_inflight = 1 };
	struct fixture *f = server_start(&opts);
	struct client *a = client_open(f), *b = client_open(f), *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(a, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);

	/* No Expect: the head alone, the body held back. */
	client_sendf(b, "POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 503);
	expect_header(r, "Retry-After", "1");
	expect_header(r, "Connection", "close");
	expect_framing(r, false);
	assert_true(client_sees_close(b));

	/* Expect: 100-continue: the final answer instead of the interim one. */
	client_sendf(c, "POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n"
			"Expect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 503);
	assert_null(strstr(r->head, "100 Continue"));
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));

	struct http_server_stats st = stats_of(f);
	assert_int_equal(st.early_rejections, 2);
	assert_int_equal(st.limit_rejections, 2);
	assert_int_equal(seen_of(f).calls, 0);

	gate_open(f);
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 200);
	/* With a slot free the same request goes through. */
	client_sendf(a, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "hello");
	assert_int_equal(stats_of(f).early_rejections, 2);
	free(r);
	client_close(a);
	client_close(b);
	client_close(c);
	server_stop(f);
}

/*
 * The busy callback refuses bodies for decoding routes only, before the body: other routes
 * are not affected; a body sent right behind the head is discarded (counted), never handed to
 * a handler.
 */
static void test_early_refusal_busy(void **state)
{
	(void)state;
	struct http_server_options opts = { .busy = busy_cb };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	char body[600];

	atomic_store(&decode_busy, true);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: 5\r\n"
			"Expect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 503);
	expect_header(r, "Retry-After", "1");
	assert_true(client_sees_close(c));
	client_close(c);
	WAIT_STAT(f, discarded_bytes, 0);

	/* Head and body in one write: the body bytes are thrown away, not parsed. */
	memset(body, 'x', sizeof(body));
	c = client_open(f);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", sizeof(body));
	client_send(c, body, sizeof(body));
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 503);
	assert_true(client_sees_close(c));
	client_close(c);
	WAIT_STAT(f, early_rejections, 2);
	WAIT_STAT(f, discarded_bytes, sizeof(body));

	/* Another route with a body, and a monitoring route, are served. */
	c = client_open(f);
	client_sendf(c, "POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\nok");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	client_sendf(c, "GET /monitor HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);

	atomic_store(&decode_busy, false);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "abc");
	assert_int_equal(seen_of(f).calls, 3);
	free(r);
	client_close(c);
	server_stop(f);
}

/* Admits a request by its head when it carries "X-Key: ok"; 401 otherwise (counts its calls). */
static atomic_int admit_calls;

static bool admit_cb(void *arg, const struct http_route *route, const struct http_request *req,
		     struct http_response *resp)
{
	(void)arg;
	atomic_fetch_add(&admit_calls, 1);
	assert_non_null(route);
	assert_null(req->body);
	assert_int_equal(req->body_len, 0);
	for (size_t i = 0; i < req->header_count; i++)
		if (strcmp(req->headers[i].name, "x-key") == 0 &&
		    strcmp(req->headers[i].value, "ok") == 0)
			return true;
	http_response_error(resp, 401, "who are you");
	http_response_header(resp, "WWW-Authenticate", "Bearer realm=\"test\"");
	return false;
}

/*
 * The admit callback decides from the head: a refused upload gets its 401 instead of a 100
 * Continue, the body is never read (0 refused body bytes while the client holds it back) and
 * the connection closes; an admitted one gets the 100 and is served. Requests without a body
 * are not asked about.
 */
static void test_expect_admit(void **state)
{
	(void)state;
	struct http_server_options opts = { .admit = admit_cb };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	atomic_store(&admit_calls, 0);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: 600\r\nX-Key: nope\r\n"
			"Expect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 401);
	assert_null(strstr(r->head, "100 Continue"));
	expect_header(r, "WWW-Authenticate", "Bearer realm=\"test\"");
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);
	WAIT_STAT(f, refused_before_body, 1);
	WAIT_STAT(f, refused_body_bytes, 0);
	assert_int_equal(seen_of(f).calls, 0);

	c = client_open(f);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: 5\r\nX-Key: ok\r\n"
			"Expect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 100);
	client_sendf(c, "hello");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "hello");
	client_sendf(c, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_int_equal(atomic_load(&admit_calls), 2);
	assert_int_equal(stats_of(f).refused_before_body, 1);
	free(r);
	client_close(c);
	server_stop(f);
}

/*
 * RFC 9110 §10.1.1: a client may send the body anyway (its wait for 100 timed out). Refused:
 * the bytes it sends after the 503 are read and thrown away (counted as refused body bytes),
 * never parsed as a request, and it still sees the answer and the close. Admitted, with the
 * body already in the same packet as the head: no 100 Continue, just the final answer.
 */
static void test_expect_impatient_client(void **state)
{
	(void)state;
	struct http_server_options opts = { .busy = busy_cb };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	char body[700], request[1024];

	memset(body, 'y', sizeof(body));
	/* A body that looks like a request: it must not be answered. */
	memcpy(body, "GET /echo HTTP/1.1\r\n\r\n", 22);
	atomic_store(&decode_busy, true);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: %zu\r\n"
			"Expect: 100-continue\r\n\r\n", sizeof(body));
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 503);
	expect_header(r, "Connection", "close");
	client_send(c, body, sizeof(body));
	assert_true(client_sees_close(c));
	client_close(c);
	WAIT_STAT(f, refused_body_bytes, sizeof(body));
	WAIT_STAT(f, refused_before_body, 1);
	assert_int_equal(stats_of(f).requests, 1);

	/* Head and body in one write, server not busy: answered without a 100. */
	atomic_store(&decode_busy, false);
	c = client_open(f);
	int n = snprintf(request, sizeof(request),
			 "POST /decode HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
			 "abc");
	client_send(c, request, (size_t)n);
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "abc");
	assert_true(client_quiet_for(c, 100));
	free(r);
	client_close(c);
	server_stop(f);
}

/*
 * Expectations other than 100-continue get 417 (body unread, connection closed); 100-continue
 * on a request without a body, or from an HTTP/1.0 client, gets no interim response.
 */
static void test_expect_unknown_and_edges(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_sendf(c, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\nExpect: 200-ok\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 417);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);
	WAIT_STAT(f, refused_before_body, 1);

	/* No body: nothing to wait for, answered directly, and the connection stays. */
	c = client_open(f);
	client_sendf(c, "GET /echo HTTP/1.1\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	client_sendf(c, "GET /echo HTTP/1.1\r\nExpect: 100-Continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	client_close(c);

	/* An empty Expect expects nothing: no 100, no 417. */
	c = client_open(f);
	client_sendf(c, "POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect:\r\n\r\n");
	assert_true(client_quiet_for(c, 200));
	client_sendf(c, "hi");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	client_close(c);

	/* HTTP/1.0 does not know 100 (RFC 9110 §15.2): the server waits for the body. */
	c = client_open(f);
	client_sendf(c, "POST /echo HTTP/1.0\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_quiet_for(c, 200));
	client_sendf(c, "ok");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "ok");
	free(r);
	client_close(c);
	server_stop(f);
}

/*
 * Pipelining: a GET and the head of an upload with Expect in one write get the GET's answer,
 * then the 100 Continue, then (after the body) the upload's; an upload refused at its head
 * with a request pipelined behind it ends the connection, the later request unanswered.
 */
static void test_expect_pipelined(void **state)
{
	(void)state;
	struct http_server_options opts = { .busy = busy_cb };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	atomic_store(&decode_busy, false);
	client_sendf(c, "GET /echo?a=first HTTP/1.1\r\n\r\n"
			"POST /decode HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "GET /echo first");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 100);
	client_sendf(c, "data");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).body, "data");
	client_close(c);

	atomic_store(&decode_busy, true);
	c = client_open(f);
	client_sendf(c, "POST /decode HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
			"GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 503);
	assert_true(client_sees_close(c));
	client_close(c);
	atomic_store(&decode_busy, false);
	WAIT_STAT(f, refused_before_body, 1);
	assert_int_equal(seen_of(f).calls, 2);
	free(r);
	server_stop(f);
}

/*
 * Monitoring routes have their own thread and slots: answered while every ordinary slot is
 * taken, refused only over max_inflight_monitoring.
 */
static void test_monitoring_lane(void **state)
{
	(void)state;
	struct http_server_options opts = { .max_inflight = 1, .max_inflight_monitoring = 1 };
	struct fixture *f = server_start(&opts);
	struct client *a = client_open(f), *b = client_open(f), *m = client_open(f);
	struct reply *r = reply_new();

	client_sendf(a, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);
	client_sendf(b, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 503);
	for (int i = 0; i < 3; i++) {
		client_sendf(m, "GET /monitor HTTP/1.1\r\n\r\n");
		assert_true(client_read_reply(m, r, false));
		assert_int_equal(r->status, 200);
		assert_string_equal(r->body, "GET /monitor -");
	}
	assert_int_equal(stats_of(f).monitoring_requests, 3);

	/* The monitoring slot taken by a blocked probe: the next probe gets 503. */
	client_sendf(b, "GET /mblock HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 2);
	client_sendf(m, "GET /monitor HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(m, r, false));
	assert_int_equal(r->status, 503);

	gate_open(f);
	assert_true(client_read_reply(a, r, false));
	assert_int_equal(r->status, 200);
	assert_true(client_read_reply(b, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "released");
	client_sendf(m, "GET /monitor HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(m, r, false));
	assert_int_equal(r->status, 200);
	free(r);
	client_close(a);
	client_close(b);
	client_close(m);
	server_stop(f);
}

/*
 * Every threadpool thread blocked in an upload handler and more queued behind them (the
 * ingest path saturated): a monitoring probe is still answered, and promptly, because it
 * never enters that queue. Without its own thread it would wait for the gate.
 */
static void test_monitoring_threadpool_saturated(void **state)
{
	(void)state;
	enum { BLOCKED = 24 }; /* more than any threadpool this test runs with */
	struct http_server_options opts = { .max_inflight = BLOCKED };
	struct fixture *f = server_start(&opts);
	struct client *blocked[BLOCKED], *m = client_open(f);
	struct reply *r = reply_new();

	for (int i = 0; i < BLOCKED; i++) {
		blocked[i] = client_open(f);
		client_sendf(blocked[i], "GET /block HTTP/1.1\r\n\r\n");
	}
	/* At least one handler runs (the others wait for threads or run too). */
	struct timespec deadline;
	deadline_in(&deadline, WAIT_SECONDS);
	pthread_mutex_lock(&f->gate.mu);
	while (f->gate.entered < 1 &&
	       pthread_cond_timedwait(&f->gate.cv, &f->gate.mu, &deadline) == 0)
		;
	pthread_mutex_unlock(&f->gate.mu);
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = monotonic_ms();
		client_sendf(m, "GET /monitor HTTP/1.1\r\n\r\n");
		assert_true(client_read_reply(m, r, false));
		assert_int_equal(r->status, 200);
		assert_true(monotonic_ms() - t0 < 2000);
	}
	gate_open(f);
	for (int i = 0; i < BLOCKED; i++) {
		assert_true(client_read_reply(blocked[i], r, false));
		assert_int_equal(r->status, 200);
		client_close(blocked[i]);
	}
	free(r);
	client_close(m);
	server_stop(f);
}

static void expect_bad_request(struct fixture *f, const char *raw)
{
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	client_send(c, raw, strlen(raw));
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 400);
	expect_framing(r, false);
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	free(r);
	client_close(c);
}

static void test_malformed_requests(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);

	expect_bad_request(f, "GARBAGE\r\n\r\n");
	expect_bad_request(f, "GET /echo HTTP/1.1\r\nNo colon here\r\n\r\n");
	expect_bad_request(f, "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n"
			      "Transfer-Encoding: chunked\r\n\r\n");
	expect_bad_request(f, "POST /echo HTTP/1.1\r\nContent-Length: x\r\n\r\n");
	expect_bad_request(f, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
	expect_bad_request(f, "GET server:80 HTTP/1.1\r\n\r\n");
	/* CONNECT switches protocols: never kept alive. */
	expect_bad_request(f, "CONNECT server:80 HTTP/1.1\r\n\r\n");
	struct http_server_stats s = stats_of(f);
	assert_int_equal(s.parse_errors, 7);
	assert_int_equal(s.responses_4xx, 7);
	assert_int_equal(seen_of(f).calls, 0);
	server_stop(f);
}

static void test_path_traversal(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();
	static const char *const bad[] = {
		"/files/../secret", "/files/%2e%2e/secret", "/files/..%2fsecret",
		"/files/a%00b",     "/files/a%zz",          "/files/..",
		"*",
	};

	/* Without a body the connection survives each 400. */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		client_sendf(c, "GET %s HTTP/1.1\r\n\r\n", bad[i]);
		assert_true(client_read_reply(c, r, false));
		if (r->status != 400)
			fail_msg("%s answered %d", bad[i], r->status);
	}
	client_sendf(c, "GET /files/..ok/x HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(seen_of(f).path, "/files/..ok/x");
	assert_int_equal(seen_of(f).calls, 1);
	assert_int_equal(stats_of(f).parse_errors, 7);
	free(r);
	client_close(c);
	server_stop(f);
}

static void test_stats(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *a = client_open(f), *b = client_open(f), *c = client_open(f);
	struct reply *r = reply_new();
	uint64_t sent, read;

	client_sendf(a, "GET /echo HTTP/1.1\r\n\r\nGET /created HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\n");
	for (int i = 0; i < 3; i++)
		assert_true(client_read_reply(a, r, false));
	client_sendf(b, "BAD\r\n\r\n");
	assert_true(client_read_reply(b, r, false));
	assert_true(client_sees_close(b));
	client_sendf(c, "POST /upload HTTP/1.1\r\nContent-Length: 17\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_true(client_sees_close(c));
	sent = a->total_sent + b->total_sent + c->total_sent;
	read = a->total_read + b->total_read + c->total_read;
	client_close(a);
	client_close(b);
	client_close(c);
	wait_open_connections(f, 0);

	struct http_server_stats s = stats_of(f);
	assert_int_equal(s.connections_accepted, 3);
	assert_int_equal(s.connections_rejected, 0);
	assert_int_equal(s.connections_open, 0);
	assert_int_equal(s.requests, 5);
	assert_int_equal(s.responses_2xx, 2);
	assert_int_equal(s.responses_3xx, 0);
	assert_int_equal(s.responses_4xx, 3);
	assert_int_equal(s.responses_5xx, 0);
	assert_int_equal(s.parse_errors, 1);
	assert_int_equal(s.limit_rejections, 1);
	assert_int_equal(s.bytes_received, sent);
	assert_int_equal(s.bytes_sent, read);
	free(r);
	server_stop(f);
}

static void test_stop_while_handler_runs(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f), *idle = client_open(f);
	struct reply *r = reply_new();
	struct timespec deadline;
	bool stop_seen;

	client_sendf(idle, "GET /echo HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(idle, r, false));
	client_sendf(c, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);
	server_request_stop(f);
	deadline_in(&deadline, WAIT_SECONDS);
	pthread_mutex_lock(&f->mu);
	while (!f->stop_seen && pthread_cond_timedwait(&f->cv, &f->mu, &deadline) == 0)
		;
	stop_seen = f->stop_seen;
	pthread_mutex_unlock(&f->mu);
	assert_true(stop_seen);

	/* Stopped: no new connections, the idle one closed, the handler still held. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(f->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(fd);
	assert_true(client_sees_close(idle));
	pthread_mutex_lock(&f->mu);
	assert_false(f->done_called);
	pthread_mutex_unlock(&f->mu);

	/* The handler finishes; its response is delivered, then the connection closes. */
	gate_open(f);
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_string_equal(r->body, "released");
	expect_header(r, "Connection", "close");
	assert_true(client_sees_close(c));
	client_close(c);
	client_close(idle);
	free(r);
	server_join(f);
}

static void test_client_gone_mid_handler(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct client *c = client_open(f);
	struct reply *r = reply_new();

	/* The client resets the connection while the handler runs. */
	client_sendf(c, "GET /block HTTP/1.1\r\n\r\n");
	gate_wait_entered(f, 1);
	client_abort(c);
	gate_open(f);
	wait_open_connections(f, 0);

	/* A half-closed client (shutdown after the request) still gets its answer. */
	c = client_open(f);
	client_sendf(c, "GET /echo?a=half HTTP/1.1\r\n\r\n");
	assert_int_equal(shutdown(c->fd, SHUT_WR), 0);
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo half");
	assert_true(client_sees_close(c));
	client_close(c);

	/* The server is unharmed. */
	c = client_open(f);
	client_sendf(c, "GET /echo?a=fine HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo fine");
	client_close(c);
	wait_open_connections(f, 0);
	free(r);
	server_stop(f);
}

static void test_listen_errors(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct http_server_options opts = { .host = "127.0.0.1", .port = f->port };
	struct http_route route = { "GET", "/", false, echo_handler, f, 0, 0 };
	char err[256] = "";
	uv_loop_t loop;

	assert_int_equal(uv_loop_init(&loop), 0);
	assert_null(http_server_start(&loop, &opts, &route, 1, err, sizeof(err)));
	assert_non_null(strstr(err, "address already in use"));
	opts.host = "localhost";
	opts.port = 0;
	assert_null(http_server_start(&loop, &opts, &route, 1, err, sizeof(err)));
	assert_non_null(strstr(err, "invalid listen address"));
	opts.host = NULL;
	assert_null(http_server_start(&loop, &opts, &route, 1, err, sizeof(err)));
	/* The failed listener's memory goes in its close callback. */
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(uv_loop_close(&loop), 0);
	server_stop(f);
}

static void test_ipv6(void **state)
{
	(void)state;
	int probe = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };

	if (probe < 0 || bind(probe, (struct sockaddr *)&a6, sizeof(a6)) < 0) {
		if (probe >= 0)
			close(probe);
		print_message("# no IPv6 loopback on this machine: IPv6 test skipped\n");
		skip();
	}
	close(probe);
	struct http_server_options opts = { .host = "::1" };
	struct fixture *f = server_start(&opts);
	struct client *c = client_open_family(AF_INET6, f->port);
	struct reply *r = reply_new();

	client_sendf(c, "GET /echo?a=v6 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo v6");
	assert_true(strncmp(seen_of(f).peer, "[::1]:", 6) == 0);
	free(r);
	client_close(c);
	server_stop(f);
}

/* ---------------------------------------------------------------------------------------- */
/* File bodies */

/* Open file descriptors of this process. */
static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

/* Waits (re-checking after every loop iteration) until this process has `want` fds. */
static void wait_fd_count(struct fixture *f, int want)
{
	struct timespec deadline;
	int n;

	deadline_in(&deadline, WAIT_SECONDS);
	pthread_mutex_lock(&f->mu);
	while ((n = fd_count()) != want &&
	       pthread_cond_timedwait(&f->cv, &f->mu, &deadline) == 0)
		;
	pthread_mutex_unlock(&f->mu);
	assert_int_equal(fd_count(), want);
}

/* Resident memory of this process in KiB. */
static long rss_kib(void)
{
	FILE *fp = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(fp);
	return kib;
}

/* Writes `size` bytes of a known pattern into a fresh temporary file; its path into `path`. */
static void pattern_file(char *path, size_t pathlen, uint64_t size)
{
	uint8_t *buf = malloc(1 << 20);
	int fd;
	const char *tmp = getenv("TMPDIR");

	snprintf(path, pathlen, "%s/sysom-http-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_non_null(buf);
	for (uint64_t at = 0; at < size;) {
		size_t n = size - at < (1 << 20) ? (size_t)(size - at) : (1 << 20);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)((at + i) * 131 + ((at + i) >> 16));
		assert_int_equal(write(fd, buf, n), (ssize_t)n);
		at += n;
	}
	close(fd);
	free(buf);
}

static uint8_t pattern_byte(uint64_t at)
{
	return (uint8_t)(at * 131 + (at >> 16));
}

/* Reads a response head; returns its Content-Length (the body starts in c->buf). */
static long read_head(struct client *c, struct reply *r)
{
	char *end;
	char value[64];

	memset(r, 0, sizeof(*r));
	while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
		assert_true(client_fill(c));
	size_t hlen = (size_t)(end - c->buf) + 4;
	memcpy(r->head, c->buf, hlen);
	r->head[hlen] = '\0';
	assert_int_equal(sscanf(r->head, "HTTP/1.1 %d ", &r->status), 1);
	memmove(c->buf, c->buf + hlen, c->len - hlen);
	c->len -= hlen;
	assert_true(reply_header(r, "Content-Length", value, sizeof(value)));
	return atol(value);
}

/* Reads `len` body bytes, checking them against the pattern from `from`; returns how many
 * arrived before the connection ended. */
static uint64_t read_pattern_body(struct client *c, uint64_t from, uint64_t len)
{
	uint64_t got = 0;

	while (got < len) {
		if (c->len == 0) {
			if (!client_fill(c))
				break;
			continue;
		}
		size_t n = c->len < len - got ? c->len : (size_t)(len - got);
		for (size_t i = 0; i < n; i++)
			if ((uint8_t)c->buf[i] != pattern_byte(from + got + i))
				fail_msg("body byte %llu differs", (unsigned long long)(got + i));
		memmove(c->buf, c->buf + n, c->len - n);
		c->len -= n;
		got += n;
	}
	return got;
}

static void test_file_body(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct reply *r = reply_new();
	int fds = fd_count();
	struct client *c = client_open(f);

	pattern_file(f->file_path, sizeof(f->file_path), 1000);
	/* GET: the whole file, then the connection carries on. */
	client_sendf(c, "GET /file HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	expect_framing(r, false);
	assert_int_equal(r->content_length, 1000);
	expect_header(r, "Content-Type", "application/octet-stream");
	expect_header(r, "X-File", "yes");
	for (int i = 0; i < 1000; i++)
		assert_int_equal((uint8_t)r->body[i], pattern_byte((uint64_t)i));
	/* A range of it. */
	client_sendf(c, "GET /file?off=100&len=50 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->content_length, 50);
	for (int i = 0; i < 50; i++)
		assert_int_equal((uint8_t)r->body[i], pattern_byte(100 + (uint64_t)i));
	/* HEAD: the length, no body (the next response follows at once), the file closed. */
	client_sendf(c, "HEAD /file HTTP/1.1\r\n\r\nGET /echo?a=after HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, true));
	assert_int_equal(r->status, 200);
	assert_int_equal(r->content_length, 1000);
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo after");
	/* A file body replaced by an error: the error is sent, the file closed. */
	client_sendf(c, "GET /file?fail=1 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 500);
	assert_non_null(strstr(r->body, "changed my mind"));
	/* An empty file body. */
	client_sendf(c, "GET /file?len=0 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->status, 200);
	assert_int_equal(r->content_length, 0);
	client_close(c);
	wait_open_connections(f, 0);
	wait_fd_count(f, fds);
	struct http_server_stats st = stats_of(f);
	assert_int_equal(st.responses_2xx, 5);
	unlink(f->file_path);
	free(r);
	server_stop(f);
}

/* 96 MiB through one connection: correct bytes, and the server never holds the file. */
static void test_file_body_large(void **state)
{
	(void)state;
	const uint64_t size = 96ull << 20;
	struct fixture *f = server_start(NULL);
	struct reply *r = reply_new();
	int fds = fd_count();
	struct client *c = client_open(f);

	pattern_file(f->file_path, sizeof(f->file_path), size);
	long before = rss_kib();
	client_sendf(c, "GET /file HTTP/1.1\r\n\r\n");
	assert_int_equal(read_head(c, r), (long)size);
	assert_int_equal(r->status, 200);
	assert_int_equal(read_pattern_body(c, 0, size), size);
	long grown = rss_kib() - before;
	/* Bounded: pieces of HTTP_FILE_CHUNK, never the file (allocator slack allowed). */
	if (grown > 24 * 1024)
		fail_msg("resident memory grew by %ld KiB while sending a %llu MiB file", grown,
			 (unsigned long long)(size >> 20));
	/* The connection is still usable. */
	client_sendf(c, "GET /echo?a=still HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_string_equal(r->body, "GET /echo still");
	client_close(c);
	wait_open_connections(f, 0);
	wait_fd_count(f, fds);
	assert_true(stats_of(f).bytes_sent > size);
	unlink(f->file_path);
	free(r);
	server_stop(f);
}

/* The peer resets the connection mid-body, or the file is shorter than announced: the
 * connection ends, the file is closed, the server is fine. */
static void test_file_body_aborted(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct reply *r = reply_new();
	int fds = fd_count();
	struct client *c;

	pattern_file(f->file_path, sizeof(f->file_path), 32u << 20);
	for (int round = 0; round < 3; round++) {
		c = client_open(f);
		client_sendf(c, "GET /file HTTP/1.1\r\n\r\n");
		assert_int_equal(read_head(c, r), 32l << 20);
		assert_int_equal(read_pattern_body(c, 0, 300000 * (uint64_t)(round + 1)),
				 300000 * (uint64_t)(round + 1));
		client_abort(c);
		wait_open_connections(f, 0);
		wait_fd_count(f, fds);
	}
	/* Announced 40 MiB, the file has 32: the body stops short and the connection closes. */
	c = client_open(f);
	client_sendf(c, "GET /file?len=41943040 HTTP/1.1\r\n\r\n");
	assert_int_equal(read_head(c, r), 41943040);
	assert_int_equal(read_pattern_body(c, 0, 41943040), 32u << 20);
	assert_true(client_sees_close(c));
	client_close(c);
	wait_open_connections(f, 0);
	wait_fd_count(f, fds);
	/* Unharmed. */
	c = client_open(f);
	client_sendf(c, "GET /file?off=5&len=5 HTTP/1.1\r\n\r\n");
	assert_true(client_read_reply(c, r, false));
	assert_int_equal(r->body_len, 5);
	assert_int_equal((uint8_t)r->body[0], pattern_byte(5));
	client_close(c);
	wait_open_connections(f, 0);
	wait_fd_count(f, fds);
	unlink(f->file_path);
	free(r);
	server_stop(f);
}

/* Stopping while a file body is being sent: the stop completes within the grace. */
static void test_file_body_stop(void **state)
{
	(void)state;
	struct fixture *f = server_start(NULL);
	struct reply *r = reply_new();
	struct client *c = client_open(f);
	char path[256];
	int fds;

	pattern_file(f->file_path, sizeof(f->file_path), 64u << 20);
	snprintf(path, sizeof(path), "%s", f->file_path);
	fds = fd_count();
	client_sendf(c, "GET /file HTTP/1.1\r\n\r\n");
	assert_int_equal(read_head(c, r), 64l << 20);
	/* The client stops reading; the server is told to stop. */
	server_request_stop(f);
	server_join(f);
	/* The response was cut short: less than the file arrived before the close. */
	assert_true(read_pattern_body(c, 0, 64u << 20) < (64u << 20));
	client_close(c);
	assert_true(fd_count() <= fds);
	unlink(path);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get_post_round_trip),
		cmocka_unit_test(test_keep_alive),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_head),
		cmocka_unit_test(test_not_found_and_method_not_allowed),
		cmocka_unit_test(test_content_length_over_limit_before_body),
		cmocka_unit_test(test_expect_continue),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_header_limits),
		cmocka_unit_test(test_small_header_limit),
		cmocka_unit_test(test_slowloris_gets_408),
		cmocka_unit_test(test_idle_close),
		cmocka_unit_test(test_max_connections),
		cmocka_unit_test(test_eviction_order),
		cmocka_unit_test(test_eviction_trusted_last),
		cmocka_unit_test(test_per_peer_limit),
		cmocka_unit_test(test_peer_key),
		cmocka_unit_test(test_first_byte_timeout),
		cmocka_unit_test(test_header_timeout),
		cmocka_unit_test(test_mark_authenticated_detached),
		cmocka_unit_test(test_max_inflight),
		cmocka_unit_test(test_continue_holds_slot),
		cmocka_unit_test(test_early_refusal_inflight),
		cmocka_unit_test(test_early_refusal_busy),
		cmocka_unit_test(test_expect_admit),
		cmocka_unit_test(test_expect_impatient_client),
		cmocka_unit_test(test_expect_unknown_and_edges),
		cmocka_unit_test(test_expect_pipelined),
		cmocka_unit_test(test_monitoring_lane),
		cmocka_unit_test(test_monitoring_threadpool_saturated),
		cmocka_unit_test(test_malformed_requests),
		cmocka_unit_test(test_path_traversal),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_stop_while_handler_runs),
		cmocka_unit_test(test_client_gone_mid_handler),
		cmocka_unit_test(test_listen_errors),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_file_body),
		cmocka_unit_test(test_file_body_large),
		cmocka_unit_test(test_file_body_aborted),
		cmocka_unit_test(test_file_body_stop),
	};

	return cmocka_run_group_tests_name("http", tests, NULL, NULL);
}
