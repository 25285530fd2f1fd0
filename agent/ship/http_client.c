/* SPDX-License-Identifier: Apache-2.0 */
/* libcurl wrapper: one reused easy handle, bounded response body, Retry-After. */
#include "agent/ship/http_client.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/error.h"
#include "common/url.h"
#include "common/wire/wire.h"

#define RETRY_AFTER_MAX_S (10ll * 365 * 24 * 3600) /* larger values are clamped */

struct http_client {
	CURL *curl;             /* reused: its connection cache keeps the connection alive */
	char *base_url;         /* without a trailing '/' */
	char *auth_header;      /* "Authorization: Bearer <token>" or NULL */
	char *ca_file;          /* or NULL */
	char *user_agent;
	uint32_t connect_timeout_ms;
	uint32_t timeout_ms;
	size_t max_response;
	char errbuf[CURL_ERROR_SIZE];
};

/* Per-request state handed to the curl callbacks. */
struct transfer {
	const struct http_client_request *req;
	struct http_client_response *resp;
	size_t cap;      /* allocated bytes of resp->body */
	size_t max;      /* bytes of body kept */
	bool nomem;      /* an allocation failed: the transfer was aborted */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_status = CURLE_FAILED_INIT;

static void global_init(void)
{
	global_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* True when `s` has no control characters (CR, LF, NUL...) that could split a header. */
static bool header_safe(const char *s, size_t max)
{
	size_t n = 0;

	for (; *s; s++, n++) {
		unsigned char c = (unsigned char)*s;
		if (n >= max || c < 0x20 || c == 0x7f)
			return false;
	}
	return true;
}

static bool token_valid(const char *t)
{
	size_t n = strlen(t);

	if (n == 0 || n > HTTP_CLIENT_TOKEN_MAX)
		return false;
	for (; *t; t++)
		if (*t <= 0x20 || *t >= 0x7f)
			return false;
	return true;
}

int http_client_new(const struct http_client_options *opts, struct http_client **out)
{
	struct http_client *c = NULL;
	int err = -ENOMEM;

	if (!opts || !opts->base_url || !sysom_url_valid(opts->base_url, HTTP_CLIENT_URL_MAX - 1) ||
	    (opts->token && !token_valid(opts->token)) ||
	    (opts->user_agent && !header_safe(opts->user_agent, 256)))
		return -SYSOM_ECONFIG;
	pthread_once(&global_once, global_init);
	if (global_status != CURLE_OK)
		return -ENOMEM;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->curl = curl_easy_init();
	c->base_url = strdup(opts->base_url);
	c->user_agent = strdup(opts->user_agent ? opts->user_agent : "sysom-agent");
	if (!c->curl || !c->base_url || !c->user_agent)
		goto cleanup;
	size_t n = strlen(c->base_url);
	while (n > 0 && c->base_url[n - 1] == '/')
		c->base_url[--n] = '\0';
	if (opts->token) {
		size_t len = strlen("Authorization: Bearer ") + strlen(opts->token) + 1;
		c->auth_header = malloc(len);
		if (!c->auth_header)
			goto cleanup;
		snprintf(c->auth_header, len, "Authorization: Bearer %s", opts->token);
	}
	if (opts->ca_file && !(c->ca_file = strdup(opts->ca_file)))
		goto cleanup;
	c->connect_timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms :
							   HTTP_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS;
	c->timeout_ms = opts->timeout_ms ? opts->timeout_ms : HTTP_CLIENT_DEFAULT_TIMEOUT_MS;
	c->max_response = opts->max_response_bytes ? opts->max_response_bytes :
						      HTTP_CLIENT_DEFAULT_MAX_RESPONSE;
	*out = c;
	return 0;
cleanup:
	http_client_free(c);
	return err;
}

void http_client_free(struct http_client *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	free(c->base_url);
	if (c->auth_header) {
		/* The token is a secret: do not leave it in freed memory. */
		explicit_bzero(c->auth_header, strlen(c->auth_header));
		free(c->auth_header);
	}
	free(c->ca_file);
	free(c->user_agent);
	free(c);
}

void http_client_response_free(struct http_client_response *resp)
{
	if (!resp)
		return;
	free(resp->body);
	memset(resp, 0, sizeof(*resp));
	resp->retry_after_s = -1;
	resp->wire_minor = -1;
}

int http_client_parse_retry_after(const char *value, int64_t now, int64_t *out_s)
{
	char buf[128];
	size_t n;
	int64_t v = 0;

	while (*value == ' ' || *value == '\t')
		value++;
	n = strlen(value);
	while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t' || value[n - 1] == '\r' ||
			 value[n - 1] == '\n'))
		n--;
	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, value, n);
	buf[n] = '\0';
	if (isdigit((unsigned char)buf[0])) {
		for (size_t i = 0; i < n; i++) {
			if (!isdigit((unsigned char)buf[i]))
				return -EINVAL;
			if (v < RETRY_AFTER_MAX_S)
				v = v * 10 + (buf[i] - '0');
		}
		*out_s = v < RETRY_AFTER_MAX_S ? v : RETRY_AFTER_MAX_S;
		return 0;
	}
	time_t when = curl_getdate(buf, NULL);
	if (when == (time_t)-1)
		return -EINVAL;
	v = (int64_t)when - now;
	*out_s = v < 0 ? 0 : v < RETRY_AFTER_MAX_S ? v : RETRY_AFTER_MAX_S;
	return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct transfer *t = arg;
	struct http_client_response *resp = t->resp;
	size_t len = size * nmemb;
	size_t keep = len;

	if (resp->body_len + keep > t->max) {
		keep = t->max - resp->body_len;
		resp->body_truncated = true; /* the rest is read and discarded */
	}
	if (keep == 0)
		return len;
	if (resp->body_len + keep + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 4096;
		while (cap < resp->body_len + keep + 1)
			cap *= 2;
		if (cap > t->max + 1)
			cap = t->max + 1;
		uint8_t *grown = realloc(resp->body, cap);
		if (!grown) {
			t->nomem = true;
			return 0; /* aborts the transfer */
		}
		resp->body = grown;
		t->cap = cap;
	}
	memcpy(resp->body + resp->body_len, data, keep);
	resp->body_len += keep;
	resp->body[resp->body_len] = '\0';
	return len;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct transfer *t = arg;
	size_t len = size * nmemb;
	static const char name[] = "retry-after:", minor_name[] = SYSOM_WIRE_MINOR_HEADER ":";
	char value[128];

	if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
		/* A new response (after 1xx): forget what an earlier one said. */
		t->resp->retry_after_s = -1;
		t->resp->wire_minor = -1;
		return len;
	}
	if (len > sizeof(minor_name) - 1 &&
	    strncasecmp(data, minor_name, sizeof(minor_name) - 1) == 0) {
		const char *p = data + sizeof(minor_name) - 1, *end = data + len;
		int32_t v = 0, digits = 0;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		for (; p < end && *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
			v = v * 10 + (*p - '0');
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
			p++;
		t->resp->wire_minor = digits && p == end && v <= 65535 ? v : -1;
		return len;
	}
	if (len > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
		size_t vlen = len - (sizeof(name) - 1);
		int64_t secs;
		if (vlen < sizeof(value)) {
			memcpy(value, data + sizeof(name) - 1, vlen);
			value[vlen] = '\0';
			if (http_client_parse_retry_after(value, (int64_t)time(NULL), &secs) == 0)
				t->resp->retry_after_s = secs;
		}
	}
	return len;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct transfer *t = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return t->req->should_abort(t->req->abort_ctx) ? 1 : 0;
}

