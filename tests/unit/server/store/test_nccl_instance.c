/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL instance rollups (server/store/nccl_instance.c): round trips at the fields' limits,
 * the size of a steady instance, and every malformed blob refused with a clear error. */
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
#include "server/store/nccl_instance.h"

static void assert_same(const struct nccl_instance_call *a, const struct nccl_instance_call *b)
{
	assert_int_equal(a->process, b->process);
	assert_int_equal(a->rank, b->rank);
	assert_int_equal(a->job_rank, b->job_rank);
	assert_int_equal(a->lateness_ns, b->lateness_ns);
	assert_int_equal(a->duration_ns, b->duration_ns);
	assert_int_equal(a->count, b->count);
	assert_int_equal(a->bytes, b->bytes);
	assert_int_equal(a->peer, b->peer);
	assert_int_equal(a->result, b->result);
}

/* Extremes (negative durations, processes going backwards) survive the deltas. */
static void test_round_trip_extremes(void **state)
{
	(void)state;
	const struct nccl_instance_call in[] = {
		{ .process = INT64_MAX, .rank = INT32_MAX, .job_rank = INT32_MIN,
		  .lateness_ns = INT64_MAX, .duration_ns = INT64_MIN, .count = UINT64_MAX,
		  .bytes = UINT64_MAX, .peer = INT32_MIN, .result = INT32_MAX },
		{ .process = 0, .rank = -1, .job_rank = -1, .lateness_ns = INT64_MIN,
		  .duration_ns = INT64_MAX, .peer = INT32_MAX, .result = INT32_MIN },
		{ .process = 42, .rank = 3, .job_rank = 3, .lateness_ns = 1500,
		  .duration_ns = -20, .count = 1024, .bytes = 4096, .peer = -1 },
		{ .process = 7, .rank = 4, .job_rank = 12, .lateness_ns = 0, .duration_ns = 900000 },
	};
	const size_t n = sizeof(in) / sizeof(in[0]);
	struct byte_buf blob = { 0 };
	struct nccl_instance_call *out;
	size_t m;

	assert_int_equal(nccl_instance_encode(in, n, &blob), 0);
	assert_int_equal(blob.data[0], NCCL_INSTANCE_VERSION);
	assert_int_equal(nccl_instance_decode(blob.data, blob.len, &out, &m), 0);
	assert_int_equal(m, n);
	for (size_t i = 0; i < n; i++)
		assert_same(&in[i], &out[i]);
	free(out);
	byte_buf_free(&blob);
}

/* An 8-rank all-reduce is a few dozen bytes; the largest instance round-trips; an empty or
 * oversized one is not encoded. */
static void test_sizes(void **state)
{
	(void)state;
	struct nccl_instance_call *in = calloc(NCCL_INSTANCE_MAX_CALLS + 1, sizeof(*in));
	struct byte_buf blob = { 0 };
	struct nccl_instance_call *out;
	size_t m;

	assert_non_null(in);
	for (size_t i = 0; i < NCCL_INSTANCE_MAX_CALLS; i++)
		in[i] = (struct nccl_instance_call){ .process = 100 + (int64_t)i, .rank = (int32_t)i,
						     .job_rank = (int32_t)i,
						     .lateness_ns = (int64_t)(i * 37 % 5000),
						     .duration_ns = 900000 + (int64_t)(i % 7) * 1000,
						     .count = 1 << 20, .bytes = 4 << 20, .peer = -1 };
	assert_int_equal(nccl_instance_encode(in, 8, &blob), 0);
	assert_true(blob.len < 8 * 16);
	blob.len = 0;
	assert_int_equal(nccl_instance_encode(in, NCCL_INSTANCE_MAX_CALLS, &blob), 0);
	assert_int_equal(nccl_instance_decode(blob.data, blob.len, &out, &m), 0);
	assert_int_equal(m, NCCL_INSTANCE_MAX_CALLS);
	assert_same(&in[NCCL_INSTANCE_MAX_CALLS - 1], &out[NCCL_INSTANCE_MAX_CALLS - 1]);
	free(out);
	blob.len = 0;
	assert_int_equal(nccl_instance_encode(in, 0, &blob), -EINVAL);
	assert_int_equal(nccl_instance_encode(in, NCCL_INSTANCE_MAX_CALLS + 1, &blob), -EINVAL);
	byte_buf_free(&blob);
	free(in);
}

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
	struct nccl_instance_call *out = (void *)1;
	size_t m = 99;

	assert_int_equal(nccl_instance_decode(b->data, b->len, &out, &m), want);
	assert_null(out);
	assert_int_equal(m, 0);
}

