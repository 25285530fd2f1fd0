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
	/* Two instances, the second going back in seq and time, of 3 and 1 calls. */
	const struct nccl_instance inst[] = {
		{ .seq = UINT64_MAX, .first_entry_ns = INT64_MAX, .nranks = INT32_MIN, .ncalls = 3 },
		{ .seq = 0, .first_entry_ns = INT64_MIN, .nranks = -1, .ncalls = 1 },
	};
	struct byte_buf blob = { 0 };
	struct nccl_instance *oi;
	struct nccl_instance_call *out;
	size_t ni, m;

	assert_int_equal(nccl_instance_encode(inst, 2, in, n, &blob), 0);
	assert_int_equal(blob.data[0], NCCL_INSTANCE_VERSION);
	assert_int_equal(nccl_instance_decode(blob.data, blob.len, &oi, &ni, &out, &m), 0);
	assert_int_equal(ni, 2);
	assert_int_equal(m, n);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(oi[i].seq, inst[i].seq);
		assert_int_equal(oi[i].first_entry_ns, inst[i].first_entry_ns);
		assert_int_equal(oi[i].nranks, inst[i].nranks);
		assert_int_equal(oi[i].ncalls, inst[i].ncalls);
	}
	assert_int_equal(oi[1].call0, 3);
	for (size_t i = 0; i < n; i++)
		assert_same(&in[i], &out[i]);
	free(oi);
	free(out);
	/* Calls not adding up to the instances' counts, or none, are not encoded. */
	blob.len = 0;
	assert_int_equal(nccl_instance_encode(inst, 2, in, n - 1, &blob), -EINVAL);
	assert_int_equal(nccl_instance_encode(inst, 1, in, n, &blob), -EINVAL);
	assert_int_equal(nccl_instance_encode(inst, 0, in, n, &blob), -EINVAL);
	byte_buf_free(&blob);
}

/* A minute of a steady 8-rank all-reduce (4,800 instances) is a few bytes per call; the
 * largest blob round-trips; beyond the bounds nothing is encoded. */
static void test_sizes(void **state)
{
	(void)state;
	const size_t ninst = NCCL_INSTANCE_MAX_CALLS / 8;
	struct nccl_instance *inst = calloc(ninst + 1, sizeof(*inst));
	struct nccl_instance_call *in = calloc(NCCL_INSTANCE_MAX_CALLS + 8, sizeof(*in));
	struct byte_buf blob = { 0 };
	struct nccl_instance *oi;
	struct nccl_instance_call *out;
	size_t ni, m;

	assert_non_null(inst);
	assert_non_null(in);
	for (size_t i = 0; i <= ninst; i++) {
		inst[i] = (struct nccl_instance){ .seq = 1000 + i,
						  .first_entry_ns = 1700000000000000000LL +
								    (int64_t)i * 12500000,
						  .nranks = 8, .ncalls = 8 };
		for (size_t r = 0; r < 8; r++)
			in[i * 8 + r] = (struct nccl_instance_call){
				.process = 100 + (int64_t)r, .rank = (int32_t)r, .job_rank = (int32_t)r,
				.lateness_ns = (int64_t)((i * 37 + r * 11) % 5000),
				.duration_ns = 900000 + (int64_t)((i + r) % 7) * 1000,
				.count = 1 << 20, .bytes = 4 << 20, .peer = -1 };
	}
	assert_int_equal(nccl_instance_encode(inst, 4800, in, 4800 * 8, &blob), 0);
	assert_true(blob.len < 4800 * 8 * 4);
	blob.len = 0;
	assert_int_equal(nccl_instance_encode(inst, ninst, in, ninst * 8, &blob), 0);
	assert_int_equal(nccl_instance_decode(blob.data, blob.len, &oi, &ni, &out, &m), 0);
	assert_int_equal(ni, ninst);
	assert_int_equal(m, NCCL_INSTANCE_MAX_CALLS);
	assert_int_equal(oi[ninst - 1].seq, inst[ninst - 1].seq);
	assert_same(&in[m - 1], &out[m - 1]);
	free(oi);
	free(out);
	blob.len = 0;
	assert_int_equal(nccl_instance_encode(inst, ninst + 1, in, (ninst + 1) * 8, &blob),
			 -EINVAL);
	byte_buf_free(&blob);
	free(inst);
	free(in);
}

