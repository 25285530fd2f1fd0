/* SPDX-License-Identifier: Apache-2.0 */
/* common/compress: bounded decompression and its accounting — declared sizes allocate once,
 * undeclared ones grow in steps, what is accounted covers what is allocated (measured), limits
 * and bad frames are refused before allocating, a refusal of the accounting ends it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "common/compress.h"
#include "common/error.h"
#include "tests/support/heap_peak.h"

/* What the accounting was told. */
struct ledger {
	uint64_t last, peak;
	unsigned calls, raises;
	unsigned fail_at; /* refuse the n-th raise (1-based) with -EAGAIN; 0: never */
};

static int ledger_account(void *ctx, uint64_t bytes)
{
	struct ledger *l = ctx;

	l->calls++;
	if (bytes > l->last) {
		l->raises++;
		if (l->fail_at && l->raises == l->fail_at)
			return -EAGAIN;
	}
	l->last = bytes;
	if (bytes > l->peak)
		l->peak = bytes;
	return 0;
}

/* Compressible but not trivial: a repeating 4 KiB pattern of pseudo-random bytes. */
static uint8_t *pattern(size_t len)
{
	uint8_t *p = malloc(len ? len : 1);
	uint32_t x = 12345;

	assert_non_null(p);
	for (size_t i = 0; i < len; i++) {
		if (i % 4096 == 0)
			x = 12345;
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
	return p;
}

/* One frame without a declared content size (streamed), window 2^window_log. */
static void compress_streamed(const uint8_t *data, size_t len, int window_log,
			      struct byte_buf *out)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t cap = ZSTD_compressBound(len) + 64;
	uint8_t *dst = byte_buf_reserve(out, cap);

	assert_non_null(c);
	assert_non_null(dst);
	ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, window_log);
	ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
	ZSTD_outBuffer ob = { dst, cap, 0 };
	ZSTD_inBuffer ib = { data, len, 0 };
	/* Feeding it in two calls keeps the size unknown to the frame header. */
	ib.size = len / 2;
	assert_false(ZSTD_isError(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_continue)));
	ib.size = len;
	assert_int_equal(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end), 0);
	out->len += ob.pos;
	ZSTD_freeCCtx(c);
}

static int decompress(const struct byte_buf *z, size_t max_output, struct ledger *l,
		      struct byte_buf *out, uint64_t *heap_peak)
{
	struct sysom_zstd_bounds b = { .max_output = max_output, .account = ledger_account,
				       .account_ctx = l };
	int rc;

	heap_peak_begin();
	rc = sysom_zstd_decompress_bounded(z->data, z->len, &b, out);
	*heap_peak = heap_peak_end();
	return rc;
}

