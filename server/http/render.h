/* SPDX-License-Identifier: Apache-2.0 */
/* Output helpers for handlers: UTF-8 sanitising, JSON responses and times. */
#ifndef SYSOM_SERVER_HTTP_RENDER_H
#define SYSOM_SERVER_HTTP_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/bytes.h"
#include "server/http/http.h"

/*
 * Appends `len` bytes of `s` to `out` as valid UTF-8 (RFC 3629): every byte that does not
 * belong to a well-formed sequence (stray continuation bytes, overlong forms, surrogates,
 * code points above U+10FFFF, truncated sequences) becomes U+FFFD.
 */
void render_utf8_append(struct byte_buf *out, const char *s, size_t len);

/* A JSON string of `s` (NULL is ""), sanitised as above; NULL only when out of memory. */
json_t *render_json_string(const char *s);

/*
 * Sets status, content type application/json and the body to `doc` (compact, one line,
 * newline-terminated). Steals the reference to `doc`. Answers 500 when `doc` is NULL or the
 * body cannot be built (out of memory).
 */
void render_json_respond(struct http_response *resp, int status, json_t *doc);

/* RFC 3339 UTC time with milliseconds ("2026-11-22T10:00:00.000Z") of ns since the epoch. */
void render_time_rfc3339(int64_t ns, char *out, size_t outlen);

/* The same as a JSON string; NULL only when out of memory. */
json_t *render_json_time(int64_t ns);

/* A 64-bit key (communicator key, commId) as 16 lower-case hex digits. */
json_t *render_json_key(uint64_t key);

#endif
