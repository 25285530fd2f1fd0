/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/1.1 server on libuv + http-parser: transport only; handlers run on worker threads. */
#ifndef SYSOM_SERVER_HTTP_HTTP_H
#define SYSOM_SERVER_HTTP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/bytes.h"

struct http_conn;

struct http_header {
	const char *name;  /* lower-cased */
	const char *value; /* surrounding whitespace trimmed */
};

/* A complete request, valid for the duration of the handler call (borrowed). */
struct http_request {
	const char *method;      /* "GET", "POST", "PUT", "HEAD", ... */
	const char *path;        /* percent-decoded path without the query ("/api/v1/nodes") */
	const char *query;       /* raw query string after '?', "" when none */
	const struct http_header *headers;
	size_t header_count;
	const uint8_t *body;     /* NULL when empty; not NUL-terminated */
	size_t body_len;
	const char *peer;        /* "127.0.0.1:53412" */
	struct http_conn *conn;  /* the transport's connection (opaque); NULL for a request
				    built elsewhere */
};

/*
 * Records that `req` passed authentication (its credential was accepted). Call it from the
 * handler, during the handler call (a worker thread); the transport reads it on its own
 * thread once the handler has returned. From then on the connection is *trusted*: it is
 * evicted last when the connection table is full, it no longer counts against its peer's
 * limit, and between requests it may stay idle for the idle timeout instead of the
 * first-byte timeout. A request with no connection (conn NULL) is ignored.
 */
void http_request_mark_authenticated(const struct http_request *req);

/* Value of header `lower_name` (first occurrence) or NULL. */
const char *http_request_header(const struct http_request *req, const char *lower_name);

/*
 * Percent-decodes `len` bytes of `s` into `out` (NUL-terminated); '+' becomes a space when
 * `plus_is_space` (query strings). Returns the decoded length, -EINVAL for a malformed escape
 * or an encoded NUL, -E2BIG when `out` (outlen bytes) is too small.
 */
int http_percent_decode(const char *s, size_t len, bool plus_is_space, char *out, size_t outlen);

/*
 * Copies the percent-decoded value of query parameter `name` into `out`.
 * Returns its length, -ENOENT when absent, -E2BIG when longer than outlen - 1,
 * -EINVAL when the encoding is malformed.
 */
int http_query_param(const struct http_request *req, const char *name, char *out, size_t outlen);

#define HTTP_MAX_EXTRA_HEADERS 8

/* What a handler fills in. The transport adds Content-Length, Connection and Date. */
struct http_response {
	int status;                  /* 200 unless set */
	char content_type[96];       /* "application/json" unless set */
	struct byte_buf body;        /* owned by the response; freed by the transport */
	struct {
		char name[64];
		char value[256];
	} extra_headers[HTTP_MAX_EXTRA_HEADERS];
	size_t extra_header_count;
	/*
	 * A file body instead of `body` (set with http_response_file; a zeroed response has
	 * none): the transport sends [body_fd_offset, body_fd_offset + body_fd_length) of
	 * body_fd, reading it in HTTP_FILE_CHUNK pieces off the loop thread, one piece in flight
	 * (memory per connection stays bounded whatever the size), and closes body_fd when the
	 * response is done, abandoned or not sent at all (HEAD, errors). Owned by the response.
	 */
	bool has_body_fd;
	int body_fd;
	uint64_t body_fd_offset, body_fd_length;
};

/* Bytes read from a file body per step (and the most a streaming connection buffers). */
#define HTTP_FILE_CHUNK (256u * 1024u)

