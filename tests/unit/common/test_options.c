/* SPDX-License-Identifier: Apache-2.0 */
/* Option tables: flags, config text, precedence, typed values and their bounds. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/options.h"

struct settings {
	char *server;
	uint32_t hz;
	double rate;
	bool idle;
	double interval;
	uint64_t size;
	char *config;
};

#define TABLE(s)                                                                               \
	{                                                                                      \
		{ "server", SYSOM_OPT_STRING, &(s)->server, 0, 0, "url", false },              \
		{ "hz", SYSOM_OPT_UINT, &(s)->hz, 10, 999, "hz", false },                      \
		{ "sample-rate", SYSOM_OPT_DOUBLE, &(s)->rate, 0.0001, 1, "rate", false },     \
		{ "include-idle", SYSOM_OPT_BOOL, &(s)->idle, 0, 0, "idle", false },           \
		{ "drain-interval", SYSOM_OPT_DURATION, &(s)->interval, 0.1, 300, "d", false }, \
		{ "spool-max-size", SYSOM_OPT_SIZE, &(s)->size, 1024, 1e12, "size", false },    \
		{ "config", SYSOM_OPT_STRING, &(s)->config, 0, 0, "config", true },            \
	}

static void test_argv(void **state)
{
	struct settings s = { 0 };
	struct sysom_option t[] = TABLE(&s);
	char err[256];
	char *argv[] = { "prog", "--server", "http://x:1", "--hz=49", "--include-idle",
			 "--drain_interval", "500ms", "--spool-max-size", "64M", "rest", NULL };

	(void)state;
	int rc = sysom_options_parse_argv(t, 7, 10, argv, err, sizeof(err));
	assert_int_equal(rc, 9); /* stops at the first non-flag argument */
	assert_string_equal(s.server, "http://x:1");
	assert_int_equal(s.hz, 49);
	assert_true(s.idle);
	assert_true(s.interval > 0.4999 && s.interval < 0.5001);
	assert_int_equal(s.size, 64ULL << 20);
	sysom_options_free(t, 7);
	assert_null(s.server);
}

static void test_argv_errors(void **state)
{
	struct settings s = { 0 };
	struct sysom_option t[] = TABLE(&s);
	char err[256];
	char *unknown[] = { "prog", "--nope", "1", NULL };
	char *range[] = { "prog", "--hz", "5000", NULL };
	char *missing[] = { "prog", "--hz", NULL };
	char *notnum[] = { "prog", "--sample-rate", "lots", NULL };
	char *negative[] = { "prog", "--hz", "-5", NULL };

	(void)state;
	assert_int_equal(sysom_options_parse_argv(t, 7, 3, unknown, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "unknown flag '--nope'"));
	assert_int_equal(sysom_options_parse_argv(t, 7, 3, range, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "outside [10, 999]"));
	assert_int_equal(sysom_options_parse_argv(t, 7, 2, missing, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "needs a value"));
	assert_int_equal(sysom_options_parse_argv(t, 7, 3, notnum, err, sizeof(err)), -SYSOM_ECONFIG);
	assert_int_equal(sysom_options_parse_argv(t, 7, 3, negative, err, sizeof(err)), -SYSOM_ECONFIG);
	sysom_options_free(t, 7);
}

static void test_config_text(void **state)
{
	struct settings s = { 0 };
	struct sysom_option t[] = TABLE(&s);
	char err[256];
	const char *text = "# comment\n\nserver = \"http://a b#c\"   # trailing comment\n"
			   "hz=77\nsample_rate = 0.25\ninclude-idle = yes\n";

	(void)state;
	assert_int_equal(sysom_options_load_text(t, 7, text, strlen(text), "f.conf", err, sizeof(err)), 0);
	assert_string_equal(s.server, "http://a b#c");
	assert_int_equal(s.hz, 77);
	assert_true(s.rate == 0.25);
	assert_true(s.idle);

	const char *bad_key = "hz = 50\nbogus = 1\n";
	assert_int_equal(sysom_options_load_text(t, 7, bad_key, strlen(bad_key), "f.conf", err, sizeof(err)),
			 -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "f.conf:2: unknown key 'bogus'"));
	const char *cli_only = "config = /etc/x\n";
	assert_int_equal(sysom_options_load_text(t, 7, cli_only, strlen(cli_only), "f.conf", err, sizeof(err)),
			 -SYSOM_ECONFIG);
	const char *no_eq = "hz 50\n";
	assert_int_equal(sysom_options_load_text(t, 7, no_eq, strlen(no_eq), "f.conf", err, sizeof(err)),
			 -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "f.conf:1: expected 'key = value'"));
	const char *bad_value = "\nhz = 1\n";
	assert_int_equal(sysom_options_load_text(t, 7, bad_value, strlen(bad_value), "f.conf", err, sizeof(err)),
			 -SYSOM_ECONFIG);
	assert_non_null(strstr(err, "f.conf:2: hz"));
	const char nul[] = "hz = 5\0";
	assert_int_equal(sysom_options_load_text(t, 7, nul, sizeof(nul) - 1, "f.conf", err, sizeof(err)),
			 -SYSOM_ECONFIG);
	sysom_options_free(t, 7);
}

