/* SPDX-License-Identifier: Apache-2.0 */
/* Small libcurl client: one keep-alive connection, bounded responses, Retry-After parsing. */
#ifndef SYSOM_AGENT_SHIP_HTTP_CLIENT_H
#define SYSOM_AGENT_SHIP_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_CLIENT_URL_MAX 2048              /* base URL + path */
#define HTTP_CLIENT_TOKEN_MAX 4096
#define HTTP_CLIENT_HEADERS_MAX 16            /* extra header lines per request */
#define HTTP_CLIENT_HEADER_LINE_MAX 8192
#define HTTP_CLIENT_DEFAULT_MAX_RESPONSE (1u << 20)
#define HTTP_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define HTTP_CLIENT_DEFAULT_TIMEOUT_MS 60000u
#define HTTP_CLIENT_ERROR_MAX 256
/*
 * Bodies of at least this many bytes are sent with "Expect: 100-continue": the server may
 * refuse the upload from its head (503 busy, 401, 413) before a byte of it travels. Smaller
 * ones go at once (a round trip costs more than sending them).
 */
#define HTTP_CLIENT_EXPECT_MIN_BYTES 1024u
/* How long to wait for the 100 Continue before sending the body anyway (RFC 9110 §10.1.1:
 * a server or proxy that does not know Expect never answers it). */
#define HTTP_CLIENT_EXPECT_TIMEOUT_MS 1000u

struct http_client_options {
	const char *base_url;        /* "http://host:port" or "https://..." (copied); a trailing
					'/' is dropped; paths are appended to it */
	const char *token;           /* bearer token sent as "Authorization: Bearer <token>", or
					NULL (copied; printable ASCII, no spaces) */
	const char *ca_file;         /* PEM bundle to verify https servers, or NULL for the
					system store (copied) */
	const char *user_agent;      /* NULL: "sysom-agent" (copied) */
	uint32_t connect_timeout_ms; /* 0: HTTP_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS */
	uint32_t timeout_ms;         /* whole request; 0: HTTP_CLIENT_DEFAULT_TIMEOUT_MS */
	size_t max_response_bytes;   /* response body kept; 0: HTTP_CLIENT_DEFAULT_MAX_RESPONSE */
};

struct http_client_request {
	const char *method;           /* "GET", "POST", "PUT", "DELETE", "HEAD" */
	const char *path;             /* starts with '/', appended to the base URL */
	const char *content_type;     /* or NULL */
	const char *content_encoding; /* or NULL */
	const char *const *headers;   /* extra "Name: value" lines (no CR/LF), or NULL */
	size_t header_count;          /* <= HTTP_CLIENT_HEADERS_MAX */
	const void *body;             /* borrowed for the call; NULL when body_len is 0 */
	size_t body_len;
	uint32_t timeout_ms;          /* 0: the client's timeout */
	/* Polled during the transfer (about once a second or more often); returning true
	 * aborts it with -ECANCELED. Optional. */
	bool (*should_abort)(void *ctx);
	void *abort_ctx;
};

struct http_client_response {
	int status;               /* HTTP status, 0 when the transport failed */
	uint8_t *body;            /* owned, NUL-terminated (not counted in body_len); NULL if empty */
	size_t body_len;          /* bytes kept, at most max_response_bytes */
	bool body_truncated;      /* the server sent more than was kept */
	int64_t retry_after_s;    /* parsed Retry-After (delta-seconds or HTTP-date, >= 0), or -1 */
	int32_t wire_minor;       /* the server's Sysom-Wire-Minor (0..65535), or -1 */
	bool expect_continue;     /* the request asked for 100 Continue before its body */
	uint64_t body_bytes_sent; /* request body bytes that left (less than the body when the
				     server answered before taking it all) */
	char error[HTTP_CLIENT_ERROR_MAX]; /* transport failure text (curl's), "" on success */
};

struct http_client;

/*
 * Creates a client (not thread-safe: one per thread). Initialises libcurl globally once.
 * Returns 0 with *out set (free with http_client_free), -SYSOM_ECONFIG for a URL that is not
 * http(s) or too long or a token with forbidden characters, or -ENOMEM.
 */
int http_client_new(const struct http_client_options *opts, struct http_client **out);

/* Frees the client and closes its connection. Accepts NULL. */
void http_client_free(struct http_client *c);

/*
 * Performs one request, reusing the open connection when the server keeps it alive. Adds
 * "Expect: 100-continue" to bodies of at least HTTP_CLIENT_EXPECT_MIN_BYTES (waiting at most
 * HTTP_CLIENT_EXPECT_TIMEOUT_MS for the 100), "Expect:" (none) to others, and the bearer token. Fills *resp (always, even on
 * failure; release it with http_client_response_free). Returns the HTTP status (100..599),
 * or a negative errno for a transport failure with resp->error set: -ECONNREFUSED,
 * -ETIMEDOUT, -EHOSTUNREACH, -ECONNRESET, -EPROTO (TLS), -ECANCELED (aborted), -ENOMEM,
 * -EIO; -EINVAL for a malformed request.
 */
int http_client_request(struct http_client *c, const struct http_client_request *req,
			struct http_client_response *resp);

/* Frees the response body and clears the response. Accepts NULL. */
void http_client_response_free(struct http_client_response *resp);

/*
 * Parses a Retry-After value: delta-seconds, or an HTTP-date taken relative to `now` (seconds
 * since the Unix epoch); a date in the past gives 0. Returns 0 with *out_s set, or -EINVAL.
 */
int http_client_parse_retry_after(const char *value, int64_t now, int64_t *out_s);

#endif
