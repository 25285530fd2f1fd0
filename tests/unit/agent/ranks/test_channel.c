/* SPDX-License-Identifier: Apache-2.0 */
/* Component telemetry: the client's channel and table builder against the agent's decoders. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/ranks/channel.h"
#include "agent/ranks/registry.h"
#include "client/sysom_channel.h"
#include "common/error.h"
#include "tests/support/batch_fixture.h"

struct listener {
	char dir[256];
	char path[300];
	int fd;
};

static void listener_open(struct listener *l)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };

	assert_int_equal(fixture_tmpdir_make(l->dir, sizeof(l->dir)), 0);
	snprintf(l->path, sizeof(l->path), "%s/agent.sock", l->dir);
	assert_true(strlen(l->path) < sizeof(addr.sun_path));
	memcpy(addr.sun_path, l->path, strlen(l->path) + 1);
	l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(l->fd >= 0);
	assert_int_equal(bind(l->fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(l->fd, 8), 0);
}

static void listener_close(struct listener *l)
{
	close(l->fd);
	assert_int_equal(fixture_tmpdir_remove(l->dir), 0);
}

/* One record from `fd` (blocking, 2 s at most) into buf; returns its header. */
static struct sysom_frame_header recv_record(int fd, uint8_t *buf, size_t size, size_t *len)
{
	struct timeval tv = { .tv_sec = 2 };
	struct sysom_frame_header h;
	ssize_t n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = recv(fd, buf, size, 0);
	assert_true(n >= (ssize_t)REGISTRY_HEADER_SIZE);
	assert_int_equal(registry_decode_header(buf, (size_t)n, &h), 0);
	*len = (size_t)n;
	return h;
}

static void test_no_socket_path_means_silence(void **state)
{
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_CUPTI };
	struct sysom_channel *c = (void *)1;

	(void)state;
	unsetenv("SYSOM_SOCKET_PATH");
	assert_int_equal(sysom_channel_open(&o, &c), -ENOENT);
	assert_null(c);
	setenv("SYSOM_SOCKET_PATH", "", 1);
	assert_int_equal(sysom_channel_open(&o, &c), -ENOENT);
	unsetenv("SYSOM_SOCKET_PATH");
}

/* No agent: the send fails at once, is counted, and the next attempt waits a second. */
static void test_absent_agent_drops_and_backs_off(void **state)
{
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_CUPTI,
					   .path = "/nonexistent/sysom/agent.sock" };
	struct sysom_channel *c;
	struct sysom_channel_stats st;
	uint32_t payload = 7;

	(void)state;
	assert_int_equal(sysom_channel_open(&o, &c), 0);
	assert_int_equal(sysom_channel_send(c, SYSOM_REC_STATS, &payload, sizeof(payload)),
			 -ENOENT);
	/* Within the retry interval no connect() is even tried. */
	assert_int_equal(sysom_channel_send(c, SYSOM_REC_STATS, &payload, sizeof(payload)),
			 -ENOTCONN);
	sysom_channel_stats(c, &st);
	assert_int_equal(st.records_dropped, 2);
	assert_int_equal(st.records_sent, 0);
	assert_int_equal(st.connects, 0);
	sysom_channel_close(c);
}

static void on_mask(void *ctx, uint32_t mask)
{
	*(uint32_t *)ctx = mask;
}

