/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl renderers fed with server documents: the top summary, tables, error messages. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl/ctl.h"

#define F(name, kind) "{\"name\":\"" name "\",\"kind\":\"" kind "\"}"

/* What GET /api/v1/flamegraph?format=json answers for the server tests' fixture, plus a
 * recursive stack from two processes. */
static const char flame_doc[] =
	"{\"total\":26,\"from\":\"2023-11-14T22:13:20.000Z\",\"to\":\"2023-11-14T23:13:20.000Z\","
	"\"truncated\":false,\"stacks\":["
	"{\"count\":10,\"process\":{\"comm\":\"python3\",\"pid\":4242,\"processes\":1},\"frames\":["
	F("python3.11+0x1000", "user") "," F("libc.so.6+0x29d90", "user") ","
	F("do_syscall_64", "kernel") "," F("do_one", "kernel") "]},"
	"{\"count\":5,\"process\":{\"comm\":\"nccl-proxy\",\"pid\":777,\"processes\":1},\"frames\":["
	F("do_syscall_64", "kernel") "," F("do_one", "kernel") "]},"
	"{\"count\":4,\"process\":{\"comm\":\"nccl-proxy\",\"pid\":777,\"processes\":1},\"frames\":["
	F("[truncated: depth limit]", "error") "," F("libc.so.6+0x1000", "user") ","
	F("[anon]+0x7f0000001000", "user") "]},"
	"{\"count\":4,\"process\":{\"comm\":\"worker\",\"pid\":null,\"processes\":2},\"frames\":["
	F("main", "user") "," F("recurse", "user") "," F("recurse", "user") "," F("recurse", "user") "]},"
	"{\"count\":3,\"process\":{\"comm\":\"python3\",\"pid\":4242,\"processes\":1},\"frames\":["
	F("python3.11+0x1000", "user") "," F("libc.so.6+0x29d90", "user") "]}]}";

static char *render_top(const char *text, uint32_t top, int want_rc)
{
	json_t *doc = json_loads(text, 0, NULL);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	assert_non_null(doc);
	assert_non_null(f);
	assert_int_equal(ctl_top_render(doc, top, f), want_rc);
	fclose(f);
	json_decref(doc);
	return out;
}

/* Asserts the fragments appear in this order. */
static void expect_in_order(const char *text, const char *const *fragments, size_t n)
{
	const char *at = text;

	for (size_t i = 0; i < n; i++) {
		const char *hit = strstr(at, fragments[i]);
		if (!hit)
			fail_msg("'%s' missing (in order) from:\n%s", fragments[i], text);
		at = hit + strlen(fragments[i]);
	}
}

static void test_top(void **state)
{
	char *out = render_top(flame_doc, 10, 0);
	static const char *const order[] = {
		"Total: 26 samples from 2023-11-14T22:13:20.000Z to 2023-11-14T23:13:20.000Z\n",
		"Top 5 stacks (leaf first):\n",
		"  #1  10 samples (38.46%)  python3 [pid 4242]\n"
		"        do_one [k]\n"
		"        do_syscall_64 [k]\n"
		"        libc.so.6+0x29d90\n"
		"        python3.11+0x1000\n",
		"  #2  5 samples (19.23%)  nccl-proxy [pid 777]\n",
		"  #3  4 samples (15.38%)  nccl-proxy [pid 777]\n"
		"        [anon]+0x7f0000001000\n"
		"        libc.so.6+0x1000\n"
		"        [truncated: depth limit]\n",
		"  #4  4 samples (15.38%)  worker [2 processes]\n",
		"  #5  3 samples (11.54%)  python3 [pid 4242]\n",
		"Top functions by self samples:\n",
		"          15   57.69%  do_one [k]\n",
		"           4   15.38%  [anon]+0x7f0000001000\n",
		"           4   15.38%  recurse\n",
		"           3   11.54%  libc.so.6+0x29d90\n",
		"Top functions by total (inclusive) samples:\n",
		"          15   57.69%  do_one [k]\n",
		"          15   57.69%  do_syscall_64 [k]\n",
		"          13   50.00%  libc.so.6+0x29d90\n",
		"          13   50.00%  python3.11+0x1000\n",
	};

	(void)state;
	expect_in_order(out, order, sizeof(order) / sizeof(order[0]));
	/* Recursion counts a stack once in the inclusive total. */
	assert_non_null(strstr(strstr(out, "by total"), "           4   15.38%  recurse\n"));
	assert_null(strstr(out, "percentages are of the total"));
	/* Truncation markers are not functions. */
	assert_null(strstr(strstr(out, "Top functions"), "[truncated"));
	free(out);
}

