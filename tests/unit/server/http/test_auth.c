/* SPDX-License-Identifier: Apache-2.0 */
/* Credentials files (every refused line class, lookups, file modes) and request authorization
 * by scope and node, with the shared token and run-time replacement. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/hex.h"
#include "server/http/auth.h"
#include "tests/unit/server/harness.h"

#define NODE_A "0123456789abcdef0123456789abcdef"
#define NODE_B "fedcba9876543210fedcba9876543210"
#define NODE_C "00000000000000000000000000000001"

/* The "sha256:HEX" spec of a token. */
static void spec_of(const char *token, char out[80])
{
	uint8_t h[AUTH_SHA256_SIZE];
	char hex[2 * AUTH_SHA256_SIZE + 1];

	assert_int_equal(auth_token_sha256(token, strlen(token), h), 0);
	sysom_hex_encode(h, sizeof(h), hex, sizeof(hex));
	snprintf(out, 80, "sha256:%s", hex);
}

static struct auth_credentials *parse_ok(const char *text)
{
	struct auth_credentials *set = NULL;
	struct auth_credentials_error err;
	int rc = auth_credentials_parse(text, strlen(text), &set, &err);

	if (rc)
		fail_msg("refused (%d) at line %zu: %s\n%s", rc, err.line, err.message, text);
	return set;
}

/* `tmpl` with its i-th "%s" replaced by args[i] (i < n; no printf formats: the templates
 * are data). Static storage. */
static const char *subst(const char *tmpl, const char *const *args, size_t n)
{
	static char text[4096];
	size_t len = 0, i = 0;

	for (const char *p = tmpl; *p && len < sizeof(text) - 1; p++) {
		if (p[0] == '%' && p[1] == 's' && i < n) {
			len += (size_t)snprintf(text + len, sizeof(text) - len, "%s", args[i++]);
			p++;
		} else {
			text[len++] = *p;
		}
	}
	text[len < sizeof(text) ? len : sizeof(text) - 1] = '\0';
	return text;
}

/* `tmpl` with the spec of token "t<i>" for its i-th "%s". */
static const char *with_specs(const char *tmpl)
{
	static char specs[4][80];
	const char *args[4];

	for (int i = 0; i < 4; i++) {
		char token[16];
		snprintf(token, sizeof(token), "t%d", i);
		spec_of(token, specs[i]);
		args[i] = specs[i];
	}
	return subst(tmpl, args, 4);
}

static void test_sha256_and_generated_tokens(void **state)
{
	uint8_t h[AUTH_SHA256_SIZE];
	char hex[2 * AUTH_SHA256_SIZE + 1], a[AUTH_TOKEN_LEN + 1], b[AUTH_TOKEN_LEN + 1];

	(void)state;
	/* FIPS 180-2 test vector. */
	assert_int_equal(auth_token_sha256("abc", 3, h), 0);
	sysom_hex_encode(h, sizeof(h), hex, sizeof(hex));
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(auth_token_generate(a, sizeof(a)), 0);
	assert_int_equal(auth_token_generate(b, sizeof(b)), 0);
	assert_int_equal(strlen(a), AUTH_TOKEN_LEN);
	assert_int_equal(strncmp(a, AUTH_TOKEN_PREFIX, strlen(AUTH_TOKEN_PREFIX)), 0);
	assert_true(sysom_hex_valid_lower(a + strlen(AUTH_TOKEN_PREFIX), 64));
	assert_string_not_equal(a, b);
	assert_int_equal(auth_token_generate(a, AUTH_TOKEN_LEN), -ENOSPC);
}