/* HELLO comes first, records arrive whole, and a MASK from the agent reaches the callback. */
static void test_hello_record_and_mask(void **state)
{
	struct listener l;
	uint32_t got_mask = 0;
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_NCCL_PROFILER,
					   .interface = 5, .name = "test-plugin\x01 v5",
					   .activation_mask = 0x5e, .on_mask = on_mask,
					   .ctx = &got_mask };
	struct sysom_channel *c;
	struct channel_hello hello;
	struct channel_comm comm;
	struct {
		struct sysom_rec_comm c;
		char name[8];
	} rc = { { .comm_id = 0xabcdef, .rank = 3, .nranks = 8, .nnodes = 2 }, "tp0" };
	uint8_t buf[REGISTRY_MAX_MESSAGE], mask_msg[REGISTRY_HEADER_SIZE + 8] = { 0 };
	struct sysom_frame_header h;
	size_t len;
	int peer;

	(void)state;
	listener_open(&l);
	o.path = l.path;
	assert_int_equal(sysom_channel_open(&o, &c), 0);
	assert_int_equal(sysom_channel_send(c, SYSOM_REC_NCCL_COMM, &rc, sizeof(rc.c) + 3), 0);
	peer = accept(l.fd, NULL, NULL);
	assert_true(peer >= 0);
	h = recv_record(peer, buf, sizeof(buf), &len);
	assert_int_equal(h.type, SYSOM_REC_HELLO);
	assert_int_equal(channel_decode_hello(buf + REGISTRY_HEADER_SIZE, h.length, &hello), 0);
	assert_int_equal(hello.component, SYSOM_COMPONENT_NCCL_PROFILER);
	assert_int_equal(hello.interface, 5);
	assert_int_equal(hello.activation_mask, 0x5e);
	assert_string_equal(hello.name, "test-plugin  v5"); /* control character replaced */
	h = recv_record(peer, buf, sizeof(buf), &len);
	assert_int_equal(h.type, SYSOM_REC_NCCL_COMM);
	assert_int_equal(channel_decode_comm(buf + REGISTRY_HEADER_SIZE, h.length, &comm), 0);
	assert_int_equal(comm.comm_id, 0xabcdef);
	assert_int_equal(comm.rank, 3);
	assert_int_equal(comm.nranks, 8);
	assert_string_equal(comm.name, "tp0");

	assert_int_equal(registry_encode_header(mask_msg, SYSOM_REC_MASK, 8), 0);
	mask_msg[REGISTRY_HEADER_SIZE] = 0x42;
	assert_int_equal(send(peer, mask_msg, sizeof(mask_msg), 0), (ssize_t)sizeof(mask_msg));
	for (int i = 0; i < 200 && !got_mask; i++) {
		sysom_channel_poll(c);
		if (!got_mask)
			usleep(10000);
	}
	assert_int_equal(got_mask, 0x42);
	close(peer);
	sysom_channel_close(c);
	listener_close(&l);
}

static const uint32_t coll_strings[] = { offsetof(struct sysom_rec_coll, func),
					 offsetof(struct sysom_rec_coll, algo),
					 offsetof(struct sysom_rec_coll, proto),
					 offsetof(struct sysom_rec_coll, datatype) };

/* Tables split at 64 KiB, share strings within a record, and decode entry for entry. */
static void test_tables_split_and_decode(void **state)
{
	struct listener l;
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_CUPTI, .name = "t" };
	struct sysom_channel *c;
	struct sysom_table *t = malloc(sizeof(*t));
	static uint8_t buf[REGISTRY_MAX_MESSAGE];
	uint32_t name_field = offsetof(struct sysom_rec_kernel, name);
	unsigned records = 0, entries = 0, n = 1000;
	int peer;

	(void)state;
	assert_non_null(t);
	listener_open(&l);
	o.path = l.path;
	assert_int_equal(sysom_channel_open(&o, &c), 0);
	sysom_table_begin(t, SYSOM_REC_GPU_KERNEL, sizeof(struct sysom_rec_kernel), 0, 100, 200);
	for (unsigned i = 0; i < n; i++) {
		struct sysom_rec_kernel k = { .device = 1, .stream = i % 3, .count = 2,
					      .total_ns = 3000, .min_ns = 1000, .max_ns = 2000 };
		char name[80];
		const char *names[1] = { name };

		snprintf(name, sizeof(name), "void kernel_number_%u<float, 128>(float const*)", i / 2);
		k.hist[sysom_rec_hist_bucket(1000)]++;
		k.hist[sysom_rec_hist_bucket(2000)]++;
		assert_int_equal(sysom_table_add(t, c, &k, &name_field, names, 1), 0);
	}
	assert_int_equal(sysom_table_flush(t, c), 0);
	peer = accept(l.fd, NULL, NULL); /* the records wait in the connection's queue */
	assert_true(peer >= 0);
	for (;;) {
		struct channel_table tab;
		struct sysom_frame_header h;
		size_t len;

		h = recv_record(peer, buf, sizeof(buf), &len);
		assert_true(len <= SYSOM_CHANNEL_MAX_RECORD);
		if (h.type == SYSOM_REC_HELLO)
			continue;
		assert_int_equal(h.type, SYSOM_REC_GPU_KERNEL);
		assert_int_equal(channel_decode_table(buf + REGISTRY_HEADER_SIZE, h.length,
						      SYSOM_REC_GPU_KERNEL, &tab), 0);
		assert_int_equal(tab.window_start_ns, 100);
		assert_int_equal(tab.window_end_ns, 200);
		for (uint32_t i = 0; i < tab.entry_count; i++, entries++) {
			struct sysom_rec_kernel k;
			char want[80];

			channel_table_kernel(&tab, i, &k);
			snprintf(want, sizeof(want), "void kernel_number_%u<float, 128>(float const*)",
				 entries / 2);
			assert_string_equal(channel_table_string(&tab, k.name), want);
			assert_int_equal(k.stream, entries % 3);
			assert_int_equal(k.hist[0], 0);
			assert_int_equal(k.hist[1], 1); /* 1000 ns = 1 µs: [1, 2) µs */
			assert_int_equal(k.hist[2], 1); /* 2000 ns: [2, 4) µs */
		}
		records++;
		if (entries == n)
			break;
	}
	assert_true(records >= 2); /* 1000 × (128 + ~28) bytes do not fit in one record */
	assert_int_equal(t->records_dropped, 0);
	close(peer);
	free(t);
	sysom_channel_close(c);
	listener_close(&l);
}