static void test_top_limits(void **state)
{
	char *out;
	char *doc = strdup(flame_doc);

	(void)state;
	/* --top 1: one stack shown, but the functions still use every stack. */
	out = render_top(flame_doc, 1, 0);
	assert_non_null(strstr(out, "Top 1 stacks"));
	assert_null(strstr(out, "#2 "));
	assert_non_null(strstr(out, "          15   57.69%  do_one [k]\n"));
	assert_null(strstr(out, "[anon]+0x7f0000001000\n           "));
	free(out);
	/* A truncated answer says so. */
	memcpy(strstr(doc, "false"), "true ", 5);
	out = render_top(doc, 10, 0);
	assert_non_null(strstr(out, "largest stacks; percentages are of the total"));
	free(out);
	free(doc);
	/* Nothing in the range. */
	out = render_top("{\"total\":0,\"stacks\":[]}", 10, 0);
	assert_string_equal(out, "Total: 0 samples\nNo samples match.\n");
	free(out);
	/* Not a flame graph. */
	free(render_top("{\"nodes\":[]}", 10, -EINVAL));
	free(render_top("{\"total\":1,\"stacks\":[{\"count\":1}]}", 10, -EINVAL));
}

/* Symbolized user frames: demangled names with spaces and parentheses, an inlined call as a
 * frame of its own, and the same function out of line in another stack. */
static void test_top_symbolized(void **state)
{
	static const char doc[] =
		"{\"total\":10,\"truncated\":false,\"stacks\":["
		"{\"count\":6,\"process\":{\"comm\":\"app\",\"pid\":1,\"processes\":1},\"frames\":["
		"{\"name\":\"main\",\"kind\":\"user\"},"
		"{\"name\":\"ns::Foo::run(std::vector<int, std::allocator<int> > const&)\",\"kind\":\"user\"},"
		"{\"name\":\"add_one\",\"kind\":\"user\",\"inlined\":true,\"file\":\"a.c\",\"line\":3}]},"
		"{\"count\":4,\"process\":{\"comm\":\"app\",\"pid\":1,\"processes\":1},\"frames\":["
		"{\"name\":\"main\",\"kind\":\"user\"},{\"name\":\"add_one\",\"kind\":\"user\"}]}]}";
	char *out;

	(void)state;
	out = render_top(doc, 10, 0);
	assert_non_null(strstr(out, "        add_one [inlined]\n"));
	assert_non_null(strstr(out, "        ns::Foo::run(std::vector<int, std::allocator<int> > const&)\n"));
	/* Inlined and out-of-line samples of one function add up under its name. */
	assert_non_null(strstr(strstr(out, "by self"), "          10  100.00%  add_one\n"));
	assert_non_null(strstr(strstr(out, "by total"), "           6   60.00%  ns::Foo::run("));
	assert_null(strstr(strstr(out, "Top functions"), "[inlined]"));
	free(out);
}

static char *render(int (*fn)(const json_t *, FILE *), const char *text, int want_rc)
{
	json_t *doc = json_loads(text, 0, NULL);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	assert_non_null(doc);
	assert_int_equal(fn(doc, f), want_rc);
	fclose(f);
	json_decref(doc);
	return out;
}

/* Stacks that differ only in offsets render the same once symbolized: one entry, counts
 * summed, ranked by the sum; a different pid or comm stays apart. */