static void test_malformed_refused(void **state)
{
	(void)state;
	/* One good call: 9 one-byte varints (process 1, rank 1, job rank 2, lateness 3,
	 * duration 4, count 6, bytes 10, peer -1, result 0). */
	const uint8_t good[9] = { 2, 2, 4, 6, 8, 6, 10, 1, 0 };
	uint8_t payload[64];
	struct byte_buf b = { 0 };
	struct nccl_instance_call *out;
	size_t m;

	blob_make(&b, NCCL_INSTANCE_VERSION, 1, sizeof(good), good, sizeof(good));
	assert_int_equal(nccl_instance_decode(b.data, b.len, &out, &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(out[0].process, 1);
	assert_int_equal(out[0].job_rank, 2);
	assert_int_equal(out[0].lateness_ns, 3);
	assert_int_equal(out[0].peer, -1);
	free(out);
	for (size_t cut = 0; cut < b.len; cut++) {
		struct byte_buf t = { 0 };
		byte_buf_append(&t, b.data, cut);
		struct nccl_instance_call *o = (void *)1;
		size_t k = 9;
		assert_int_not_equal(nccl_instance_decode(t.data, t.len, &o, &k), 0);
		assert_null(o);
		assert_int_equal(k, 0);
		byte_buf_free(&t);
	}
	blob_make(&b, 2, 1, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* unknown version */
	blob_make(&b, NCCL_INSTANCE_VERSION, 0, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* no calls */
	blob_make(&b, NCCL_INSTANCE_VERSION, 2, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* fewer calls than declared */
	blob_make(&b, NCCL_INSTANCE_VERSION, NCCL_INSTANCE_MAX_CALLS + 1, sizeof(good), good,
		  sizeof(good));
	expect(&b, -SYSOM_ELIMIT);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, NCCL_INSTANCE_CALL_MAX_BYTES + 1, good,
		  sizeof(good));
	expect(&b, -SYSOM_ELIMIT); /* more payload than a call can take */
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, sizeof(good) + 1, good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* declared length differs */
	memcpy(payload, good, sizeof(good));
	payload[sizeof(good)] = 0;
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, sizeof(good) + 1, payload, sizeof(good) + 1);
	expect(&b, -SYSOM_ECORRUPT); /* trailing byte */
	/* process as an 11-byte varint */
	memset(payload, 0xff, 10);
	payload[10] = 0x01;
	memcpy(payload + 11, good + 1, 8);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 19, payload, 19);
	expect(&b, -SYSOM_ECORRUPT);
	/* rank past int32 */
	const uint8_t big[] = { 0x80, 0x80, 0x80, 0x80, 0x10 }; /* zigzag 2^32: +2^31 */
	payload[0] = good[0];
	memcpy(payload + 1, big, sizeof(big));
	memcpy(payload + 1 + sizeof(big), good + 2, 7);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1 + sizeof(big) + 7, payload, 1 + sizeof(big) + 7);
	expect(&b, -SYSOM_ECORRUPT);
	/* a 10th byte past 64 bits (lateness) */
	memcpy(payload, good, 3);
	memset(payload + 3, 0xff, 9);
	payload[12] = 0x02;
	memcpy(payload + 13, good + 4, 5);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 18, payload, 18);
	expect(&b, -SYSOM_ECORRUPT);
	/* not zstd after the header */
	b.len = 0;
	const uint8_t junk[] = { NCCL_INSTANCE_VERSION, 1, 9, 'n', 'o', 't', ' ', 'z', 's', 't' };
	byte_buf_append(&b, junk, sizeof(junk));
	expect(&b, -SYSOM_ECORRUPT);
	byte_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_extremes),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_malformed_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
