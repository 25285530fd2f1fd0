/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline stragglers on the GPU clock: stages judged on their kernels' time per microbatch
 * from CUPTI and NCCL profiler plugin rows (server/analysis/pipeline.c, issue 22). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "include/sysom/nccl_ops.h"
#include "server/analysis/pipeline.h"

#define US 1000ll
#define MS 1000000ll
#define COMM 0xabcdull
#define PLUGIN_COMM 0x77ull
#define MB 40 /* microbatches */
#define STAGES 4

static const struct pipeline_params params = { .k = 3.5, .min_excess_ns = 1000000,
					       .scale_floor_ns = 50000 };

static uint32_t pid_of(int rank)
{
	return (uint32_t)(1000 + rank);
}

static void add(struct pipeline *pl, uint8_t op, int32_t rank, int32_t peer, uint64_t seq,
		int64_t entry, int64_t exit)
{
	struct pipeline_call c = { .comm = COMM, .seq = seq, .entry_ns = entry, .exit_ns = exit,
				   .rank = rank, .peer = peer, .job_rank = rank + 100,
				   .pid = pid_of(rank), .op = op };
	assert_int_equal(pipeline_add(pl, &c), 0);
}

/* A 4-stage chain over MB microbatches whose stages all spend `host[r]` on the host per
 * microbatch (Send/Recv return once enqueued, as on a real GPU: their GPU time is not seen
 * here). */
static void chain(struct pipeline *pl, const int64_t *host)
{
	int64_t ready[STAGES][MB];

	for (int r = 0; r < STAGES; r++) {
		int64_t t = 0;
		for (int m = 0; m < MB; m++) {
			if (r > 0) {
				int64_t start = ready[r - 1][m] > t ? ready[r - 1][m] : t;
				add(pl, SYSOM_NCCL_RECV, r, r - 1, (uint64_t)m, t, start + 20 * US);
				t = start + 20 * US;
			}
			t += host[r] + (m % 3) * 10 * US;
			ready[r][m] = t;
			if (r + 1 < STAGES) {
				add(pl, SYSOM_NCCL_SEND, r, r + 1, (uint64_t)m, t, t + 5 * US);
				t += 5 * US;
			}
		}
	}
}

static void compute(struct pipeline *pl, int rank, uint64_t kernels, uint64_t ns)
{
	struct pipeline_gpu_compute g = { .job_rank = rank + 100, .pid = pid_of(rank),
					  .kernels = kernels, .kernel_ns = ns };
	assert_int_equal(pipeline_gpu_compute_add(pl, &g), 0);
}

static void p2p(struct pipeline *pl, int rank, uint8_t op, int peer, uint64_t comm_id,
		uint64_t count, uint64_t timed, uint64_t ns)
{
	struct pipeline_gpu_p2p g = { .job_rank = rank + 100, .pid = pid_of(rank),
				      .comm_id = comm_id, .rank = rank,
				      .peer = peer, .op = op, .count = count,
				      .kernel_timed = timed, .kernel_ns = ns };
	assert_int_equal(pipeline_gpu_p2p_add(pl, &g), 0);
}

/* The plugin's rows of every stage: MB sends to the next stage, MB receives from the previous
 * one taking `recv_ns` each on the GPU; split in two rows (two windows) each. */
static void plugin_rows(struct pipeline *pl, int64_t recv_ns)
{
	for (int r = 0; r < STAGES; r++)
		for (int w = 0; w < 2; w++) {
			if (r + 1 < STAGES)
				p2p(pl, r, SYSOM_NCCL_SEND, r + 1, PLUGIN_COMM, MB / 2, MB / 2,
				    MB / 2 * 30 * US);
			if (r > 0)
				p2p(pl, r, SYSOM_NCCL_RECV, r - 1, PLUGIN_COMM, MB / 2, MB / 2,
				    (uint64_t)(MB / 2 * recv_ns));
		}
}

static const struct pipeline_stage *stage(const struct pipeline_result *r, int32_t rank)
{
	for (size_t i = 0; i < r->nstages; i++)
		if (r->stages[i].rank == rank)
			return &r->stages[i];
	fail_msg("stage %d missing", rank);
	return NULL;
}

static const struct pipeline_link *link_of(const struct pipeline_result *r, int32_t src)
{
	for (size_t i = 0; i < r->nlinks; i++)
		if (r->links[i].src == src)
			return &r->links[i];
	fail_msg("link %d missing", src);
	return NULL;
}

static const int64_t equal_host[STAGES] = { 2 * MS, 2 * MS, 2 * MS, 2 * MS };

/* Stage 2's kernels take 3 ms per microbatch, the others' 1 ms; the host times are equal:
 * only the GPU clock names it. */