static void test_top_merges_identical_stacks(void **state)
{
	static const char doc[] =
		"{\"total\":20,\"stacks\":["
		"{\"count\":6,\"process\":{\"comm\":\"w\",\"pid\":1},\"frames\":[" F("main", "user") "," F("hot", "user") "]},"
		"{\"count\":5,\"process\":{\"comm\":\"w\",\"pid\":1},\"frames\":[" F("main", "user") "," F("cold", "user") "]},"
		"{\"count\":4,\"process\":{\"comm\":\"w\",\"pid\":1},\"frames\":[" F("main", "user") "," F("hot", "user") "]},"
		"{\"count\":3,\"process\":{\"comm\":\"w\",\"pid\":2},\"frames\":[" F("main", "user") "," F("hot", "user") "]},"
		"{\"count\":2,\"process\":{\"comm\":\"w\",\"pid\":1},\"frames\":[" F("main", "user") "," F("hot", "kernel") "]}]}";
	char *out = render_top(doc, 10, 0);
	const char *order[] = { "Top 4 stacks", "#1  10 samples (50.00%)  w [pid 1]", "hot", "main",
				"#2  5 samples", "cold", "#3  3 samples", "[pid 2]", "#4  2 samples",
				"hot [k]" };

	(void)state;
	expect_in_order(out, order, sizeof(order) / sizeof(order[0]));
	assert_null(strstr(out, "#5"));
	/* Function tallies are unchanged by the merge: hot is the leaf of 6+4+3 samples. */
	assert_non_null(strstr(out, "13   65.00%  hot\n"));
	free(out);
	(void)state;
}

static void test_tables(void **state)
{
	char *out;

	(void)state;
	out = render(ctl_nodes_render,
		     "{\"nodes\":[{\"node_id\":\"01010101010101010101010101010101\",\"hostname\":\"gpu-1\","
		     "\"kernel_release\":\"6.1.0\",\"agent_version\":\"0.1\",\"batches\":12,"
		     "\"last_seen\":\"2026-11-22T10:00:00.000Z\"}]}", 0);
	assert_non_null(strstr(out, "NODE ID"));
	assert_non_null(strstr(out, "01010101010101010101010101010101  gpu-1"));
	assert_non_null(strstr(out, "      12  2026-11-22T10:00:00.000Z\n"));
	free(out);
	out = render(ctl_nodes_render, "{\"nodes\":[]}", 0);
	assert_non_null(strstr(out, "no nodes"));
	free(out);
	free(render(ctl_nodes_render, "{\"processes\":[]}", -EINVAL));
	out = render(ctl_processes_render,
		     "{\"processes\":[{\"pid\":4242,\"comm\":\"python3\",\"hostname\":\"gpu-1\","
		     "\"cmdline\":\"python3 train.py\",\"samples\":13}]}", 0);
	assert_non_null(strstr(out, "SAMPLES"));
	assert_non_null(strstr(out, "        13      4242  python3           gpu-1                 "
				    "-                                 python3 train.py\n"));
	free(out);
	/* The OWNER column: the pod, else the Slurm job, else the unit. */
	out = render(ctl_processes_render,
		     "{\"processes\":[{\"pid\":1,\"samples\":1,\"identity\":{\"namespace\":\"ml\","
		     "\"pod\":\"llama-0\",\"pod_uid\":\"u\",\"container\":\"\",\"slurm_job\":null}},"
		     "{\"pid\":2,\"samples\":1,\"identity\":{\"pod\":\"\",\"pod_uid\":\"\","
		     "\"container_id\":\"\",\"slurm_job\":77,\"slurm_step\":\"batch\"}},"
		     "{\"pid\":3,\"samples\":1,\"identity\":{\"unit\":\"sshd.service\","
		     "\"slurm_job\":null}}]}", 0);
	assert_non_null(strstr(out, "  ml/llama-0  "));
	assert_non_null(strstr(out, "  slurm:77.batch  "));
	assert_non_null(strstr(out, "  sshd.service  "));
	free(out);
	free(render(ctl_processes_render, "[]", -EINVAL));

	out = render(ctl_jobs_render,
		     "{\"jobs\":[{\"job\":\"simjob-7\",\"world_size\":8,\"ranks\":8,\"processes\":8,"
		     "\"nodes\":2,\"first_seen\":\"x\",\"last_seen\":\"2026-11-22T10:00:00.000Z\"}]}", 0);
	assert_non_null(strstr(out, "JOB"));
	assert_non_null(strstr(out, "simjob-7                               8       8          8      2  "
				    "2026-11-22T10:00:00.000Z\n"));
	free(out);
	out = render(ctl_jobs_render, "{\"jobs\":[]}", 0);
	assert_non_null(strstr(out, "no training jobs"));
	free(out);
	free(render(ctl_jobs_render, "{}", -EINVAL));

	/* The last rank to enter is the one the others waited for; skew in ms. */
	out = render(ctl_collectives_render,
		     "{\"instances\":[{\"op\":\"AllReduce\",\"seq\":5,\"comm\":\"00000000000000ab\","
		     "\"bytes\":4096,\"nranks\":2,\"ranks_seen\":2,\"complete\":true,"
		     "\"skew_ns\":2500000,\"calls\":["
		     "{\"rank\":0,\"hostname\":\"gpu-1\",\"pid\":100,\"entry_ns\":1000},"
		     "{\"rank\":1,\"hostname\":\"gpu-2\",\"pid\":200,\"entry_ns\":2501000}]},"
		     "{\"op\":\"Broadcast\",\"seq\":0,\"comm\":\"00000000000000cd\",\"bytes\":8,"
		     "\"nranks\":null,\"ranks_seen\":0,\"complete\":false,\"skew_ns\":0,\"calls\":["
		     "{\"rank\":null,\"hostname\":\"gpu-3\",\"pid\":300,\"entry_ns\":5}]}],"
		     "\"truncated\":true}", 0);
	assert_non_null(strstr(out, "LAST TO ENTER"));
	assert_non_null(strstr(out, "AllReduce              5  00000000000000ab          4096        2/2"
				    "       2.500  rank 1 (gpu-2 pid 200)\n"));
	assert_non_null(strstr(out, "0/?"));
	assert_non_null(strstr(out, "gpu-3 pid 300  [incomplete]\n"));
	assert_non_null(strstr(out, "truncated"));
	free(out);
	free(render(ctl_collectives_render, "{\"instances\":[{\"calls\":3}]}", -EINVAL));
}

