/* SPDX-License-Identifier: Apache-2.0 */
/* Credentials files: scoped bearer credentials stored as token hashes (parser and lookups). */
#ifndef SYSOM_SERVER_HTTP_AUTH_CREDENTIALS_H
#define SYSOM_SERVER_HTTP_AUTH_CREDENTIALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Credentials file format (docs/operations.md, "Credentials", has the same table). UTF-8/ASCII
 * text, one credential per line, fields separated by spaces or tabs; `#` starts a comment that
 * runs to the end of the line; blank lines are ignored; a NUL byte is an error.
 *
 *   FIELD       VALUE
 *   SCOPE       agent | read | admin
 *   NAME        1..AUTH_CREDENTIAL_NAME_MAX of [A-Za-z0-9._@-]; unique in the file; shown in
 *               logs and 403 answers (never the token)
 *   TOKEN-SPEC  "sha256:" + 64 hex digits: SHA-256 of the bearer token; unique in the file
 *   NODE-IDS    agent lines only, required: "*" (any node) or node ids (32 hex digits)
 *               separated by commas, at most AUTH_CREDENTIAL_MAX_NODES, no repeats
 *
 * Scopes: agent may post batches for its nodes and upload kernel symbols and symbol files;
 * read may use every GET of the query API and /metrics' per-node series; admin may do
 * everything (settings, baselines, batches for any node).
 */
#define AUTH_CREDENTIAL_NAME_MAX 64
#define AUTH_CREDENTIAL_MAX_NODES 65536   /* node ids on one agent line */
#define AUTH_CREDENTIALS_MAX 65536        /* credentials in one file */
#define AUTH_CREDENTIALS_FILE_MAX (16u << 20) /* bytes of a credentials file */
#define AUTH_NODE_ID_SIZE 16
#define AUTH_SHA256_SIZE 32
#define AUTH_TOKEN_SPEC_PREFIX "sha256:"

/* What a credential may do (bit flags; a request names the scopes it accepts). */
enum auth_scope {
	AUTH_SCOPE_AGENT = 1u << 0, /* batches for its nodes, kernel symbols, symbol files */
	AUTH_SCOPE_READ = 1u << 1,  /* the query API's GETs, reports, /metrics per-node series */
	AUTH_SCOPE_ADMIN = 1u << 2, /* everything: settings, baselines, batches for any node */
};
#define AUTH_SCOPES_ALL (AUTH_SCOPE_AGENT | AUTH_SCOPE_READ | AUTH_SCOPE_ADMIN)

/* One credential of a set (read-only; owned by the set). */
struct auth_credential {
	char name[AUTH_CREDENTIAL_NAME_MAX + 1];
	enum auth_scope scope;                     /* exactly one scope */
	uint8_t token_sha256[AUTH_SHA256_SIZE];    /* SHA-256 of the token */
	bool any_node;                             /* agent "*": batches of every node */
	const uint8_t (*nodes)[AUTH_NODE_ID_SIZE]; /* sorted node ids (agent lines), or NULL */
	size_t node_count;
	size_t line;                               /* 1-based line in the file */
};

/* An immutable set of credentials, sorted by token hash. */
struct auth_credentials;

/* Where and why a credentials text was refused. */
struct auth_credentials_error {
	size_t line;       /* 1-based; 0 when the error is not about one line */
	char message[200]; /* never contains a token hash */
};

/*
 * Parses a credentials text (`len` bytes, need not be NUL-terminated; at most
 * AUTH_CREDENTIALS_FILE_MAX). Returns 0 with *out set (free with auth_credentials_free; an
 * empty text gives an empty set), -SYSOM_ECORRUPT with *err filled for a malformed line, an
 * unknown scope, a malformed token spec or node id, a repeated name or token hash,
 * -SYSOM_ELIMIT with *err filled beyond a limit, or -ENOMEM.
 */
int auth_credentials_parse(const char *text, size_t len, struct auth_credentials **out,
			   struct auth_credentials_error *err);

/*
 * Reads and parses credentials file `path`: a regular file of at most
 * AUTH_CREDENTIALS_FILE_MAX bytes that others may not read and neither group nor others may
 * write. Returns 0 with *out set, -SYSOM_ECONFIG with `err` saying why (file mode, parse
 * error with its line), -ENOMEM or -errno (with `err` set).
 */
int auth_credentials_load(const char *path, struct auth_credentials **out, char *err,
			  size_t errlen);

/* Frees a set; accepts NULL. */
void auth_credentials_free(struct auth_credentials *c);

/* Number of credentials in the set. */
size_t auth_credentials_count(const struct auth_credentials *c);

/* Credential `i` (< count) in token-hash order; borrowed from the set. */
const struct auth_credential *auth_credentials_at(const struct auth_credentials *c, size_t i);

/* The credential named `name`, or NULL; borrowed from the set. */
const struct auth_credential *auth_credentials_by_name(const struct auth_credentials *c,
						       const char *name);

/*
 * The credential whose token hash is `sha256`, or NULL; borrowed from the set. The search
 * orders by the hash of the presented token (which says nothing usable about any token);
 * the final equality is compared in constant time.
 */
const struct auth_credential *auth_credentials_find(const struct auth_credentials *c,
						    const uint8_t sha256[AUTH_SHA256_SIZE]);

/* Whether the credential may write batches for node `node_id`: admin, agent "*" or listed. */
bool auth_credential_writes_node(const struct auth_credential *cred,
				 const uint8_t node_id[AUTH_NODE_ID_SIZE]);

/* "agent", "read" or "admin" for one scope; "?" otherwise. */
const char *auth_scope_name(enum auth_scope scope);

#endif
