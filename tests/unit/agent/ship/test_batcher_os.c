/* SPDX-License-Identifier: Apache-2.0 */
/* OS signal rows through the batcher: merged per key across drains, named, bounded, sealed and
 * decoded. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/ship/batcher.h"
#include "agent/node/proctrack.h"
#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"

struct fx {
	struct host_identity host;
	struct kernel_info kernel;
	struct proctrack *pt;
	struct batcher *b;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct proctrack_options po;
	struct batcher_options bo = { .agent_version = "test", .hz = 99, .sample_rate = 0.1,
				      .drain_interval_s = 5, .batch_interval_s = 30,
				      .zstd_level = 1, .max_sample_rows = 2 };

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
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	batcher_free(f->b);
	proctrack_free(f->pt);
	free(f);
	return 0;
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

/* Two drains' rows of the same keys: one row each, sums, latest names, OR'ed masks. */
static void test_rows_merge_across_drains(void **state)
{
	struct fx *f = *state;
	uint32_t self = (uint32_t)getpid(), tid = (uint32_t)gettid();
	struct sysom_batch b;

	for (int drain = 0; drain < 2; drain++) {
		struct sysom_os_cpu c = { .cpu = 1, .numa_node = 0, .busy_ns = 1000,
					  .context_switches = 10 };
		c.softirq_count[SYSOM_SOFTIRQ_NET_RX] = 3;
		c.softirq_ns[SYSOM_SOFTIRQ_NET_RX] = 300;
		assert_int_equal(batcher_add_os_cpu(f->b, &c), 0);
		struct sysom_os_irq q = { .cpu = 1, .irq = 42, .name = 999 /* ignored */,
					  .count = 5, .ns = 50 };
		assert_int_equal(batcher_add_os_irq(f->b, &q, drain ? "eth0-rx-1" : "eth0-rx-0"), 0);
		struct sysom_os_thread t = { .process = 77 /* ignored */, .tid = tid,
					     .comm = 12345 /* ignored */, .oncpu_ns = 500,
					     .runq_wait_ns = 40, .runq_waits = 2,
					     .voluntary_switches = 1, .involuntary_switches = 1 };
		t.runq_hist[3] = 2;
		t.cpus[0] = drain ? 2 : 1;
		assert_int_equal(batcher_add_os_thread(f->b, self, 0, &t,
						       drain ? "NCCL Proxy" : "python3"), 0);
	}
	seal(f, &b);
	assert_int_equal(b.os_cpu_count, 1);
	assert_int_equal(b.os_cpus[0].busy_ns, 2000);
	assert_int_equal(b.os_cpus[0].softirq_count[SYSOM_SOFTIRQ_NET_RX], 6);
	assert_int_equal(b.os_irq_count, 1);
	assert_int_equal(b.os_irqs[0].count, 10);
	assert_string_equal(sysom_batch_string(&b, b.os_irqs[0].name), "eth0-rx-1");
	assert_int_equal(b.os_thread_count, 1);
	const struct sysom_os_thread *t = &b.os_threads[0];
	assert_int_equal(b.processes[t->process].tgid, self);
	assert_int_equal(t->tid, tid);
	assert_int_equal(t->oncpu_ns, 1000);
	assert_int_equal(t->runq_waits, 4);
	assert_int_equal(t->runq_hist[3], 4);
	assert_int_equal(t->cpus[0], 3);
	assert_string_equal(sysom_batch_string(&b, t->comm), "NCCL Proxy");
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_OS_ROWS_DROPPED), 0);
	sysom_batch_free(&b);
}

/* Rows past the decoder's limit are dropped and counted; what the decoder would refuse is
 * refused. */
