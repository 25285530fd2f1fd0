/* SPDX-License-Identifier: Apache-2.0 */
/* Re-stamping captured batches for load generation (tests/support/batch_stamp.c): every
 * stamped batch decodes, carries the new identity, and keeps the node's records consistent. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/wire/wire.h"
#include "tests/support/batch_fixture.h"
#include "tests/support/batch_stamp.h"

#define WINDOW_START 1700000000000000000ULL
#define KEY_WORLD 0x1111222233334444ULL
#define KEY_CHILD 0x5555666677778888ULL
#define COMM_HASH 0x0badc0ffee0ddf00ULL
#define CALLS 5 /* AllReduce seq 0..4 on the world communicator */
#define SALT 0x00ff00ff00ff00ffULL

/* The fixture batch plus what a training job adds: a job rank, a communicator and its split
 * child, NCCL calls (collectives and a GroupStart without a communicator), profile and link
 * rows. Decoded from its encoding, as a captured batch is. */
static void captured_batch(struct sysom_batch *out)
{
	struct fixture_spec spec = { .node = 7, .epoch = 99, .sequence = 3,
				     .window_start_ns = WINDOW_START, .hostname = "gpu-a1" };
	struct sysom_batch b;
	struct byte_buf enc = { 0 };
	uint32_t job, src, func, algo, proto, dtype;

	assert_int_equal(fixture_batch_build(&b, &spec), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "job-7", &job), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "TORCHELASTIC_RUN_ID", &src), 0);
	struct sysom_job_rank jr = { .process = 0, .job = job, .rank = 0, .world_size = 8,
				     .local_rank = 0, .local_world_size = 8, .group_rank = 0,
				     .source = SYSOM_JOB_FROM_ENVIRONMENT, .job_id_source = src };
	assert_int_equal(sysom_batch_set_job_rank(&b, &jr), 0);
	struct sysom_communicator world = {
		.process = 0, .rank = 0, .key = KEY_WORLD, .nccl_comm_hash = COMM_HASH, .nranks = 8,
		.split_color = -1, .split_key = -1, .key_source = SYSOM_COMM_KEY_UNIQUE_ID,
		.created_ns = WINDOW_START + 1000, .handle = 0x1000,
	};
	struct sysom_communicator child = world;
	child.key = KEY_CHILD;
	child.parent_key = KEY_WORLD;
	child.nccl_comm_hash = 0;
	child.created_ns = 0;
	child.key_source = SYSOM_COMM_KEY_SPLIT;
	assert_int_equal(sysom_batch_set_communicator(&b, &world), 0);
	assert_int_equal(sysom_batch_set_communicator(&b, &child), 0);
	for (uint64_t i = 0; i < CALLS; i++) {
		struct sysom_nccl_call c = {
			.process = 0, .tid = 4242, .comm_key = KEY_WORLD, .seq = i,
			.entry_ns = WINDOW_START + 1000000 * (i + 1),
			.exit_ns = WINDOW_START + 1000000 * (i + 1) + 500, .count = 2, .bytes = 8,
			.op = SYSOM_NCCL_ALL_REDUCE, .datatype = 7, .redop = 0, .peer = -1,
		};
		assert_int_equal(sysom_batch_add_nccl_call(&b, &c), 0);
	}
	struct sysom_nccl_call group = { .process = 0, .tid = 4242, .seq = 0,
					 .entry_ns = WINDOW_START + 10, .exit_ns = WINDOW_START + 20,
					 .op = SYSOM_NCCL_GROUP_START, .datatype = SYSOM_NCCL_NO_DATATYPE,
					 .redop = SYSOM_NCCL_NO_REDOP, .peer = -1, .rank = -1 };
	assert_int_equal(sysom_batch_add_nccl_call(&b, &group), 0);
	/* In flight at the window's end: left out of every copy (it could never return). */
	struct sysom_nccl_call waiting = {
		.process = 0, .tid = 4242, .comm_key = KEY_WORLD, .seq = CALLS,
		.entry_ns = WINDOW_START + 29000000000ULL, .exit_ns = WINDOW_START + 30000000000ULL,
		.count = 2, .bytes = 8, .op = SYSOM_NCCL_ALL_REDUCE, .datatype = 7, .redop = 0,
		.peer = -1, .flags = SYSOM_NCCL_IN_FLIGHT,
	};
	assert_int_equal(sysom_batch_add_nccl_call(&b, &waiting), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "AllReduce", &func), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "Ring", &algo), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "Simple", &proto), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "ncclFloat32", &dtype), 0);
	struct sysom_nccl_profile p = { .process = 0, .rank = 0, .comm_id = COMM_HASH, .nranks = 8,
					.func = func, .algo = algo, .proto = proto, .datatype = dtype,
					.peer = -1, .nchannels = 2, .count = CALLS, .bytes = 40,
					.first_seq = 0, .last_seq = CALLS - 1 };
	assert_int_equal(sysom_batch_add_nccl_profile(&b, &p), 0);
	struct sysom_nccl_link l = { .process = 0, .rank = 0, .comm_id = COMM_HASH, .peer = 1,
				     .channel = -1, .transfers = 1, .bytes = 8, .time_ns_total = 10,
				     .sx = 8, .sy = 10, .sxx = 64, .sxy = 80, .syy = 100,
				     .min_latency_ns = 1, .min_bytes_per_ns = 1, .min_r2 = 1,
				     .min_points = 2 };
	assert_int_equal(sysom_batch_add_nccl_link(&b, &l), 0);
	assert_int_equal(sysom_batch_encode(&b, &enc), 0);
	sysom_batch_free(&b);
	memset(out, 0, sizeof(*out));
	assert_int_equal(sysom_batch_decode(enc.data, enc.len, &sysom_wire_default_limits, out, NULL), 0);
	byte_buf_free(&enc);
}

