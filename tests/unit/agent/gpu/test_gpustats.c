/* SPDX-License-Identifier: Apache-2.0 */
/* Component telemetry folded into a real batch: records in, sealed and decoded batch out. */
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
#include <unistd.h>

#include <cmocka.h>

#include "agent/ship/batcher.h"
#include "agent/gpu/gpustats.h"
#include "agent/node/proctrack.h"
#include "include/sysom/records.h"
#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"

struct fx {
	struct host_identity host;
	struct kernel_info kernel;
	struct proctrack *pt;
	struct batcher *b;
	struct gpustats *g;
	void *conn; /* the connection state */
	uint32_t tgid;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct proctrack_options po;
	struct batcher_options bo = { .agent_version = "test", .hz = 99, .sample_rate = 0.1,
				      .drain_interval_s = 5, .batch_interval_s = 30,
				      .zstd_level = 1 };
	struct gpustats_options go = { 0 };

	assert_non_null(f);
	snprintf(f->host.hostname, sizeof(f->host.hostname), "node-a");
	bo.host = &f->host;
	f->kernel.id.kind = SYSOM_OBJECT_KERNEL;
	f->kernel.id.len = 20;
	memset(f->kernel.id.bytes, 0xab, 20);
	bo.kernel = &f->kernel;
	proctrack_options_default(&po);
	assert_int_equal(proctrack_new(&po, &f->pt), 0);
	assert_int_equal(batcher_new(&bo, f->pt, &f->b), 0);
	go.batcher = f->b;
	assert_int_equal(gpustats_new(&go, &f->g), 0);
	f->tgid = (uint32_t)getpid();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	gpustats_conn_closed(f->g, f->conn);
	gpustats_free(f->g);
	batcher_free(f->b);
	proctrack_free(f->pt);
	free(f);
	return 0;
}

static int feed(struct fx *f, uint16_t type, const void *p, size_t len)
{
	return gpustats_record(f->g, f->tgid, &f->conn, type, p, len);
}

/* A table record payload with one string area. */
static size_t table(uint8_t *out, uint16_t entry_size, const void *entries, uint16_t n,
		    const char *strings, uint32_t strings_size, uint64_t comm)
{
	struct sysom_rec_table h = { .entry_size = entry_size, .entry_count = n,
				     .strings_size = strings_size, .comm_id = comm,
				     .window_start_ns = 1000, .window_end_ns = 2000 };

	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), entries, (size_t)entry_size * n);
	memcpy(out + sizeof(h) + (size_t)entry_size * n, strings, strings_size);
	return sizeof(h) + (size_t)entry_size * n + strings_size;
}

static void seal(struct fx *f, struct sysom_batch *out)
{
	uint8_t node[16] = { 1 };
	struct byte_buf z = { 0 }, raw = { 0 };
	struct sysom_wire_error err;

	assert_int_equal(batcher_seal(f->b, node, 1, 1, 3000000000ull, &z, NULL), 0);
	assert_int_equal(sysom_zstd_decompress(z.data, z.len, 1 << 26, &raw), 0);
	int rc = sysom_batch_decode(raw.data, raw.len, &sysom_wire_default_limits, out, &err);
	if (rc)
		print_error("decode at %zu: %s\n", err.offset, err.message);
	assert_int_equal(rc, 0);
	byte_buf_free(&z);
	byte_buf_free(&raw);
}

