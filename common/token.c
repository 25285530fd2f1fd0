/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer token files, read the same way by the agent, the server and sysomctl. */
#include "common/token.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

int sysom_token_file_read(const char *path, char **token, bool *world_readable, char *err,
			  size_t errlen)
{
	char buf[SYSOM_TOKEN_MAX + 2];
	struct stat st;
	size_t len = 0;
	char *start, *end, *copy;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open token file %s: %s", path, sysom_strerror(rc));
		return rc;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "token file %s is not a regular file", path);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	while (len < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot read token file %s: %s", path, sysom_strerror(rc));
			goto cleanup;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	end = memchr(buf, '\n', len);
	if (!end && len > SYSOM_TOKEN_MAX) {
		snprintf(err, errlen, "token file %s: first line longer than %d bytes", path,
			 SYSOM_TOKEN_MAX);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	if (!end)
		end = buf + len;
	start = buf;
	while (start < end && isspace((unsigned char)*start))
		start++;
	while (end > start && isspace((unsigned char)end[-1]))
		end--;
	if (end == start) {
		snprintf(err, errlen, "token file %s: the first line is empty", path);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	/* It travels in an HTTP header: printable, no spaces. */
	for (const char *p = start; p < end; p++) {
		if (!isgraph((unsigned char)*p)) {
			snprintf(err, errlen, "token file %s: the token has spaces or unprintable bytes",
				 path);
			rc = -SYSOM_ECONFIG;
			goto cleanup;
		}
	}
	copy = strndup(start, (size_t)(end - start));
	if (!copy) {
		rc = -ENOMEM;
		goto cleanup;
	}
	*token = copy;
	if (world_readable)
		*world_readable = (st.st_mode & S_IROTH) != 0;
cleanup:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return rc;
}