static int map_curl_error(CURLcode rc, const struct transfer *t)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
		return -ECONNRESET;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
		return -EPROTO;
	case CURLE_ABORTED_BY_CALLBACK:
		return -ECANCELED;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_WRITE_ERROR:
		return t->nomem ? -ENOMEM : -EIO;
	default:
		return -EIO;
	}
}

static bool method_known(const char *m)
{
	static const char *const known[] = { "GET", "POST", "PUT", "DELETE", "HEAD", "PATCH" };

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(m, known[i]) == 0)
			return true;
	return false;
}

static bool request_valid(const struct http_client_request *req)
{
	if (!req->method || !method_known(req->method) || !req->path || req->path[0] != '/' ||
	    !header_safe(req->path, HTTP_CLIENT_URL_MAX) || strchr(req->path, ' '))
		return false;
	if ((req->content_type && !header_safe(req->content_type, 256)) ||
	    (req->content_encoding && !header_safe(req->content_encoding, 256)))
		return false;
	if (req->header_count > HTTP_CLIENT_HEADERS_MAX || (req->header_count && !req->headers))
		return false;
	for (size_t i = 0; i < req->header_count; i++)
		if (!req->headers[i] || !strchr(req->headers[i], ':') ||
		    !header_safe(req->headers[i], HTTP_CLIENT_HEADER_LINE_MAX))
			return false;
	return req->body || req->body_len == 0;
}

