/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: a small HTTP/1.1 server on 127.0.0.1 in a thread, scripted or with a handler. */
#ifndef SYSOM_TESTS_SUPPORT_STUB_HTTP_H
#define SYSOM_TESTS_SUPPORT_STUB_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define STUB_HTTP_MAX_STEPS 32
#define STUB_HTTP_MAX_RECORDED 256
#define STUB_HTTP_MAX_REQUEST (8u << 20) /* header block + body of one request */
#define STUB_HTTP_WAIT_S 20              /* stub_http_wait gives up after this long */

/* One scripted answer. */
struct stub_step {
	int status;          /* 0: close the connection without answering */
	const char *headers; /* extra header lines, each ending in "\r\n", or NULL */
	const char *body;    /* or NULL */
	bool stall;          /* read the request, then wait for the client to go away */
};

/* A request as received (the first STUB_HTTP_MAX_RECORDED are kept in `reqs`). */
struct stub_request {
	char method[16];
	char path[256];
	char *headers;   /* raw header block (owned) */
	uint8_t *body;   /* owned */
	size_t body_len;
	int status;      /* what was answered, 0 for none */
	unsigned conn;   /* connection number, from 1 */
};

/* A handler's answer: `body` is heap memory the server frees (or NULL). */
struct stub_reply {
	int status;         /* 0: hang up without answering */
	char headers[512];  /* extra header lines, each ending in "\r\n" */
	char *body;
	bool stall;
};

/* Decides the answer to `req` (server thread, server lock not held). */
typedef void (*stub_http_handler_fn)(void *ctx, const struct stub_request *req,
				     struct stub_reply *reply);

struct stub_http {
	int listen_fd;
	int wake[2];
	uint16_t port;
	pthread_t thread;
	pthread_mutex_t lock;  /* guards what follows */
	pthread_cond_t cond;   /* a request was recorded */
	struct stub_step script[STUB_HTTP_MAX_STEPS];
	size_t nscript, next_step;
	struct stub_step dflt; /* after the script */
	stub_http_handler_fn handler; /* when set, answers everything (script unused) */
	void *handler_ctx;
	int expect_refusal;    /* non-zero: requests with Expect: 100-continue get this status
				  (Connection: close) from their head, the body unread */
	uint64_t continues;    /* 100 Continue answers sent */
	struct stub_request reqs[STUB_HTTP_MAX_RECORDED];
	size_t nreqs;          /* requests seen */
	unsigned connections;
};

/* Starts a server answering with `script` (n steps), then `dflt`. Asserts on failure. */
struct stub_http *stub_http_start(const struct stub_step *script, size_t n, struct stub_step dflt);

/* The same on 127.0.0.1:`port` (e.g. the port of a stub stopped to play a receiver that is
 * down for a while). Asserts on failure. */
struct stub_http *stub_http_start_port(uint16_t port, const struct stub_step *script, size_t n,
				       struct stub_step dflt);

/* Starts a server answering every request through `handler`. */
struct stub_http *stub_http_start_handler(stub_http_handler_fn handler, void *ctx);

/* Stops the thread, closes every socket, frees the records. Accepts NULL. */
void stub_http_stop(struct stub_http *s);

/*
 * Requests with "Expect: 100-continue" get a 100 Continue before their body is read (unless
 * the body is already there). With `status` non-zero they get that final status instead,
 * with "Retry-After: 1" and "Connection: close", and the connection closes without the body
 * being read (recorded with body_len 0 and that status). 0 restores the default.
 */
void stub_http_set_expect_refusal(struct stub_http *s, int status);
/* 100 Continue answers sent so far. */
uint64_t stub_http_continues(struct stub_http *s);
/* Replaces the answer given after the script. */
void stub_http_set_default(struct stub_http *s, struct stub_step dflt);

/* Requests seen so far. */
size_t stub_http_count(struct stub_http *s);

/* Waits for at least n requests; false after STUB_HTTP_WAIT_S seconds. */
bool stub_http_wait(struct stub_http *s, size_t n);

/* Copies header `name`'s value of recorded request i into out; false when absent. */
bool stub_http_header(struct stub_http *s, size_t i, const char *name, char *out, size_t outlen);

/* Same, from a raw header block. */
bool stub_http_header_in(const char *headers, const char *name, char *out, size_t outlen);

/* An absolute CLOCK_REALTIME deadline `seconds` from now. */
void stub_http_deadline(struct timespec *ts, double seconds);

#endif