static int gpu_render_top3(const json_t *doc, FILE *out)
{
	return ctl_gpu_render(doc, 3, out);
}

/* The GPU view: per rank GPU time against the median, top kernels, collectives and links. */
static void test_gpu(void **state)
{
	char *out;

	(void)state;
	out = render(gpu_render_top3,
		     "{\"processes\":[{\"rank\":3,\"hostname\":\"gpu-1\",\"pid\":5003,"
		     "\"gpu_kernel_ns\":2000000,\"kernel_executions\":11,"
		     "\"gpu_time_ratio_to_median\":1.98,\"kernels\":["
		     "{\"name\":\"gemm\",\"total_ns\":1500000},{\"name\":\"memcpy\",\"total_ns\":500000}],"
		     "\"collectives\":[{\"func\":\"AllReduce\",\"algo\":\"Ring\",\"proto\":\"Simple\","
		     "\"datatype\":\"ncclFloat32\",\"peer\":null,\"count\":3,\"bytes\":12288,"
		     "\"gpu\":{\"mean_ns\":20000,\"algbw_gbps\":0.2048}}],"
		     "\"links\":[{\"peer\":4,\"channel\":null,\"transfers\":4,"
		     "\"fit\":{\"latency_ns\":5000,\"bandwidth_gbps\":12.5,\"r2\":1},"
		     "\"min_fit\":{\"latency_ns\":5000,\"bandwidth_gbps\":12.5,\"points\":2}}]},"
		     "{\"rank\":null,\"hostname\":\"gpu-2\",\"pid\":77,\"gpu_kernel_ns\":0,"
		     "\"kernel_executions\":0,\"gpu_time_ratio_to_median\":null,\"kernels\":[],"
		     "\"collectives\":[],\"links\":[]}],\"truncated\":false}", 0);
	assert_non_null(strstr(out, "vs MEDIAN"));
	assert_non_null(strstr(out, "3       gpu-1                 5003         2.000          11      1.98x  "
				    "gemm (75%), memcpy (25%)\n"));
	assert_non_null(strstr(out, "?       gpu-2                   77         0.000           0          -  -\n"));
	assert_non_null(strstr(out, "AllReduce       Ring      Simple   ncclFloat32       -           3"
				    "            4096          20.0        0.20\n"));
	assert_non_null(strstr(out, "     4      all           4          5.00         12.50   1.000  (5.00, 12.50)\n"));
	free(out);
	out = render(gpu_render_top3, "{\"processes\":[]}", 0);
	assert_non_null(strstr(out, "no GPU timing"));
	free(out);
	free(render(gpu_render_top3, "{\"processes\":[{\"kernels\":3}]}", -EINVAL));
	free(render(gpu_render_top3, "{}", -EINVAL));
}