static void test_limits_and_refusals(void **state)
{
	struct fx *f = *state;
	struct sysom_batch b;

	for (uint32_t cpu = 0; cpu <= BATCHER_MAX_OS_CPUS; cpu++) {
		struct sysom_os_cpu c = { .cpu = cpu, .numa_node = -1, .busy_ns = 1 };
		assert_int_equal(batcher_add_os_cpu(f->b, &c), 0);
	}
	struct sysom_os_cpu bad = { .cpu = 1, .numa_node = -1, .hardirq_ns = 5 };
	struct sysom_os_irq zero = { .cpu = 1, .irq = 3 };
	struct sysom_os_thread tid0 = { .tid = 0, .oncpu_ns = 1 };
	assert_int_equal(batcher_add_os_irq(f->b, &zero, "x"), -EINVAL);
	assert_int_equal(batcher_add_os_thread(f->b, (uint32_t)getpid(), 0, &tid0, "x"), -EINVAL);
	seal(f, &b);
	assert_int_equal(b.os_cpu_count, BATCHER_MAX_OS_CPUS);
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_OS_ROWS_DROPPED), 1);
	sysom_batch_free(&b);
	/* The next window starts empty; an invalid CPU row is refused there too. */
	assert_int_equal(batcher_add_os_cpu(f->b, &bad), -EINVAL);
	seal(f, &b);
	assert_int_equal(b.os_cpu_count, 0);
	assert_int_equal(sysom_batch_counter(&b, SYSOM_COUNTER_OS_ROWS_DROPPED), 0);
	sysom_batch_free(&b);
}


/* Off-CPU entries: one OFFCPU row per drain and key with its stacks resolved (a vanished
 * process's too, as for samples); rows beyond the limit (2 here) are counted as lost,
 * malformed ones dropped. */
static void test_offcpu_rows(void **state)
{
	struct fx *f = *state;
	struct sysom_offcpu_key key = { .tgid = (uint32_t)getpid(), .tid = (uint32_t)gettid(),
					.state = SYSOM_OFFCPU_STATE_DISK, .kernel_stack = 11,
					.user_stack = 22 };
	struct sysom_stack_trace k = { .nframes = 2, .side = SYSOM_SIDE_KERNEL,
				       .ips = { 0xffffffff81000100ull, 0xffffffff81000200ull } };
	struct sysom_stack_trace u = { .nframes = 1, .side = SYSOM_SIDE_USER,
				       .ips = { (uint64_t)(uintptr_t)&test_offcpu_rows } };
	struct sampler_offcpu_entry e = { .key = &key, .count = 3, .total_ns = 9000000,
					  .max_ns = 5000000, .comm = "io_worker", .kernel = &k,
					  .user = &u };
	struct sysom_batch d;

	batcher_begin_drain(f->b, 1000000000ull);
	assert_int_equal(batcher_add_offcpu(f->b, &e), 0);
	assert_int_equal(batcher_add_offcpu(f->b, &e), 0); /* same drain, same key: merged */
	struct sysom_offcpu_key other = key;
	other.tid = key.tid + 1;
	e.key = &other;
	assert_int_equal(batcher_add_offcpu(f->b, &e), 0); /* second row */
	other.tid = key.tid + 2;
	assert_int_equal(batcher_add_offcpu(f->b, &e), 0); /* over the limit: lost */
	e.key = &key;
	e.max_ns = e.total_ns + 1; /* BPF never sends it: dropped */
	assert_int_equal(batcher_add_offcpu(f->b, &e), 0);
	seal(f, &d);
	assert_int_equal(d.offcpu_count, 2);
	const struct sysom_offcpu *o = &d.offcpu[0];
	assert_int_equal(d.processes[o->process].tgid, (uint32_t)getpid());
	assert_int_equal(o->tid, (uint32_t)gettid());
	assert_int_equal(o->state, SYSOM_OFFCPU_DISK);
	assert_int_equal(o->count, 6);
	assert_int_equal(o->blocked_ns, 18000000);
	assert_int_equal(o->max_ns, 5000000);
	assert_string_equal(sysom_batch_string(&d, o->thread_comm), "io_worker");
	assert_int_equal(d.stacks[o->kernel_stack].kind, SYSOM_STACK_KERNEL);
	assert_int_equal(d.stacks[o->kernel_stack].nframes, 2);
	assert_int_equal(d.stacks[o->user_stack].kind, SYSOM_STACK_USER);
	assert_int_equal(d.offcpu[1].tid, (uint32_t)gettid() + 1);
	assert_int_equal(sysom_batch_counter(&d, SYSOM_COUNTER_OFFCPU_LOST), 3);
	sysom_batch_free(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_offcpu_rows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rows_merge_across_drains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_limits_and_refusals, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
