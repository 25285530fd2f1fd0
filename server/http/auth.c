/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer tokens and scoped credentials: hashed comparison, authorization, run-time replacement. */
#include "server/http/auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "common/hex.h"

struct auth {
	pthread_rwlock_t lock;
	bool shared;                              /* a shared token is set */
	uint8_t shared_sha256[AUTH_SHA256_SIZE];  /* its SHA-256 (the token itself is not kept) */
	struct auth_credentials *creds;           /* NULL: no credentials file */
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
	auth_credentials_free(a->creds);
	explicit_bzero(a->shared_sha256, sizeof(a->shared_sha256));
	free(a);
}

int auth_token_sha256(const char *token, size_t len, uint8_t out[AUTH_SHA256_SIZE])
{
	unsigned int n = 0;

	if (!EVP_Digest(token, len, out, &n, EVP_sha256(), NULL) || n != AUTH_SHA256_SIZE)
		return -ENOMEM; /* only allocation can fail for a built-in digest */
	return 0;
}

int auth_token_generate(char *out, size_t outlen)
{
	static const size_t prefix_len = sizeof(AUTH_TOKEN_PREFIX) - 1;
	uint8_t random[32];
	size_t got = 0;
	int rc = 0;

	if (outlen < AUTH_TOKEN_LEN + 1)
		return -ENOSPC;
	while (got < sizeof(random)) {
		ssize_t n = getrandom(random + got, sizeof(random) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto cleanup;
		}
		got += (size_t)n;
	}
	memcpy(out, AUTH_TOKEN_PREFIX, prefix_len);
	sysom_hex_encode(random, sizeof(random), out + prefix_len, outlen - prefix_len);
cleanup:
	explicit_bzero(random, sizeof(random));
	return rc;
}

/* Whether the installed set holds a credential with token hash `sha256` (lock held). */
static bool shared_conflicts(const struct auth_credentials *set, const uint8_t *sha256)
{
	return auth_credentials_find(set, sha256) != NULL;
}

int auth_token_set(struct auth *a, const char *token)
{
	uint8_t sha256[AUTH_SHA256_SIZE];
	bool set = token && *token;
	int rc = 0;

	memset(sha256, 0, sizeof(sha256));
	if (set && (rc = auth_token_sha256(token, strlen(token), sha256)))
		return rc;
	pthread_rwlock_wrlock(&a->lock);
	if (set && shared_conflicts(a->creds, sha256)) {
		rc = -EEXIST;
	} else {
		a->shared = set;
		memcpy(a->shared_sha256, sha256, sizeof(sha256));
	}
	pthread_rwlock_unlock(&a->lock);
	explicit_bzero(sha256, sizeof(sha256));
	return rc;
}

int auth_credentials_set(struct auth *a, struct auth_credentials *set,
			 struct auth_credentials **old)
{
	struct auth_credentials *replaced = NULL;
	int rc = 0;

	pthread_rwlock_wrlock(&a->lock);
	if (a->shared && shared_conflicts(set, a->shared_sha256)) {
		rc = -EEXIST;
	} else {
		replaced = a->creds;
		a->creds = set;
	}
	pthread_rwlock_unlock(&a->lock);
	if (rc == 0 && old)
		*old = replaced;
	else
		auth_credentials_free(replaced);
	return rc;
}

bool auth_enabled(struct auth *a)
{
	bool on;

	pthread_rwlock_rdlock(&a->lock);
	on = a->shared || a->creds;
	pthread_rwlock_unlock(&a->lock);
	return on;
}

/* The token of an "Authorization: Bearer TOKEN" header, or NULL. */
static const char *bearer_token(const struct http_request *req)
{
	const char *header = http_request_header(req, "authorization");

	if (!header || strncasecmp(header, "Bearer ", 7) != 0)
		return NULL;
	header += 7;
	while (*header == ' ')
		header++;
	return *header ? header : NULL;
}

/*
 * The one place where a request passes authentication (or not): with the lock held, matches
 * the presented token's hash against the shared token and the credentials set. Fills the
 * identity part of *d and *cred (the matching credential, NULL for the shared token or when
 * authentication is off). Its caller tells the transport when a request authenticated.
 */
