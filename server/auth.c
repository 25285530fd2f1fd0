/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer tokens: constant-time check, run-time replacement, token files. */
#include "server/auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

struct auth {
	pthread_rwlock_t lock;
	char *token; /* NULL: authentication off */
	size_t token_len;
};

struct auth *auth_new(void)
{
	struct auth *a = calloc(1, sizeof(*a));

	if (a && pthread_rwlock_init(&a->lock, NULL)) {
		free(a);
		return NULL;
	}
	return a;
}

void auth_free(struct auth *a)
{
	if (!a)
		return;
	pthread_rwlock_destroy(&a->lock);
	free(a->token);
	free(a);
}

int auth_token_set(struct auth *a, const char *token)
{
	char *copy = NULL;

	if (token && *token && !(copy = strdup(token)))
		return -ENOMEM;
	pthread_rwlock_wrlock(&a->lock);
	free(a->token);
	a->token = copy;
	a->token_len = copy ? strlen(copy) : 0;
	pthread_rwlock_unlock(&a->lock);
	return 0;
}

bool auth_enabled(struct auth *a)
{
	bool on;

	pthread_rwlock_rdlock(&a->lock);
	on = a->token != NULL;
	pthread_rwlock_unlock(&a->lock);
	return on;
}

/* Compares without an early exit: the time depends on the lengths, not on the contents. */
static bool equal_constant_time(const char *given, size_t given_len, const char *want,
				size_t want_len)
{
	unsigned diff = given_len != want_len;

	for (size_t i = 0; i < want_len; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < given_len ? given[i] : 0);
	return diff == 0;
}

bool auth_request_check(struct auth *a, const struct http_request *req)
{
	const char *header = http_request_header(req, "authorization");
	bool ok;

	pthread_rwlock_rdlock(&a->lock);
	if (!a->token) {
		ok = true;
	} else if (!header || strncasecmp(header, "Bearer ", 7) != 0) {
		ok = false;
	} else {
		const char *given = header + 7;
		while (*given == ' ')
			given++;
		ok = equal_constant_time(given, strlen(given), a->token, a->token_len);
	}
	pthread_rwlock_unlock(&a->lock);
	return ok;
}

void auth_respond_unauthorized(struct http_response *resp)
{
	http_response_error(resp, 401, "missing or invalid bearer token");
	http_response_header(resp, "WWW-Authenticate", "Bearer realm=\"sysom\"");
}

int auth_token_file_read(const char *path, char **token, bool *world_readable, char *err,
			 size_t errlen)
{
	char buf[AUTH_TOKEN_MAX + 2];
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
	if (!end && len > AUTH_TOKEN_MAX) {
		snprintf(err, errlen, "token file %s: first line longer than %d bytes", path,
			 AUTH_TOKEN_MAX);
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
	/* The agents send it in a header: printable, no spaces (as the agent requires). */
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
	*world_readable = (st.st_mode & S_IROTH) != 0;
cleanup:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return rc;
}
