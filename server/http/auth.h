/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer-token authentication of API requests; the token can be replaced at run time. */
#ifndef SYSOM_SERVER_HTTP_AUTH_H
#define SYSOM_SERVER_HTTP_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "server/http/http.h"


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


#endif
