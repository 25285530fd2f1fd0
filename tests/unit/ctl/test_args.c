/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl command lines: commands, options, validation, defaults and the request URLs. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/token.h"
#include "ctl/ctl.h"

#define MAXARGS 24

/* Parses a space-separated command line (no quoting; "_" in a token becomes a space). */
static int parse(const char *line, const char *env, struct ctl_args *out, char *err, size_t errlen)
{
	char *copy = strdup(line), *save = NULL;
	char *argv[MAXARGS] = { "sysomctl" };
	int argc = 1, rc;

	assert_non_null(copy);
	for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		for (char *p = tok; *p; p++)
			if (*p == '_')
				*p = ' ';
		assert_true(argc < MAXARGS);
		argv[argc++] = tok;
	}
	rc = ctl_args_parse(argc, argv, env, out, err, errlen);
	free(copy);
	return rc;
}

static void expect_url(const char *line, const char *env, const char *want)
{
	struct ctl_args a;
	struct byte_buf url;
	char err[256] = "";
	int rc = parse(line, env, &a, err, sizeof(err));

	if (rc != 0)
		fail_msg("'%s': rc %d: %s", line, rc, err);
	assert_int_equal(ctl_url_build(&a, &url), 0);
	if (strcmp((const char *)url.data, want) != 0)
		fail_msg("'%s': URL %s, want %s", line, (const char *)url.data, want);
	byte_buf_free(&url);
	ctl_args_free(&a);
}