/* A hand-made table payload: header, entries, strings. */
static size_t make_table(uint8_t *out, uint16_t entry_size, const void *entries, uint16_t n,
			 const char *strings, uint32_t strings_size, uint64_t comm)
{
	struct sysom_rec_table h = { .entry_size = entry_size, .entry_count = n,
				     .strings_size = strings_size, .comm_id = comm,
				     .window_start_ns = 1, .window_end_ns = 2 };

	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), entries, (size_t)entry_size * n);
	memcpy(out + sizeof(h) + (size_t)entry_size * n, strings, strings_size);
	return sizeof(h) + (size_t)entry_size * n + strings_size;
}

static void test_table_rejections(void **state)
{
	static const char strings[] = "\0AllReduce\0Ring\0Simple\0ncclFloat32";
	uint8_t buf[4096];
	struct channel_table t;
	struct sysom_rec_coll good = { .func = 1, .algo = 11, .proto = 16, .datatype = 23,
				       .peer = -1, .nchannels = 2, .count = 4, .bytes = 4096,
				       .kernel_timed = 4, .kernel_ns_total = 40, .kernel_ns_min = 5,
				       .kernel_ns_max = 15, .first_seq = 0, .last_seq = 3 };
	struct sysom_rec_coll e;
	size_t len;

	(void)state;
	len = make_table(buf, sizeof(good), &good, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), 0);
	channel_table_coll(&t, 0, &e);
	assert_string_equal(channel_table_string(&t, e.func), "AllReduce");
	assert_string_equal(channel_table_string(&t, e.datatype), "ncclFloat32");
	/* Wrong type for the payload, truncated, trailing garbage. */
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_STATS, &t), -EINVAL);
	assert_int_equal(channel_decode_table(buf, len - 1, SYSOM_REC_NCCL_COLL, &t),
			 -SYSOM_ECORRUPT);
	assert_int_equal(channel_decode_table(buf, 31, SYSOM_REC_NCCL_COLL, &t), -SYSOM_ECORRUPT);
	/* Communicator 0 */
	len = make_table(buf, sizeof(good), &good, 1, strings, sizeof(strings), 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -EINVAL);
	/* A string offset into the middle of a string, out of range, func empty. */
	e = good;
	e.algo = 12;
	len = make_table(buf, sizeof(e), &e, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -SYSOM_ECORRUPT);
	e = good;
	e.proto = sizeof(strings);
	len = make_table(buf, sizeof(e), &e, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -SYSOM_ECORRUPT);
	e = good;
	e.func = 0;
	len = make_table(buf, sizeof(e), &e, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -SYSOM_ECORRUPT);
	/* Values: no operations, more timed than counted, min > max, seq range reversed. */
	const struct { size_t off; uint64_t v; } bad[] = {
		{ offsetof(struct sysom_rec_coll, count), 0 },
		{ offsetof(struct sysom_rec_coll, kernel_timed), 5 },
		{ offsetof(struct sysom_rec_coll, span_timed), 5 },
		{ offsetof(struct sysom_rec_coll, kernel_ns_min), 16 },
		{ offsetof(struct sysom_rec_coll, first_seq), 4 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		e = good;
		memcpy((uint8_t *)&e + bad[i].off, &bad[i].v, sizeof(bad[i].v));
		len = make_table(buf, sizeof(e), &e, 1, strings, sizeof(strings), 9);
		assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -EINVAL);
	}
	/* Strings not NUL-terminated; entry size below the known size. */
	len = make_table(buf, sizeof(good), &good, 1, strings, sizeof(strings) - 1, 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -SYSOM_ECORRUPT);
	len = make_table(buf, sizeof(good) - 8, &good, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), -SYSOM_ECORRUPT);
	/* A larger entry from a newer producer: the known prefix is read. */
	{
		uint8_t big[sizeof(good) + 16] = { 0 };

		memcpy(big, &good, sizeof(good));
		len = make_table(buf, sizeof(big), big, 1, strings, sizeof(strings), 9);
		assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_COLL, &t), 0);
		channel_table_coll(&t, 0, &e);
		assert_int_equal(e.bytes, 4096);
	}
}