static struct batch_stamp_identity identity(uint32_t n, uint64_t sequence, uint64_t end_ns)
{
	struct batch_stamp_identity id = {
		.hostname = n == 1 ? "load-00001" : "load-00002",
		.epoch = 0xe0 + n,
		.sequence = sequence,
		.window_end_ns = end_ns,
		.key_salt = SALT * n,
		.seq_offset = (sequence - 1) * CALLS,
	};
	memset(id.node_id, (int)n, sizeof(id.node_id));
	return id;
}

/* Stamps and decodes (fully validated); the caller frees *out. */
static void stamp_decode(struct batch_stamp *t, const struct batch_stamp_identity *id,
			 struct sysom_batch *out)
{
	struct byte_buf enc = { 0 };
	struct sysom_wire_error err = { 0 };
	int rc;

	assert_int_equal(batch_stamp_encode(t, id, &enc), 0);
	memset(out, 0, sizeof(*out));
	rc = sysom_batch_decode(enc.data, enc.len, &sysom_wire_default_limits, out, &err);
	if (rc)
		fail_msg("stamped batch does not decode: %s at %zu", err.message, err.offset);
	byte_buf_free(&enc);
}

static const struct sysom_communicator *comm_of(const struct sysom_batch *b, uint64_t key)
{
	for (uint32_t i = 0; i < b->communicator_count; i++)
		if (b->communicators[i].key == key)
			return &b->communicators[i];
	return NULL;
}

