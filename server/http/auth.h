/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bearer-token authentication and scoped authorization of requests: a shared token (every
 * scope) and a set of scoped credentials, both replaceable at run time.
 */
#ifndef SYSOM_SERVER_HTTP_AUTH_H
#define SYSOM_SERVER_HTTP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http/auth_credentials.h"
#include "server/http/http.h"

/* The name the shared token (--token-file) has in logs and answers: no credential's name. */
#define AUTH_SHARED_TOKEN_NAME "(token-file)"
/* Issued tokens: this prefix (for secret scanners) and 64 hex digits (256 random bits). */
#define AUTH_TOKEN_PREFIX "sysom_"
#define AUTH_TOKEN_LEN (sizeof(AUTH_TOKEN_PREFIX) - 1 + 64)

struct auth;

/* Creates an authenticator without a token (every request allowed); NULL when out of memory. */
struct auth *auth_new(void);

/* Frees it; accepts NULL. */
void auth_free(struct auth *a);

/*
 * Sets the shared token (--token-file: every scope, any node), kept as its SHA-256; NULL or
 * "" removes it. Thread-safe against requests being authorized. Returns 0, or -EEXIST (and
 * changes nothing) when a credential of the installed set has the same token.
 */
int auth_token_set(struct auth *a, const char *token);

/*
 * Installs a credentials set (NULL: none), taking ownership on success. The set it replaces
 * goes to *old when `old` is not NULL (the caller frees it, e.g. after logging what changed),
 * else is freed. Thread-safe against requests being authorized. Returns 0, or -EEXIST when
 * one of its credentials has the shared token (nothing changed; the caller keeps `set`).
 */
int auth_credentials_set(struct auth *a, struct auth_credentials *set,
			 struct auth_credentials **old);

/* True when a shared token or a credentials set (even an empty one) is installed. */
bool auth_enabled(struct auth *a);

/* Why authorization answered as it did. */
enum auth_result {
	AUTH_ALLOWED = 0,
	AUTH_UNAUTHENTICATED, /* no bearer token, or one no credential has: 401 */
	AUTH_FORBIDDEN,       /* a valid credential without the scope or the node: 403 */
};

/* Who a request authenticated as and what was decided (no secret in it). */
struct auth_decision {
	enum auth_result result;
	bool token_presented;                        /* an Authorization: Bearer header came */
	char name[AUTH_CREDENTIAL_NAME_MAX + 1];     /* credential name, AUTH_SHARED_TOKEN_NAME,
							or "" (authentication off or failed) */
	unsigned scopes;                             /* the credential's scopes: every scope
							when authentication is off */
	char message[200];                           /* for 401 and 403: why */
};

/*
 * Authenticates the request only: AUTH_ALLOWED with the credential's name and scopes (every
 * scope when authentication is off), or AUTH_UNAUTHENTICATED. Fills *d either way.
 */
enum auth_result auth_request_identify(struct auth *a, const struct http_request *req,
				       struct auth_decision *d);

/*
 * Authenticates the request and checks that its credential has one of `scopes` (admin always
 * qualifies) and, when `node_id` is not NULL, may write batches for that node. Fills *d.
 */
enum auth_result auth_request_authorize(struct auth *a, const struct http_request *req,
					unsigned scopes, const uint8_t *node_id,
					struct auth_decision *d);

/*
 * Answers a refusal: 401 with "WWW-Authenticate: Bearer realm=\"sysom\"", or 403; a JSON
 * error with d->message.
 */
void auth_respond(struct http_response *resp, const struct auth_decision *d);

/*
 * auth_request_authorize without a node, answering the refusal itself. True when allowed.
 */
bool auth_request_allow(struct auth *a, const struct http_request *req, unsigned scopes,
			struct http_response *resp);

/* Writes the SHA-256 of `len` bytes of `token` to `out`. Returns 0 or -ENOMEM. */
int auth_token_sha256(const char *token, size_t len, uint8_t out[AUTH_SHA256_SIZE]);

/*
 * Makes a new token: AUTH_TOKEN_PREFIX and 64 hex digits from the kernel's random source,
 * NUL-terminated in `out` (at least AUTH_TOKEN_LEN + 1 bytes). Returns 0 or -errno.
 */
int auth_token_generate(char *out, size_t outlen);

#endif