static void test_peek(void **state)
{
	char *argv[] = { "prog", "--server", "http://x", "--config", "/etc/a.conf", "--hz", "9", NULL };
	char *eq[] = { "prog", "--hz", "9", "--config=/etc/b.conf", NULL };
	char *after_dashdash[] = { "prog", "--", "--config", "x", NULL };
	char *none[] = { "prog", "--server", "u", NULL };

	(void)state;
	/* Found after flag values, in both spellings, not after "--". */
	assert_string_equal(sysom_options_peek_argv(7, argv, "config"), "/etc/a.conf");
	assert_string_equal(sysom_options_peek_argv(4, eq, "config"), "/etc/b.conf");
	assert_null(sysom_options_peek_argv(4, after_dashdash, "config"));
	assert_null(sysom_options_peek_argv(3, none, "config"));
}

static void test_units(void **state)
{
	double d;
	uint64_t b;

	(void)state;
	assert_int_equal(sysom_parse_duration("30", &d), 0);
	assert_true(d == 30);
	assert_int_equal(sysom_parse_duration("5m", &d), 0);
	assert_true(d == 300);
	assert_int_equal(sysom_parse_duration("1h", &d), 0);
	assert_true(d == 3600);
	assert_int_equal(sysom_parse_duration("250ms", &d), 0);
	assert_true(d == 0.25);
	assert_int_equal(sysom_parse_duration("5x", &d), -EINVAL);
	assert_int_equal(sysom_parse_duration("-1s", &d), -EINVAL);
	assert_int_equal(sysom_parse_duration("", &d), -EINVAL);
	assert_int_equal(sysom_parse_size("512M", &b), 0);
	assert_int_equal(b, 512ULL << 20);
	assert_int_equal(sysom_parse_size("2GiB", &b), 0);
	assert_int_equal(b, 2ULL << 30);
	assert_int_equal(sysom_parse_size("64k", &b), 0);
	assert_int_equal(b, 65536);
	assert_int_equal(sysom_parse_size("10", &b), 0);
	assert_int_equal(b, 10);
	assert_int_equal(sysom_parse_size("1Q", &b), -EINVAL);
	assert_int_equal(sysom_parse_size("99999999999T", &b), -EINVAL);
}

static void test_seconds_option(void **state)
{
	uint64_t ns = 7;

	(void)state;
	assert_true(sysom_seconds_option(0, 2.5, 10, &ns));
	assert_int_equal(ns, 2500000000ull);
	assert_true(sysom_seconds_option(0.001, 1, 10, &ns));
	assert_int_equal(ns, 1000000);
	assert_true(sysom_seconds_option(10, 1, 10, &ns)); /* the bound itself is allowed */
	ns = 7;
	assert_false(sysom_seconds_option(10.5, 1, 10, &ns));
	assert_false(sysom_seconds_option(-1, 1, 10, &ns));
	assert_false(sysom_seconds_option(1e-12, 1, 10, &ns)); /* rounds to 0 ns */
	assert_false(sysom_seconds_option(NAN, 1, 10, &ns));
	assert_false(sysom_seconds_option(INFINITY, 1, 1e300, &ns));
	assert_int_equal(ns, 7); /* untouched on failure */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_argv),
		cmocka_unit_test(test_argv_errors),
		cmocka_unit_test(test_config_text),
		cmocka_unit_test(test_peek),
		cmocka_unit_test(test_units),
		cmocka_unit_test(test_seconds_option),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