static void test_fold_everything(void **state)
{
	struct fx *f = *state;
	struct sysom_rec_hello hello = { .component = SYSOM_COMPONENT_NCCL_PROFILER,
					 .interface = 5 };
	struct {
		struct sysom_rec_comm c;
		char name[4];
	} comm = { { .comm_id = 0x1234, .rank = 3, .nranks = 8, .nnodes = 2 }, "dp" };
	static const char cs[] = "\0AllReduce\0Ring\0Simple\0ncclFloat32";
	struct sysom_rec_coll coll = { .func = 1, .algo = 11, .proto = 16, .datatype = 23,
				       .peer = -1, .nchannels = 2, .count = 10, .bytes = 40960,
				       .kernel_timed = 10, .kernel_ns_total = 1000,
				       .kernel_ns_min = 50, .kernel_ns_max = 200, .span_timed = 0,
				       .enqueue_ns_total = 300, .first_seq = 0, .last_seq = 9 };
	struct sysom_rec_link link = { .peer = 4, .channel = -1, .transfers = 3, .bytes = 300,
				       .time_ns_total = 600, .sx = 300, .sy = 600, .sxx = 35000,
				       .sxy = 70000, .syy = 140000, .min_latency_ns = 10,
				       .min_bytes_per_ns = 2, .min_r2 = 1, .min_points = 3 };
	static const char ks[] = "\0sim_gemm_fwd";
	struct sysom_rec_kernel kern = { .name = 1, .device = 0, .stream = 7, .count = 2,
					 .total_ns = 3000, .min_ns = 1000, .max_ns = 2000 };
	struct sysom_rec_stat stats[2] = { { .id = SYSOM_STAT_EVENTS, .value = 100 },
					   { .id = SYSOM_STAT_RECORDS_DROPPED, .value = 2 } };
	uint8_t buf[4096];
	size_t len;
	struct sysom_batch b;
	struct gpustats_stats st;

	assert_int_equal(feed(f, SYSOM_REC_HELLO, &hello, sizeof(hello)), 0);
	/* A table before its communicator is announced is refused. */
	len = table(buf, sizeof(coll), &coll, 1, cs, sizeof(cs), 0x1234);
	assert_int_equal(feed(f, SYSOM_REC_NCCL_COLL, buf, len), -ENOENT);
	assert_int_equal(feed(f, SYSOM_REC_NCCL_COMM, &comm, sizeof(comm.c) + 2), 0);
	/* Two windows of the same operation kind merge into one row. */
	assert_int_equal(feed(f, SYSOM_REC_NCCL_COLL, buf, len), 0);
	coll.first_seq = 10;
	coll.last_seq = 19;
	coll.kernel_ns_min = 40;
	len = table(buf, sizeof(coll), &coll, 1, cs, sizeof(cs), 0x1234);
	assert_int_equal(feed(f, SYSOM_REC_NCCL_COLL, buf, len), 0);
	len = table(buf, sizeof(link), &link, 1, "", 1, 0x1234);
	assert_int_equal(feed(f, SYSOM_REC_NCCL_LINK, buf, len), 0);
	assert_int_equal(feed(f, SYSOM_REC_NCCL_LINK, buf, len), 0);
	link.peer = 8; /* outside the communicator */
	len = table(buf, sizeof(link), &link, 1, "", 1, 0x1234);
	assert_int_equal(feed(f, SYSOM_REC_NCCL_LINK, buf, len), -EINVAL);
	kern.hist[1] = 1;
	kern.hist[2] = 1;
	len = table(buf, sizeof(kern), &kern, 1, ks, sizeof(ks), 0);
	assert_int_equal(feed(f, SYSOM_REC_GPU_KERNEL, buf, len), 0);
	assert_int_equal(feed(f, SYSOM_REC_STATS, stats, sizeof(stats)), 0);
	stats[0].value = 130; /* cumulative: 30 more */
	assert_int_equal(feed(f, SYSOM_REC_STATS, stats, sizeof(stats)), 0);
	assert_int_equal(feed(f, 99, "x", 1), -ENOSYS);

	gpustats_stats_read(f->g, &st);
	assert_int_equal(st.components, 1);
	assert_int_equal(st.rejected, 2);
	assert_int_equal(st.profiles, 2);
	assert_int_equal(st.links, 2);
	assert_int_equal(st.kernels, 1);

	seal(f, &b);
	assert_int_equal(b.nccl_profile_count, 1);
	const struct sysom_nccl_profile *p = &b.nccl_profiles[0];
	assert_int_equal(p->rank, 3);
	assert_int_equal(p->nranks, 8);
	assert_int_equal(p->comm_id, 0x1234);
	assert_string_equal(sysom_batch_string(&b, p->comm_name), "dp");
	assert_string_equal(sysom_batch_string(&b, p->func), "AllReduce");
	assert_string_equal(sysom_batch_string(&b, p->algo), "Ring");
	assert_string_equal(sysom_batch_string(&b, p->datatype), "ncclFloat32");
	assert_int_equal(p->count, 20);
	assert_int_equal(p->bytes, 81920);
	assert_int_equal(p->kernel_ns_total, 2000);
	assert_int_equal(p->kernel_ns_min, 40);
	assert_int_equal(p->kernel_ns_max, 200);
	assert_int_equal(p->first_seq, 0);
	assert_int_equal(p->last_seq, 19);
	assert_int_equal(b.processes[p->process].tgid, f->tgid);

	assert_int_equal(b.nccl_link_count, 1);
	assert_int_equal(b.nccl_links[0].transfers, 6);
	assert_true(fabs(b.nccl_links[0].sxy - 140000) < 1e-9);
	assert_int_equal(b.nccl_links[0].peer, 4);
	assert_int_equal(b.nccl_links[0].rank, 3);

	assert_int_equal(b.gpu_kernel_count, 1);
	assert_string_equal(sysom_batch_string(&b, b.gpu_kernels[0].name), "sim_gemm_fwd");
	assert_int_equal(b.gpu_kernels[0].count, 2);
	assert_int_equal(b.gpu_kernels[0].stream, 7);
	assert_int_equal(b.gpu_kernels[0].hist[2], 1);

	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_PROFILER_EVENTS), 130);
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_COMPONENT_SEND_DROPS), 2);
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_CHANNEL_RECORDS), 9);
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_CHANNEL_REJECTED), 2);
	sysom_batch_free(&b);
}

/* A process that exited before the batch sealed keeps its rows: the measurements were made,
 * and the process record says which tgid they came from. */
static void test_exited_process_kept(void **state)
{
	struct fx *f = *state;
	static const char ks[] = "\0k";
	struct sysom_rec_kernel kern = { .name = 1, .count = 1, .total_ns = 5, .min_ns = 5,
					 .max_ns = 5 };
	uint8_t buf[512];
	size_t len;
	struct sysom_batch b;

	f->tgid = 0x3fffffff; /* no such process */
	kern.hist[0] = 1;
	len = table(buf, sizeof(kern), &kern, 1, ks, sizeof(ks), 0);
	assert_int_equal(feed(f, SYSOM_REC_GPU_KERNEL, buf, len), 0);
	seal(f, &b);
	assert_int_equal(b.gpu_kernel_count, 1);
	assert_int_equal(b.processes[b.gpu_kernels[0].process].tgid, 0x3fffffff);
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_GPU_STATS_DROPPED), 0);
	sysom_batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fold_everything, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exited_process_kept, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