static void test_parse_valid(void **state)
{
	(void)state;
	struct auth_credentials *set = parse_ok(with_specs(
		"# sysom credentials\n"
		"\n"
		"agent  node-a\t%s " NODE_B "," NODE_A "   # two nodes\r\n"
		"agent any_node.1 %s *\n"
		"   read grafana@ops %s\n"
		"admin ops-1 %s"));
	const struct auth_credential *c;
	uint8_t a[16], b[16], other[16];

	assert_int_equal(auth_credentials_count(set), 4);
	c = auth_credentials_by_name(set, "node-a");
	assert_non_null(c);
	assert_int_equal(c->scope, AUTH_SCOPE_AGENT);
	assert_int_equal(c->line, 3);
	assert_false(c->any_node);
	assert_int_equal(c->node_count, 2);
	sysom_hex_decode(NODE_A, 32, a, 16);
	sysom_hex_decode(NODE_B, 32, b, 16);
	sysom_hex_decode(NODE_C, 32, other, 16);
	assert_memory_equal(c->nodes[0], a, 16); /* sorted */
	assert_memory_equal(c->nodes[1], b, 16);
	assert_true(auth_credential_writes_node(c, a));
	assert_true(auth_credential_writes_node(c, b));
	assert_false(auth_credential_writes_node(c, other));
	c = auth_credentials_by_name(set, "any_node.1");
	assert_true(c->any_node);
	assert_true(auth_credential_writes_node(c, other));
	c = auth_credentials_by_name(set, "grafana@ops");
	assert_int_equal(c->scope, AUTH_SCOPE_READ);
	assert_false(auth_credential_writes_node(c, a));
	c = auth_credentials_by_name(set, "ops-1");
	assert_int_equal(c->scope, AUTH_SCOPE_ADMIN);
	assert_int_equal(c->line, 6);
	assert_true(auth_credential_writes_node(c, other));
	assert_null(auth_credentials_by_name(set, "nobody"));
	auth_credentials_free(set);

	/* Comments and blank lines only: an empty set (nobody gets in with it). */
	set = parse_ok("# nothing yet\n\n   \n");
	assert_int_equal(auth_credentials_count(set), 0);
	auth_credentials_free(set);
	set = parse_ok("");
	assert_int_equal(auth_credentials_count(set), 0);
	auth_credentials_free(set);
}