static void test_link_and_kernel_rejections(void **state)
{
	static const char strings[] = "\0k";
	uint8_t buf[4096];
	struct channel_table t;
	struct sysom_rec_link link = { .peer = 1, .channel = -1, .transfers = 2, .bytes = 10,
				       .sx = 10, .sy = 20, .sxx = 50, .sxy = 100, .syy = 200,
				       .min_latency_ns = NAN, .min_bytes_per_ns = NAN,
				       .min_r2 = NAN };
	struct sysom_rec_link l;
	struct sysom_rec_kernel kern = { .name = 1, .count = 1, .total_ns = 5, .min_ns = 5,
					 .max_ns = 5 };
	struct sysom_rec_kernel k;
	size_t len;

	(void)state;
	len = make_table(buf, sizeof(link), &link, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_LINK, &t), 0);
	l = link;
	l.sxy = INFINITY;
	len = make_table(buf, sizeof(l), &l, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_LINK, &t), -EINVAL);
	l = link;
	l.transfers = 0;
	len = make_table(buf, sizeof(l), &l, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_LINK, &t), -EINVAL);
	l = link;
	l.peer = -1;
	len = make_table(buf, sizeof(l), &l, 1, strings, sizeof(strings), 9);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_NCCL_LINK, &t), -EINVAL);

	kern.hist[sysom_rec_hist_bucket(5)] = 1;
	len = make_table(buf, sizeof(kern), &kern, 1, strings, sizeof(strings), 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_GPU_KERNEL, &t), 0);
	k = kern;
	k.hist[3] = 1; /* histogram sum 2 != count 1 */
	len = make_table(buf, sizeof(k), &k, 1, strings, sizeof(strings), 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_GPU_KERNEL, &t), -EINVAL);
	k = kern;
	k.name = 0;
	len = make_table(buf, sizeof(k), &k, 1, strings, sizeof(strings), 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_GPU_KERNEL, &t), -SYSOM_ECORRUPT);
	k = kern;
	k.max_ns = 4;
	len = make_table(buf, sizeof(k), &k, 1, strings, sizeof(strings), 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_GPU_KERNEL, &t), -EINVAL);

	/* A name of CHANNEL_MAX_STRING bytes is taken; one byte more is refused (it would make
	 * the batch's string table exceed what the server accepts). */
	char names[CHANNEL_MAX_STRING + 3];
	memset(names, 'n', sizeof(names));
	names[0] = '\0';
	names[CHANNEL_MAX_STRING + 1] = '\0';
	len = make_table(buf, sizeof(kern), &kern, 1, names, CHANNEL_MAX_STRING + 2, 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_GPU_KERNEL, &t), 0);
	names[CHANNEL_MAX_STRING + 1] = 'n';
	names[CHANNEL_MAX_STRING + 2] = '\0';
	len = make_table(buf, sizeof(kern), &kern, 1, names, CHANNEL_MAX_STRING + 3, 0);
	assert_int_equal(channel_decode_table(buf, len, SYSOM_REC_GPU_KERNEL, &t), -SYSOM_ECORRUPT);
}