static void blob_make(struct byte_buf *b, uint8_t version, uint64_t ninst, uint64_t count,
		      uint64_t raw_len, const uint8_t *payload, size_t payload_len)
{
	uint8_t hdr[1 + 30];
	size_t n = 0;
	uint64_t v[3] = { ninst, count, raw_len };

	hdr[n++] = version;
	for (int i = 0; i < 3; i++) {
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
	struct nccl_instance *oi = (void *)1;
	struct nccl_instance_call *out = (void *)1;
	size_t ni = 99, m = 99;

	assert_int_equal(nccl_instance_decode(b->data, b->len, &oi, &ni, &out, &m), want);
	assert_null(oi);
	assert_null(out);
	assert_int_equal(ni, 0);
	assert_int_equal(m, 0);
}

static void test_malformed_refused(void **state)
{
	(void)state;
	/* One instance (seq 1, first entry 2, nranks 8, 1 call) and its call: process 1,
	 * rank 1, job rank 2, lateness 3, duration 4, count 6, bytes 10, peer -1, result 0. */
	const uint8_t good[13] = { 2, 4, 16, 1, 2, 2, 4, 6, 8, 6, 10, 1, 0 };
	uint8_t payload[64];
	struct byte_buf b = { 0 };
	struct nccl_instance *oi;
	struct nccl_instance_call *out;
	size_t ni, m;

	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, sizeof(good), good, sizeof(good));
	assert_int_equal(nccl_instance_decode(b.data, b.len, &oi, &ni, &out, &m), 0);
	assert_int_equal(ni, 1);
	assert_int_equal(m, 1);
	assert_int_equal(oi[0].seq, 1);
	assert_int_equal(oi[0].first_entry_ns, 2);
	assert_int_equal(oi[0].nranks, 8);
	assert_int_equal(out[0].process, 1);
	assert_int_equal(out[0].job_rank, 2);
	assert_int_equal(out[0].lateness_ns, 3);
	assert_int_equal(out[0].peer, -1);
	free(oi);
	free(out);
	for (size_t cut = 0; cut < b.len; cut++) {
		struct byte_buf t = { 0 };
		byte_buf_append(&t, b.data, cut);
		struct nccl_instance *ti = (void *)1;
		struct nccl_instance_call *tc = (void *)1;
		size_t tn = 9, tm = 9;
		assert_int_not_equal(nccl_instance_decode(t.data, t.len, &ti, &tn, &tc, &tm), 0);
		assert_null(ti);
		assert_null(tc);
		assert_int_equal(tn + tm, 0);
		byte_buf_free(&t);
	}
	blob_make(&b, 2, 1, 1, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* unknown version */
	blob_make(&b, NCCL_INSTANCE_VERSION, 0, 1, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* no instances */
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 0, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* no calls */
	blob_make(&b, NCCL_INSTANCE_VERSION, 2, 1, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* fewer instances than declared */
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 2, sizeof(good), good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* fewer calls than declared */
	blob_make(&b, NCCL_INSTANCE_VERSION, NCCL_INSTANCE_MAX_INSTANCES + 1, 1, sizeof(good),
		  good, sizeof(good));
	expect(&b, -SYSOM_ELIMIT);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, NCCL_INSTANCE_MAX_CALLS + 1, sizeof(good), good,
		  sizeof(good));
	expect(&b, -SYSOM_ELIMIT);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1,
		  NCCL_INSTANCE_HEAD_MAX_BYTES + NCCL_INSTANCE_CALL_MAX_BYTES + 1, good, sizeof(good));
	expect(&b, -SYSOM_ELIMIT); /* more payload than the counts can take */
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, sizeof(good) + 1, good, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT); /* declared length differs */
	memcpy(payload, good, sizeof(good));
	payload[sizeof(good)] = 0;
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, sizeof(good) + 1, payload, sizeof(good) + 1);
	expect(&b, -SYSOM_ECORRUPT); /* trailing byte */
	memcpy(payload, good, sizeof(good));
	payload[3] = 2; /* the instance claims 2 calls of the 1 declared */
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, sizeof(good), payload, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT);
	payload[3] = 0; /* an instance without calls */
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, sizeof(good), payload, sizeof(good));
	expect(&b, -SYSOM_ECORRUPT);
	/* process as an 11-byte varint */
	memcpy(payload, good, 4);
	memset(payload + 4, 0xff, 10);
	payload[14] = 0x01;
	memcpy(payload + 15, good + 5, 8);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, 23, payload, 23);
	expect(&b, -SYSOM_ECORRUPT);
	/* rank past int32 */
	const uint8_t big[] = { 0x80, 0x80, 0x80, 0x80, 0x10 }; /* zigzag 2^32: +2^31 */
	memcpy(payload, good, 5);
	memcpy(payload + 5, big, sizeof(big));
	memcpy(payload + 5 + sizeof(big), good + 6, 7);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, 5 + sizeof(big) + 7, payload,
		  5 + sizeof(big) + 7);
	expect(&b, -SYSOM_ECORRUPT);
	/* a 10th byte past 64 bits (lateness) */
	memcpy(payload, good, 7);
	memset(payload + 7, 0xff, 9);
	payload[16] = 0x02;
	memcpy(payload + 17, good + 8, 5);
	blob_make(&b, NCCL_INSTANCE_VERSION, 1, 1, 22, payload, 22);
	expect(&b, -SYSOM_ECORRUPT);
	/* not zstd after the header */
	b.len = 0;
	const uint8_t junk[] = { NCCL_INSTANCE_VERSION, 1, 1, 13, 'n', 'o', 't', ' ', 'z', 's' };
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