/* Stragglers: the verdict first, then each communicator's ranks by excess. */
static void test_stragglers(void **state)
{
	char *out;

	(void)state;
	out = render(ctl_stragglers_render,
		     "{\"stragglers\":[{\"rank\":5,\"pid\":5005,\"hostname\":\"gpu-2\","
		     "\"communicators\":[\"0000000000000abc\"],\"persistence\":\"persistent\","
		     "\"max_excess_ms\":31.7,\"diagnosis\":{\"layer\":\"gpu\",\"summary\":\"every kernel"
		     " runs 2.00x slower\",\"action\":\"check the GPU\"}}],\"communicators\":[{\"comm\":\"0000000000000abc\","
		     "\"nranks\":8,\"instances\":12,\"incomplete\":0,\"stragglers\":[5],\"ranks\":["
		     "{\"rank\":5,\"pid\":5005,\"hostname\":\"gpu-2\",\"trimmed_lateness_ms\":35,"
		     "\"excess_ms\":31.714,\"z\":null,\"flagged_fraction\":1,"
		     "\"last_to_enter_fraction\":1,\"straggler\":true,\"persistence\":\"persistent\"},"
		     "{\"rank\":7,\"pid\":5007,\"hostname\":\"gpu-2\",\"trimmed_lateness_ms\":7,"
		     "\"excess_ms\":-0.5,\"z\":-0.04,\"flagged_fraction\":0,"
		     "\"last_to_enter_fraction\":0,\"straggler\":false,\"persistence\":null}]}]}", 0);
	assert_non_null(strstr(out, "STRAGGLER: rank 5 (gpu-2 pid 5005), persistent, up to 31.700 ms"
				    " later than the other ranks, in 0000000000000abc\n"));
	assert_non_null(strstr(out, "communicator 0000000000000abc: 8 ranks, 12 instances analysed, 0 incomplete"));
	assert_non_null(strstr(out, "  layer: gpu: every kernel runs 2.00x slower\n  action: check the GPU\n"));
	assert_non_null(strstr(out, "  5       gpu-2                 5005        35.000      31.714       inf"
				    "      100%    100%  persistent\n"));
	assert_non_null(strstr(out, "  7       gpu-2                 5007         7.000      -0.500      -0.0"
				    "        0%      0%  -\n"));
	free(out);
	out = render(ctl_stragglers_render, "{\"stragglers\":[],\"communicators\":[]}", 0);
	assert_non_null(strstr(out, "No straggler."));
	free(out);
	/* A pipeline job: its slow stage and link named, no "No straggler.". */
	out = render(ctl_stragglers_render,
		     "{\"stragglers\":[],\"communicators\":[],\"pipeline\":{\"transfers\":90,"
		     "\"unmatched_sends\":1,\"unmatched_recvs\":0,\"slow_stages\":1,\"slow_links\":1,"
		     "\"stages\":[{\"communicator\":\"00000000000000cc\",\"stage\":2,\"job_rank\":5,"
		     "\"pid\":77,\"hostname\":\"gpu-3\",\"busy_ms\":5.6,\"recv_wait_ms\":0.01,"
		     "\"excess_ms\":4.5,\"slow\":true,\"diagnosis\":{\"layer\":\"cpu\","
		     "\"summary\":\"fn is on 40 pp more\",\"action\":\"find fn\"}},"
		     "{\"communicator\":\"00000000000000cc\",\"stage\":3,\"job_rank\":6,\"pid\":78,"
		     "\"busy_ms\":1.1,\"recv_wait_ms\":4.7,\"excess_ms\":0,\"slow\":false}],"
		     "\"links\":[{\"communicator\":\"00000000000000cc\",\"src\":3,\"dst\":4,"
		     "\"src_job_rank\":6,\"dst_job_rank\":7,\"src_host\":\"gpu-3\","
		     "\"dst_host\":\"gpu-4\",\"transfer_ms\":4.8,\"wait_ms\":0.1,"
		     "\"excess_ms\":4.7,\"slow\":true}]}}", 0);
	assert_null(strstr(out, "No straggler."));
	assert_non_null(strstr(out, "PIPELINE STRAGGLER: stage 2 (rank 5, gpu-3 pid 77) of 00000000000000cc"
				    " is slow: +4.500 ms per microbatch (5.600 ms busy)\n"
				    "  layer: cpu: fn is on 40 pp more\n  action: find fn\n"));
	assert_non_null(strstr(out, "PIPELINE STRAGGLER: link 3->4 (rank 6 on gpu-3 to rank 7 on gpu-4) of "
				    "00000000000000cc is slow: 4.800 ms per transfer, +4.700 ms over the other "
				    "links\n"));
	assert_non_null(strstr(out, "pipeline: 90 transfers paired, 1 sends and 0 receives unmatched\n"));
	assert_non_null(strstr(out, "  00000000000000cc      3       6         1.100         4.700       0.000"
				    "             -  -\n"));
	free(out);
	/* A stage slow on the GPU alone (issue 22): named with its GPU compute, the clock in the
	 * table; a link's GPU transfer time shown. */
	out = render(ctl_stragglers_render,
		     "{\"stragglers\":[],\"communicators\":[],\"pipeline\":{\"transfers\":90,"
		     "\"unmatched_sends\":0,\"unmatched_recvs\":0,\"slow_stages\":1,\"slow_links\":0,"
		     "\"stages\":[{\"communicator\":\"00000000000000cc\",\"stage\":2,\"job_rank\":5,"
		     "\"pid\":77,\"hostname\":\"gpu-3\",\"busy_ms\":1.2,\"recv_wait_ms\":0.01,"
		     "\"excess_ms\":0.1,\"slow\":true,\"clock\":\"gpu\",\"gpu_busy_ms\":3.0,"
		     "\"gpu_excess_ms\":2.0},"
		     "{\"communicator\":\"00000000000000cc\",\"stage\":3,\"job_rank\":6,\"pid\":78,"
		     "\"busy_ms\":1.1,\"recv_wait_ms\":4.7,\"excess_ms\":0,\"slow\":false,"
		     "\"clock\":null,\"gpu_busy_ms\":null}],"
		     "\"links\":[{\"communicator\":\"00000000000000cc\",\"src\":2,\"dst\":3,"
		     "\"transfer_ms\":0.2,\"wait_ms\":0.1,\"excess_ms\":0,\"slow\":false,"
		     "\"gpu_transfer_ms\":0.15}]}}", 0);
	assert_non_null(strstr(out, "PIPELINE STRAGGLER: stage 2 (rank 5, gpu-3 pid 77) of 00000000000000cc"
				    " is slow on the GPU: +2.000 ms of GPU compute per microbatch (3.000 ms;"
				    " host busy 1.200 ms like the other stages)\n"));
	assert_non_null(strstr(out, "  00000000000000cc      2       5         1.200         0.010       0.100"
				    "         3.000  slow (gpu)\n"));
	assert_non_null(strstr(out, "  00000000000000cc      3       6         1.100         4.700       0.000"
				    "             -  -\n"));
	assert_non_null(strstr(out, "  00000000000000cc      2->3         0.200         0.100       0.000"
				    "         0.150  -\n"));
	free(out);
	free(render(ctl_stragglers_render, "{\"communicators\":[]}", -EINVAL));
}

