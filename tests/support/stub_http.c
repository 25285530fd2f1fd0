/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: a single-threaded HTTP/1.1 server (keep-alive, Content-Length bodies). */
#include "tests/support/stub_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* Waits until fd is readable; false when the server is being stopped. */
static bool wait_readable(struct stub_http *s, int fd)
{
	struct pollfd p[2] = { { fd, POLLIN, 0 }, { s->wake[0], POLLIN, 0 } };

	for (;;) {
		int n = poll(p, 2, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (p[1].revents & POLLIN))
			return false;
		if (p[0].revents)
			return true;
	}
}

static size_t content_length(const char *headers)
{
	const char *p = headers;

	while ((p = strstr(p, "\r\n")) != NULL) {
		p += 2;
		if (strncasecmp(p, "Content-Length:", 15) == 0)
			return (size_t)strtoull(p + 15, NULL, 10);
	}
	return 0;
}

static void write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* The answer to a request: the handler's, else the next scripted step. */
static void answer_for(struct stub_http *s, const struct stub_request *req, struct stub_reply *out)
{
	memset(out, 0, sizeof(*out));
	if (s->handler) {
		s->handler(s->handler_ctx, req, out);
		return;
	}
	pthread_mutex_lock(&s->lock);
	struct stub_step st = s->next_step < s->nscript ? s->script[s->next_step++] : s->dflt;
	pthread_mutex_unlock(&s->lock);
	out->status = st.status;
	out->stall = st.stall;
	snprintf(out->headers, sizeof(out->headers), "%s", st.headers ? st.headers : "");
	out->body = st.body ? strdup(st.body) : NULL;
}

static void serve_connection(struct stub_http *s, int fd, unsigned conn)
{
	char *buf = malloc(STUB_HTTP_MAX_REQUEST);
	size_t have = 0;

	if (!buf)
		return;
	for (;;) {
		char *end;
		/* Header block. */
		while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
			if (have == STUB_HTTP_MAX_REQUEST || !wait_readable(s, fd))
				goto done;
			ssize_t n = recv(fd, buf + have, STUB_HTTP_MAX_REQUEST - have, 0);
			if (n <= 0)
				goto done;
			have += (size_t)n;
		}
		size_t hlen = (size_t)(end - buf) + 4;
		char *hdr = strndup(buf, hlen);
		size_t blen = hdr ? content_length(hdr) : 0;
		if (!hdr || blen > STUB_HTTP_MAX_REQUEST - hlen) {
			free(hdr);
			goto done;
		}
		char expect[32];
		if (blen && stub_http_header_in(hdr, "Expect", expect, sizeof(expect)) &&
		    strcasecmp(expect, "100-continue") == 0) {
			pthread_mutex_lock(&s->lock);
			int refusal = s->expect_refusal;
			if (!refusal && have == hlen)
				s->continues++;
			pthread_mutex_unlock(&s->lock);
			if (refusal) {
				char head[256];
				int n = snprintf(head, sizeof(head),
						 "HTTP/1.1 %d Refused\r\nContent-Length: 0\r\n"
						 "Retry-After: 1\r\nConnection: close\r\n\r\n",
						 refusal);
				pthread_mutex_lock(&s->lock);
				if (s->nreqs < STUB_HTTP_MAX_RECORDED) {
					struct stub_request *r = &s->reqs[s->nreqs];
					memset(r, 0, sizeof(*r));
					sscanf(hdr, "%15s %255s", r->method, r->path);
					r->headers = hdr;
					hdr = NULL;
					r->body = malloc(1);
					r->status = refusal;
					r->conn = conn;
				}
				s->nreqs++;
				pthread_cond_broadcast(&s->cond);
				pthread_mutex_unlock(&s->lock);
				free(hdr);
				write_all(fd, head, (size_t)n);
				goto done;
			}
			if (have == hlen) {
				static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
				write_all(fd, cont, sizeof(cont) - 1);
			}
		}
		while (have < hlen + blen) {
			if (!wait_readable(s, fd)) {
				free(hdr);
				goto done;
			}
			ssize_t n = recv(fd, buf + have, STUB_HTTP_MAX_REQUEST - have, 0);
			if (n <= 0) {
				free(hdr);
				goto done;
			}
			have += (size_t)n;
		}

		struct stub_request req = { .headers = hdr, .body = (uint8_t *)buf + hlen,
					    .body_len = blen, .conn = conn };
		struct stub_reply reply;
		sscanf(hdr, "%15s %255s", req.method, req.path);
		answer_for(s, &req, &reply);

		pthread_mutex_lock(&s->lock);
		if (s->nreqs < STUB_HTTP_MAX_RECORDED) {
			struct stub_request *r = &s->reqs[s->nreqs];
			*r = req;
			r->headers = hdr;
			hdr = NULL;
			r->body = malloc(blen ? blen : 1);
			if (r->body)
				memcpy(r->body, buf + hlen, blen);
			r->status = reply.stall ? 0 : reply.status;
		}
		s->nreqs++;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		free(hdr);

		memmove(buf, buf + hlen + blen, have - hlen - blen);
		have -= hlen + blen;
		if (reply.stall) {
			free(reply.body);
			/* Until the client aborts (EOF) or the server stops. */
			while (wait_readable(s, fd) && recv(fd, buf, STUB_HTTP_MAX_REQUEST, 0) > 0)
				;
			goto done;
		}
		if (reply.status == 0) {
			free(reply.body);
			goto done; /* hang up without a word */
		}
		const char *body = reply.body ? reply.body : "";
		char head[1024];
		int n = snprintf(head, sizeof(head),
				 "HTTP/1.1 %d Scripted\r\nContent-Length: %zu\r\n%s\r\n", reply.status,
				 strlen(body), reply.headers);
		write_all(fd, head, (size_t)n);
		write_all(fd, body, strlen(body));
		free(reply.body);
	}