/* Every class of refused line: the error names the line and says what is wrong. */
static void test_parse_refused(void **state)
{
	char spec[80], long_name[80], text[4096];
	static const char pasted_token[] = "sysom_3b1d05c2f4a9e8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3";

	(void)state;
	spec_of("t0", spec);
	memset(long_name, 'n', AUTH_CREDENTIAL_NAME_MAX + 1);
	long_name[AUTH_CREDENTIAL_NAME_MAX + 1] = '\0';
	struct {
		const char *fmt; /* %s: a valid spec (or a name where noted) */
		size_t line;
		int rc;
		const char *fragment;
	} cases[] = {
		{ "# ok\nreader x %s\n", 2, -SYSOM_ECORRUPT, "unknown scope 'reader'" },
		{ "Agent x %s *\n", 1, -SYSOM_ECORRUPT, "unknown scope" },
		{ "agent x\n", 1, -SYSOM_ECORRUPT, "found 2 fields" },
		{ "read\n", 1, -SYSOM_ECORRUPT, "found 1 field" },
		{ "agent x %s " NODE_A " " NODE_B "\n", 1, -SYSOM_ECORRUPT, "commas, not spaces" },
		{ "read bad/name %s\n", 1, -SYSOM_ECORRUPT, "characters other than" },
		{ "read %s sha256:00\n", 1, -SYSOM_ECORRUPT, "name longer than" }, /* %s: long name */
		{ "read x sha256:0123\n", 1, -SYSOM_ECORRUPT, "not sha256: and 64 hex digits" },
		{ "read x md5:%s\n", 1, -SYSOM_ECORRUPT, "not sha256:" },
		{ "read x sha256:zz%s\n", 1, -SYSOM_ECORRUPT, "not sha256:" },
		{ "read x %s\n", 1, -SYSOM_ECORRUPT, "never tokens" }, /* %s: a pasted token */
		{ "agent x %s\n", 1, -SYSOM_ECORRUPT, "needs the node ids" },
		{ "read x %s " NODE_A "\n", 1, -SYSOM_ECORRUPT, "only agent credentials name nodes" },
		{ "admin x %s *\n", 1, -SYSOM_ECORRUPT, "only agent credentials name nodes" },
		{ "agent x %s 0123\n", 1, -SYSOM_ECORRUPT, "node id '0123' is not 32 hex" },
		{ "agent x %s " NODE_A ",\n", 1, -SYSOM_ECORRUPT, "node id '' is not" },
		{ "agent x %s ," NODE_A "\n", 1, -SYSOM_ECORRUPT, "node id '' is not" },
		{ "agent x %s 0123456789abcdef0123456789abcdeg\n", 1, -SYSOM_ECORRUPT, "not 32 hex" },
		{ "agent x %s *," NODE_A "\n", 1, -SYSOM_ECORRUPT, "node id '*' is not" },
		{ "agent x %s " NODE_A "," NODE_B "," NODE_A "\n", 1, -SYSOM_ECORRUPT,
		  "node id " NODE_A " is listed twice" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct auth_credentials *set = NULL;
		struct auth_credentials_error err;
		const char *arg = i == 6 ? long_name : i == 10 ? pasted_token : i == 9 ? spec + 9 : spec;
		int rc;

		snprintf(text, sizeof(text), "%s", subst(cases[i].fmt, &arg, 1));
		rc = auth_credentials_parse(text, strlen(text), &set, &err);
		if (rc != cases[i].rc || err.line != cases[i].line ||
		    !strstr(err.message, cases[i].fragment))
			fail_msg("case %zu: %d at line %zu '%s' (want %d at line %zu '%s')\n%s", i, rc,
				 err.line, err.message, cases[i].rc, cases[i].line, cases[i].fragment,
				 text);
		assert_null(set);
		/* A token hash or a token pasted by mistake never reaches a message. */
		assert_null(strstr(err.message, spec + 7));
		assert_null(strstr(err.message, pasted_token));
	}
}

static void test_parse_duplicates_and_limits(void **state)
{
	struct auth_credentials *set = NULL;
	struct auth_credentials_error err;
	const char *text;
	char *big;

	(void)state;
	/* The same token twice (under two names): the later line is named, and the other. */
	{
		char spec[80];
		const char *args[] = { spec, spec, spec };
		spec_of("t1", spec);
		text = subst("read a %s\nread b %s\n\nadmin c %s\n", args, 3);
		assert_int_equal(auth_credentials_parse(text, strlen(text), &set, &err),
				 -SYSOM_ECORRUPT);
		assert_int_equal(err.line, 2);
		assert_non_null(strstr(err.message, "'b' has the same token as 'a' (line 1)"));
	}
	/* The same name twice. */
	text = with_specs("read a %s\nagent b %s *\nadmin a %s\n");
	assert_int_equal(auth_credentials_parse(text, strlen(text), &set, &err), -SYSOM_ECORRUPT);
	assert_int_equal(err.line, 3);
	assert_non_null(strstr(err.message, "name 'a' is already used on line 1"));
	assert_null(set);
	/* A NUL byte. */
	assert_int_equal(auth_credentials_parse("read a\0b", 8, &set, &err), -SYSOM_ECORRUPT);
	assert_non_null(strstr(err.message, "NUL"));
	/* Too large a file, too many node ids on a line. */
	big = calloc(1, AUTH_CREDENTIALS_FILE_MAX + 2);
	assert_non_null(big);
	memset(big, '#', AUTH_CREDENTIALS_FILE_MAX + 1);
	assert_int_equal(auth_credentials_parse(big, AUTH_CREDENTIALS_FILE_MAX + 1, &set, &err),
			 -SYSOM_ELIMIT);
	{
		char spec[80];
		size_t len;
		spec_of("t0", spec);
		len = (size_t)snprintf(big, 200, "agent many %s ", spec);
		for (uint32_t i = 0; i <= AUTH_CREDENTIAL_MAX_NODES; i++)
			len += (size_t)snprintf(big + len, 40, "%s%032x", i ? "," : "", i);
		assert_int_equal(auth_credentials_parse(big, len, &set, &err), -SYSOM_ELIMIT);
		assert_non_null(strstr(err.message, "more than 65536 node ids"));
		/* Exactly the limit is fine. */
		len -= 33;
		assert_int_equal(auth_credentials_parse(big, len, &set, &err), 0);
		assert_int_equal(auth_credentials_at(set, 0)->node_count, AUTH_CREDENTIAL_MAX_NODES);
		auth_credentials_free(set);
	}
	free(big);
}

/* Lookups by token hash: only the exact hash matches, wherever it sorts. */
static void test_find(void **state)
{
	struct auth_credentials *set = parse_ok(with_specs("read a %s\nread b %s\nread c %s\n"));
	uint8_t h[AUTH_SHA256_SIZE];

	(void)state;
	for (int i = 0; i < 3; i++) {
		char token[16];
		snprintf(token, sizeof(token), "t%d", i);
		assert_int_equal(auth_token_sha256(token, strlen(token), h), 0);
		const struct auth_credential *c = auth_credentials_find(set, h);
		assert_non_null(c);
		assert_memory_equal(c->token_sha256, h, sizeof(h));
		/* One bit off, anywhere: no match. */
		h[31] ^= 1;
		assert_null(auth_credentials_find(set, h));
		h[31] ^= 1;
		h[0] ^= 0x80;
		assert_null(auth_credentials_find(set, h));
	}
	memset(h, 0xff, sizeof(h)); /* sorts after every credential */
	assert_null(auth_credentials_find(set, h));
	memset(h, 0, sizeof(h)); /* before every one */
	assert_null(auth_credentials_find(set, h));
	assert_null(auth_credentials_find(NULL, h));
	auth_credentials_free(set);
}

/* Files: modes others could read or anyone but the owner could write are refused. */
static void test_load_file_modes(void **state)
{
	char dir[128], path[256], err[512];
	struct auth_credentials *set = NULL;
	const char *text = with_specs("read a %s\n");
	FILE *f;

	(void)state;
	assert_int_equal(fixture_tmpdir_make(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/credentials", dir);
	assert_int_equal(auth_credentials_load(path, &set, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "cannot open credentials file"));
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	static const struct {
		mode_t mode;
		int rc;
		const char *fragment;
	} modes[] = {
		{ 0600, 0, NULL },
		{ 0640, 0, NULL },
		{ 0400, 0, NULL },
		{ 0644, -SYSOM_ECONFIG, "readable by every user" },
		{ 0604, -SYSOM_ECONFIG, "readable by every user" },
		{ 0620, -SYSOM_ECONFIG, "writable by its group" },
		{ 0602, -SYSOM_ECONFIG, "writable by every user" },
	};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		assert_int_equal(chmod(path, modes[i].mode), 0);
		err[0] = '\0';
		int rc = auth_credentials_load(path, &set, err, sizeof(err));
		if (rc != modes[i].rc || (modes[i].fragment && !strstr(err, modes[i].fragment)))
			fail_msg("mode %o: %d '%s'", modes[i].mode, rc, err);
		if (rc == 0) {
			assert_int_equal(auth_credentials_count(set), 1);
			auth_credentials_free(set);
			set = NULL;
		}
	}
	/* A bad line: the path and the line number. */
	assert_int_equal(chmod(path, 0600), 0);
	f = fopen(path, "a");
	fputs("reader b sha256:00\n", f);
	fclose(f);
	assert_int_equal(auth_credentials_load(path, &set, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "line 2: unknown scope 'reader'"));
	/* Not a regular file. */
	assert_int_equal(auth_credentials_load(dir, &set, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "not a regular file"));
	assert_null(set);
	unlink(path);
	fixture_tmpdir_remove(dir);
}

/* ---- requests ------------------------------------------------------------------------------ */

static enum auth_result decide(struct auth *a, const char *authorization, unsigned scopes,
			       const char *node_hex, struct auth_decision *d)
{
	struct test_request t;
	uint8_t node[16];

	request_init(&t, "GET", "/api/v1/x", "");
	if (authorization)
		request_header(&t, "authorization", authorization);
	if (node_hex)
		sysom_hex_decode(node_hex, 32, node, sizeof(node));
	return auth_request_authorize(a, &t.req, scopes, node_hex ? node : NULL, d);
}

/* The credentials of the request tests: tokens t0 (agent A,B), t1 (agent *), t2 (read),
 * t3 (admin). */
static struct auth *scoped_auth(void)
{
	struct auth *a = auth_new();

	assert_non_null(a);
	assert_int_equal(auth_credentials_set(a, parse_ok(with_specs(
						     "agent node-ab %s " NODE_A "," NODE_B "\n"
						     "agent fleet %s *\n"
						     "read grafana %s\n"
						     "admin ops %s\n")),
					      NULL),
			 0);
	return a;
}

static void test_authorize_scopes_and_nodes(void **state)
{
	struct auth *a = scoped_auth();
	struct auth_decision d;

	(void)state;
	assert_true(auth_enabled(a));
	/* Agent: its own nodes, not another; never the read or admin endpoints. */
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_AGENT, NODE_A, &d), AUTH_ALLOWED);
	assert_string_equal(d.name, "node-ab");
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_AGENT, NODE_B, &d), AUTH_ALLOWED);
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_AGENT, NODE_C, &d), AUTH_FORBIDDEN);
	assert_non_null(strstr(d.message, "'node-ab' may not write batches for node " NODE_C));
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_AGENT, NULL, &d), AUTH_ALLOWED);
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_READ, NULL, &d), AUTH_FORBIDDEN);
	assert_non_null(strstr(d.message, "(scope agent) may not do this: it needs scope read or admin"));
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_AGENT | AUTH_SCOPE_READ, NULL, &d),
			 AUTH_ALLOWED);
	assert_int_equal(decide(a, "Bearer t1", AUTH_SCOPE_AGENT, NODE_C, &d), AUTH_ALLOWED);
	/* Read: GETs only. */
	assert_int_equal(decide(a, "Bearer t2", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	assert_int_equal(d.scopes, AUTH_SCOPE_READ);
	assert_int_equal(decide(a, "Bearer t2", AUTH_SCOPE_AGENT, NODE_A, &d), AUTH_FORBIDDEN);
	assert_int_equal(decide(a, "Bearer t2", AUTH_SCOPE_ADMIN, NULL, &d), AUTH_FORBIDDEN);
	assert_non_null(strstr(d.message, "'grafana' (scope read)"));
	/* Admin: everything, any node. */
	assert_int_equal(decide(a, "Bearer t3", AUTH_SCOPE_AGENT, NODE_C, &d), AUTH_ALLOWED);
	assert_int_equal(decide(a, "Bearer t3", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	assert_int_equal(decide(a, "Bearer t3", AUTH_SCOPE_ADMIN, NULL, &d), AUTH_ALLOWED);
	/* No or unknown token: 401, whatever the scope. */
	assert_int_equal(decide(a, NULL, AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	assert_false(d.token_presented);
	assert_int_equal(decide(a, "Bearer t4", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	assert_true(d.token_presented);
	assert_string_equal(d.name, "");
	assert_int_equal(decide(a, "Basic dDA=", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	assert_int_equal(decide(a, "Bearer ", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	/* The scheme is case-insensitive; spaces before the token are skipped. */
	assert_int_equal(decide(a, "bearer   t2", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	/* A token is compared whole: a prefix or an extension is another token. */
	assert_int_equal(decide(a, "Bearer t", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	assert_int_equal(decide(a, "Bearer t22", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	/* Identify: who, without a scope check. */
	{
		struct test_request t;
		request_init(&t, "GET", "/metrics", "");
		request_header(&t, "authorization", "Bearer t0");
		assert_int_equal(auth_request_identify(a, &t.req, &d), AUTH_ALLOWED);
		assert_int_equal(d.scopes, AUTH_SCOPE_AGENT);
	}
	auth_free(a);
}

/* The answers: 401 with the challenge, 403 with the reason; allow() answers them itself. */
static void test_respond(void **state)
{
	struct auth *a = scoped_auth();
	struct test_request t;
	struct http_response resp;

	(void)state;
	request_init(&t, "GET", "/api/v1/nodes", "");
	response_init(&resp);
	assert_false(auth_request_allow(a, &t.req, AUTH_SCOPE_READ, &resp));
	assert_int_equal(resp.status, 401);
	assert_non_null(response_header(&resp, "WWW-Authenticate"));
	byte_buf_free(&resp.body);
	request_token(&t, "t0");
	response_init(&resp);
	assert_false(auth_request_allow(a, &t.req, AUTH_SCOPE_READ, &resp));
	assert_int_equal(resp.status, 403);
	assert_null(response_header(&resp, "WWW-Authenticate"));
	assert_non_null(memmem(resp.body.data, resp.body.len, "node-ab", 7));
	byte_buf_free(&resp.body);
	response_init(&resp);
	assert_true(auth_request_allow(a, &t.req, AUTH_SCOPE_AGENT, &resp));
	assert_int_equal(resp.status, 200);
	byte_buf_free(&resp.body);
	auth_free(a);
}

/* The shared token has every scope and any node; without any configuration all is allowed. */
static void test_shared_token_and_off(void **state)
{
	struct auth *a = auth_new();
	struct auth_decision d;

	(void)state;
	assert_false(auth_enabled(a));
	assert_int_equal(decide(a, NULL, AUTH_SCOPE_ADMIN, NODE_C, &d), AUTH_ALLOWED);
	assert_int_equal(d.scopes, AUTH_SCOPES_ALL);
	assert_string_equal(d.name, "");
	assert_int_equal(auth_token_set(a, "shared-secret"), 0);
	assert_true(auth_enabled(a));
	assert_int_equal(decide(a, "Bearer shared-secret", AUTH_SCOPE_ADMIN, NODE_C, &d), AUTH_ALLOWED);
	assert_string_equal(d.name, AUTH_SHARED_TOKEN_NAME);
	assert_int_equal(decide(a, "Bearer shared-secre", AUTH_SCOPE_READ, NULL, &d),
			 AUTH_UNAUTHENTICATED);
	/* Both at once: the shared token and the credentials each work. */
	assert_int_equal(auth_credentials_set(a, parse_ok(with_specs("read grafana %s\n")), NULL),
			 0);
	assert_int_equal(decide(a, "Bearer shared-secret", AUTH_SCOPE_AGENT, NODE_A, &d),
			 AUTH_ALLOWED);
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	/* A credential with the shared token is refused, either way round; nothing changes. */
	struct auth_credentials *clash;
	char spec[80], line[128];
	spec_of("shared-secret", spec);
	snprintf(line, sizeof(line), "admin x %s\n", spec);
	clash = parse_ok(line);
	assert_int_equal(auth_credentials_set(a, clash, NULL), -EEXIST);
	auth_credentials_free(clash);
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	assert_int_equal(auth_token_set(a, "t0"), -EEXIST);
	assert_int_equal(decide(a, "Bearer shared-secret", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	assert_string_equal(d.name, AUTH_SHARED_TOKEN_NAME);
	/* Removing the shared token leaves the credentials; an empty set still authenticates. */
	assert_int_equal(auth_token_set(a, NULL), 0);
	assert_int_equal(decide(a, "Bearer shared-secret", AUTH_SCOPE_READ, NULL, &d),
			 AUTH_UNAUTHENTICATED);
	assert_int_equal(auth_credentials_set(a, parse_ok("# none\n"), NULL), 0);
	assert_true(auth_enabled(a));
	assert_int_equal(decide(a, "Bearer t0", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	assert_int_equal(auth_credentials_set(a, NULL, NULL), 0);
	assert_false(auth_enabled(a));
	auth_free(a);
}

/* Replacing the set (a reload): old tokens stop working at once, new ones start; the replaced
 * set comes back to the caller for logging. */
static void test_replace(void **state)
{
	struct auth *a = scoped_auth();
	struct auth_credentials *old = NULL, *next;
	struct auth_decision d;
	char spec[80], text[256];

	(void)state;
	spec_of("rotated", spec);
	snprintf(text, sizeof(text), "read grafana %s\n", spec);
	next = parse_ok(text);
	assert_int_equal(auth_credentials_set(a, next, &old), 0);
	assert_non_null(old);
	assert_int_equal(auth_credentials_count(old), 4);
	auth_credentials_free(old);
	assert_int_equal(decide(a, "Bearer t2", AUTH_SCOPE_READ, NULL, &d), AUTH_UNAUTHENTICATED);
	assert_int_equal(decide(a, "Bearer rotated", AUTH_SCOPE_READ, NULL, &d), AUTH_ALLOWED);
	assert_string_equal(d.name, "grafana");
	auth_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_and_generated_tokens),
		cmocka_unit_test(test_parse_valid),
		cmocka_unit_test(test_parse_refused),
		cmocka_unit_test(test_parse_duplicates_and_limits),
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_load_file_modes),
		cmocka_unit_test(test_authorize_scopes_and_nodes),
		cmocka_unit_test(test_respond),
		cmocka_unit_test(test_shared_token_and_off),
		cmocka_unit_test(test_replace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
