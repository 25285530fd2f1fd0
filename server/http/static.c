/* SPDX-License-Identifier: Apache-2.0 */
/* Static files of the web UI below one directory: safe names, content types, revalidation. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "server/http/static.h"

struct http_static {
	int dirfd;
	uint64_t max_file;
};

int http_static_open(const char *dir, uint64_t max_file, struct http_static **out, char *err,
		     size_t errlen)
{
	struct http_static *st = NULL;
	int fd, rc = 0;

	*out = NULL;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open the UI directory %s: %s", dir, strerror(errno));
		goto cleanup;
	}
	if (!(st = calloc(1, sizeof(*st)))) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto cleanup;
	}
	st->dirfd = fd;
	st->max_file = max_file ? max_file : HTTP_STATIC_DEFAULT_MAX_FILE;
	*out = st;
	fd = -1;
cleanup:
	if (fd >= 0)
		close(fd);
	return rc;
}

void http_static_free(struct http_static *st)
{
	if (!st)
		return;
	close(st->dirfd);
	free(st);
}

static bool name_byte_ok(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

int http_static_name(const char *path, char *out, size_t outlen)
{
	static const char prefix[] = HTTP_STATIC_PREFIX;
	static const char index_name[] = "index.html";
	const char *rel, *seg;
	size_t len;

	if (strncmp(path, prefix, sizeof(prefix) - 1) != 0)
		return -ENOENT;
	rel = path + sizeof(prefix) - 1;
	len = strlen(rel);
	if (len > HTTP_STATIC_MAX_NAME)
		return -ENAMETOOLONG;
	/* Every segment but an empty last one (a directory: its index) is a safe name. */
	for (seg = rel; *seg;) {
		size_t n = strcspn(seg, "/");
		if (n == 0 || seg[0] == '.')
			return -EINVAL;
		for (size_t i = 0; i < n; i++)
			if (!name_byte_ok((unsigned char)seg[i]))
				return -EINVAL;
		seg += n;
		if (*seg == '/')
			seg++;
	}
	if (len == 0 || rel[len - 1] == '/') {
		if (len + sizeof(index_name) > outlen || len + sizeof(index_name) - 1 > HTTP_STATIC_MAX_NAME)
			return -ENAMETOOLONG;
		memcpy(out, rel, len);
		memcpy(out + len, index_name, sizeof(index_name));
		return 0;
	}
	if (len + 1 > outlen)
		return -ENAMETOOLONG;
	memcpy(out, rel, len + 1);
	return 0;
}

const char *http_static_content_type(const char *name)
{
	static const struct {
		const char *ext, *type;
	} types[] = {
		{ ".html", "text/html; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".mjs", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".json", "application/json" },
		{ ".map", "application/json" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".ico", "image/x-icon" },
		{ ".txt", "text/plain; charset=utf-8" },
		{ ".woff2", "font/woff2" },
	};
	const char *dot = strrchr(name, '.');
	const char *slash = strrchr(name, '/');

	if (!dot || (slash && dot < slash))
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return NULL;
}

/* Opens `name` below the directory without following any symbolic link or leaving it
 * (openat2 RESOLVE_BENEATH; the name check already excludes ".." on older kernels). */
static int open_beneath(int dirfd, const char *name)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	return fd < 0 ? -errno : (int)fd;
}

/* The UI's own security headers: no script or style from anywhere but the server, no
 * framing, no referrer (the token is never in a URL, but keep paths private anyway). */
static void security_headers(struct http_response *resp)
{
	http_response_header(resp, "X-Content-Type-Options", "nosniff");
	http_response_header(resp, "Content-Security-Policy",
			     "default-src 'self'; style-src 'self' 'unsafe-inline'; "
			     "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
			     "frame-ancestors 'none'");
	http_response_header(resp, "Referrer-Policy", "no-referrer");
}

void http_static_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct http_static *st = ctx;
	char name[HTTP_STATIC_MAX_NAME + 1], etag[64], date[32];
	const char *type, *inm;
	struct stat sb;
	int fd = -1, rc;

	if (!st) {
		http_response_error(resp, 404, "the web UI is not installed on this server "
					       "(sysom-server --ui-dir DIR)");
		goto cleanup;
	}
	rc = http_static_name(req->path, name, sizeof(name));
	if (rc) {
		http_response_error(resp, 404, "no such file of the web UI (%s)",
				    rc == -ENAMETOOLONG ? "name too long" : "invalid name");
		goto cleanup;
	}
	if (!(type = http_static_content_type(name))) {
		http_response_error(resp, 404, "no such file of the web UI (type not served)");
		goto cleanup;
	}
	fd = open_beneath(st->dirfd, name);
	if (fd < 0 && fd != -ENOENT && fd != -ENOTDIR && fd != -ELOOP && fd != -EXDEV) {
		/* Not a name problem: say why (permissions, descriptors) to whoever looks. */
		http_response_error(resp, 500, "cannot open web UI file %s: %s", name, strerror(-fd));
		goto cleanup;
	}
	if (fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		http_response_error(resp, 404, "no such file of the web UI");
		goto cleanup;
	}
	if ((uint64_t)sb.st_size > st->max_file) {
		http_response_error(resp, 500, "web UI file %s is %" PRIu64 " bytes, over the size "
				    "limit of %" PRIu64 " (--max-ui-file)", name, (uint64_t)sb.st_size,
				    st->max_file);
		goto cleanup;
	}
	security_headers(resp);
	/* Assets are not content-hashed: always revalidate (a 304 costs a round trip, a stale
	 * script after an upgrade costs a broken page); vendored libraries change only with an
	 * upgrade, so an hour is fine for them. */
	http_response_header(resp, "Cache-Control", strncmp(name, "vendor/", 7) == 0
							     ? "public, max-age=3600"
							     : "no-cache");
	snprintf(etag, sizeof(etag), "\"%" PRIx64 "-%" PRIx64 "-%lx\"", (uint64_t)sb.st_size,
		 (uint64_t)sb.st_mtim.tv_sec, (unsigned long)sb.st_mtim.tv_nsec);
	http_response_header(resp, "ETag", etag);
	http_date_format(sb.st_mtim.tv_sec, date, sizeof(date));
	http_response_header(resp, "Last-Modified", date);
	inm = http_request_header(req, "if-none-match");
	if (inm && (strcmp(inm, etag) == 0 || strcmp(inm, "*") == 0)) {
		http_response_text(resp, 304, type, "", 0);
		goto cleanup;
	}
	http_response_file(resp, 200, type, fd, 0, (uint64_t)sb.st_size);
	fd = -1; /* the response owns it */
cleanup:
	if (fd >= 0)
		close(fd);
}

void http_static_redirect(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	http_response_header(resp, "Location", HTTP_STATIC_PREFIX);
	http_response_header(resp, "Cache-Control", "no-cache");
	http_response_text(resp, 302, "text/plain; charset=utf-8", "the web UI is at /ui/\n", 22);
}