static char *render_patterns(const char *text, int want_rc)
{
	json_t *doc = json_loads(text, 0, NULL);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	assert_non_null(doc);
	assert_int_equal(ctl_patterns_render(doc, 0, f), want_rc);
	fclose(f);
	json_decref(doc);
	return out;
}

/* Patterns: the findings as a table, the job-wide changes as ALL RANKS lines. */
static void test_patterns(void **state)
{
	char *out;

	(void)state;
	out = render_patterns(
		     "{\"workers\":8,\"functions\":[{\"name\":\"sim_gemm_bwd\"}],\"findings\":["
		     "{\"rank\":4,\"function\":\"sim_gemm_bwd\",\"kind\":\"kernel\",\"dimension\":\"mu\","
		     "\"value\":4.5,\"median\":1.5,\"z\":40.2,\"cost\":0.2,\"why\":\"slower\"}],"
		     "\"history\":{\"from\":\"A\",\"to\":\"B\",\"changes\":[{\"function\":\"f\","
		     "\"kind\":\"cpu\",\"dimension\":\"beta\",\"now\":0.4,\"then\":0,\"change\":null}]}}", 0);
	assert_non_null(strstr(out, "8 ranks, 1 key functions\n"));
	assert_non_null(strstr(out, "4       kernel      sim_gemm_bwd                      mu     "
				    "      4.5000        1.5000     40.2   20.0%  slower\n"));
	assert_non_null(strstr(out, "against the job's history A .. B:\n"
				    "  ALL RANKS: cpu f: beta 0.4000 (was 0.0000, new)\n"));
	free(out);
	out = render_patterns(
		     "{\"workers\":2,\"functions\":[],\"findings\":[],\"history\":{\"from\":null,"
		     "\"to\":null,\"changes\":[]}}", 0);
	assert_non_null(strstr(out, "No rank abnormal in any function.\n"));
	assert_null(strstr(out, "history"));
	free(out);
	free(render_patterns("{\"findings\":[]}", -EINVAL));
}

