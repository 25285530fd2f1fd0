/* SPDX-License-Identifier: Apache-2.0 */
/* The debuginfod read side: /buildid/<hex>/{executable,debuginfo} streamed from the symbol
 * repository, so that elfutils clients (debuginfod-find, gdb, perf) work against the server. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "server/symbols/symbols.h"
#include "server/symbols/symbols_internal.h"

/* Opens a repository file for reading; fd or -errno. */
static int repo_open(struct symbols *s, const struct sysom_build_id *id, enum symrepo_kind kind,
		     struct stat *sb)
{
	char path[PATH_MAX];
	int fd, rc;

	if ((rc = symrepo_path(s->repo, id, kind, path, sizeof(path))))
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, sb) != 0)
		rc = -errno;
	else if (!S_ISREG(sb->st_mode))
		rc = -EINVAL;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Answers with the file: octet-stream, X-DEBUGINFOD-SIZE, Last-Modified. */
static void respond_file(struct symbols *s, struct http_response *resp, int fd,
			 const struct stat *sb)
{
	char size[24], date[40];

	snprintf(size, sizeof(size), "%" PRIu64, (uint64_t)sb->st_size);
	http_date_format((int64_t)sb->st_mtim.tv_sec, date, sizeof(date));
	http_response_file(resp, 200, "application/octet-stream", fd, 0, (uint64_t)sb->st_size);
	http_response_header(resp, "X-DEBUGINFOD-SIZE", size);
	http_response_header(resp, "Last-Modified", date);
	http_response_header(resp, "Cache-Control", "public, max-age=86400, immutable");
	metrics_counter_add(&s->metrics->debuginfod_bytes, (uint64_t)sb->st_size);
}

void symbols_debuginfod_get(void *ctx, const struct http_request *req,
			    struct http_response *resp)
{
	struct symbols *s = ctx;
	const char *rest = req->path + strlen(DEBUGINFOD_PREFIX);
	const char *slash = strchr(rest, '/');
	enum debuginfod_type type = DEBUGINFOD_OTHER;
	enum debuginfod_result result = DEBUGINFOD_NOT_FOUND;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	struct sysom_build_id id;
	struct stat sb;
	int fd = -ENOENT;

	/* With --debuginfod-auth the files are read like the query API: read scope. */
	if (s->opts.debuginfod_auth && !auth_request_allow(s->auth, req, AUTH_SCOPE_READ, resp)) {
		result = DEBUGINFOD_ERROR;
		goto cleanup;
	}
	if (!slash || (size_t)(slash - rest) >= sizeof(hex)) {
		http_response_error(resp, 404, "want /buildid/BUILDID/executable or .../debuginfo");
		goto cleanup;
	}
	memcpy(hex, rest, (size_t)(slash - rest));
	hex[slash - rest] = '\0';
	if (strcmp(slash + 1, "executable") == 0)
		type = DEBUGINFOD_EXECUTABLE;
	else if (strcmp(slash + 1, "debuginfo") == 0)
		type = DEBUGINFOD_DEBUGINFO;
	if (sysom_build_id_parse_hex(hex, SYSOM_OBJECT_ELF, &id)) {
		http_response_error(resp, 404, "invalid build ID (want 6..128 hex digits, even count)");
		goto cleanup;
	}
	/* Sources and sections are not kept; debuginfod clients fall back to the files. */
	if (type == DEBUGINFOD_OTHER) {
		http_response_error(resp, 404, "only executable and debuginfo are served");
		goto cleanup;
	}
	if (type == DEBUGINFOD_EXECUTABLE) {
		fd = repo_open(s, &id, SYMREPO_EXECUTABLE, &sb);
	} else {
		fd = repo_open(s, &id, SYMREPO_DEBUGINFO, &sb);
		/* An executable that was not stripped is its own debug file. */
		if (fd == -ENOENT && symbols_executable_has_dwarf(s, &id))
			fd = repo_open(s, &id, SYMREPO_EXECUTABLE, &sb);
	}
	if (fd == -ENOENT) {
		http_response_error(resp, 404, "no %s for build ID %s",
				    type == DEBUGINFOD_EXECUTABLE ? "executable" : "debuginfo", hex);
		goto cleanup;
	}
	if (fd < 0) {
		http_response_error(resp, 500, "cannot open the file: %s", sysom_strerror(fd));
		result = DEBUGINFOD_ERROR;
		goto cleanup;
	}
	respond_file(s, resp, fd, &sb);
	result = DEBUGINFOD_FOUND;
cleanup:
	metrics_counter_add(&s->metrics->debuginfod_requests[type][result], 1);
}