/* Adds a response header (ignored beyond HTTP_MAX_EXTRA_HEADERS; values truncated to fit). */
void http_response_header(struct http_response *resp, const char *name, const char *value);
/* Sets status and a JSON body {"error": message} (message printf-formatted). */
void http_response_error(struct http_response *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Sets status, content type and a body copied from `text`. */
void http_response_text(struct http_response *resp, int status, const char *content_type,
			const char *text, size_t len);

/*
 * Sets status, content type and a file body: `length` bytes of `fd` from `offset` (the
 * response takes ownership of `fd`, also when it replaces an earlier file body, which it
 * closes). Content-Length is `length`; a HEAD request gets the headers only. The file must
 * not shrink while it is sent: a short read ends the connection (the peer sees a body
 * shorter than its Content-Length, never other bytes).
 */
void http_response_file(struct http_response *resp, int status, const char *content_type, int fd,
			uint64_t offset, uint64_t length);

/* Frees the body buffer and closes a file body; the response can be reused. Accepts NULL. */
void http_response_release(struct http_response *resp);

/* An HTTP date ("Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110 IMF-fixdate) of Unix seconds;
 * `out` needs 30 bytes. Locale-independent. */
void http_date_format(int64_t unix_seconds, char *out, size_t outlen);

/* Called on a worker thread (never the loop thread); may block (storage, decoding). */
typedef void (*http_handler_fn)(void *ctx, const struct http_request *req,
				struct http_response *resp);

struct http_route {
	const char *method;    /* exact method; "GET" routes also answer HEAD without a body */
	/*
	 * An exact path; a pattern whose "{name}" segments each match one non-empty path segment
	 * ("/api/v1/jobs/{job}/gpu"); or, when `prefix`, a prefix ("/api/v1/kernel-symbols/").
	 */
	const char *path;
	bool prefix;
	http_handler_fn handler;
	void *ctx;             /* passed to the handler (borrowed; outlives the server) */
	size_t max_body;       /* bytes; larger bodies get 413 before being read (0: no body allowed) */
	unsigned flags;        /* HTTP_ROUTE_* (0: an ordinary route) */
};

/*
 * A monitoring route (/healthz, /metrics): its handlers run on the transport's own monitoring
 * thread, not the shared threadpool, and count against max_inflight_monitoring, not
 * max_inflight, so that a probe is answered while uploads fill every worker and slot.
 */
#define HTTP_ROUTE_MONITORING 0x1u
/*
 * A route whose handler reserves from the server's decode memory (ingest, symbol uploads):
 * a request with a body is refused with 503 right after its head, before any body byte is
 * read, while the server's `busy` callback says that memory is full (see
 * http_server_options.busy).
 */
#define HTTP_ROUTE_DECODES 0x2u

/*
 * Whether `path` matches `pattern`: characters compare equal, and each "{name}" of the pattern
 * matches one non-empty segment of the path (no '/').
 */
bool http_path_match(const char *pattern, const char *path);

/* Whether route `r` answers `path` (exact, pattern or prefix, as its fields say). */
bool http_route_path_matches(const struct http_route *r, const char *path);

/*
 * The first route of `routes` (in table order) for `method` and `path`; for HEAD a GET route
 * when no HEAD route exists; NULL when none. Sets *path_known when any route has the path
 * (the caller answers 405 rather than 404). The server routes requests with it; handlers
 * that dispatch a sub-table can too.
 */
const struct http_route *http_route_find(const struct http_route *routes, size_t nroutes,
					 const char *method, const char *path, bool *path_known);

/* max_connections_per_peer: no limit. */
#define HTTP_UNLIMITED UINT32_MAX

/*
 * Connection fairness (docs/operations.md, "Connection fairness"): when max_connections are
 * open, a new connection evicts the least valuable one instead of being refused: first a
 * connection lingering after its last response, then an untrusted one waiting for a request
 * (longest waiting first), then an untrusted one part-way through a request (longest silent
 * first), then a trusted one idle between requests (longest idle first). A handler running,
 * a response being written or a trusted connection's request in progress is never evicted;
 * when nothing can be, the new connection gets 503.
 */
struct http_server_options {
	const char *host;              /* "127.0.0.1", "::1", "0.0.0.0" */
	uint16_t port;                 /* 0: an ephemeral port (see http_server_port) */
	uint32_t max_connections;      /* open at once (default 1024); beyond: evict, else 503 */
	/*
	 * Untrusted connections (no authenticated request yet) from one peer: one IPv4 address
	 * or one IPv6 /64 (default 32; HTTP_UNLIMITED: none). Beyond: 503, then close.
	 */
	uint32_t max_connections_per_peer;
	/*
	 * The first byte of a request must arrive within this (default 5000) on a new
	 * connection, and between requests on an untrusted one; silent close otherwise.
	 * Trusted connections wait idle_timeout_ms between requests.
	 */
	uint32_t first_byte_timeout_ms;
	uint32_t header_timeout_ms;    /* request line + headers within this of the request's
					  first byte (default 10000): 408 */
	uint32_t max_header_bytes;     /* request line + headers (default 64 KiB): 431 beyond */
	uint32_t max_headers;          /* header count (default 100): 431 beyond */
	uint32_t idle_timeout_ms;      /* keep-alive idle close (default 60000) */
	uint32_t request_timeout_ms;   /* whole request must arrive within (default 30000): 408 */
	uint32_t max_inflight;         /* handlers queued or running at once (default 64): 503 beyond */
	/*
	 * Handlers of HTTP_ROUTE_MONITORING routes queued or running at once (default 4), on
	 * their own thread and outside max_inflight: 503 beyond.
	 */
	uint32_t max_inflight_monitoring;
	/*
	 * Early refusal (docs/operations.md, "Refusing before the body"): a request with a body
	 * for a non-monitoring route gets 503 + Retry-After right after its head, its body never
	 * read or buffered, while max_inflight handlers are queued or running, or (routes with
	 * HTTP_ROUTE_DECODES) while busy(busy_arg) returns true. Called on the loop thread; must
	 * not block. NULL: only the in-flight count decides.
	 */
	bool (*busy)(void *arg);
	void *busy_arg;
	/*
	 * Admission of a request by its head (docs/operations.md, "Refusing before the body"):
	 * called on the loop thread for a request with a body to a non-monitoring route once its
	 * route and size are accepted and before its body is read or a 100 Continue is sent.
	 * `req` has the method, path, query, headers and peer (no body). Returning false refuses
	 * it with what the callback put in `resp` (a final status >= 400, e.g. 401): the body is
	 * never read and the connection closes after the answer. Must not block. NULL: admit.
	 */
	bool (*admit)(void *arg, const struct http_route *route, const struct http_request *req,
		      struct http_response *resp);
	void *admit_arg;
};

/* Counters kept by the transport (read with http_server_stats; monotonically increasing). */
struct http_server_stats {
	uint64_t connections_accepted;
	uint64_t connections_rejected; /* refused: max_connections open, none evictable */
	uint64_t connections_open;     /* gauge */
	uint64_t requests;
	uint64_t responses_2xx, responses_3xx, responses_4xx, responses_5xx;
	uint64_t bytes_received, bytes_sent;
	uint64_t parse_errors;         /* malformed requests (400) */
	uint64_t limit_rejections;     /* 408/413/431/503 answered by the transport itself */
	uint64_t connections_evicted;  /* closed to make room for a new connection */
	uint64_t peer_rejections;      /* refused over max_connections_per_peer */
	uint64_t first_byte_timeouts;  /* closed: no request began within first_byte_timeout */
	uint64_t header_timeouts;      /* 408: the head did not arrive within header_timeout */
	uint64_t connections_trusted;  /* gauge: open connections that made an authenticated
					  request */
	uint64_t early_rejections;     /* 503 right after the head, the body not read (also in
					  limit_rejections) */
	uint64_t discarded_bytes;      /* input read and thrown away by lingering closes (what
					  refused peers sent before they saw the answer) */
	uint64_t monitoring_requests;  /* handled on the monitoring thread */
	uint64_t refused_before_body;  /* requests with a body answered with a final status right
					  after their head, the body not read: 503, 413, 417 and
					  admit refusals such as 401 */
	uint64_t refused_body_bytes;   /* body bytes of those that the peer sent anyway and the
					  server read (and threw away) before the connection closed
					  (part of discarded_bytes) */
};

struct http_server;

/*
 * Binds and starts listening on `loop`. `routes` is borrowed and must outlive the server.
 * Returns NULL with a message in `err` when it cannot (address in use, bad address...).
 * Unknown paths get 404, known paths with another method 405 (with Allow).
 */
struct http_server *http_server_start(uv_loop_t *loop, const struct http_server_options *opts,
				      const struct http_route *routes, size_t nroutes, char *err,
				      size_t errlen);

/*
 * The most file descriptors a server started with `opts` holds at once: its connections,
 * the refused connections it is still answering, the listener (each file body being sent
 * adds one more). For sizing RLIMIT_NOFILE.
 */
uint64_t http_server_descriptors_needed(const struct http_server_options *opts);

/* The port actually bound (useful with port 0). */
uint16_t http_server_port(const struct http_server *srv);

/* A consistent snapshot of the counters; callable from any thread. */
void http_server_stats(const struct http_server *srv, struct http_server_stats *out);

/*
 * Stops accepting, lets in-flight handlers finish, closes connections and frees the server
 * once every handle is closed; `done` (optional) is called on the loop thread then.
 */
void http_server_stop(struct http_server *srv, void (*done)(void *arg), void *arg);

#endif
