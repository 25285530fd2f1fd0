/* SPDX-License-Identifier: Apache-2.0 */
/* Server test fixture (header-only): the fixture batch plus the ranks of a training job on one
 * node, with their communicators, NCCL AllReduce calls and GPU kernel launches. */
#ifndef SYSOM_TESTS_UNIT_SERVER_JOB_FIXTURE_H
#define SYSOM_TESTS_UNIT_SERVER_JOB_FIXTURE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/wire/wire.h"
#include "tests/support/batch_fixture.h"

/*
 * On top of fixture_batch_build(spec->base): processes "python3" with tgid JOB_PID(rank) for
 * ranks first_rank .. first_rank + local_ranks - 1 of job `job` (world JOB_WORLD, local rank
 * rank % local_ranks, group rank base.node - 1, groups "tp=<rank % 2>,dp=<rank / 2>"; on node
 * 2 the GPU of local rank l is NVML device local_ranks - 1 - l (CUDA_VISIBLE_DEVICES reversed),
 * on other nodes unknown, as from an agent before wire 1.7); per
 * rank the communicator JOB_COMM (nranks JOB_WORLD) and the CommSplit child
 * JOB_TP_COMM(rank / 2) (nranks 2, color rank / 2); `instances` AllReduce calls on JOB_COMM,
 * seq 0.. entered at window start + (seq + 1) s + rank ms, leaving at + (seq + 1) s + 20 ms,
 * 1024 floats; rank `skip_rank` makes no call for seq 1; per rank one GroupStart (no
 * communicator) and one CommInitRank call, which are not collectives. With `launches`, per
 * rank: JOB_KERNEL launched 10 times from the fixture's user stack U, an unnamed kernel
 * (function 0xdead) 2 times from U, and "memcpyKernel" once without a user stack. With
 * `gpu_timing`, per rank: GPU time of JOB_KERNEL (10 runs of 100 µs; twice as long on rank
 * `slow_rank`), "memcpyKernel" (1 run, 5 µs) and JOB_UNLAUNCHED (4 runs, 1 µs, never seen
 * launched); an NCCL profile of 3 AllReduce (Ring, Simple, 4096 bytes, 20 µs on the GPU) on
 * JOB_COMM; a link to rank + 1 with 2 transfers on the line 5000 ns + bytes / 12.5.
 */
#define JOB_WORLD 8
#define JOB_COMM 0xabcULL
#define JOB_TP_COMM(i) (0x7000ULL + (uint64_t)(i))
#define JOB_PID(rank) (5000u + (uint32_t)(rank))
#define JOB_KERNEL "ncclDevKernel_AllReduce_Sum_f32"
#define JOB_UNLAUNCHED "graphReplayedKernel"

struct job_spec {
	struct fixture_spec base;
	const char *job;
	int first_rank, local_ranks;
	int instances;
	int skip_rank; /* -1: none */
	bool launches;
	bool gpu_timing;
	int slow_rank; /* with gpu_timing: whose JOB_KERNEL takes twice as long (-1: none) */
	bool slow_all; /* ... every kernel of slow_rank, not only JOB_KERNEL */
	uint64_t kernel_ns; /* with gpu_timing: one JOB_KERNEL run (0: 100 µs) */
	int late_rank; /* enters every AllReduce `late_ms` later than the fixture's schedule */
	int late_ms;   /* 0: nobody is late */
	/* CPU samples per rank: 10 on the user stack U; rank `hot_rank` also has 30 on U
	 * extended by python3.11+0x2000 (a hot function). Off unless `samples`. */
	bool samples;
	int hot_rank;
	/* Two DataLoader workers (JOB_RANKS role worker, pids JOB_PID(first_rank) + 100 and
	 * + 101) of the node's first rank. */
	bool workers;
};

