/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer tokens: constant-time check, run-time replacement, token files. */
#include "server/http/auth.h"

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
	/* The transport keeps room for connections whose requests pass (with no token: all). */
	if (ok)
		http_request_mark_authenticated(req);
	return ok;
}

void auth_respond_unauthorized(struct http_response *resp)
{
	http_response_error(resp, 401, "missing or invalid bearer token");
	http_response_header(resp, "WWW-Authenticate", "Bearer realm=\"sysom\"");
}

