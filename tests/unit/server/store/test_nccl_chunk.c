/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL call chunks (server/store/nccl_chunk.c): round trips at the fields' limits, and every
 * malformed blob refused with a clear error. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/compress.h"
#include "common/error.h"
#include "server/store/nccl_chunk.h"

static void assert_same(const struct nccl_chunk_call *a, const struct nccl_chunk_call *b)
{
	assert_int_equal(a->tid, b->tid);
	assert_int_equal(a->seq, b->seq);
	assert_int_equal(a->entry_ns, b->entry_ns);
	assert_int_equal(a->exit_ns, b->exit_ns);
	assert_int_equal(a->count, b->count);
	assert_int_equal(a->bytes, b->bytes);
	assert_int_equal(a->stream, b->stream);
	assert_int_equal(a->peer, b->peer);
	assert_int_equal(a->result, b->result);
	assert_int_equal(a->rank, b->rank);
	assert_int_equal(a->datatype, b->datatype);
	assert_int_equal(a->redop, b->redop);
	assert_int_equal(a->flags, b->flags);
}

/* Extremes (and going backwards in seq and time, exit before entry) survive the deltas. */
static void test_round_trip_extremes(void **state)
{
	(void)state;
	const struct nccl_chunk_call in[] = {
		{ .tid = UINT32_MAX, .seq = UINT64_MAX, .entry_ns = UINT64_MAX, .exit_ns = 0,
		  .count = UINT64_MAX, .bytes = UINT64_MAX, .stream = UINT64_MAX, .peer = INT32_MIN,
		  .result = INT32_MAX, .rank = -1, .datatype = 255, .redop = 255, .flags = 255 },
		{ .tid = 0, .seq = 0, .entry_ns = 0, .exit_ns = UINT64_MAX, .peer = INT32_MAX,
		  .result = INT32_MIN, .rank = INT32_MIN },
		{ .tid = 7, .seq = 5, .entry_ns = 1700000000000000000ULL,
		  .exit_ns = 1700000000000001000ULL, .count = 1024, .bytes = 4096, .stream = 0x7f00,
		  .peer = -1, .rank = 3, .datatype = 7, .redop = 0 },
		{ .tid = 7, .seq = 4, .entry_ns = 1699999999999999000ULL,
		  .exit_ns = 1699999999999998000ULL, .rank = 3 },
	};
	const size_t n = sizeof(in) / sizeof(in[0]);
	struct byte_buf blob = { 0 };
	struct nccl_chunk_call *out;
	size_t m;

	assert_int_equal(nccl_chunk_encode(in, n, &blob), 0);
	assert_int_equal(blob.data[0], NCCL_CHUNK_VERSION);
	assert_int_equal(nccl_chunk_decode(blob.data, blob.len, &out, &m), 0);
	assert_int_equal(m, n);
	for (size_t i = 0; i < n; i++)
		assert_same(&in[i], &out[i]);
	free(out);
	byte_buf_free(&blob);
}

/* A full chunk of a steady collective stream is a few bytes per call (what the store gains
 * over one row per call); an empty or oversized chunk is not encoded. */
static void test_full_chunk_is_small(void **state)
{
	(void)state;
	struct nccl_chunk_call *in = calloc(NCCL_CHUNK_MAX_CALLS + 1, sizeof(*in));
	struct byte_buf blob = { 0 };
	struct nccl_chunk_call *out;
	size_t m;

	assert_non_null(in);
	for (size_t i = 0; i < NCCL_CHUNK_MAX_CALLS; i++)
		in[i] = (struct nccl_chunk_call){ .tid = 4242, .seq = 1000 + i,
						  .entry_ns = 1700000000000000000ULL + i * 1160000,
						  .exit_ns = 1700000000000000000ULL + i * 1160000 + 900000 + i % 7 * 1000,
						  .count = 1 << 20, .bytes = 4 << 20, .stream = 0x5000,
						  .peer = -1, .rank = 2, .datatype = 7, .redop = 0 };
	assert_int_equal(nccl_chunk_encode(in, NCCL_CHUNK_MAX_CALLS, &blob), 0);
	assert_true(blob.len < NCCL_CHUNK_MAX_CALLS * 8);
	assert_int_equal(nccl_chunk_decode(blob.data, blob.len, &out, &m), 0);
	assert_int_equal(m, NCCL_CHUNK_MAX_CALLS);
	assert_same(&in[NCCL_CHUNK_MAX_CALLS - 1], &out[NCCL_CHUNK_MAX_CALLS - 1]);
	free(out);
	blob.len = 0;
	assert_int_equal(nccl_chunk_encode(in, 0, &blob), -EINVAL);
	assert_int_equal(nccl_chunk_encode(in, NCCL_CHUNK_MAX_CALLS + 1, &blob), -EINVAL);
	byte_buf_free(&blob);
	free(in);
}