/* The GPU-side timing rows of one rank (see job_batch_build). */
static inline int job_gpu_rows(struct sysom_batch *b, const struct job_spec *js, uint32_t proc,
			       int rank)
{
	static const char *const names[] = { JOB_KERNEL, "memcpyKernel", JOB_UNLAUNCHED };
	const uint64_t counts[] = { 10, 1, 4 };
	const uint64_t slow = rank == js->slow_rank ? 2 : 1, others = js->slow_all ? slow : 1;
	const uint64_t each[] = { (js->kernel_ns ? js->kernel_ns : 100000ULL) * slow, 5000 * others,
				  1000 * others };
	uint32_t comm, func, algo, proto, dtype;
	int rc;

	for (int i = 0; i < 3; i++) {
		struct sysom_gpu_kernel k = { .process = proc, .device = 0, .stream = 7,
					      .count = counts[i], .total_ns = counts[i] * each[i],
					      .min_ns = each[i], .max_ns = each[i] };
		k.hist[sysom_gpu_hist_bucket(each[i])] = (uint32_t)counts[i];
		if ((rc = sysom_batch_intern_cstring(b, names[i], &k.name)) ||
		    (rc = sysom_batch_add_gpu_kernel(b, &k)))
			return rc;
	}
	if ((rc = sysom_batch_intern_cstring(b, "world", &comm)) ||
	    (rc = sysom_batch_intern_cstring(b, "AllReduce", &func)) ||
	    (rc = sysom_batch_intern_cstring(b, "Ring", &algo)) ||
	    (rc = sysom_batch_intern_cstring(b, "Simple", &proto)) ||
	    (rc = sysom_batch_intern_cstring(b, "ncclFloat32", &dtype)))
		return rc;
	struct sysom_nccl_profile p = { .process = proc, .rank = rank, .comm_id = JOB_COMM,
					.comm_name = comm, .nranks = JOB_WORLD, .func = func,
					.algo = algo, .proto = proto, .datatype = dtype, .peer = -1,
					.nchannels = 2, .count = 3, .bytes = 3 * 4096,
					.kernel_timed = 3, .kernel_ns_total = 60000,
					.kernel_ns_min = 20000, .kernel_ns_max = 20000,
					.span_timed = 3, .span_ns_total = 90000,
					.enqueue_ns_total = 3000, .transfers = 2,
					.transfer_bytes = 3000, .first_seq = 0, .last_seq = 2 };
	if ((rc = sysom_batch_add_nccl_profile(b, &p)))
		return rc;
	/* (1000 B, 5080 ns) and (2000 B, 5160 ns). */
	struct sysom_nccl_link l = { .process = proc, .rank = rank, .comm_id = JOB_COMM,
				     .peer = (rank + 1) % JOB_WORLD, .channel = -1, .transfers = 2,
				     .bytes = 3000, .time_ns_total = 10240, .sx = 3000,
				     .sy = 10240, .sxx = 5e6, .sxy = 15.4e6, .syy = 52432000,
				     .min_latency_ns = 5000, .min_bytes_per_ns = 12.5, .min_r2 = 1,
				     .min_points = 2 };
	return sysom_batch_add_nccl_link(b, &l);
}

static inline uint32_t job_object(const struct sysom_batch *b, const char *name)
{
	for (uint32_t i = 0; i < b->object_count; i++)
		if (strcmp(sysom_batch_string(b, b->objects[i].name), name) == 0)
			return i;
	return SYSOM_WIRE_NONE;
}