static void test_hello_comm_stats_rejections(void **state)
{
	struct sysom_rec_hello h = { .component = 1 };
	struct sysom_rec_comm c = { .comm_id = 1, .rank = 0, .nranks = 2, .nnodes = 1 };
	struct sysom_rec_stat s[3] = { { .id = SYSOM_STAT_EVENTS, .value = 10 },
				       { .id = 999, .value = 1 },
				       { .id = SYSOM_STAT_CUPTI_DROPPED, .value = 3 } };
	uint8_t buf[512];
	struct channel_hello ho;
	struct channel_comm co;
	uint64_t values[CHANNEL_STAT_MAX + 1];
	bool present[CHANNEL_STAT_MAX + 1];

	(void)state;
	assert_int_equal(channel_decode_hello((uint8_t *)&h, sizeof(h) - 1, &ho), -SYSOM_ECORRUPT);
	h.reserved[1] = 1;
	assert_int_equal(channel_decode_hello((uint8_t *)&h, sizeof(h), &ho), -SYSOM_ECORRUPT);
	h.reserved[1] = 0;
	memcpy(buf, &h, sizeof(h));
	memset(buf + sizeof(h), 'x', 200);
	assert_int_equal(channel_decode_hello(buf, sizeof(h) + 200, &ho), -EINVAL);
	assert_int_equal(channel_decode_hello(buf, sizeof(h) + 127, &ho), 0);
	assert_int_equal(strlen(ho.name), 127);

	assert_int_equal(channel_decode_comm((uint8_t *)&c, sizeof(c), &co), 0);
	c.rank = 2;
	assert_int_equal(channel_decode_comm((uint8_t *)&c, sizeof(c), &co), -EINVAL);
	c.rank = 0;
	c.comm_id = 0;
	assert_int_equal(channel_decode_comm((uint8_t *)&c, sizeof(c), &co), -EINVAL);
	c.comm_id = 1;
	c.nnodes = 3;
	assert_int_equal(channel_decode_comm((uint8_t *)&c, sizeof(c), &co), -EINVAL);
	c.nnodes = 1;
	c.flags = 2;
	assert_int_equal(channel_decode_comm((uint8_t *)&c, sizeof(c), &co), -EINVAL);

	assert_int_equal(channel_decode_stats((uint8_t *)s, sizeof(s), values, present), 0);
	assert_true(present[SYSOM_STAT_EVENTS]);
	assert_int_equal(values[SYSOM_STAT_EVENTS], 10);
	assert_int_equal(values[SYSOM_STAT_CUPTI_DROPPED], 3);
	assert_false(present[SYSOM_STAT_ORPHANS]);
	assert_int_equal(channel_decode_stats((uint8_t *)s, sizeof(s) - 1, values, present),
			 -SYSOM_ECORRUPT);
	s[1].id = SYSOM_STAT_EVENTS; /* repeated */
	assert_int_equal(channel_decode_stats((uint8_t *)s, sizeof(s), values, present),
			 -SYSOM_ECORRUPT);
}

static void test_table_builder_limits(void **state)
{
	struct sysom_table *t = malloc(sizeof(*t));
	struct sysom_rec_coll e = { .count = 1 };
	const char *huge_names[4];
	char *huge = malloc(5000);
	uint32_t bad_field = sizeof(e) - 2;

	(void)state;
	assert_non_null(t);
	assert_non_null(huge);
	memset(huge, 'a', 4999);
	huge[4999] = '\0';
	for (int i = 0; i < 4; i++)
		huge_names[i] = huge;
	sysom_table_begin(t, SYSOM_REC_NCCL_COLL, sizeof(e), 1, 0, 0);
	/* A string field that lies outside the entry. */
	assert_int_equal(sysom_table_add(t, NULL, &e, &bad_field, huge_names, 1), -EINVAL);
	/* Strings are cut at 1023 bytes, so four long ones still fit; identical ones are shared. */
	assert_int_equal(sysom_table_add(t, NULL, &e, coll_strings, huge_names, 4), 0);
	assert_int_equal(t->strings_len, 1 + 1024);
	free(huge);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_socket_path_means_silence),
		cmocka_unit_test(test_absent_agent_drops_and_backs_off),
		cmocka_unit_test(test_hello_record_and_mask),
		cmocka_unit_test(test_tables_split_and_decode),
		cmocka_unit_test(test_table_rejections),
		cmocka_unit_test(test_link_and_kernel_rejections),
		cmocka_unit_test(test_hello_comm_stats_rejections),
		cmocka_unit_test(test_table_builder_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