static enum auth_result request_authenticate(const struct auth *a, const uint8_t *sha256,
					     struct auth_decision *d,
					     const struct auth_credential **cred)
{
	*cred = NULL;
	if (!a->shared && !a->creds) {
		d->scopes = AUTH_SCOPES_ALL;
		return AUTH_ALLOWED;
	}
	if (!sha256) {
		snprintf(d->message, sizeof(d->message), "missing or invalid bearer token");
		return AUTH_UNAUTHENTICATED;
	}
	if (a->shared && CRYPTO_memcmp(sha256, a->shared_sha256, AUTH_SHA256_SIZE) == 0) {
		snprintf(d->name, sizeof(d->name), "%s", AUTH_SHARED_TOKEN_NAME);
		d->scopes = AUTH_SCOPES_ALL;
		return AUTH_ALLOWED;
	}
	*cred = auth_credentials_find(a->creds, sha256);
	if (!*cred) {
		snprintf(d->message, sizeof(d->message), "missing or invalid bearer token");
		return AUTH_UNAUTHENTICATED;
	}
	snprintf(d->name, sizeof(d->name), "%s", (*cred)->name);
	d->scopes = (*cred)->scope;
	return AUTH_ALLOWED;
}

/* Scope names of `scopes` joined by " or " into out. */
static void scopes_text(unsigned scopes, char *out, size_t outlen)
{
	size_t len = 0;

	out[0] = '\0';
	for (unsigned bit = AUTH_SCOPE_AGENT; bit <= AUTH_SCOPE_ADMIN; bit <<= 1) {
		if (!(scopes & bit))
			continue;
		int n = snprintf(out + len, outlen - len, "%s%s", len ? " or " : "",
				 auth_scope_name((enum auth_scope)bit));
		if (n < 0 || (size_t)n >= outlen - len)
			break;
		len += (size_t)n;
	}
}

/* Authenticates and, when `check` is set, checks scopes and node: the shared body. */
static enum auth_result decide(struct auth *a, const struct http_request *req, bool check,
			       unsigned scopes, const uint8_t *node_id, struct auth_decision *d)
{
	const struct auth_credential *cred;
	const char *token = bearer_token(req);
	uint8_t sha256[AUTH_SHA256_SIZE];
	bool hashed = false;
	enum auth_result r;

	memset(d, 0, sizeof(*d));
	d->token_presented = token != NULL;
	/* Hashing first, outside the lock; a failure (out of memory) reads as no token. */
	if (token && auth_token_sha256(token, strlen(token), sha256) == 0)
		hashed = true;
	pthread_rwlock_rdlock(&a->lock);
	r = request_authenticate(a, hashed ? sha256 : NULL, d, &cred);
	/*
	 * The transport keeps room for connections whose requests authenticate (with no
	 * authentication configured: all); a valid credential counts even without the scope.
	 */
	if (r == AUTH_ALLOWED)
		http_request_mark_authenticated(req);
	if (r == AUTH_ALLOWED && check) {
		unsigned accepted = scopes | AUTH_SCOPE_ADMIN;
		char want[64];

		if (!(d->scopes & accepted)) {
			scopes_text(accepted, want, sizeof(want));
			snprintf(d->message, sizeof(d->message),
				 "credential '%s' (scope %s) may not do this: it needs scope %s",
				 d->name, auth_scope_name((enum auth_scope)d->scopes), want);
			r = AUTH_FORBIDDEN;
		} else if (node_id && cred && !auth_credential_writes_node(cred, node_id)) {
			char hex[2 * AUTH_NODE_ID_SIZE + 1];

			sysom_hex_encode(node_id, AUTH_NODE_ID_SIZE, hex, sizeof(hex));
			snprintf(d->message, sizeof(d->message),
				 "credential '%s' may not write batches for node %s", d->name, hex);
			r = AUTH_FORBIDDEN;
		}
	}
	pthread_rwlock_unlock(&a->lock);
	explicit_bzero(sha256, sizeof(sha256));
	d->result = r;
	return r;
}

enum auth_result auth_request_identify(struct auth *a, const struct http_request *req,
				       struct auth_decision *d)
{
	return decide(a, req, false, 0, NULL, d);
}

enum auth_result auth_request_authorize(struct auth *a, const struct http_request *req,
					unsigned scopes, const uint8_t *node_id,
					struct auth_decision *d)
{
	return decide(a, req, true, scopes, node_id, d);
}

void auth_respond(struct http_response *resp, const struct auth_decision *d)
{
	if (d->result == AUTH_FORBIDDEN) {
		http_response_error(resp, 403, "%s", d->message);
		return;
	}
	http_response_error(resp, 401, "%s",
			    d->message[0] ? d->message : "missing or invalid bearer token");
	http_response_header(resp, "WWW-Authenticate", "Bearer realm=\"sysom\"");
}

bool auth_request_allow(struct auth *a, const struct http_request *req, unsigned scopes,
			struct http_response *resp)
{
	struct auth_decision d;

	if (auth_request_authorize(a, req, scopes, NULL, &d) == AUTH_ALLOWED)
		return true;
	auth_respond(resp, &d);
	return false;
}
