/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a credentials file (--credentials-file) → a validated credentials set. */
// fuzz-sources: server/http/auth_credentials.c
#include <stdlib.h>
#include <string.h>

#include "server/http/auth_credentials.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct auth_credentials *set = NULL;
	struct auth_credentials_error err;
	int rc = auth_credentials_parse((const char *)data, size, &set, &err);

	if (rc) {
		/* Refused whole, with a message that fits. */
		if (set || !err.message[0] || strlen(err.message) >= sizeof(err.message))
			abort();
		return 0;
	}
	/* Accepted: every credential is well formed, found by its hash and by its name. */
	for (size_t i = 0; i < auth_credentials_count(set); i++) {
		const struct auth_credential *c = auth_credentials_at(set, i);
		size_t len = strlen(c->name);
		if (len == 0 || len > AUTH_CREDENTIAL_NAME_MAX ||
		    auth_credentials_find(set, c->token_sha256) != c ||
		    auth_credentials_by_name(set, c->name) != c)
			abort();
		if (c->scope == AUTH_SCOPE_AGENT) {
			if (!c->any_node && (!c->node_count || c->node_count > AUTH_CREDENTIAL_MAX_NODES))
				abort();
			for (size_t j = 0; j < c->node_count; j++)
				if (!auth_credential_writes_node(c, c->nodes[j]))
					abort();
		} else if (c->node_count || c->any_node) {
			abort();
		}
	}
	auth_credentials_free(set);
	return 0;
}
