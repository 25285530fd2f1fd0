/* SPDX-License-Identifier: Apache-2.0 */
/* UTF-8 sanitising, JSON responses and RFC 3339 times for the HTTP handlers. */
#include "server/http/render.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 when the first byte is bad. */
static size_t utf8_sequence(const unsigned char *s, size_t left)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	/* The second byte's range is narrower after E0, ED, F0 and F4 (Unicode table 3-7). */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (left < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

void render_utf8_append(struct byte_buf *out, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t start = 0, i = 0;

	while (i < len) {
		size_t n = utf8_sequence(p + i, len - i);
		if (n) {
			i += n;
			continue;
		}
		byte_buf_append(out, p + start, i - start);
		byte_buf_append(out, "\xef\xbf\xbd", 3);
		start = ++i;
	}
	byte_buf_append(out, p + start, len - start);
}

json_t *render_json_string(const char *s)
{
	struct byte_buf clean = { 0 };
	json_t *str;

	if (!s)
		s = "";
	str = json_string(s);
	if (str)
		return str;
	/* jansson refuses invalid UTF-8: replace the bad bytes and try again. */
	render_utf8_append(&clean, s, strlen(s));
	if (byte_buf_error(&clean)) {
		byte_buf_free(&clean);
		return NULL;
	}
	str = json_stringn(clean.len ? (const char *)clean.data : "", clean.len);
	byte_buf_free(&clean);
	return str;
}

void render_json_respond(struct http_response *resp, int status, json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;

	json_decref(doc);
	if (!text) {
		http_response_error(resp, 500, "out of memory building the response");
		return;
	}
	resp->status = status;
	snprintf(resp->content_type, sizeof(resp->content_type), "application/json");
	resp->body.len = 0;
	byte_buf_append(&resp->body, text, strlen(text));
	byte_buf_append(&resp->body, "\n", 1);
	free(text);
	if (byte_buf_error(&resp->body))
		http_response_error(resp, 500, "out of memory building the response");
}

void render_time_rfc3339(int64_t ns, char *out, size_t outlen)
{
	int64_t sec = ns / 1000000000, ms = (ns % 1000000000) / 1000000;
	time_t t;
	struct tm tm;
	char date[40];

	if (ms < 0) {
		ms += 1000;
		sec--;
	}
	t = (time_t)sec;
	if (!gmtime_r(&t, &tm) || !strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(date, sizeof(date), "1970-01-01T00:00:00");
	snprintf(out, outlen, "%s.%03dZ", date, (int)ms);
}

json_t *render_json_time(int64_t ns)
{
	char text[48];

	render_time_rfc3339(ns, text, sizeof(text));
	return json_string(text);
}

json_t *render_json_key(uint64_t key)
{
	char text[17];

	snprintf(text, sizeof(text), "%016" PRIx64, key);
	return json_string(text);
}
