/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Static files of the web UI (ui/ in the source tree, `--ui-dir`): GET /ui/... answers a
 * regular file below one directory, by a name of safe characters only (no "..", no hidden
 * files, no symbolic links), with a content type by extension, an ETag and Last-Modified for
 * revalidation, and a size limit; "/" and "/ui" redirect to "/ui/". docs/http-api.md, "Web UI".
 */
#ifndef SYSOM_SERVER_HTTP_STATIC_H
#define SYSOM_SERVER_HTTP_STATIC_H

#include <stddef.h>
#include <stdint.h>

#include "server/http/http.h"

#define HTTP_STATIC_PREFIX "/ui/"
#define HTTP_STATIC_MAX_NAME 255             /* bytes of a path below the directory */
#define HTTP_STATIC_DEFAULT_MAX_FILE (16u << 20) /* bytes of one asset */

struct http_static;

/*
 * Opens `dir` (kept open: a directory renamed away keeps being served until restart) and
 * serves files up to `max_file` bytes (0: HTTP_STATIC_DEFAULT_MAX_FILE). Returns 0 with *out
 * set, or a negative errno with a sentence in `err` (no such directory, not a directory).
 */
int http_static_open(const char *dir, uint64_t max_file, struct http_static **out, char *err,
		     size_t errlen);

/* Closes it; accepts NULL. */
void http_static_free(struct http_static *st);

/*
 * The relative file name GET `path` (decoded, starting with HTTP_STATIC_PREFIX) asks for, in
 * `out`: "index.html" for a path ending in '/'. -EINVAL when a segment is empty, ".", "..",
 * hidden (starts with '.') or has a byte outside [A-Za-z0-9._-]; -ENAMETOOLONG beyond
 * HTTP_STATIC_MAX_NAME; -ENOENT when `path` is not under the prefix.
 */
int http_static_name(const char *path, char *out, size_t outlen);

/* The Content-Type of a file name by its extension, NULL for an extension not served. */
const char *http_static_content_type(const char *name);

/*
 * GET and HEAD under HTTP_STATIC_PREFIX (ctx: struct http_static, or NULL when no UI is
 * installed: 404 saying so). 200 with the file, 304 when If-None-Match has its ETag, 404 for
 * a bad or missing name, 500 for a file over the size limit. No authentication: the assets
 * hold no data; the page asks for the token and sends it to the API.
 */
void http_static_get(void *ctx, const struct http_request *req, struct http_response *resp);

/* GET "/" and "/ui": 302 to "/ui/" (ctx unused). */
void http_static_redirect(void *ctx, const struct http_request *req, struct http_response *resp);

#endif
