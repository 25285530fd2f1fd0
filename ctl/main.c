/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl: the SRE's command line over sysom-server's query API. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <curl/curl.h>

#include "common/error.h"
#include "common/token.h"
#include "ctl/ctl.h"

/* Writes the answer as it came to a->output; returns the exit status. */
static int output_file(const struct ctl_args *a, const struct byte_buf *body)
{
	FILE *f = fopen(a->output, "wb");
	bool ok;

	if (!f) {
		fprintf(stderr, "sysomctl: cannot create %s: %s\n", a->output, strerror(errno));
		return EXIT_FAILURE;
	}
	ok = !body->len || fwrite(body->data, 1, body->len, f) == body->len;
	ok = fclose(f) == 0 && ok;
	if (!ok) {
		fprintf(stderr, "sysomctl: cannot write %s: %s\n", a->output, strerror(errno));
		return EXIT_FAILURE;
	}
	fprintf(stderr, "sysomctl: wrote %zu bytes to %s\n", body->len, a->output);
	return EXIT_SUCCESS;
}

/* Prints the response as the command's format asks; returns the exit status. */
static int output(const struct ctl_args *a, const struct byte_buf *body)
{
	json_t *doc;
	json_error_t jerr;
	int rc;

	if (a->output && a->format != CTL_FORMAT_TOP && a->format != CTL_FORMAT_TABLE)
		return output_file(a, body);
	if (a->output && !freopen(a->output, "w", stdout)) { /* a rendered summary */
		fprintf(stderr, "sysomctl: cannot create %s: %s\n", a->output, strerror(errno));
		return EXIT_FAILURE;
	}
	if (a->format == CTL_FORMAT_PPROF && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "sysomctl: a pprof profile is binary (gzip): write it with -o FILE\n");
		return EXIT_FAILURE;
	}
	if (a->command == CTL_DIFF && a->format == CTL_FORMAT_TOP) {
		rc = ctl_diff_render((const char *)body->data, body->len, a->top,
				     (uint32_t)strtoul(a->rank_a, NULL, 10),
				     (uint32_t)strtoul(a->rank_b, NULL, 10), stdout);
		if (rc) {
			fprintf(stderr, "sysomctl: unexpected answer from the server\n");
			return EXIT_FAILURE;
		}
		return fflush(stdout) ? EXIT_FAILURE : EXIT_SUCCESS;
	}
	if (a->format == CTL_FORMAT_JSON || a->format == CTL_FORMAT_FOLDED ||
	    a->format == CTL_FORMAT_TEXT || a->format == CTL_FORMAT_PPROF ||
	    a->format == CTL_FORMAT_SPEEDSCOPE) {
		if (body->len && fwrite(body->data, 1, body->len, stdout) != body->len)
			return EXIT_FAILURE;
		return fflush(stdout) ? EXIT_FAILURE : EXIT_SUCCESS;
	}
	doc = json_loadb(body->len ? (const char *)body->data : "", body->len, 0, &jerr);
	if (!doc) {
		fprintf(stderr, "sysomctl: the server's answer is not JSON: %s\n", jerr.text);
		return EXIT_FAILURE;
	}
	switch (a->command) {
	case CTL_NODES:
		rc = ctl_nodes_render(doc, stdout);
		break;
	case CTL_JOBS:
		rc = ctl_jobs_render(doc, stdout);
		break;
	case CTL_COLLECTIVES:
		rc = ctl_collectives_render(doc, stdout);
		break;
	case CTL_GPU:
		rc = ctl_gpu_render(doc, a->top, stdout);
		break;
	case CTL_STRAGGLERS:
		rc = ctl_stragglers_render(doc, stdout);
		break;
	case CTL_PATTERNS:
		rc = ctl_patterns_render(doc, a->top, stdout);
		break;
	case CTL_HOSTS:
		rc = ctl_hosts_render(doc, stdout);
		break;
	case CTL_DIAGNOSE:
		rc = ctl_diagnoses_render(doc, stdout);
		break;
	case CTL_PROCESSES:
		rc = ctl_processes_render(doc, stdout);
		break;
	default:
		rc = ctl_top_render(doc, a->top, stdout);
		break;
	}
	json_decref(doc);
	if (rc) {
		fprintf(stderr, "sysomctl: unexpected answer from the server: %s\n", sysom_strerror(rc));
		return EXIT_FAILURE;
	}
	return fflush(stdout) ? EXIT_FAILURE : EXIT_SUCCESS;
}

int main(int argc, char **argv)
{
	struct ctl_args a;
	struct byte_buf url = { 0 }, body = { 0 };
	char err[512], *token = NULL;
	long status = 0;
	int rc, exit_status = EXIT_FAILURE;

	rc = ctl_args_parse(argc, argv, getenv("SYSOM_SERVER"), &a, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "sysomctl: %s\n", err);
		return 2;
	}
	if (rc == 1) {
		ctl_usage(stdout);
		ctl_args_free(&a);
		return EXIT_SUCCESS;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "sysomctl: cannot initialise libcurl\n");
		goto cleanup;
	}
	if (a.token_file && sysom_token_file_read(a.token_file, &token, NULL, err, sizeof(err))) {
		fprintf(stderr, "sysomctl: %s\n", err);
		goto cleanup;
	}
	if (ctl_url_build(&a, &url)) {
		fprintf(stderr, "sysomctl: out of memory\n");
		goto cleanup;
	}
	if (ctl_http_get((const char *)url.data, token, &body, &status, err, sizeof(err))) {
		fprintf(stderr, "sysomctl: %s\n", err);
		goto cleanup;
	}
	if (status < 200 || status > 299) {
		ctl_error_text(body.data, body.len, err, sizeof(err));
		fprintf(stderr, "sysomctl: server answered %ld: %s\n", status, err);
		if (status == 401)
			fprintf(stderr, "sysomctl: (pass the API token with --token-file)\n");
		goto cleanup;
	}
	exit_status = output(&a, &body);
cleanup:
	if (token) {
		explicit_bzero(token, strlen(token));
		free(token);
	}
	byte_buf_free(&url);
	byte_buf_free(&body);
	ctl_args_free(&a);
	curl_global_cleanup();
	return exit_status;
}