/* Diagnoses: a header, then each incident with its summary under it. */
static void test_diagnoses(void **state)
{
	char *out;

	(void)state;
	out = render(ctl_diagnoses_render,
		     "{\"diagnoses\":[{\"id\":7,\"status\":\"open\",\"opened\":\"2026-11-25T10:00:00.000Z\","
		     "\"kind\":\"straggler\",\"rank\":3,\"layer\":\"os\",\"severity\":\"critical\","
		     "\"job\":\"j1\",\"summary\":\"run-queue wait on rank 3\"},{\"id\":6,"
		     "\"status\":\"resolved\",\"opened\":\"2026-11-25T09:00:00.000Z\",\"kind\":"
		     "\"regression\",\"rank\":null,\"layer\":\"cpu\",\"severity\":\"warning\","
		     "\"job\":\"j1\",\"summary\":\"iteration time rose\"}]}", 0);
	assert_non_null(strstr(out, "ID      STATUS    OPENED"));
	assert_non_null(strstr(out, "7       open      2026-11-25T10:00:00.000Z  straggler   3      os       critical  j1\n"
				    "        run-queue wait on rank 3\n"));
	assert_non_null(strstr(out, "6       resolved  2026-11-25T09:00:00.000Z  regression  -      cpu      warning   j1\n"));
	free(out);
	out = render(ctl_diagnoses_render, "{\"diagnoses\":[]}", 0);
	assert_non_null(strstr(out, "No diagnosis in the range."));
	free(out);
	free(render(ctl_diagnoses_render, "{}", -EINVAL));
}

/* Two ranks' profiles: functions by the difference of their share of samples. */
static void test_diff(void **state)
{
	static const char text[] = "python3;main;train_step;forward 60 30\n"
				   "python3;main;train_step;extra_work;spin 0 60\n"
				   "python3;main;optimizer 40 10\n"
				   "python3;main;rec;rec 0 0\n";
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	(void)state;
	assert_int_equal(ctl_diff_render(text, sizeof(text) - 1, 4, 1, 2, f), 0);
	fclose(f);
	assert_non_null(strstr(out, "rank 1: 100 samples; rank 2: 100 samples\n"));
	/* extra_work and spin +60 pp (ties by name), then optimizer -30, forward -30... */
	const char *x = strstr(out, "    +60.00      0.00     60.00  extra_work\n");
	const char *y = strstr(out, "    +60.00      0.00     60.00  spin\n");
	const char *z = strstr(out, "    -30.00     40.00     10.00  optimizer\n");
	assert_true(x && y && z && x < y && y < z);
	assert_null(strstr(out, "  main\n")); /* 100% on both sides: no difference, not in the top 4 */
	free(out);
	f = open_memstream(&out, &len);
	assert_int_equal(ctl_diff_render("python3;a 1\n", 12, 4, 0, 1, f), -EINVAL);
	fclose(f);
	free(out);
}

