/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer-token authentication of API requests; the token can be replaced at run time. */
#ifndef SYSOM_SERVER_AUTH_H
#define SYSOM_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "server/http.h"

#define AUTH_TOKEN_MAX 4096

struct auth;

/* Creates an authenticator without a token (every request allowed); NULL when out of memory. */
struct auth *auth_new(void);

/* Frees it; accepts NULL. */
void auth_free(struct auth *a);

/*
 * Sets the token requests must present as "Authorization: Bearer TOKEN" (copied); NULL or ""
 * removes it. Thread-safe against concurrent auth_request_check. Returns 0 or -ENOMEM.
 */
int auth_token_set(struct auth *a, const char *token);

/* True when a token is configured. */
bool auth_enabled(struct auth *a);

/*
 * True when no token is configured or the request carries it. The comparison takes the same
 * time wherever the presented token first differs.
 */
bool auth_request_check(struct auth *a, const struct http_request *req);

/* Answers 401 with "WWW-Authenticate: Bearer realm=\"sysom\"" and a JSON error. */
void auth_respond_unauthorized(struct http_response *resp);

/*
 * Reads a token file: the first line with surrounding whitespace removed, which must be
 * printable ASCII without spaces (as the agent requires). Writes a heap copy to *token (caller
 * frees) and whether the file is readable by every user to *world_readable. Returns 0, -errno,
 * or -SYSOM_ECONFIG (empty, unprintable, not a regular file, longer than AUTH_TOKEN_MAX), with
 * a sentence in `err`.
 */
int auth_token_file_read(const char *path, char **token, bool *world_readable, char *err,
			 size_t errlen);

#endif
