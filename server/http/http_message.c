/* SPDX-License-Identifier: Apache-2.0 */
/* Request accessors and response builders shared by the transport and the handlers. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/bytes.h"
#include "server/http/http.h"

void http_date_format(int64_t unix_seconds, char *out, size_t outlen)
{
	static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
	static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	time_t t = (time_t)unix_seconds;
	struct tm tm;

	/* Formatted by hand: strftime's %a and %b follow the locale, HTTP dates do not. */
	if (!gmtime_r(&t, &tm) || tm.tm_wday < 0 || tm.tm_wday > 6 || tm.tm_mon < 0 ||
	    tm.tm_mon > 11 || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 0) {
		snprintf(out, outlen, "Thu, 01 Jan 1970 00:00:00 GMT");
		return;
	}
	snprintf(out, outlen, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
		 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

const char *http_request_header(const struct http_request *req, const char *lower_name)
{
	for (size_t i = 0; i < req->header_count; i++)
		if (strcmp(req->headers[i].name, lower_name) == 0)
			return req->headers[i].value;
	return NULL;
}

int http_percent_decode(const char *s, size_t len, bool plus_is_space, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '%') {
			if (i + 2 >= len)
				return -EINVAL;
			int hi = sysom_hex_digit(s[i + 1]), lo = sysom_hex_digit(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '+' && plus_is_space) {
			c = ' ';
		}
		if (c == '\0')
			return -EINVAL;
		if (o + 1 >= outlen)
			return -E2BIG;
		out[o++] = c;
	}
	if (outlen == 0)
		return -E2BIG;
	out[o] = '\0';
	return (int)o;
}

int http_query_param(const struct http_request *req, const char *name, char *out, size_t outlen)
{
	const char *q = req->query ? req->query : "";
	size_t nlen = strlen(name);

	while (*q) {
		const char *amp = strchr(q, '&');
		size_t plen = amp ? (size_t)(amp - q) : strlen(q);
		const char *eq = memchr(q, '=', plen);
		size_t klen = eq ? (size_t)(eq - q) : plen;

		if (klen == nlen && memcmp(q, name, nlen) == 0) {
			if (!eq)
				return http_percent_decode("", 0, true, out, outlen);
			return http_percent_decode(eq + 1, plen - klen - 1, true, out, outlen);
		}
		q += plen;
		if (*q == '&')
			q++;
	}
	return -ENOENT;
}

void http_response_header(struct http_response *resp, const char *name, const char *value)
{
	if (resp->extra_header_count >= HTTP_MAX_EXTRA_HEADERS)
		return;
	size_t i = resp->extra_header_count++;
	snprintf(resp->extra_headers[i].name, sizeof(resp->extra_headers[i].name), "%s", name);
	snprintf(resp->extra_headers[i].value, sizeof(resp->extra_headers[i].value), "%s", value);
}

/* A buffer body replaces a file body: close the file. */
static void file_body_drop(struct http_response *resp)
{
	if (!resp->has_body_fd)
		return;
	close(resp->body_fd);
	resp->has_body_fd = false;
	resp->body_fd = -1;
	resp->body_fd_offset = resp->body_fd_length = 0;
}

void http_response_text(struct http_response *resp, int status, const char *content_type,
			const char *text, size_t len)
{
	resp->status = status;
	snprintf(resp->content_type, sizeof(resp->content_type), "%s", content_type);
	file_body_drop(resp);
	resp->body.len = 0;
	resp->body.error = 0; /* a fresh body: an earlier failed append no longer matters */
	byte_buf_append(&resp->body, text, len);
}

void http_response_file(struct http_response *resp, int status, const char *content_type, int fd,
			uint64_t offset, uint64_t length)
{
	if (resp->has_body_fd && resp->body_fd != fd)
		close(resp->body_fd);
	byte_buf_free(&resp->body);
	resp->status = status;
	snprintf(resp->content_type, sizeof(resp->content_type), "%s", content_type);
	resp->has_body_fd = true;
	resp->body_fd = fd;
	resp->body_fd_offset = offset;
	resp->body_fd_length = length;
}

void http_response_release(struct http_response *resp)
{
	if (!resp)
		return;
	byte_buf_free(&resp->body);
	file_body_drop(resp);
}

void http_response_error(struct http_response *resp, int status, const char *fmt, ...)
{
	char message[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	/* jansson escapes the message; invalid UTF-8 (from a peer's bytes) is replaced. */
	json_t *obj = json_object();
	json_t *str = json_string(message);
	if (!str)
		str = json_string("invalid request (message not valid UTF-8)");
	json_object_set_new(obj, "error", str);
	char *dump = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	resp->status = status;
	snprintf(resp->content_type, sizeof(resp->content_type), "application/json");
	file_body_drop(resp);
	resp->body.len = 0;
	resp->body.error = 0;
	if (dump) {
		byte_buf_append(&resp->body, dump, strlen(dump));
		byte_buf_append(&resp->body, "\n", 1);
		free(dump);
	}
}