static void test_error_text(void **state)
{
	char msg[64];

	(void)state;
	ctl_error_text((const uint8_t *)"{\"error\":\"'from' is after 'to'\"}\n", 33, msg, sizeof(msg));
	assert_string_equal(msg, "'from' is after 'to'");
	ctl_error_text((const uint8_t *)"Bad Gateway\r\nmore", 17, msg, sizeof(msg));
	assert_string_equal(msg, "Bad Gateway");
	ctl_error_text(NULL, 0, msg, sizeof(msg));
	assert_string_equal(msg, "(empty response)");
}

/* Hosts: anomalous nodes first with their deviations; verdicts in words; empty and malformed. */
static void test_hosts(void **state)
{
	const char *text =
		"{\"job\":\"j\",\"nodes\":["
		"{\"node_id\":\"aa\",\"hostname\":\"gpu-1\",\"score\":0.4,\"threshold\":9.8,"
		"\"periods_over\":0,\"has_history\":true,\"has_peers\":true,\"stale\":false,"
		"\"anomalous\":false,\"deviations\":[]},"
		"{\"node_id\":\"bb\",\"hostname\":\"gpu-2\",\"score\":737.7,\"threshold\":9.8,"
		"\"periods_over\":2,\"has_history\":true,\"has_peers\":true,\"stale\":false,"
		"\"anomalous\":true,\"deviations\":[{\"signal\":\"tcp_retrans_segs\",\"value\":3242,"
		"\"z\":648.2,\"peer_median\":0.5,\"own_median\":1.3}]},"
		"{\"node_id\":\"cc\",\"hostname\":\"gpu-3\",\"score\":0,\"threshold\":9.8,"
		"\"periods_over\":0,\"has_history\":false,\"has_peers\":true,\"stale\":false,"
		"\"anomalous\":false,\"deviations\":[]}]}";
	json_t *doc = json_loads(text, 0, NULL);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	(void)state;
	assert_non_null(doc);
	assert_int_equal(ctl_hosts_render(doc, f), 0);
	fclose(f);
	json_decref(doc);
	char *bad = strstr(out, "gpu-2"), *good = strstr(out, "gpu-1");
	assert_non_null(bad);
	assert_non_null(good);
	assert_true(bad < good); /* anomalous first */
	assert_non_null(strstr(out, "ANOMALOUS"));
	assert_non_null(strstr(out, "tcp_retrans_segs 3242 (z 648.2; 0.5, 1.3)"));
	assert_non_null(strstr(out, "learning"));
	assert_non_null(strstr(out, "normal"));
	free(out);

	out = NULL;
	f = open_memstream(&out, &len);
	doc = json_loads("{\"nodes\":[]}", 0, NULL);
	assert_int_equal(ctl_hosts_render(doc, f), 0);
	fclose(f);
	json_decref(doc);
	assert_non_null(strstr(out, "no host signals"));
	free(out);
	out = NULL;
	f = open_memstream(&out, &len);
	doc = json_loads("{\"nodes\":7}", 0, NULL);
	assert_int_equal(ctl_hosts_render(doc, f), -EINVAL);
	fclose(f);
	json_decref(doc);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_top),
		cmocka_unit_test(test_top_limits),
		cmocka_unit_test(test_top_symbolized),
		cmocka_unit_test(test_top_merges_identical_stacks),
		cmocka_unit_test(test_tables),
		cmocka_unit_test(test_gpu),
		cmocka_unit_test(test_stragglers),
		cmocka_unit_test(test_patterns),
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_diagnoses),
		cmocka_unit_test(test_diff),
		cmocka_unit_test(test_error_text),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