done:
	free(buf);
	close(fd);
}

static void *server_main(void *arg)
{
	struct stub_http *s = arg;

	while (wait_readable(s, s->listen_fd)) {
		int fd = accept(s->listen_fd, NULL, NULL);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&s->lock);
		unsigned conn = ++s->connections;
		pthread_mutex_unlock(&s->lock);
		serve_connection(s, fd, conn);
	}
	return NULL;
}

static struct stub_http *start(uint16_t port, const struct stub_step *script, size_t n,
			       struct stub_step dflt, stub_http_handler_fn handler, void *ctx)
{
	struct stub_http *s = calloc(1, sizeof(*s));
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				    .sin_port = htons(port) };
	socklen_t alen = sizeof(addr);
	int one = 1;

	assert_non_null(s);
	assert_true(n <= STUB_HTTP_MAX_STEPS);
	if (n)
		memcpy(s->script, script, n * sizeof(*script));
	s->nscript = n;
	s->dflt = dflt;
	s->handler = handler;
	s->handler_ctx = ctx;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	assert_int_equal(pipe(s->wake), 0);
	s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->listen_fd >= 0);
	/* So a later stub can take this port while its closed connections linger (TIME_WAIT
	 * sockets block the port unless they had the option too). */
	assert_int_equal(setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(s->listen_fd, 16), 0);
	assert_int_equal(getsockname(s->listen_fd, (struct sockaddr *)&addr, &alen), 0);
	s->port = ntohs(addr.sin_port);
	assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
	return s;
}

struct stub_http *stub_http_start(const struct stub_step *script, size_t n, struct stub_step dflt)
{
	return start(0, script, n, dflt, NULL, NULL);
}

struct stub_http *stub_http_start_port(uint16_t port, const struct stub_step *script, size_t n,
				       struct stub_step dflt)
{
	return start(port, script, n, dflt, NULL, NULL);
}

struct stub_http *stub_http_start_handler(stub_http_handler_fn handler, void *ctx)
{
	struct stub_step none = { 500, NULL, NULL, false };

	return start(0, NULL, 0, none, handler, ctx);
}

void stub_http_stop(struct stub_http *s)
{
	if (!s)
		return;
	assert_int_equal(write(s->wake[1], "x", 1), 1);
	pthread_join(s->thread, NULL);
	close(s->listen_fd);
	close(s->wake[0]);
	close(s->wake[1]);
	for (size_t i = 0; i < s->nreqs && i < STUB_HTTP_MAX_RECORDED; i++) {
		free(s->reqs[i].headers);
		free(s->reqs[i].body);
	}
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void stub_http_set_default(struct stub_http *s, struct stub_step dflt)
{
	pthread_mutex_lock(&s->lock);
	s->dflt = dflt;
	pthread_mutex_unlock(&s->lock);
}

size_t stub_http_count(struct stub_http *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->nreqs;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void stub_http_deadline(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)seconds;
	ts->tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

bool stub_http_wait(struct stub_http *s, size_t n)
{
	struct timespec ts;
	bool ok = true;

	stub_http_deadline(&ts, STUB_HTTP_WAIT_S);
	pthread_mutex_lock(&s->lock);
	while (s->nreqs < n && ok)
		ok = pthread_cond_timedwait(&s->cond, &s->lock, &ts) == 0 || s->nreqs >= n;
	pthread_mutex_unlock(&s->lock);
	return ok;
}

bool stub_http_header_in(const char *headers, const char *name, char *out, size_t outlen)
{
	const char *p = headers;
	size_t k = strlen(name);

	while (p && (p = strstr(p, "\r\n")) != NULL) {
		p += 2;
		if (strncasecmp(p, name, k) == 0 && p[k] == ':') {
			const char *v = p + k + 1, *e = strstr(v, "\r\n");
			while (*v == ' ')
				v++;
			snprintf(out, outlen, "%.*s", e ? (int)(e - v) : (int)strlen(v), v);
			return true;
		}
	}
	return false;
}

bool stub_http_header(struct stub_http *s, size_t i, const char *name, char *out, size_t outlen)
{
	return stub_http_header_in(s->reqs[i].headers, name, out, outlen);
}

void stub_http_set_expect_refusal(struct stub_http *s, int status)
{
	pthread_mutex_lock(&s->lock);
	s->expect_refusal = status;
	pthread_mutex_unlock(&s->lock);
}

uint64_t stub_http_continues(struct stub_http *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t n = s->continues;
	pthread_mutex_unlock(&s->lock);
	return n;
}