static inline int job_batch_build(struct sysom_batch *b, const struct job_spec *js)
{
	const uint64_t t0 = js->base.window_start_ns;
	uint32_t libc, python, ustack, comm, exe, cmd, job, src, master, name, memcpy_name, noname;
	struct sysom_frame frames[2];
	int rc;

	if ((rc = fixture_batch_build(b, &js->base)))
		return rc;
	libc = job_object(b, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	python = job_object(b, "/usr/bin/python3.11");
	if (libc == SYSOM_WIRE_NONE || python == SYSOM_WIRE_NONE)
		return -EINVAL;
	frames[0] = (struct sysom_frame){ libc, 0x29d90 };
	frames[1] = (struct sysom_frame){ python, 0x1000 };
	if ((rc = sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, frames, 2, &ustack)) ||
	    (rc = sysom_batch_intern_cstring(b, "python3", &comm)) ||
	    (rc = sysom_batch_intern_cstring(b, "/usr/bin/python3.11", &exe)) ||
	    (rc = sysom_batch_intern_cstring(b, "python3 train.py", &cmd)) ||
	    (rc = sysom_batch_intern_cstring(b, js->job, &job)) ||
	    (rc = sysom_batch_intern_cstring(b, "TORCHELASTIC_RUN_ID", &src)) ||
	    (rc = sysom_batch_intern_cstring(b, "10.0.0.1:29500", &master)) ||
	    (rc = sysom_batch_intern_cstring(b, JOB_KERNEL, &name)) ||
	    (rc = sysom_batch_intern_cstring(b, "memcpyKernel", &memcpy_name)) ||
	    (rc = sysom_batch_intern_cstring(b, "", &noname)))
		return rc;
	for (int i = 0; i < js->local_ranks; i++) {
		int rank = js->first_rank + i;
		struct sysom_process p = { .tgid = JOB_PID(rank), .generation = 1,
					   .start_time_ns = 1000000ULL * (uint64_t)rank, .comm = comm,
					   .exe = exe, .cmdline = cmd, .ppid = 1 };
		uint32_t proc, groups;
		char text[64];

		snprintf(text, sizeof(text), "tp=%d,dp=%d", rank % 2, rank / 2);
		if ((rc = sysom_batch_add_process(b, &p, &proc)) ||
		    (rc = sysom_batch_intern_cstring(b, text, &groups)))
			return rc;
		struct sysom_job_rank jr = { .process = proc, .job = job, .rank = rank,
					     .world_size = JOB_WORLD, .local_rank = rank % js->local_ranks,
					     .local_world_size = js->local_ranks,
					     .group_rank = js->base.node - 1,
					     .source = SYSOM_JOB_FROM_ENVIRONMENT, .job_id_source = src,
					     .master = master, .groups = groups,
					     .gpu_device = js->base.node == 2
							? (uint8_t)(js->local_ranks - rank % js->local_ranks)
							: 0 };
		struct sysom_communicator world = {
			.process = proc, .rank = rank, .key = JOB_COMM, .nranks = JOB_WORLD,
			.split_color = -1, .split_key = -1, .key_source = SYSOM_COMM_KEY_UNIQUE_ID,
			.created_ns = t0 + 1000000, .handle = 0x5550000 + (uint64_t)rank };
		struct sysom_communicator tp = {
			.process = proc, .rank = rank % 2, .key = JOB_TP_COMM(rank / 2),
			.parent_key = JOB_COMM, .nranks = 2, .split_color = rank / 2, .split_key = rank,
			.split_ordinal = 1, .key_source = SYSOM_COMM_KEY_SPLIT, .created_ns = t0 + 2000000,
			.handle = 0x6660000 + (uint64_t)rank };
		if ((rc = sysom_batch_set_job_rank(b, &jr)) ||
		    (rc = sysom_batch_set_communicator(b, &world)) ||
		    (rc = sysom_batch_set_communicator(b, &tp)))
			return rc;
		for (int seq = 0; seq < js->instances; seq++) {
			uint64_t at = t0 + (uint64_t)(seq + 1) * 1000000000ULL;
			struct sysom_nccl_call c = {
				.process = proc, .tid = JOB_PID(rank) + 1, .comm_key = JOB_COMM,
				.seq = (uint64_t)seq,
				.entry_ns = at + (uint64_t)rank * 1000000ULL +
					    (rank == js->late_rank ? (uint64_t)js->late_ms * 1000000ULL : 0),
				.exit_ns = at + 20000000ULL + (uint64_t)js->late_ms * 1000000ULL,
				.count = 1024, .bytes = 4096,
				.stream = 0x77, .op = SYSOM_NCCL_ALL_REDUCE, .datatype = 7, .redop = 0,
				.peer = -1, .result = 0, .rank = rank };
			if (rank == js->skip_rank && seq == 1)
				continue;
			if ((rc = sysom_batch_add_nccl_call(b, &c)))
				return rc;
		}
		struct sysom_nccl_call other = { .process = proc, .tid = JOB_PID(rank), .entry_ns = t0 + 500,
						 .exit_ns = t0 + 600, .op = SYSOM_NCCL_GROUP_START,
						 .datatype = SYSOM_NCCL_NO_DATATYPE,
						 .redop = SYSOM_NCCL_NO_REDOP, .peer = -1, .rank = -1 };
		if ((rc = sysom_batch_add_nccl_call(b, &other)))
			return rc;
		other.op = SYSOM_NCCL_COMM_INIT_RANK;
		other.comm_key = JOB_COMM;
		if ((rc = sysom_batch_add_nccl_call(b, &other)))
			return rc;
		if (js->gpu_timing && (rc = job_gpu_rows(b, js, proc, rank)))
			return rc;
		if (js->samples) {
			struct sysom_frame hot[3] = { { python, 0x2000 }, frames[0], frames[1] };
			uint32_t hstack, tcomm;
			struct sysom_sample smp = { .process = proc, .tid = JOB_PID(rank), .cpu = 1,
						    .time_offset_ms = 1000,
						    .kernel_stack = SYSOM_WIRE_NONE,
						    .user_stack = ustack, .count = 10 };
			if ((rc = sysom_batch_intern_cstring(b, "python3", &tcomm)))
				return rc;
			smp.thread_comm = tcomm;
			if ((rc = sysom_batch_add_sample(b, &smp)))
				return rc;
			if (rank == js->hot_rank) {
				if ((rc = sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE,
								hot, 3, &hstack)))
					return rc;
				smp.user_stack = hstack;
				smp.count = 30;
				if ((rc = sysom_batch_add_sample(b, &smp)))
					return rc;
			}
		}
		if (!js->launches)
			continue;
		struct sysom_launch l = { .process = proc, .kernel_name = name, .function = 0xbeef,
					  .user_stack = ustack, .kernel_stack = SYSOM_WIRE_NONE,
					  .count = 10, .grid = { 8, 1, 1 }, .block = { 256, 1, 1 } };
		if ((rc = sysom_batch_add_launch(b, &l)))
			return rc;
		l.kernel_name = noname;
		l.function = 0xdead;
		l.count = 2;
		if ((rc = sysom_batch_add_launch(b, &l)))
			return rc;
		l.kernel_name = memcpy_name;
		l.function = 0xc0de;
		l.user_stack = SYSOM_WIRE_NONE;
		l.count = 1;
		if ((rc = sysom_batch_add_launch(b, &l)))
			return rc;
	}
	uint32_t first = b->job_rank_count - (uint32_t)(js->local_ranks > 0 ? js->local_ranks : 0);
	for (uint32_t i = 0; js->workers && js->local_ranks > 0 && i < 2; i++) {
		struct sysom_job_rank w = b->job_ranks[first];
		struct sysom_process p = b->processes[w.process];
		uint32_t proc;

		p.tgid = JOB_PID(js->first_rank) + 100 + i;
		p.ppid = JOB_PID(js->first_rank);
		if ((rc = sysom_batch_add_process(b, &p, &proc)))
			return rc;
		w.process = proc;
		w.role = SYSOM_JOB_ROLE_WORKER;
		w.rank_pid = JOB_PID(js->first_rank);
		if ((rc = sysom_batch_set_job_rank(b, &w)))
			return rc;
	}
	return 0;
}

#endif