static void test_slow_on_gpu_only(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	for (int s = 0; s < STAGES; s++) /* rows from two windows, summed */
		for (int w = 0; w < 2; w++)
			compute(pl, s, MB, (uint64_t)(MB / 2 * (s == 2 ? 3 : 1) * MS));
	plugin_rows(pl, 150 * US);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(r.gpu_stages, STAGES);
	assert_int_equal(r.slow_stages, 1);
	assert_int_equal(r.gpu_slow_stages, 1);
	assert_int_equal(r.gpu_invalid + r.gpu_ambiguous, 0);
	const struct pipeline_stage *s2 = stage(&r, 2);
	assert_true(s2->slow && s2->gpu_slow && !s2->host_slow);
	assert_true(s2->gpu_judged && s2->gpu_timed);
	assert_int_equal(s2->gpu_microbatches, MB);
	assert_true(fabs(s2->gpu_busy_ns - 3.0 * MS) < 1);
	assert_true(fabs(s2->gpu_excess_ns - 2.0 * MS) < 1);
	for (int s = 0; s < STAGES; s++) {
		if (s == 2)
			continue;
		assert_false(stage(&r, s)->slow);
		assert_true(stage(&r, s)->gpu_judged);
		assert_true(fabs(stage(&r, s)->gpu_busy_ns - 1.0 * MS) < 1);
	}
	/* The last stage divides by its receives (it sends nothing). */
	assert_int_equal(stage(&r, 3)->gpu_microbatches, MB);
	/* Per link the receiver's mean Recv kernel time. */
	for (int l = 0; l < STAGES - 1; l++) {
		assert_true(link_of(&r, l)->gpu_timed);
		assert_int_equal(link_of(&r, l)->gpu_transfers, MB);
		assert_true(fabs(link_of(&r, l)->gpu_transfer_ns - 150.0 * US) < 1);
	}
	pipeline_result_free(&r);
	pipeline_free(pl);
}

/* No GPU rows: the host verdict alone, as before GPU timing existed. */
static void test_no_gpu_rows(void **state)
{
	int64_t host[STAGES] = { 2 * MS, 2 * MS, 5 * MS, 2 * MS };
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, host);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(r.slow_stages, 1);
	assert_int_equal(r.gpu_stages + r.gpu_slow_stages, 0);
	assert_true(stage(&r, 2)->slow && stage(&r, 2)->host_slow && !stage(&r, 2)->gpu_slow);
	for (int s = 0; s < STAGES; s++)
		assert_false(stage(&r, s)->gpu_timed || stage(&r, s)->gpu_judged);
	for (size_t l = 0; l < r.nlinks; l++)
		assert_false(r.links[l].gpu_timed);
	pipeline_result_free(&r);
	pipeline_free(pl);

	/* Equal host times and no GPU rows: nothing slow, even with the calls complete. */
	struct pipeline_params complete = params;
	complete.calls_complete = true;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	assert_int_equal(pipeline_analyse(pl, &complete, &r), 0);
	assert_int_equal(r.slow_stages + r.gpu_stages, 0);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