/* A blob with the given header and a payload compressed as given. */
static void blob_make(struct byte_buf *b, uint8_t version, uint64_t count, uint64_t raw_len,
		      const uint8_t *payload, size_t payload_len)
{
	uint8_t hdr[1 + 20];
	size_t n = 0;
	uint64_t v[2] = { count, raw_len };

	hdr[n++] = version;
	for (int i = 0; i < 2; i++) {
		uint64_t x = v[i];
		do {
			hdr[n++] = (uint8_t)((x & 0x7f) | (x >> 7 ? 0x80 : 0));
			x >>= 7;
		} while (x);
	}
	b->len = 0;
	byte_buf_append(b, hdr, n);
	assert_int_equal(sysom_zstd_compress(payload, payload_len, 1, b), 0);
}

static void expect(const struct byte_buf *b, int want)
{
	struct nccl_chunk_call *out = (void *)1;
	size_t m = 99;

	assert_int_equal(nccl_chunk_decode(b->data, b->len, &out, &m), want);
	assert_null(out);
	assert_int_equal(m, 0);
}

static void test_malformed_refused(void **state)
{
	(void)state;
	/* One good call: 13 one-byte varints. */
	uint8_t good[13] = { 1, 2, 4, 6, 8, 10, 1, 0, 2, 7, 0, 0, 0 };
	uint8_t payload[64];
	struct byte_buf b = { 0 };

	blob_make(&b, NCCL_CHUNK_VERSION, 1, sizeof(good), good, sizeof(good));
	struct nccl_chunk_call *out;
	size_t m;
	assert_int_equal(nccl_chunk_decode(b.data, b.len, &out, &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(out[0].seq, 1);
	assert_int_equal(out[0].peer, -1);
	assert_int_equal(out[0].rank, 1);
	free(out);
	/* Every truncation of a good blob. */
	for (size_t cut = 0; cut < b.len; cut++) {
		struct byte_buf t = { 0 };
		byte_buf_append(&t, b.data, cut);
		struct nccl_chunk_call *o = (void *)1;
		size_t k = 9;
		assert_int_not_equal(nccl_chunk_decode(t.data, t.len, &o, &k), 0);
		assert_null(o);
		byte_buf_free(&t);
	}
	blob_make(&b, 2, 1, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* unknown version */
	blob_make(&b, NCCL_CHUNK_VERSION, 0, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* no calls */
	blob_make(&b, NCCL_CHUNK_VERSION, 2, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* fewer calls than declared */
	blob_make(&b, NCCL_CHUNK_VERSION, NCCL_CHUNK_MAX_CALLS + 1, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ELIMIT);
	blob_make(&b, NCCL_CHUNK_VERSION, 1, NCCL_CHUNK_CALL_MAX_BYTES + 1, good, sizeof(good));
	expect(&b, -SYSOM_ELIMIT); /* more payload than a call can take */
	blob_make(&b, NCCL_CHUNK_VERSION, 1, sizeof(good) + 1, good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* declared length differs */
	memcpy(payload, good, sizeof(good));
	payload[sizeof(good)] = 0;
	blob_make(&b, NCCL_CHUNK_VERSION, 1, sizeof(good) + 1, payload, sizeof(good) + 1);
	expect(&b, -SYSOM_ECORRUPT); /* trailing byte */
	memcpy(payload, good, sizeof(good));
	payload[9] = 0x80; /* datatype 256 (two bytes) */
	payload[10] = 0x02;
	memcpy(payload + 11, good + 10, 3);
	blob_make(&b, NCCL_CHUNK_VERSION, 1, 14, payload, 14);
	expect(&b, -SYSOM_ECORRUPT); /* a field past its width */
	/* tid as an 11-byte varint */
	memset(payload, 0xff, 10);
	payload[10] = 0x01;
	memcpy(payload + 11, good + 1, 12);
	blob_make(&b, NCCL_CHUNK_VERSION, 1, 23, payload, 23);
	expect(&b, -SYSOM_ECORRUPT);
	/* peer past int32 */
	memcpy(payload, good, 6);
	const uint8_t big[] = { 0x80, 0x80, 0x80, 0x80, 0x10 }; /* zigzag 2^32: +2^31 */
	memcpy(payload + 6, big, sizeof(big));
	memcpy(payload + 6 + sizeof(big), good + 7, 6);
	blob_make(&b, NCCL_CHUNK_VERSION, 1, 6 + sizeof(big) + 6, payload, 6 + sizeof(big) + 6);
	expect(&b, -SYSOM_ECORRUPT);
	/* not zstd after the header */
	b.len = 0;
	const uint8_t junk[] = { NCCL_CHUNK_VERSION, 1, 13, 'n', 'o', 't', ' ', 'z', 's', 't', 'd' };
	byte_buf_append(&b, junk, sizeof(junk));
	expect(&b, -SYSOM_ECORRUPT);
	byte_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_extremes),
		cmocka_unit_test(test_full_chunk_is_small),
		cmocka_unit_test(test_malformed_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