static void test_declared_size_allocates_once(void **state)
{
	const size_t n = 3u << 20;
	uint8_t *data = pattern(n);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;

	(void)state;
	assert_int_equal(sysom_zstd_compress(data, n, 3, &z), 0);
	assert_int_equal(decompress(&z, 16u << 20, &l, &out, &heap), 0);
	assert_int_equal(out.len, n);
	assert_memory_equal(out.data, data, n);
	assert_int_equal(out.cap, n + 1); /* the declared size and the byte proving an excess */
	assert_int_equal(l.raises, 2); /* the context, then the one buffer */
	assert_int_equal(l.last, out.cap); /* the context is gone; the buffer stays */
	assert_true(l.peak >= n + 1);
	assert_true(l.peak < n + 1 + sysom_zstd_context_max());
	if (heap_peak_available()) {
		print_message("# declared 3 MiB: accounted %llu, allocated at most %llu\n",
			      (unsigned long long)l.peak, (unsigned long long)heap);
		assert_true(heap <= l.peak);
		assert_true(heap >= n); /* the measurement sees the buffer */
	}
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

static void test_undeclared_size_grows_in_steps(void **state)
{
	const size_t n = 5u << 20;
	uint8_t *data = pattern(n);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;

	(void)state;
	compress_streamed(data, n, 20, &z);
	assert_int_equal(ZSTD_getFrameContentSize(z.data, z.len), ZSTD_CONTENTSIZE_UNKNOWN);
	assert_int_equal(decompress(&z, 16u << 20, &l, &out, &heap), 0);
	assert_int_equal(out.len, n);
	assert_memory_equal(out.data, data, n);
	assert_true(l.raises > 3); /* the context, then the doublings */
	assert_true(out.cap - out.len <= out.cap / 8); /* a doubled buffer's tail is given back */
	assert_int_equal(l.last, out.cap);
	/* Growing from c to 2c holds both for a moment: the accounting said so. */
	assert_true(l.peak <= sysom_zstd_context_max() + 3 * (uint64_t)n);
	if (heap_peak_available()) {
		print_message("# undeclared 5 MiB: accounted %llu, allocated at most %llu\n",
			      (unsigned long long)l.peak, (unsigned long long)heap);
		assert_true(heap <= l.peak);
	}
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

static void test_declared_excess_refused_before_allocating(void **state)
{
	const size_t n = 2u << 20;
	uint8_t *data = calloc(1, n);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;

	(void)state;
	assert_non_null(data);
	assert_int_equal(sysom_zstd_compress(data, n, 3, &z), 0);
	assert_int_equal(decompress(&z, n - 1, &l, &out, &heap), -SYSOM_ELIMIT);
	assert_int_equal(l.raises, 0);
	assert_null(out.data);
	if (heap_peak_available())
		assert_true(heap < 4096);
	/* Exactly the limit is fine. */
	assert_int_equal(decompress(&z, n, &l, &out, &heap), 0);
	assert_int_equal(out.len, n);
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

static void test_undeclared_bomb_stops_at_the_limit(void **state)
{
	const size_t n = 8u << 20, limit = 3u << 20;
	uint8_t *data = calloc(1, n);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;

	(void)state;
	assert_non_null(data);
	compress_streamed(data, n, 20, &z);
	assert_int_equal(decompress(&z, limit, &l, &out, &heap), -SYSOM_ELIMIT);
	assert_true(out.cap <= limit + 1);
	assert_int_equal(l.last, out.cap);
	assert_true(l.peak <= sysom_zstd_context_max() + 2 * ((uint64_t)limit + 1));
	if (heap_peak_available())
		assert_true(heap <= l.peak);
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

static void test_refused_accounting_ends_it(void **state)
{
	const size_t n = 4u << 20;
	uint8_t *data = pattern(n);
	struct byte_buf z = { 0 }, out = { 0 };
	uint64_t heap;

	(void)state;
	compress_streamed(data, n, 20, &z);
	/* The context is refused: nothing is allocated. */
	struct ledger l = { .fail_at = 1 };
	assert_int_equal(decompress(&z, 16u << 20, &l, &out, &heap), -EAGAIN);
	assert_null(out.data);
	assert_int_equal(l.last, 0);
	/* The third step (a doubling) is refused: the decompression stops there. */
	struct ledger m = { .fail_at = 3 };
	assert_int_equal(decompress(&z, 16u << 20, &m, &out, &heap), -EAGAIN);
	assert_true(out.len < n);
	assert_int_equal(m.last, out.cap);
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

static void test_large_window_refused_from_the_header(void **state)
{
	uint8_t *data = pattern(1000);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;

	(void)state;
	compress_streamed(data, 1000, SYSOM_ZSTD_WINDOW_LOG_MAX + 1, &z);
	assert_int_equal(decompress(&z, 1u << 20, &l, &out, &heap), -SYSOM_ELIMIT);
	assert_int_equal(l.raises, 0);
	byte_buf_free(&z);
	compress_streamed(data, 1000, SYSOM_ZSTD_WINDOW_LOG_MAX, &z);
	assert_int_equal(decompress(&z, 1u << 20, &l, &out, &heap), 0);
	assert_int_equal(out.len, 1000);
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

static void test_malformed_refused_before_allocating(void **state)
{
	uint8_t *data = pattern(100000);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;
	static const uint8_t garbage[] = "definitely not zstd";

	(void)state;
	struct byte_buf g = { .data = (uint8_t *)garbage, .len = sizeof(garbage) };
	assert_int_equal(decompress(&g, 1u << 20, &l, &out, &heap), -SYSOM_ECORRUPT);
	assert_int_equal(sysom_zstd_compress(data, 100000, 3, &z), 0);
	z.len -= 10; /* truncated */
	assert_int_equal(decompress(&z, 1u << 20, &l, &out, &heap), -SYSOM_ECORRUPT);
	assert_int_equal(l.raises, 0);
	assert_null(out.data);
	struct byte_buf empty = { 0 };
	assert_int_equal(decompress(&empty, 1u << 20, &l, &out, &heap), -SYSOM_ECORRUPT);
	byte_buf_free(&z);
	free(data);
}

static void test_several_frames(void **state)
{
	uint8_t *data = pattern(300000);
	struct byte_buf z = { 0 }, out = { 0 };
	struct ledger l = { 0 };
	uint64_t heap;
	/* A skippable frame (magic 0x184D2A50, 4-byte length, payload) between two frames. */
	static const uint8_t skippable[] = { 0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'x', 'y', 'z' };

	(void)state;
	assert_int_equal(sysom_zstd_compress(data, 100000, 3, &z), 0);
	byte_buf_append(&z, skippable, sizeof(skippable));
	assert_int_equal(sysom_zstd_compress(data + 100000, 200000, 3, &z), 0);
	assert_int_equal(decompress(&z, 1u << 20, &l, &out, &heap), 0);
	assert_int_equal(out.len, 300000);
	assert_memory_equal(out.data, data, 300000);
	assert_int_equal(out.cap, 300001); /* the declared sizes add up: one allocation */
	byte_buf_free(&out);
	/* The sum is what the limit applies to. */
	assert_int_equal(decompress(&z, 299999, &l, &out, &heap), -SYSOM_ELIMIT);
	byte_buf_free(&out);
	byte_buf_free(&z);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_declared_size_allocates_once),
		cmocka_unit_test(test_undeclared_size_grows_in_steps),
		cmocka_unit_test(test_declared_excess_refused_before_allocating),
		cmocka_unit_test(test_undeclared_bomb_stops_at_the_limit),
		cmocka_unit_test(test_refused_accounting_ends_it),
		cmocka_unit_test(test_large_window_refused_from_the_header),
		cmocka_unit_test(test_malformed_refused_before_allocating),
		cmocka_unit_test(test_several_frames),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
