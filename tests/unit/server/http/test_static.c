/* SPDX-License-Identifier: Apache-2.0 */
/* The web UI's static files: names (traversal, hidden files, odd bytes), content types,
 * missing files, symbolic links, directories, the size limit, revalidation and redirects. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/http/static.h"

struct fixture {
	char root[64];  /* a temporary directory: ui/ inside, secret.js beside it */
	char ui[96];
	struct http_static *st;
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char path[256], err[256];

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/sysom-static.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->ui, sizeof(f->ui), "%s/ui", f->root);
	assert_int_equal(mkdir(f->ui, 0755), 0);
	snprintf(path, sizeof(path), "%s/secret.js", f->root);
	write_file(path, "outside\n");
	snprintf(path, sizeof(path), "%s/index.html", f->ui);
	write_file(path, "<!doctype html>\n");
	snprintf(path, sizeof(path), "%s/app.js", f->ui);
	write_file(path, "export {};\n");
	snprintf(path, sizeof(path), "%s/vendor", f->ui);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/vendor/lib.css", f->ui);
	write_file(path, "a{}\n");
	snprintf(path, sizeof(path), "%s/vendor/index.html", f->ui);
	write_file(path, "<p>vendor</p>\n");
	snprintf(path, sizeof(path), "%s/notes.sh", f->ui);
	write_file(path, "echo\n");
	snprintf(path, sizeof(path), "%s/.hidden.js", f->ui);
	write_file(path, "hidden\n");
	snprintf(path, sizeof(path), "%s/big.js", f->ui);
	write_file(path, "0123456789012345678901234567890123456789\n"); /* 41 bytes */
	snprintf(path, sizeof(path), "%s/dir.js", f->ui);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/link.js", f->ui);
	assert_int_equal(symlink("../secret.js", path), 0);
	snprintf(path, sizeof(path), "%s/vlink", f->ui);
	assert_int_equal(symlink(f->root, path), 0);
	assert_int_equal(http_static_open(f->ui, 40, &f->st, err, sizeof(err)), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	http_static_free(f->st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static const char *header(const struct http_response *resp, const char *name)
{
	for (size_t i = 0; i < resp->extra_header_count; i++)
		if (strcasecmp(resp->extra_headers[i].name, name) == 0)
			return resp->extra_headers[i].value;
	return NULL;
}

/* GET `path` (with an If-None-Match when `inm`); returns the status, the response in *resp
 * (released by the caller). */
static int get(struct http_static *st, const char *path, const char *inm,
	       struct http_response *resp)
{
	struct http_header h = { "if-none-match", inm };
	struct http_request req = { .method = "GET", .path = path, .query = "",
				    .headers = inm ? &h : NULL, .header_count = inm ? 1 : 0 };

	memset(resp, 0, sizeof(*resp));
	resp->status = 200;
	resp->body_fd = -1;
	http_static_get(st, &req, resp);
	return resp->status;
}

/* Whether the (buffer) body holds `text` (bodies are not NUL-terminated). */
static bool body_has(const struct http_response *resp, const char *text)
{
	return resp->body.data && memmem(resp->body.data, resp->body.len, text, strlen(text));
}

/* The file body of a 200: its bytes, read back (caller frees). */
static char *body_of(const struct http_response *resp)
{
	char *buf = calloc(1, resp->body_fd_length + 1);
	assert_non_null(buf);
	assert_true(resp->has_body_fd);
	assert_int_equal(pread(resp->body_fd, buf, resp->body_fd_length, 0),
			 (ssize_t)resp->body_fd_length);
	return buf;
}

static void test_names(void **state)
{
	static const struct {
		const char *path, *name;
		int rc;
	} cases[] = {
		{ "/ui/", "index.html", 0 },
		{ "/ui/app.js", "app.js", 0 },
		{ "/ui/vendor/", "vendor/index.html", 0 },
		{ "/ui/vendor/d3.min.js", "vendor/d3.min.js", 0 },
		{ "/ui/../secret.js", NULL, -EINVAL },
		{ "/ui/vendor/../../secret.js", NULL, -EINVAL },
		{ "/ui/./app.js", NULL, -EINVAL },
		{ "/ui/.hidden.js", NULL, -EINVAL },
		{ "/ui//app.js", NULL, -EINVAL },
		{ "/ui/a\\b.js", NULL, -EINVAL },
		{ "/ui/a b.js", NULL, -EINVAL },
		{ "/ui/a%2e.js", NULL, -EINVAL },
		{ "/ui/\xc3\xa9.js", NULL, -EINVAL },
		{ "/other/app.js", NULL, -ENOENT },
		{ "/ui", NULL, -ENOENT },
	};
	char out[HTTP_STATIC_MAX_NAME + 1], longpath[600];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = http_static_name(cases[i].path, out, sizeof(out));
		if (rc != cases[i].rc)
			fail_msg("%s: %d, expected %d", cases[i].path, rc, cases[i].rc);
		if (rc == 0)
			assert_string_equal(out, cases[i].name);
	}
	memset(longpath, 'a', sizeof(longpath));
	memcpy(longpath, "/ui/", 4);
	longpath[4 + HTTP_STATIC_MAX_NAME] = '\0';
	assert_int_equal(http_static_name(longpath, out, sizeof(out)), 0);
	longpath[4 + HTTP_STATIC_MAX_NAME] = 'a';
	longpath[5 + HTTP_STATIC_MAX_NAME] = '\0';
	assert_int_equal(http_static_name(longpath, out, sizeof(out)), -ENAMETOOLONG);
	/* A directory's index must fit too. */
	longpath[4 + HTTP_STATIC_MAX_NAME - 3] = '/';
	longpath[4 + HTTP_STATIC_MAX_NAME - 2] = '\0';
	assert_int_equal(http_static_name(longpath, out, sizeof(out)), -ENAMETOOLONG);
}

static void test_types(void **state)
{
	(void)state;
	assert_string_equal(http_static_content_type("index.html"), "text/html; charset=utf-8");
	assert_string_equal(http_static_content_type("a/b.js"), "text/javascript; charset=utf-8");
	assert_string_equal(http_static_content_type("x.mjs"), "text/javascript; charset=utf-8");
	assert_string_equal(http_static_content_type("x.css"), "text/css; charset=utf-8");
	assert_string_equal(http_static_content_type("x.svg"), "image/svg+xml");
	assert_string_equal(http_static_content_type("LICENSE.txt"), "text/plain; charset=utf-8");
	assert_null(http_static_content_type("notes.sh"));
	assert_null(http_static_content_type("LICENSE"));
	assert_null(http_static_content_type("a.js/b"));
	assert_null(http_static_content_type("x.JS"));
}

static void test_serve(void **state)
{
	struct fixture *f = *state;
	struct http_response resp;
	char etag[256], *body;

	assert_int_equal(get(f->st, "/ui/", NULL, &resp), 200);
	assert_string_equal(resp.content_type, "text/html; charset=utf-8");
	body = body_of(&resp);
	assert_string_equal(body, "<!doctype html>\n");
	free(body);
	assert_string_equal(header(&resp, "Cache-Control"), "no-cache");
	assert_string_equal(header(&resp, "X-Content-Type-Options"), "nosniff");
	assert_non_null(strstr(header(&resp, "Content-Security-Policy"), "default-src 'self'"));
	assert_non_null(header(&resp, "Last-Modified"));
	snprintf(etag, sizeof(etag), "%s", header(&resp, "ETag"));
	assert_true(etag[0] == '"');
	http_response_release(&resp);

	/* Revalidation: the same ETag is 304 without a body; another one gets the file. */
	assert_int_equal(get(f->st, "/ui/index.html", etag, &resp), 304);
	assert_false(resp.has_body_fd);
	assert_string_equal(header(&resp, "ETag"), etag);
	http_response_release(&resp);
	assert_int_equal(get(f->st, "/ui/index.html", "\"other\"", &resp), 200);
	http_response_release(&resp);

	assert_int_equal(get(f->st, "/ui/app.js", NULL, &resp), 200);
	assert_string_equal(resp.content_type, "text/javascript; charset=utf-8");
	assert_int_equal(resp.body_fd_length, 11);
	http_response_release(&resp);

	assert_int_equal(get(f->st, "/ui/vendor/lib.css", NULL, &resp), 200);
	assert_string_equal(resp.content_type, "text/css; charset=utf-8");
	assert_string_equal(header(&resp, "Cache-Control"), "public, max-age=3600");
	http_response_release(&resp);

	/* 40 bytes is the limit of this fixture: 41 is refused, and said to be. */
	assert_int_equal(get(f->st, "/ui/big.js", NULL, &resp), 500);
	assert_false(resp.has_body_fd);
	assert_true(body_has(&resp, "over the size limit of 40"));
	http_response_release(&resp);
}

static void test_refused(void **state)
{
	struct fixture *f = *state;
	static const char *const paths[] = {
		"/ui/missing.js",          /* no such file */
		"/ui/../secret.js",        /* traversal */
		"/ui/vendor/../../secret.js",
		"/ui/link.js",             /* a symbolic link out of the directory */
		"/ui/vlink/secret.js",     /* through a linked directory */
		"/ui/.hidden.js",          /* hidden */
		"/ui/notes.sh",            /* a type not served */
		"/ui/dir.js",              /* a directory */
		"/ui/missing/",            /* a directory without index */
	};
	struct http_response resp;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		int status = get(f->st, paths[i], NULL, &resp);
		if (status != 404)
			fail_msg("%s: %d, expected 404", paths[i], status);
		assert_false(resp.has_body_fd);
		assert_string_equal(resp.content_type, "application/json");
		assert_true(body_has(&resp, "\"error\""));
		http_response_release(&resp);
	}
	/* No UI installed: 404 that says how to install one. */
	assert_int_equal(get(NULL, "/ui/", NULL, &resp), 404);
	assert_true(body_has(&resp, "--ui-dir"));
	http_response_release(&resp);
}

static void test_open_and_redirect(void **state)
{
	struct fixture *f = *state;
	struct http_static *st = NULL;
	struct http_response resp = { .status = 200, .body_fd = -1 };
	struct http_request req = { .method = "GET", .path = "/", .query = "" };
	char path[256], err[256];

	assert_int_equal(http_static_open("/nonexistent/sysom-ui", 0, &st, err, sizeof(err)),
			 -ENOENT);
	assert_null(st);
	assert_non_null(strstr(err, "/nonexistent/sysom-ui"));
	snprintf(path, sizeof(path), "%s/app.js", f->ui);
	assert_int_equal(http_static_open(path, 0, &st, err, sizeof(err)), -ENOTDIR);
	assert_null(st);

	http_static_redirect(NULL, &req, &resp);
	assert_int_equal(resp.status, 302);
	assert_string_equal(header(&resp, "Location"), "/ui/");
	http_response_release(&resp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_types),
		cmocka_unit_test_setup_teardown(test_serve, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_and_redirect, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