static void test_stamp_sets_identity_and_keeps_records(void **state)
{
	struct sysom_batch cap, b;
	struct batch_stamp *t = NULL;
	uint64_t end = WINDOW_START + 3600ULL * 1000000000ULL; /* an hour after the capture */
	uint64_t shift = end - (WINDOW_START + 30ULL * 1000000000ULL);
	uint32_t samples, stacks, frames, strings;

	(void)state;
	captured_batch(&cap);
	samples = cap.sample_count;
	stacks = cap.stack_count;
	frames = cap.frame_count;
	strings = cap.string_count;
	assert_int_equal(batch_stamp_new(&cap, &t), 0);
	assert_int_equal(cap.string_count, 0); /* ownership moved */
	assert_int_equal(batch_stamp_seq_span(t), CALLS);

	struct batch_stamp_identity id = identity(1, 4, end);
	stamp_decode(t, &id, &b);
	assert_memory_equal(b.node_id, id.node_id, SYSOM_NODE_ID_SIZE);
	assert_int_equal(b.agent_epoch, id.epoch);
	assert_int_equal(b.sequence, 4);
	assert_int_equal(b.window_end_ns, end);
	assert_int_equal(b.window_end_ns - b.window_start_ns, 30ULL * 1000000000ULL);
	assert_string_equal(sysom_batch_string(&b, b.node.hostname), "load-00001");
	assert_int_equal(b.job_rank_count, 1);
	assert_string_equal(sysom_batch_string(&b, b.job_ranks[0].job), "job-7-load-00001");
	assert_string_equal(sysom_batch_string(&b, b.job_ranks[0].job_id_source),
			    "TORCHELASTIC_RUN_ID");
	/* One hostname slot and one job slot more than captured. */
	assert_int_equal(b.string_count, strings + 2);

	const struct sysom_communicator *w = comm_of(&b, KEY_WORLD ^ SALT);
	const struct sysom_communicator *c = comm_of(&b, KEY_CHILD ^ SALT);
	assert_non_null(w);
	assert_non_null(c);
	assert_int_equal(w->nccl_comm_hash, COMM_HASH ^ SALT);
	assert_int_equal(w->created_ns, WINDOW_START + 1000 + shift);
	assert_int_equal(c->parent_key, KEY_WORLD ^ SALT);
	assert_int_equal(c->nccl_comm_hash, 0); /* unknown stays unknown */
	assert_int_equal(c->created_ns, 0);

	assert_int_equal(b.nccl_call_count, CALLS + 1);
	for (uint32_t i = 0; i < b.nccl_call_count; i++) {
		const struct sysom_nccl_call *call = &b.nccl_calls[i];
		assert_false(call->flags & SYSOM_NCCL_IN_FLIGHT);
		if (call->op == SYSOM_NCCL_GROUP_START) {
			assert_int_equal(call->comm_key, 0);
			assert_int_equal(call->seq, 0); /* no sequence to advance */
			assert_int_equal(call->entry_ns, WINDOW_START + 10 + shift);
			continue;
		}
		assert_int_equal(call->comm_key, KEY_WORLD ^ SALT);
		assert_int_equal(call->seq, i + 3 * CALLS);
		assert_int_equal(call->entry_ns, WINDOW_START + 1000000 * (i + 1) + shift);
		assert_int_equal(call->exit_ns - call->entry_ns, 500);
	}
	assert_int_equal(b.nccl_profile_count, 1);
	assert_int_equal(b.nccl_profiles[0].comm_id, COMM_HASH ^ SALT);
	assert_int_equal(b.nccl_profiles[0].first_seq, 3 * CALLS);
	assert_int_equal(b.nccl_profiles[0].last_seq, 4 * CALLS - 1);
	assert_int_equal(b.nccl_link_count, 1);
	assert_int_equal(b.nccl_links[0].comm_id, COMM_HASH ^ SALT);

	/* The profile as captured: stacks and samples are sent as they are. */
	assert_int_equal(b.sample_count, samples);
	assert_int_equal(b.stack_count, stacks);
	assert_int_equal(b.frame_count, frames);
	uint64_t total = 0;
	for (uint32_t i = 0; i < b.sample_count; i++)
		total += b.samples[i].count;
	assert_int_equal(total, FIXTURE_SAMPLES);
	sysom_batch_free(&b);
	batch_stamp_free(t);
}

