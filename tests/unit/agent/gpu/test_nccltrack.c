/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator keys and kernel names from synthetic gputrace events (agent/gpu/nccltrack.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/gpu/nccltrack.h"
#include "bpf/gputrace.h"
#include "common/error.h"

static struct nccltrack *new_tracker(uint32_t max_comms)
{
	struct nccltrack_options o;
	struct nccltrack *nt;

	nccltrack_options_default(&o);
	if (max_comms)
		o.max_comms = max_comms;
	assert_int_equal(nccltrack_new(&o, &nt), 0);
	return nt;
}

static struct gt_nccl_event call(uint32_t tgid, uint8_t fn, uint64_t comm, uint64_t seq)
{
	return (struct gt_nccl_event){ .type = GT_EVENT_NCCL_CALL, .tgid = tgid, .tid = tgid,
				       .fn = fn, .generation = 1, .entry_ns = 1000,
				       .exit_ns = 2000, .comm = comm, .count = 4, .seq = seq,
				       .datatype = 7, .redop = 0, .peer = -1, .rank = -1,
				       .nranks = -1, .color = -1, .key = -1 };
}

static struct gt_nccl_init_event init_rank(uint32_t tgid, uint64_t comm, int rank, int nranks,
					   uint8_t id_byte)
{
	struct gt_nccl_init_event e = { .call = call(tgid, GT_NCCL_COMM_INIT_RANK, comm, 0) };

	e.call.type = GT_EVENT_NCCL_INIT;
	e.call.rank = rank;
	e.call.nranks = nranks;
	memset(e.unique_id, id_byte, sizeof(e.unique_id));
	return e;
}

static struct gt_nccl_init_event split(uint32_t tgid, uint64_t parent, uint64_t child, int color,
				       int key)
{
	struct gt_nccl_init_event e = { .call = call(tgid, GT_NCCL_COMM_SPLIT, child, 0) };

	e.call.type = GT_EVENT_NCCL_INIT;
	e.call.parent = parent;
	e.call.color = color;
	e.call.key = key;
	return e;
}

static struct nccltrack_call feed(struct nccltrack *nt, const void *ev, size_t len)
{
	struct nccltrack_call out;

	assert_int_equal(nccltrack_event(nt, ev, len, 1000000, &out), 1);
	return out;
}

struct comms {
	uint32_t n;
	uint32_t tgid[16];
	struct sysom_communicator c[16];
};

static void collect(void *ctx, uint32_t tgid, uint32_t generation,
		    const struct sysom_communicator *c)
{
	struct comms *cs = ctx;

	assert_int_equal(generation, 1);
	assert_true(cs->n < 16);
	cs->tgid[cs->n] = tgid;
	cs->c[cs->n++] = *c;
}

static const struct sysom_communicator *comm_of(const struct comms *cs, uint32_t tgid,
						 uint64_t handle)
{
	for (uint32_t i = 0; i < cs->n; i++)
		if (cs->tgid[i] == tgid && cs->c[i].handle == handle)
			return &cs->c[i];
	fail_msg("no communicator 0x%llx in pid %u", (unsigned long long)handle, tgid);
	return NULL;
}

/* Two ranks initialising with the same id share a key; their calls carry it and their rank. */
static void test_unique_id_key_and_calls(void **state)
{
	struct nccltrack *nt = new_tracker(0);
	struct gt_nccl_init_event a = init_rank(100, 0xa0, 0, 2, 0x11);
	struct gt_nccl_init_event b = init_rank(200, 0xb0, 1, 2, 0x11);
	struct gt_nccl_init_event other = init_rank(300, 0xc0, 0, 1, 0x22);
	struct nccltrack_call ca, cb, co, x;

	(void)state;
	ca = feed(nt, &a, sizeof(a));
	cb = feed(nt, &b, sizeof(b));
	co = feed(nt, &other, sizeof(other));
	assert_int_equal(ca.call.op, SYSOM_NCCL_COMM_INIT_RANK);
	assert_true(ca.call.comm_key != 0);
	assert_int_equal(ca.call.comm_key, cb.call.comm_key);
	assert_int_not_equal(ca.call.comm_key, co.call.comm_key);
	assert_int_equal(ca.call.rank, 0);
	assert_int_equal(cb.call.rank, 1);
	assert_int_equal(ca.call.entry_ns, 1000 + 1000000); /* monotonic → realtime offset */
	assert_int_equal(ca.call.exit_ns, 2000 + 1000000);

	struct gt_nccl_event ar = call(200, GT_NCCL_ALL_REDUCE, 0xb0, 5);
	x = feed(nt, &ar, sizeof(ar));
	assert_int_equal(x.tgid, 200);
	assert_int_equal(x.generation, 1);
	assert_int_equal(x.call.comm_key, ca.call.comm_key);
	assert_int_equal(x.call.rank, 1);
	assert_int_equal(x.call.seq, 5);
	assert_int_equal(x.call.bytes, 16); /* 4 floats */
	assert_int_equal(x.call.datatype, 7);

	/* A failed init creates nothing. */
	struct gt_nccl_init_event bad = init_rank(400, 0xd0, 0, 2, 0x33);
	bad.call.result = 5;
	x = feed(nt, &bad, sizeof(bad));
	assert_int_equal(x.call.comm_key, 0);
	assert_int_equal(x.call.result, 5);
	nccltrack_free(nt);
}

/* CommSplit children: same key for the same (parent, ordinal, color) on every rank. */
static void test_split_keys(void **state)
{
	struct nccltrack *nt = new_tracker(0);
	struct comms cs = { 0 };

	(void)state;
	for (uint32_t r = 0; r < 4; r++) {
		struct gt_nccl_init_event w = init_rank(100 + r, 0x1000, (int)r, 4, 0x5a);
		feed(nt, &w, sizeof(w));
	}
	/* First split: colors r % 2; second split of the same parent: one color. */
	for (uint32_t r = 0; r < 4; r++) {
		struct gt_nccl_init_event s1 = split(100 + r, 0x1000, 0x2000, (int)(r % 2), (int)r);
		struct gt_nccl_init_event s2 = split(100 + r, 0x1000, 0x3000, 7, (int)(3 - r));
		feed(nt, &s1, sizeof(s1));
		feed(nt, &s2, sizeof(s2));
	}
	/* NOCOLOR: the rank gets no communicator, but the ordinal still advances. */
	struct gt_nccl_init_event none = split(100, 0x1000, 0, -1, 0);
	assert_int_equal(feed(nt, &none, sizeof(none)).call.comm_key, 0);

	nccltrack_for_each_comm(nt, collect, &cs);
	const struct sysom_communicator *w0 = comm_of(&cs, 100, 0x1000);
	const struct sysom_communicator *a0 = comm_of(&cs, 100, 0x2000);
	const struct sysom_communicator *a1 = comm_of(&cs, 101, 0x2000);
	const struct sysom_communicator *a2 = comm_of(&cs, 102, 0x2000);
	const struct sysom_communicator *b3 = comm_of(&cs, 103, 0x3000);
	const struct sysom_communicator *b0 = comm_of(&cs, 100, 0x3000);
	assert_int_equal(w0->key_source, SYSOM_COMM_KEY_UNIQUE_ID);
	assert_int_equal(a0->key_source, SYSOM_COMM_KEY_SPLIT);
	assert_int_equal(a0->parent_key, w0->key);
	assert_int_equal(a0->key, a2->key);        /* color 0 */
	assert_int_not_equal(a0->key, a1->key);    /* color 1 */
	assert_int_equal(a0->split_ordinal, 1);
	assert_int_equal(b0->split_ordinal, 2);
	assert_int_equal(b0->key, b3->key);
	assert_int_not_equal(b0->key, a0->key);
	assert_int_equal(a1->split_color, 1);
	assert_int_equal(a1->split_key, 1);
	assert_int_equal(a1->rank, -1); /* the fake library has no layout: the server derives it */
	nccltrack_free(nt);
}

/* Communicators met first in a collective: NCCL's commHash when read, else a local key. */
static void test_unknown_communicators(void **state)
{
	struct nccltrack *nt = new_tracker(0);
	struct gt_nccl_event a = call(100, GT_NCCL_ALL_REDUCE, 0x10, 0);
	struct gt_nccl_event b = call(200, GT_NCCL_ALL_REDUCE, 0x10, 0);
	struct gt_nccl_event h = call(300, GT_NCCL_BROADCAST, 0x20, 3);
	struct nccltrack_call ca, cb, ch;

	(void)state;
	ca = feed(nt, &a, sizeof(a));
	cb = feed(nt, &b, sizeof(b));
	assert_true(ca.call.comm_key != 0);
	assert_int_not_equal(ca.call.comm_key, cb.call.comm_key); /* same handle, other process */
	h.flags = GT_COMM_FIELDS;
	h.comm_hash = 0xfeedface;
	h.rank = 3;
	h.nranks = 8;
	h.peer = 2;
	ch = feed(nt, &h, sizeof(h));
	assert_int_equal(ch.call.comm_key, 0xfeedface);
	assert_int_equal(ch.call.rank, 3);
	assert_int_equal(ch.call.peer, 2);

	/* Destroy marks it; prune drops it after the visit. */
	struct gt_nccl_event d = call(300, GT_NCCL_COMM_DESTROY, 0x20, 0);
	assert_int_equal(feed(nt, &d, sizeof(d)).call.comm_key, 0xfeedface);
	struct comms cs = { 0 };
	nccltrack_for_each_comm(nt, collect, &cs);
	assert_int_equal(cs.n, 3);
	assert_true(comm_of(&cs, 300, 0x20)->flags & SYSOM_COMM_DESTROYED);
	nccltrack_prune(nt);
	memset(&cs, 0, sizeof(cs));
	nccltrack_for_each_comm(nt, collect, &cs);
	assert_int_equal(cs.n, 2);

	/* A process that exits is forgotten at the next prune. */
	nccltrack_forget(nt, 100);
	nccltrack_prune(nt);
	memset(&cs, 0, sizeof(cs));
	nccltrack_for_each_comm(nt, collect, &cs);
	assert_int_equal(cs.n, 1);
	assert_int_equal(cs.tgid[0], 200);
	nccltrack_free(nt);
}

static void test_kernel_names(void **state)
{
	struct nccltrack *nt = new_tracker(0);
	struct gt_name_event n = { .type = GT_EVENT_CU_NAME, .tgid = 9, .generation = 1,
				   .handle = 0xf00 };
	struct gt_name_event alias = { .type = GT_EVENT_CU_ALIAS, .tgid = 9, .generation = 1,
				       .handle = 0xabc, .source = 0xf00 };
	struct nccltrack_call out;

	(void)state;
	snprintf(n.name, sizeof(n.name), "_Z8sim_gemmPf\x01x");
	n.name_len = (uint32_t)strlen(n.name);
	assert_int_equal(nccltrack_event(nt, &n, sizeof(n), 0, &out), 0);
	assert_string_equal(nccltrack_kernel_name(nt, 9, 0xf00), "_Z8sim_gemmPf?x");
	assert_int_equal(nccltrack_event(nt, &alias, sizeof(alias), 0, &out), 0);
	assert_string_equal(nccltrack_kernel_name(nt, 9, 0xabc), "_Z8sim_gemmPf?x");
	assert_null(nccltrack_kernel_name(nt, 9, 0x123));
	assert_null(nccltrack_kernel_name(nt, 10, 0xf00));
	/* A name_len past the buffer is clamped; no NUL in the buffer is fine. */
	memset(n.name, 'k', sizeof(n.name));
	n.name_len = 100000;
	n.handle = 0xf01;
	assert_int_equal(nccltrack_event(nt, &n, sizeof(n), 0, &out), 0);
	assert_int_equal(strlen(nccltrack_kernel_name(nt, 9, 0xf01)), GT_NAME_MAX - 1);
	/* A new incarnation (exec) starts empty. */
	n.generation = 2;
	n.handle = 0x1;
	assert_int_equal(nccltrack_event(nt, &n, sizeof(n), 0, &out), 0);
	assert_null(nccltrack_kernel_name(nt, 9, 0xf00));
	nccltrack_free(nt);
}

static void test_malformed_events(void **state)
{
	struct nccltrack *nt = new_tracker(0);
	struct gt_nccl_event e = call(1, GT_NCCL_ALL_REDUCE, 0x10, 0);
	struct nccltrack_call out;
	struct nccltrack_stats st;
	uint32_t unknown = 99;

	(void)state;
	assert_int_equal(nccltrack_event(nt, &e, sizeof(e) - 1, 0, &out), -SYSOM_ECORRUPT);
	assert_int_equal(nccltrack_event(nt, &e, 2, 0, &out), -SYSOM_ECORRUPT);
	assert_int_equal(nccltrack_event(nt, &unknown, sizeof(unknown), 0, &out), -SYSOM_ECORRUPT);
	e.fn = GT_CU_LAUNCH_KERNEL;
	assert_int_equal(nccltrack_event(nt, &e, sizeof(e), 0, &out), -SYSOM_ECORRUPT);
	e.fn = GT_NCCL_ALL_REDUCE;
	e.exit_ns = e.entry_ns - 1;
	assert_int_equal(nccltrack_event(nt, &e, sizeof(e), 0, &out), -SYSOM_ECORRUPT);
	e.type = GT_EVENT_NCCL_INIT; /* an init type with a call's size */
	e.exit_ns = e.entry_ns;
	assert_int_equal(nccltrack_event(nt, &e, sizeof(e), 0, &out), -SYSOM_ECORRUPT);
	nccltrack_stats_read(nt, &st);
	assert_int_equal(st.corrupt_events, 6);
	nccltrack_free(nt);
}

/* Bounded tables: past max_comms the call still counts but its communicator is not kept. */
static void test_communicator_limit(void **state)
{
	struct nccltrack *nt = new_tracker(2);
	struct nccltrack_stats st;

	(void)state;
	for (uint64_t h = 1; h <= 3; h++) {
		struct gt_nccl_event e = call(1, GT_NCCL_ALL_REDUCE, h, 0);
		struct nccltrack_call out = feed(nt, &e, sizeof(e));
		if (h == 3)
			assert_int_equal(out.call.comm_key, 0);
	}
	nccltrack_stats_read(nt, &st);
	assert_int_equal(st.communicators, 2);
	assert_int_equal(st.table_full, 1);
	/* Destroying one makes room. */
	struct gt_nccl_event d = call(1, GT_NCCL_COMM_DESTROY, 1, 0);
	feed(nt, &d, sizeof(d));
	struct gt_nccl_event e = call(1, GT_NCCL_ALL_REDUCE, 4, 0);
	assert_int_not_equal(feed(nt, &e, sizeof(e)).call.comm_key, 0);
	nccltrack_free(nt);
}

static void test_init_all(void **state)
{
	struct nccltrack *nt = new_tracker(0);
	struct gt_nccl_init_event e = { .call = call(5, GT_NCCL_COMM_INIT_ALL, 0, 0) };
	struct comms cs = { 0 };

	(void)state;
	e.call.type = GT_EVENT_NCCL_INIT;
	e.call.nranks = 3;
	e.comms[0] = 0x100;
	e.comms[1] = 0x200;
	e.comms[2] = 0x300;
	e.call.comm = 0x100;
	assert_true(feed(nt, &e, sizeof(e)).call.comm_key != 0);
	nccltrack_for_each_comm(nt, collect, &cs);
	assert_int_equal(cs.n, 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(cs.c[i].rank, (int32_t)i);
		assert_int_equal(cs.c[i].nranks, 3);
		assert_int_equal(cs.c[i].key, cs.c[0].key);
		assert_int_equal(cs.c[i].key_source, SYSOM_COMM_KEY_LOCAL);
	}
	nccltrack_free(nt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unique_id_key_and_calls),
		cmocka_unit_test(test_split_keys),
		cmocka_unit_test(test_unknown_communicators),
		cmocka_unit_test(test_kernel_names),
		cmocka_unit_test(test_malformed_events),
		cmocka_unit_test(test_communicator_limit),
		cmocka_unit_test(test_init_all),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