/* GPU timing for one stage only: shown, not judged (nothing to compare it with). */
static void test_gpu_one_stage(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	compute(pl, 2, MB, (uint64_t)(MB * 30 * MS));
	plugin_rows(pl, 150 * US);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(r.gpu_stages, 1);
	assert_true(stage(&r, 2)->gpu_timed);
	assert_false(stage(&r, 2)->gpu_judged);
	assert_int_equal(r.slow_stages, 0);
	assert_false(stage(&r, 1)->gpu_timed);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

/* Without the plugin's counts, the calls divide the kernel time, but only when they are all
 * of the range (calls_complete) and the process has no Send/Recv plugin rows at all. */
static void test_gpu_counts_from_calls(void **state)
{
	struct pipeline_params complete = params;
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	complete.calls_complete = true;
	for (int pass = 0; pass < 2; pass++) {
		assert_int_equal(pipeline_new(&pl), 0);
		chain(pl, equal_host);
		for (int s = 0; s < STAGES; s++)
			compute(pl, s, MB, (uint64_t)(MB * (s == 1 ? 4 : 1) * MS));
		assert_int_equal(pipeline_analyse(pl, pass ? &complete : &params, &r), 0);
		if (!pass) {
			assert_int_equal(r.gpu_stages + r.slow_stages, 0);
		} else {
			assert_int_equal(r.gpu_stages, STAGES);
			assert_true(stage(&r, 1)->gpu_slow && !stage(&r, 1)->host_slow);
			assert_int_equal(stage(&r, 1)->gpu_microbatches, MB);
			assert_int_equal(r.slow_stages, 1);
		}
		pipeline_result_free(&r);
		pipeline_free(pl);
	}
	/* Plugin rows for another rank of the process: not a gap the calls may fill. */
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	compute(pl, 0, MB, (uint64_t)(MB * MS));
	struct pipeline_gpu_p2p other = { .job_rank = 100, .pid = pid_of(0), .comm_id = 5,
					  .rank = 7, .peer = 8,
					  .op = SYSOM_NCCL_SEND, .count = 3 };
	assert_int_equal(pipeline_gpu_p2p_add(pl, &other), 0);
	assert_int_equal(pipeline_analyse(pl, &complete, &r), 0);
	assert_false(stage(&r, 0)->gpu_timed);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

/* Hostile GPU rows: contradictions counted and left out, sums saturate without a verdict,
 * huge counts give a finite value, too many keys drop the GPU clock, two plugin
 * communicators matching one stage leave it untimed. */
static void test_gpu_hostile(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	compute(pl, 0, 0, 5 * MS);                          /* time without executions */
	compute(pl, 0, MB, (uint64_t)(MB * MS));
	compute(pl, 1, MB, UINT64_MAX / 2 + 1);             /* overflows when summed */
	compute(pl, 1, MB, UINT64_MAX / 2 + 1);
	compute(pl, 2, UINT64_MAX, UINT64_MAX);             /* saturated at once */
	compute(pl, 2, 1, 1);
	compute(pl, 3, MB, (uint64_t)(MB * MS));
	plugin_rows(pl, 150 * US);
	/* Contradictory plugin rows: no count, more timed than counted, time untimed, bad op,
	 * a peer that is itself. */
	struct pipeline_gpu_p2p bad[] = {
		{ .pid = pid_of(0), .comm_id = 1, .rank = 0, .peer = 1, .op = SYSOM_NCCL_SEND },
		{ .pid = pid_of(0), .comm_id = 1, .rank = 0, .peer = 1, .op = SYSOM_NCCL_SEND,
		  .count = 1, .kernel_timed = 2 },
		{ .pid = pid_of(0), .comm_id = 1, .rank = 0, .peer = 1, .op = SYSOM_NCCL_SEND,
		  .count = 1, .kernel_ns = 9 },
		{ .pid = pid_of(0), .comm_id = 1, .rank = 0, .peer = 1,
		  .op = SYSOM_NCCL_ALL_REDUCE, .count = 1 },
		{ .pid = pid_of(0), .comm_id = 1, .rank = 0, .peer = 0, .op = SYSOM_NCCL_SEND,
		  .count = 1 },
		{ .pid = pid_of(0), .comm_id = 1, .rank = -1, .peer = 1, .op = SYSOM_NCCL_SEND,
		  .count = 1 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(pipeline_gpu_p2p_add(pl, &bad[i]), 0);
	/* Stage 3's receives claim UINT64_MAX microbatches (saturating with the real ones). */
	p2p(pl, 3, SYSOM_NCCL_RECV, 2, PLUGIN_COMM, UINT64_MAX - 5, 0, 0);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	/* 1 compute + 6 plugin rows contradictory; stages 1, 2 (compute) and 3 (count) and the
	 * link into 3 (its Recv sums) saturated. */
	assert_int_equal(r.gpu_invalid, 7 + 4);
	assert_true(stage(&r, 0)->gpu_timed);
	assert_false(stage(&r, 1)->gpu_timed);
	assert_false(stage(&r, 2)->gpu_timed);
	assert_false(stage(&r, 3)->gpu_timed);
	assert_false(link_of(&r, 2)->gpu_timed);
	assert_int_equal(r.gpu_stages, 1);
	assert_int_equal(r.slow_stages, 0);
	pipeline_result_free(&r);
	pipeline_free(pl);

	/* A huge but unsaturated count: a finite, tiny value; the stage is not slow. */
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	for (int s = 0; s < STAGES; s++)
		compute(pl, s, MB, (uint64_t)(MB * MS));
	plugin_rows(pl, 150 * US);
	p2p(pl, 1, SYSOM_NCCL_SEND, 2, PLUGIN_COMM, UINT64_MAX / 4, 0, 0);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_true(stage(&r, 1)->gpu_timed && isfinite(stage(&r, 1)->gpu_busy_ns));
	assert_true(stage(&r, 1)->gpu_busy_ns < 1);
	assert_int_equal(r.slow_stages, 0);
	pipeline_result_free(&r);
	pipeline_free(pl);

	/* Two plugin communicators whose rows both match stage 1's sends: ambiguous. */
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	for (int s = 0; s < STAGES; s++)
		compute(pl, s, MB, (uint64_t)(MB * MS));
	plugin_rows(pl, 150 * US);
	p2p(pl, 1, SYSOM_NCCL_SEND, 2, PLUGIN_COMM + 1, MB, MB, MB);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_false(stage(&r, 1)->gpu_timed);
	assert_int_equal(r.gpu_ambiguous, 1);
	assert_int_equal(r.gpu_stages, STAGES - 1);
	pipeline_result_free(&r);
	pipeline_free(pl);

	/* More processes than PIPELINE_MAX_GPU_ROWS: the GPU clock is dropped, said so. */
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	for (uint32_t i = 0; i <= PIPELINE_MAX_GPU_ROWS; i++) {
		struct pipeline_gpu_compute g = { .pid = 5000 + i, .kernels = 1, .kernel_ns = 1 };
		assert_int_equal(pipeline_gpu_compute_add(pl, &g), 0);
	}
	for (int s = 0; s < STAGES; s++)
		compute(pl, s, MB, (uint64_t)(MB * (s == 2 ? 9 : 1) * MS));
	plugin_rows(pl, 150 * US);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_true(r.gpu_incomplete);
	assert_int_equal(r.gpu_stages + r.slow_stages, 0);
	pipeline_result_free(&r);
	pipeline_free(pl);

	/* The caller's own limit: the same. */
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	for (int s = 0; s < STAGES; s++)
		compute(pl, s, MB, (uint64_t)(MB * (s == 2 ? 9 : 1) * MS));
	plugin_rows(pl, 150 * US);
	pipeline_gpu_incomplete(pl);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_true(r.gpu_incomplete);
	assert_int_equal(r.gpu_stages + r.slow_stages, 0);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

/* Rows of one process added apart (windows of other processes between) are summed; a process
 * is (job rank, pid). */
static void test_gpu_rows_interleaved(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, equal_host);
	for (int w = 0; w < 4; w++)
		for (int s = STAGES - 1; s >= 0; s--)
			compute(pl, s, MB / 4, (uint64_t)(MB / 4 * (s == 0 ? 5 : 2) * MS));
	/* The same pid on another node (another job rank): another process, not summed in. */
	struct pipeline_gpu_compute elsewhere = { .job_rank = 7, .pid = pid_of(3), .kernels = 1,
						  .kernel_ns = 1000 * MS };
	assert_int_equal(pipeline_gpu_compute_add(pl, &elsewhere), 0);
	struct pipeline_gpu_p2p elsewhere_sends = { .job_rank = 7, .pid = pid_of(2),
						    .comm_id = PLUGIN_COMM, .rank = 2, .peer = 3,
						    .op = SYSOM_NCCL_SEND, .count = 1 };
	assert_int_equal(pipeline_gpu_p2p_add(pl, &elsewhere_sends), 0);
	plugin_rows(pl, 0);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(stage(&r, 2)->gpu_microbatches, MB);
	assert_int_equal(r.gpu_ambiguous, 0);
	assert_true(fabs(stage(&r, 0)->gpu_busy_ns - 5.0 * MS) < 1);
	assert_true(fabs(stage(&r, 3)->gpu_busy_ns - 2.0 * MS) < 1);
	assert_true(stage(&r, 0)->gpu_slow);
	/* Receives timed with 0 ns: a link timed at 0. */
	assert_true(link_of(&r, 0)->gpu_timed && link_of(&r, 0)->gpu_transfer_ns == 0);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

static void test_kernel_is_nccl(void **state)
{
	(void)state;
	assert_true(pipeline_kernel_is_nccl("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"));
	assert_true(pipeline_kernel_is_nccl("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"));
	assert_true(pipeline_kernel_is_nccl("_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"));
	assert_true(pipeline_kernel_is_nccl("_Z35ncclKernel_AllReduce_RING_LL_Sum_floatP14ncclDevComm"));
	assert_false(pipeline_kernel_is_nccl("sim_gemm_fwd"));
	assert_false(pipeline_kernel_is_nccl("_Z12sim_gemm_fwdv"));
	assert_false(pipeline_kernel_is_nccl("nccl"));
	assert_false(pipeline_kernel_is_nccl("_Z"));
	assert_false(pipeline_kernel_is_nccl(""));
	assert_false(pipeline_kernel_is_nccl(NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slow_on_gpu_only),
		cmocka_unit_test(test_no_gpu_rows),
		cmocka_unit_test(test_gpu_one_stage),
		cmocka_unit_test(test_gpu_counts_from_calls),
		cmocka_unit_test(test_gpu_hostile),
		cmocka_unit_test(test_gpu_rows_interleaved),
		cmocka_unit_test(test_kernel_is_nccl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