/* Each stamp starts from the captured records: stamps do not accumulate. */
static void test_stamps_do_not_accumulate(void **state)
{
	struct sysom_batch cap, first, second;
	struct batch_stamp *t = NULL;

	(void)state;
	captured_batch(&cap);
	assert_int_equal(batch_stamp_new(&cap, &t), 0);
	struct batch_stamp_identity a = identity(1, 1, WINDOW_START + 60ULL * 1000000000ULL);
	struct batch_stamp_identity b = identity(2, 2, WINDOW_START + 90ULL * 1000000000ULL);
	stamp_decode(t, &a, &first);
	stamp_decode(t, &b, &second);
	assert_string_equal(sysom_batch_string(&second, second.node.hostname), "load-00002");
	assert_string_equal(sysom_batch_string(&second, second.job_ranks[0].job), "job-7-load-00002");
	assert_non_null(comm_of(&first, KEY_WORLD ^ SALT));
	assert_non_null(comm_of(&second, KEY_WORLD ^ (2 * SALT)));
	assert_null(comm_of(&second, KEY_WORLD ^ SALT ^ (2 * SALT)));
	for (uint32_t i = 0; i < second.nccl_call_count; i++) {
		if (second.nccl_calls[i].op != SYSOM_NCCL_ALL_REDUCE)
			continue;
		assert_int_equal(second.nccl_calls[i].seq, first.nccl_calls[i].seq + CALLS);
		assert_int_equal(second.nccl_calls[i].entry_ns,
				 first.nccl_calls[i].entry_ns + 30ULL * 1000000000ULL);
	}
	assert_int_equal(second.string_count, first.string_count);
	sysom_batch_free(&first);
	sysom_batch_free(&second);
	batch_stamp_free(t);
}

/* A key equal to the salt must not become 0 (key 0 is invalid on the wire). */
static void test_key_equal_to_salt_stays_valid(void **state)
{
	struct sysom_batch cap, b;
	struct batch_stamp *t = NULL;

	(void)state;
	captured_batch(&cap);
	assert_int_equal(batch_stamp_new(&cap, &t), 0);
	struct batch_stamp_identity id = identity(1, 1, WINDOW_START + 60ULL * 1000000000ULL);
	id.key_salt = KEY_WORLD;
	stamp_decode(t, &id, &b);
	assert_non_null(comm_of(&b, KEY_WORLD));
	assert_non_null(comm_of(&b, KEY_CHILD ^ KEY_WORLD));
	sysom_batch_free(&b);
	batch_stamp_free(t);
}

static void test_invalid_identities_are_refused(void **state)
{
	struct sysom_batch cap;
	struct batch_stamp *t = NULL;
	struct byte_buf out = { 0 };
	char long_name[BATCH_STAMP_HOSTNAME_MAX + 2];

	(void)state;
	captured_batch(&cap);
	assert_int_equal(batch_stamp_new(&cap, &t), 0);
	struct batch_stamp_identity ok = identity(1, 1, WINDOW_START + 60ULL * 1000000000ULL), id;
	id = ok;
	id.sequence = 0;
	assert_int_equal(batch_stamp_encode(t, &id, &out), -EINVAL);
	id = ok;
	id.key_salt = 0;
	assert_int_equal(batch_stamp_encode(t, &id, &out), -EINVAL);
	id = ok;
	id.hostname = "";
	assert_int_equal(batch_stamp_encode(t, &id, &out), -EINVAL);
	memset(long_name, 'h', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	id.hostname = long_name;
	assert_int_equal(batch_stamp_encode(t, &id, &out), -EINVAL);
	long_name[BATCH_STAMP_HOSTNAME_MAX] = '\0'; /* exactly the maximum is fine */
	assert_int_equal(batch_stamp_encode(t, &id, &out), 0);
	id = ok;
	id.window_end_ns = 1000; /* before the window's own length */
	assert_int_equal(batch_stamp_encode(t, &id, &out), -EINVAL);
	byte_buf_free(&out);
	batch_stamp_free(t);
}

/* A batch still being built (builder indexes present) is not a captured one. */
static void test_builder_batch_is_refused(void **state)
{
	struct fixture_spec spec = { .node = 1, .epoch = 1, .sequence = 1,
				     .window_start_ns = WINDOW_START };
	struct sysom_batch b;
	struct batch_stamp *t = (struct batch_stamp *)&spec;

	(void)state;
	assert_int_equal(fixture_batch_build(&b, &spec), 0);
	assert_int_equal(batch_stamp_new(&b, &t), -EINVAL);
	assert_null(t);
	assert_int_equal(b.string_count, 0); /* taken and freed */
	sysom_batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stamp_sets_identity_and_keeps_records),
		cmocka_unit_test(test_stamps_do_not_accumulate),
		cmocka_unit_test(test_key_equal_to_salt_stays_valid),
		cmocka_unit_test(test_invalid_identities_are_refused),
		cmocka_unit_test(test_builder_batch_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
