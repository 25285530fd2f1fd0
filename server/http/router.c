/* SPDX-License-Identifier: Apache-2.0 */
/* Route matching: exact paths, "{name}" segment patterns and prefixes; the first route wins. */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "server/http/http.h"

bool http_path_match(const char *pattern, const char *path)
{
	const char *p = pattern, *s = path;

	while (*p) {
		const char *close = *p == '{' ? strchr(p, '}') : NULL;

		if (close && !memchr(p, '/', (size_t)(close - p))) {
			size_t seg = strcspn(s, "/");
			if (seg == 0)
				return false; /* a segment parameter is never empty */
			s += seg;
			p = close + 1;
			continue;
		}
		if (*p++ != *s++)
			return false;
	}
	return *s == '\0';
}

bool http_route_path_matches(const struct http_route *r, const char *path)
{
	if (r->prefix)
		return strncmp(path, r->path, strlen(r->path)) == 0;
	if (strchr(r->path, '{'))
		return http_path_match(r->path, path);
	return strcmp(path, r->path) == 0;
}

const struct http_route *http_route_find(const struct http_route *routes, size_t nroutes,
					 const char *method, const char *path, bool *path_known)
{
	const struct http_route *get_route = NULL;
	bool head = strcmp(method, "HEAD") == 0;

	*path_known = false;
	for (size_t i = 0; i < nroutes; i++) {
		const struct http_route *r = &routes[i];
		if (!http_route_path_matches(r, path))
			continue;
		*path_known = true;
		if (strcmp(r->method, method) == 0)
			return r;
		if (head && !get_route && strcmp(r->method, "GET") == 0)
			get_route = r;
	}
	return get_route;
}