/* Appends "Name: value" to the list; false when out of memory. */
static bool add_header(struct curl_slist **list, const char *name, const char *value)
{
	char line[HTTP_CLIENT_HEADER_LINE_MAX];
	struct curl_slist *grown;

	if (value)
		snprintf(line, sizeof(line), "%s: %s", name, value);
	else
		snprintf(line, sizeof(line), "%s", name);
	grown = curl_slist_append(*list, line);
	if (!grown)
		return false;
	*list = grown;
	return true;
}

int http_client_request(struct http_client *c, const struct http_client_request *req,
			struct http_client_response *resp)
{
	struct transfer t = { .req = req, .resp = resp };
	struct curl_slist *headers = NULL;
	char url[HTTP_CLIENT_URL_MAX];
	CURL *h = c->curl;
	CURLcode rc;
	long status = 0;
	int err;

	memset(resp, 0, sizeof(*resp));
	resp->retry_after_s = -1;
	resp->wire_minor = -1;
	if (!request_valid(req)) {
		snprintf(resp->error, sizeof(resp->error), "malformed request");
		return -EINVAL;
	}
	if ((size_t)snprintf(url, sizeof(url), "%s%s", c->base_url, req->path) >= sizeof(url)) {
		snprintf(resp->error, sizeof(resp->error), "URL too long");
		return -EINVAL;
	}
	t.max = c->max_response;

	/* Larger bodies ask first (the server refuses a busy or unauthorized upload from its
	 * head, before the body travels); "Expect:" stops curl's own choice for the others. An
	 * empty "Content-Type:" stops curl adding a form type to bodies without one. */
	bool has_body = strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0;
	resp->expect_continue = has_body && req->body_len >= HTTP_CLIENT_EXPECT_MIN_BYTES;
	err = -ENOMEM;
	if (!add_header(&headers, resp->expect_continue ? "Expect: 100-continue" : "Expect:",
			NULL) ||
	    (c->auth_header && !add_header(&headers, c->auth_header, NULL)) ||
	    !add_header(&headers, req->content_type ? "Content-Type" : "Content-Type:",
			req->content_type) ||
	    (req->content_encoding &&
	     !add_header(&headers, "Content-Encoding", req->content_encoding)))
		goto cleanup;
	for (size_t i = 0; i < req->header_count; i++)
		if (!add_header(&headers, req->headers[i], NULL))
			goto cleanup;

	/* Reset keeps the live connection; every option is set again below. */
	curl_easy_reset(h);
	c->errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
			 (long)(req->timeout_ms ? req->timeout_ms : c->timeout_ms));
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	if (req->should_abort) {
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
	}
	if (strcmp(req->method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	} else if (strcmp(req->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else {
		/* POST semantics send the body; other methods rename the request line. */
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body_len ? req->body : "");
		if (strcmp(req->method, "POST") != 0)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
		if (resp->expect_continue)
			curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS,
					 (long)HTTP_CLIENT_EXPECT_TIMEOUT_MS);
	}

	rc = curl_easy_perform(h);
	curl_off_t uploaded = 0;
	if (curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &uploaded) == CURLE_OK && uploaded > 0)
		resp->body_bytes_sent = (uint64_t)uploaded;
	if (rc != CURLE_OK) {
		err = map_curl_error(rc, &t);
		snprintf(resp->error, sizeof(resp->error), "%s",
			 c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
		goto cleanup;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (status < 100 || status > 599) {
		err = -EPROTO;
		snprintf(resp->error, sizeof(resp->error), "invalid HTTP status %ld", status);
		goto cleanup;
	}
	resp->status = (int)status;
	err = resp->status;
cleanup:
	/* The handle keeps pointers to the header list and the request: drop them. */
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
	curl_slist_free_all(headers);
	if (err == -ENOMEM && !resp->error[0])
		snprintf(resp->error, sizeof(resp->error), "out of memory");
	return err;
}