static void test_urls(void **state)
{
	(void)state;
	expect_url("nodes", NULL, "http://127.0.0.1:8080/api/v1/nodes");
	expect_url("nodes", "", "http://127.0.0.1:8080/api/v1/nodes");
	expect_url("nodes", "http://env:9/", "http://env:9/api/v1/nodes");
	expect_url("--server http://srv:1234// nodes", "http://env:9", "http://srv:1234/api/v1/nodes");
	expect_url("--server=https://srv nodes --format json", NULL, "https://srv/api/v1/nodes");
	expect_url("processes --node gpu-1 --from -5m --to now --limit 50", NULL,
		   "http://127.0.0.1:8080/api/v1/processes?node=gpu-1&from=-5m&to=now&limit=50");
	/* The top summary is rendered from JSON. */
	expect_url("flamegraph", NULL, "http://127.0.0.1:8080/api/v1/flamegraph?format=json");
	expect_url("flamegraph --format folded --pid 42 --comm a_b;c --top 3", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph?format=folded&pid=42&comm=a%20b%3Bc");
	expect_url("flamegraph --from 2026-11-22T10:00:00+02:00 --to=1700000000.5 --format json", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph?format=json&from=2026-11-22T10%3A00%3A00%2B02%3A00"
		   "&to=1700000000.5");
	expect_url("flamegraph --kind gpu-launch --format folded", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph?format=folded&kind=gpu-launch");
	expect_url("jobs", NULL, "http://127.0.0.1:8080/api/v1/jobs");
	/* The job is a path segment: '/' and spaces are encoded. */
	expect_url("collectives --job simjob-42", NULL,
		   "http://127.0.0.1:8080/api/v1/jobs/simjob-42/collectives");
	expect_url("collectives --job a/b_c --comm 00000000000000ab --op AllReduce --from -5m "
		   "--limit 20", NULL,
		   "http://127.0.0.1:8080/api/v1/jobs/a%2Fb%20c/collectives?comm=00000000000000ab"
		   "&op=AllReduce&from=-5m&limit=20");
	expect_url("gpu --job simjob-42 --rank 3 --from -5m", NULL,
		   "http://127.0.0.1:8080/api/v1/jobs/simjob-42/gpu?rank=3&from=-5m");
	expect_url("stragglers --job j --comm abc --k 3 --window 50 --min-excess-ms 2", NULL,
		   "http://127.0.0.1:8080/api/v1/jobs/j/stragglers?comm=abc&k=3&window=50"
		   "&min_excess_ms=2");
	expect_url("diagnose --job j --status open --from -1h --limit 5", NULL,
		   "http://127.0.0.1:8080/api/v1/diagnoses?job=j&from=-1h&status=open&limit=5");
	expect_url("diagnose --id 42", NULL, "http://127.0.0.1:8080/api/v1/diagnoses/42?format=text");
	expect_url("diagnose --id 42 --format json", NULL,
		   "http://127.0.0.1:8080/api/v1/diagnoses/42?format=json");
	expect_url("diff --job j --a 0 --b 3 --from -5m", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph/diff?job=j&a=0&b=3&from=-5m");
	expect_url("flamegraph --kind gpu-time --format folded", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph?format=folded&kind=gpu-time");
	/* Exports: the format travels as is; -o is the client's business. */
	expect_url("flamegraph --format pprof -o /tmp/p.pb.gz --pid 7 --job j", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph?job=j&format=pprof&pid=7");
	expect_url("flamegraph --kind gpu-launch --format speedscope --output x.json", NULL,
		   "http://127.0.0.1:8080/api/v1/flamegraph?format=speedscope&kind=gpu-launch");
	/* The trace's job: an argument (before or after flags) or --job. */
	expect_url("trace simjob-42", NULL, "http://127.0.0.1:8080/api/v1/jobs/simjob-42/trace");
	expect_url("trace --from -5m a/b -o t.json --to now --limit 10", NULL,
		   "http://127.0.0.1:8080/api/v1/jobs/a%2Fb/trace?from=-5m&to=now&limit=10");
	expect_url("trace --job j --comm abc", NULL,
		   "http://127.0.0.1:8080/api/v1/jobs/j/trace?comm=abc");
}

/* -o and the export formats land in the parsed arguments. */
static void test_exports(void **state)
{
	struct ctl_args a;
	char err[256] = "";

	(void)state;
	assert_int_equal(parse("flamegraph --format pprof -o out.pb.gz", NULL, &a, err, sizeof(err)), 0);
	assert_int_equal(a.format, CTL_FORMAT_PPROF);
	assert_string_equal(a.output, "out.pb.gz");
	ctl_args_free(&a);
	assert_int_equal(parse("flamegraph --format speedscope", NULL, &a, err, sizeof(err)), 0);
	assert_int_equal(a.format, CTL_FORMAT_SPEEDSCOPE);
	assert_null(a.output);
	ctl_args_free(&a);
	assert_int_equal(parse("trace j -o t.json", NULL, &a, err, sizeof(err)), 0);
	assert_int_equal(a.command, CTL_TRACE);
	assert_int_equal(a.format, CTL_FORMAT_JSON);
	assert_string_equal(a.job, "j");
	assert_string_equal(a.output, "t.json");
	ctl_args_free(&a);
}

static void test_fields(void **state)
{
	struct ctl_args a;
	char err[256];

	(void)state;
	assert_int_equal(parse("--token-file /t flamegraph --node n1 --pid 7 --limit 9 --top 4", NULL,
			       &a, err, sizeof(err)), 0);
	assert_int_equal(a.command, CTL_FLAMEGRAPH);
	assert_int_equal(a.format, CTL_FORMAT_TOP);
	assert_string_equal(a.token_file, "/t");
	assert_string_equal(a.node, "n1");
	assert_string_equal(a.pid, "7");
	assert_null(a.comm);
	assert_int_equal(a.limit, 9);
	assert_int_equal(a.top, 4);
	ctl_args_free(&a);
	assert_int_equal(parse("processes", NULL, &a, err, sizeof(err)), 0);
	assert_int_equal(a.format, CTL_FORMAT_TABLE);
	assert_int_equal(a.top, CTL_DEFAULT_TOP);
	assert_int_equal(a.limit, 0);
	ctl_args_free(&a);
}

static void expect_error(const char *line, const char *fragment)
{
	struct ctl_args a = { .limit = 77 };
	char err[256] = "";
	int rc = parse(line, NULL, &a, err, sizeof(err));

	if (rc != -SYSOM_ECONFIG)
		fail_msg("'%s': rc %d, want -SYSOM_ECONFIG", line, rc);
	if (!strstr(err, fragment))
		fail_msg("'%s': '%s' lacks '%s'", line, err, fragment);
	assert_int_equal(a.limit, 77); /* untouched */
}

static void test_errors(void **state)
{
	(void)state;
	expect_error("", "missing command");
	expect_error("--server http://x", "missing command");
	expect_error("status", "unknown command 'status'");
	expect_error("--bogus nodes", "unknown flag '--bogus'");
	expect_error("nodes --pid 1", "unknown flag '--pid'");
	expect_error("processes --top 3", "unknown flag '--top'");
	expect_error("nodes extra", "unexpected argument 'extra'");
	expect_error("trace", "--job is required");
	expect_error("trace a b", "unexpected argument 'b'");
	expect_error("trace --job a b", "unexpected argument 'b'");
	expect_error("trace a --format pprof", "unknown flag '--format'");
	expect_error("trace a --limit 200001", "limit");
	expect_error("diff --job j --a 0 --b 1 --format pprof", "not one of top, folded, json");
	expect_error("collectives --job j --format speedscope", "not one of table, json");
	expect_error("flamegraph --format svg", "top, folded, json, pprof, speedscope");
	expect_error("flamegraph -o", "needs a value");
	expect_error("flamegraph --pid abc", "--pid: 'abc'");
	expect_error("flamegraph --pid -1", "--pid");
	expect_error("flamegraph --pid 4294967296", "--pid");
	expect_error("flamegraph --format svg", "top, folded, json");
	expect_error("processes --format top", "table, json");
	expect_error("nodes --format folded", "table, json");
	expect_error("flamegraph --limit 0", "limit");
	expect_error("flamegraph --limit 100001", "limit");
	expect_error("flamegraph --top 0", "top");
	expect_error("flamegraph --node", "needs a value");
	expect_error("--server ftp://x nodes", "not an http");
	expect_error("--server localhost:8080 nodes", "not an http");
	expect_error("collectives", "--job is required");
	expect_error("collectives --job=", "--job is required");
	expect_error("collectives --job j --limit 10001", "limit");
	expect_error("collectives --job j --format folded", "table, json");
	expect_error("collectives --job j --pid 3", "unknown flag '--pid'");
	expect_error("gpu", "gpu: --job is required");
	expect_error("stragglers", "stragglers: --job is required");
	expect_error("diagnose --id x", "--id 'x' is not a diagnosis id");
	expect_error("diagnose --id 0", "is not a diagnosis id");
	expect_error("diagnose --id 3 --job j", "--id takes no other filter");
	expect_error("diagnose --status closed", "--status must be open or all");
	expect_error("diagnose --id 3 --format table", "is not one of text, json");
	expect_error("diagnose --format text", "is not one of table, json");
	expect_error("diff --job j --a 0", "--b must be a rank");
	expect_error("diff --job j --a x --b 1", "--a must be a rank");
	expect_error("stragglers --job j --pid 3", "unknown flag '--pid'");
	expect_error("gpu --job j --rank -1", "--rank");
	expect_error("gpu --job j --rank x3", "--rank");
	expect_error("gpu --job j --format folded", "table, json");
	expect_error("flamegraph --kind gpu", "cpu, gpu-launch, gpu-time, off-cpu or wall");
	expect_error("jobs --job j", "unknown flag '--job'");
	expect_error("flamegraph --kind gpu", "not cpu, gpu-launch, gpu-time, off-cpu or wall");
	expect_error("flamegraph --kind wall --job j --rank x", "--rank");
}

static void test_help(void **state)
{
	struct ctl_args a;
	char err[256];
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	assert_int_equal(parse("--help", NULL, &a, err, sizeof(err)), 1);
	assert_true(a.help);
	ctl_args_free(&a);
	assert_int_equal(parse("help", NULL, &a, err, sizeof(err)), 1);
	ctl_args_free(&a);
	assert_int_equal(parse("flamegraph --help", NULL, &a, err, sizeof(err)), 1);
	ctl_args_free(&a);
	f = open_memstream(&text, &len);
	ctl_usage(f);
	fclose(f);
	assert_non_null(strstr(text, "flamegraph"));
	assert_non_null(strstr(text, "SYSOM_SERVER"));
	free(text);
}

static void test_token_file(void **state)
{
	char path[] = "/tmp/sysomctl-token-XXXXXX";
	char err[256], *token = NULL;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "  s3cret \nsecond line\n", 22), 22);
	close(fd);
	assert_int_equal(sysom_token_file_read(path, &token, NULL, err, sizeof(err)), 0);
	assert_string_equal(token, "s3cret");
	free(token);
	token = NULL;
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "   \n", 4), 4);
	close(fd);
	assert_int_equal(sysom_token_file_read(path, &token, NULL, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_null(token);
	unlink(path);
	assert_int_equal(sysom_token_file_read(path, &token, NULL, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, path));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_urls),
		cmocka_unit_test(test_fields),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_help),
		cmocka_unit_test(test_token_file),
		cmocka_unit_test(test_exports),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
