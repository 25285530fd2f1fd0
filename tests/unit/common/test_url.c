/* SPDX-License-Identifier: Apache-2.0 */
/* common/url: the http(s) URL check (scheme, authority, printable ASCII, length). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/url.h"

static void test_accepts(void **state)
{
	(void)state;
	assert_true(sysom_url_valid("http://127.0.0.1:8080", 64));
	assert_true(sysom_url_valid("https://sysom.example.com/base/path?x=1", 64));
	assert_true(sysom_url_valid("HTTP://Host", 64)); /* the scheme in either case */
	assert_true(sysom_url_valid("HtTpS://[::1]:443/", 64));
	assert_true(sysom_url_valid("http://h/%20encoded", 64));
}

static void test_scheme_and_host(void **state)
{
	(void)state;
	assert_false(sysom_url_valid(NULL, 64));
	assert_false(sysom_url_valid("", 64));
	assert_false(sysom_url_valid("127.0.0.1:8080", 64));   /* no scheme */
	assert_false(sysom_url_valid("ftp://host/", 64));
	assert_false(sysom_url_valid("http:/host", 64));
	assert_false(sysom_url_valid("httpx://host", 64));
	assert_false(sysom_url_valid("http://", 64));          /* no authority */
	assert_false(sysom_url_valid("https://", 64));
	assert_false(sysom_url_valid("http:///path", 64));
	assert_false(sysom_url_valid("//host/path", 64));
}

static void test_characters(void **state)
{
	(void)state;
	assert_false(sysom_url_valid("http://host/a b", 64));      /* space */
	assert_false(sysom_url_valid(" http://host", 64));
	assert_false(sysom_url_valid("http://host ", 64));
	assert_false(sysom_url_valid("http://host/\tx", 64));      /* control characters */
	assert_false(sysom_url_valid("http://host/\r\nX-Evil: 1", 64));
	assert_false(sysom_url_valid("http://host/\x01", 64));
	assert_false(sysom_url_valid("http://host/\x7f", 64));     /* DEL */
	assert_false(sysom_url_valid("http://h\xc3\xa9st/", 64));  /* not ASCII */
}

static void test_length(void **state)
{
	char url[80];

	(void)state;
	memset(url, 'a', sizeof(url));
	memcpy(url, "http://", 7);
	url[32] = '\0';
	assert_true(sysom_url_valid(url, 32));  /* exactly max_len bytes */
	assert_false(sysom_url_valid(url, 31));
	url[32] = 'a';
	url[79] = '\0';
	assert_false(sysom_url_valid(url, 32));
	assert_true(sysom_url_valid(url, 79));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepts),
		cmocka_unit_test(test_scheme_and_host),
		cmocka_unit_test(test_characters),
		cmocka_unit_test(test_length),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
