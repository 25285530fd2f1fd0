/* SPDX-License-Identifier: Apache-2.0 */
/* The ClickHouse backend's HTTP client: one statement per POST, keep-alive handles reused. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/log.h"
#include "server/store/clickhouse_internal.h"

int ch__code_errno(long code)
{
	switch (code) {
	case 159: /* TIMEOUT_EXCEEDED */
	case 202: /* TOO_MANY_SIMULTANEOUS_QUERIES */
	case 209: /* SOCKET_TIMEOUT */
	case 210: /* NETWORK_ERROR */
	case 252: /* TOO_MANY_PARTS */
	case 242: /* TABLE_IS_READ_ONLY */
		return -EBUSY;
	case 241: /* MEMORY_LIMIT_EXCEEDED */
		return -ENOMEM;
	case 243: /* NOT_ENOUGH_SPACE */
		return -ENOSPC;
	case 192: /* UNKNOWN_USER */
	case 193: /* WRONG_PASSWORD */
	case 194: /* REQUIRED_PASSWORD */
	case 195: /* IP_ADDRESS_NOT_ALLOWED */
	case 497: /* ACCESS_DENIED */
	case 516: /* AUTHENTICATION_FAILED */
		return -EACCES;
	default:
		return -EIO;
	}
}

void ch__quote(struct byte_buf *sql, const char *text)
{
	byte_buf_append(sql, "'", 1);
	for (const char *p = text; *p; p++) {
		if (*p == '\\' || *p == '\'')
			byte_buf_append(sql, "\\", 1);
		byte_buf_append(sql, p, 1);
	}
	byte_buf_append(sql, "'", 1);
}

struct answer {
	struct byte_buf *out;
	bool too_big;
};

static size_t answer_write(char *data, size_t size, size_t n, void *arg)
{
	struct answer *a = arg;

	if (!a->out)
		return size * n;
	if (a->out->len + size * n > CH_MAX_ANSWER) {
		a->too_big = true;
		return 0;
	}
	byte_buf_append(a->out, data, size * n);
	return byte_buf_error(a->out) ? 0 : size * n;
}

static CURL *handle_take(struct ch_store *s)
{
	CURL *h = NULL;

	pthread_mutex_lock(&s->lock);
	if (s->nhandles)
		h = s->handles[--s->nhandles];
	pthread_mutex_unlock(&s->lock);
	if (h)
		curl_easy_reset(h);
	else
		h = curl_easy_init();
	return h;
}

static void handle_give(struct ch_store *s, CURL *h)
{
	pthread_mutex_lock(&s->lock);
	if (s->nhandles < CH_HANDLES) {
		s->handles[s->nhandles++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	if (h)
		curl_easy_cleanup(h);
}

/* The exception code in ClickHouse's error text "Code: N, e.displayText() = ...". */
static long error_code(const struct byte_buf *body)
{
	const char *p = body->data ? strstr((const char *)body->data, "Code: ") : NULL;

	return p ? strtol(p + 6, NULL, 10) : 0;
}

static int curl_errno(CURLcode c)
{
	switch (c) {
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return -EBUSY;
	default:
		return -EIO;
	}
}

int ch__exec(struct ch_store *s, const char *sql, const void *data, size_t len,
	     struct byte_buf *out)
{
	return ch__exec_timeout(s, sql, data, len, out, s->timeout_ms);
}

int ch__exec_timeout(struct ch_store *s, const char *sql, const void *data, size_t len,
		     struct byte_buf *out, long timeout_ms)
{
	struct byte_buf url = { 0 }, errbody = { 0 };
	struct answer a = { .out = out ? out : &errbody };
	CURL *h = handle_take(s);
	char *q = NULL;
	long status = 0;
	CURLcode cc;
	int rc = 0;

	if (out)
		out->len = 0;
	if (!h) {
		rc = -ENOMEM;
		goto cleanup;
	}
	byte_buf_printf(&url, "%s?database=%s", s->url, s->database);
	/* A statement in the body may be longer than ClickHouse's 256 KiB default parse limit: a
	 * 10,000-rank job's reads list its processes and nodes (bounded by the store's own
	 * QUERY_MAX_* limits, never by what a peer sends). */
	if (!data)
		byte_buf_printf(&url, "&max_query_size=%u", CH_MAX_QUERY);
	/* ClickHouse goes on with a query whose client hung up: it stops at the same timeout, so
	 * that a dashboard's refreshes of a range too heavy to answer do not pile up queries. */
	byte_buf_printf(&url, "&max_execution_time=%ld", (timeout_ms + 999) / 1000);
	if (data) {
		if (!(q = curl_easy_escape(h, sql, 0))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		byte_buf_printf(&url, "&query=%s", q);
	}
	byte_buf_append(&url, "", 1);
	if ((rc = byte_buf_error(&url)))
		goto cleanup;
	curl_easy_setopt(h, CURLOPT_URL, (const char *)url.data);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 2000 ? timeout_ms : 2000L);
	curl_easy_setopt(h, CURLOPT_POST, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, data ? data : (const void *)sql);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(data ? len : strlen(sql)));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, answer_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
	if (s->user) {
		curl_easy_setopt(h, CURLOPT_USERNAME, s->user);
		curl_easy_setopt(h, CURLOPT_PASSWORD, s->password ? s->password : "");
	}
	cc = curl_easy_perform(h);
	if (cc != CURLE_OK) {
		rc = a.too_big ? -E2BIG : byte_buf_error(a.out) ? -ENOMEM : curl_errno(cc);
		log_debug("clickhouse: %s", curl_easy_strerror(cc));
		goto cleanup;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		byte_buf_append(a.out, "", 1);
		rc = byte_buf_error(a.out) ? -ENOMEM : ch__code_errno(error_code(a.out));
		if (!byte_buf_error(a.out))
			log_warn("clickhouse answered %ld: %.300s", status, (const char *)a.out->data);
		goto cleanup;
	}
	if (out) {
		byte_buf_append(out, "", 1);
		if ((rc = byte_buf_error(out)))
			goto cleanup;
		out->len--;
	}
cleanup:
	curl_free(q);
	if (h)
		handle_give(s, h);
	byte_buf_free(&url);
	byte_buf_free(&errbody);
	return rc;
}

int ch__execf(struct ch_store *s, struct byte_buf *out, const char *fmt, ...)
{
	struct byte_buf sql = { 0 };
	va_list ap;
	int n, rc;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if (!byte_buf_reserve(&sql, (size_t)n + 1))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf((char *)sql.data, (size_t)n + 1, fmt, ap);
	va_end(ap);
	rc = ch__exec(s, (const char *)sql.data, NULL, 0, out);
	byte_buf_free(&sql);
	return rc;
}
