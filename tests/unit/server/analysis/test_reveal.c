/* SPDX-License-Identifier: Apache-2.0 */
/* Host anomaly scoring (server/analysis/reveal.c): a clear outlier is found and named; healthy
 * peers, a job-wide change, one window, a lone node give nothing; MAD 0 and unknown values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/reveal.h"

static uint64_t rng = 42;

static double unif(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static double gauss(void)
{
	double u = unif() + 1e-12, v = unif();
	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* Typical healthy values of every signal, with ~5% noise. */
static double healthy(uint16_t s)
{
	static const double base[REVEAL_SIGNALS] = {
		[SYSOM_HOST_CPU_MHZ] = 2400, [SYSOM_HOST_CPU_MHZ_MIN] = 2200,
		[SYSOM_HOST_CPU_BUSY] = 0.6, [SYSOM_HOST_CPU_IOWAIT] = 0.01,
		[SYSOM_HOST_CPU_STEAL] = 0.0, [SYSOM_HOST_CONTEXT_SWITCHES] = 20000,
		[SYSOM_HOST_PROCS_BLOCKED] = 0, [SYSOM_HOST_SOFTIRQ_NET_RX] = 5000,
		[SYSOM_HOST_SOFTIRQ_NET_TX] = 800, [SYSOM_HOST_SOFTIRQ_TOTAL] = 12000,
		[SYSOM_HOST_PSI_CPU_SOME_AVG10] = 3, [SYSOM_HOST_PSI_CPU_SOME] = 0.03,
		[SYSOM_HOST_TCP_OUT_SEGS] = 40000, [SYSOM_HOST_TCP_RETRANS_SEGS] = 1,
		[SYSOM_HOST_DISK_READ_IOPS] = 20, [SYSOM_HOST_DISK_WRITE_IOPS] = 80,
		[SYSOM_HOST_DISK_READ_MS] = 0.5, [SYSOM_HOST_DISK_WRITE_MS] = 1.5,
		[SYSOM_HOST_MEM_AVAILABLE] = 200e9, [SYSOM_HOST_MEM_AVAILABLE_SHARE] = 0.7,
		[SYSOM_HOST_PGMAJFAULT] = 2,
	};
	double v = base[s] * (1 + 0.05 * gauss());
	return v < 0 ? 0 : v;
}

/* `nodes` nodes x `windows` windows of healthy values; spike(node, window, signal, &v). */
typedef void (*spike_fn)(size_t node, size_t window, uint16_t s, double *v);

static void build(struct reveal_input *in, size_t nodes, size_t windows, spike_fn spike)
{
	memset(in, 0, sizeof(*in));
	for (size_t i = 0; i < nodes; i++) {
		char id[40], host[32];
		snprintf(id, sizeof(id), "%032zx", i + 1);
		snprintf(host, sizeof(host), "node%zu", i);
		for (size_t t = 0; t < windows; t++)
			for (uint16_t s = 1; s < REVEAL_SIGNALS; s++) {
				double v = healthy(s);
				if (spike)
					spike(i, t, s, &v);
				assert_int_equal(reveal_input_add(in, id, host,
								  1000000 + (int64_t)t * 2000, s, v), 0);
			}
	}
}

static size_t score(const struct reveal_input *in, struct reveal_node_score *out)
{
	struct reveal_options o;
	size_t anomalous = 0;

	reveal_options_default(&o);
	assert_int_equal(reveal_score(in, &o, out), 0);
	for (size_t i = 0; i < in->nnodes; i++)
		anomalous += out[i].anomalous;
	return anomalous;
}

static void spike_node3_retrans(size_t node, size_t window, uint16_t s, double *v)
{
	if (node == 3 && window >= 18 && s == SYSOM_HOST_TCP_RETRANS_SEGS)
		*v = 500;
	if (node == 3 && window >= 18 && s == SYSOM_HOST_SOFTIRQ_NET_RX)
		*v = 60000;
}

static void test_clear_outlier(void **state)
{
	struct reveal_input in;
	struct reveal_node_score out[8];

	(void)state;
	build(&in, 8, 20, spike_node3_retrans);
	assert_int_equal(score(&in, out), 1);
	assert_true(out[3].anomalous);
	assert_string_equal(out[3].hostname, "node3");
	assert_int_equal(out[3].periods_over, 2);
	assert_true(out[3].has_history && out[3].has_peers);
	assert_true(out[3].score > out[3].threshold);
	assert_true(out[3].ntop >= 2);
	/* The two spiking signals lead, retransmits (500 against ~1, floor 5) first. */
	assert_int_equal(out[3].top[0].signal, SYSOM_HOST_TCP_RETRANS_SEGS);
	assert_true(out[3].top[0].z > 50);
	assert_true(out[3].top[0].value == 500);
	assert_true(fabs(out[3].top[0].peer_median - 1) < 0.5);
	assert_int_equal(out[3].top[1].signal, SYSOM_HOST_SOFTIRQ_NET_RX);
	for (size_t i = 0; i < 8; i++)
		if (i != 3)
			assert_true(out[i].score < out[i].threshold);
	reveal_input_free(&in);
}

static void spike_clock(size_t node, size_t window, uint16_t s, double *v)
{
	if (node == 6 && window >= 18 && s == SYSOM_HOST_CPU_MHZ)
		*v /= 3; /* throttled to a third */
}

/* One signal alone, among 38 known: z ~ -6.7 is under the 38-signal score threshold (9.8) but
 * over REVEAL_Z_MIN on its own: found (univariate). */
static void test_single_signal(void **state)
{
	struct reveal_input in;
	struct reveal_node_score out[8];

	(void)state;
	build(&in, 8, 20, spike_clock);
	assert_int_equal(score(&in, out), 1);
	assert_true(out[6].anomalous);
	assert_true(out[6].score < out[6].threshold);
	assert_int_equal(out[6].top[0].signal, SYSOM_HOST_CPU_MHZ);
	assert_true(out[6].top[0].z <= -REVEAL_Z_MIN);
	reveal_input_free(&in);
}

/* Many healthy jobs of noisy nodes: not one anomaly. */
static void test_healthy_peers(void **state)
{
	struct reveal_input in;
	struct reveal_node_score out[16];

	(void)state;
	for (int round = 0; round < 50; round++) {
		build(&in, 16, 30, NULL);
		assert_int_equal(score(&in, out), 0);
		for (size_t i = 0; i < 16; i++)
			assert_int_equal(out[i].nsignals, SYSOM_HOST_SIGNAL_MAX);
		reveal_input_free(&in);
	}
}

static void spike_all(size_t node, size_t window, uint16_t s, double *v)
{
	(void)node;
	if (window >= 18 && s == SYSOM_HOST_TCP_RETRANS_SEGS)
		*v = 500 + node;
}

static void spike_once(size_t node, size_t window, uint16_t s, double *v)
{
	if (node == 2 && window == 19 && s == SYSOM_HOST_TCP_RETRANS_SEGS)
		*v = 500;
}

static void spike_always(size_t node, size_t window, uint16_t s, double *v)
{
	(void)window;
	if (node == 5 && s == SYSOM_HOST_TCP_RETRANS_SEGS)
		*v = 500;
}

/* Every node at once (the fabric): peers move with it. One window: not two periods. A node
 * always different: its own history says normal. A lone node: no peers, no verdict. */
static void test_not_anomalies(void **state)
{
	struct reveal_input in;
	struct reveal_node_score out[8];

	(void)state;
	build(&in, 8, 20, spike_all);
	assert_int_equal(score(&in, out), 0);
	reveal_input_free(&in);

	build(&in, 8, 20, spike_once);
	assert_int_equal(score(&in, out), 0);
	assert_int_equal(out[2].periods_over, 1);
	assert_true(out[2].score > out[2].threshold);
	reveal_input_free(&in);

	build(&in, 8, 20, spike_always);
	assert_int_equal(score(&in, out), 0);
	reveal_input_free(&in);

	build(&in, 1, 20, spike_node3_retrans); /* node 0 alone, no spike */
	assert_int_equal(score(&in, out), 0);
	reveal_input_free(&in);
	build(&in, 4, 20, spike_node3_retrans);
	struct reveal_options o;
	reveal_options_default(&o);
	o.min_peers = 5; /* 4 nodes are too few peers: the spike is scored but no verdict */
	assert_int_equal(reveal_score(&in, &o, out), 0);
	assert_false(out[3].anomalous);
	assert_false(out[3].has_peers);
	assert_int_equal(out[3].periods_over, 2);
	reveal_input_free(&in);

	/* Too little history: no verdict either. */
	build(&in, 8, 6, spike_node3_retrans);
	assert_int_equal(score(&in, out), 0);
	reveal_input_free(&in);
}

/* Constant signals (MAD 0): a change within the floor is nothing, a large one is found. */
static void test_constant_signals(void **state)
{
	struct reveal_input in = { 0 };
	struct reveal_node_score out[6];

	(void)state;
	for (size_t i = 0; i < 6; i++) {
		char id[40];
		snprintf(id, sizeof(id), "%032zx", i + 1);
		for (int t = 0; t < 12; t++) {
			double drops = 0;
			if (t >= 10 && i == 1)
				drops = 3;   /* within the floor of 5/s */
			if (t >= 10 && i == 4)
				drops = 400;
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000,
							  SYSOM_HOST_NET_RX_DROPS, drops), 0);
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000,
							  SYSOM_HOST_CPU_MHZ, 2000), 0);
		}
	}
	assert_int_equal(score(&in, out), 1);
	assert_true(out[4].anomalous);
	assert_int_equal(out[4].top[0].signal, SYSOM_HOST_NET_RX_DROPS);
	assert_true(isfinite(out[4].top[0].z));
	assert_false(out[1].anomalous);
	assert_true(out[1].score > 0.5 && out[1].score < 0.7); /* 3/s against the floor of 5/s */
	assert_true(out[1].score < out[1].threshold);
	reveal_input_free(&in);
}

/* NaN, infinite, negative values and unknown signals are ignored; missing signals are unknown,
 * not zero; a clock going down is harmful (direction), up is not. */
static void test_unknown_and_direction(void **state)
{
	struct reveal_input in = { 0 };
	struct reveal_node_score out[5];

	(void)state;
	for (size_t i = 0; i < 5; i++) {
		char id[40];
		snprintf(id, sizeof(id), "%032zx", i + 1);
		for (int t = 0; t < 12; t++) {
			double mhz = 2400;
			if (t >= 10 && i == 0)
				mhz = 800;  /* throttled */
			if (t >= 10 && i == 1)
				mhz = 4800; /* faster: not harmful */
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000, SYSOM_HOST_CPU_MHZ,
							  mhz), 0);
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000, SYSOM_HOST_CPU_BUSY,
							  NAN), 0);
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000,
							  SYSOM_HOST_PSI_IO_SOME, -1), 0);
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000, 0, 5), 0);
			assert_int_equal(reveal_input_add(&in, id, "h", t * 1000,
							  SYSOM_HOST_SIGNAL_MAX + 1, 5), 0);
			if (i != 2)
				assert_int_equal(reveal_input_add(&in, id, "h", t * 1000,
								  SYSOM_HOST_TCP_TIMEOUTS,
								  INFINITY), 0);
		}
	}
	assert_int_equal(score(&in, out), 1);
	assert_true(out[0].anomalous);
	assert_int_equal(out[0].nsignals, 1);
	assert_int_equal(out[0].top[0].signal, SYSOM_HOST_CPU_MHZ);
	assert_true(out[0].top[0].z < -6);
	assert_false(out[1].anomalous);
	assert_true(out[1].score == 0);
	assert_int_equal(reveal_signal_direction(SYSOM_HOST_CPU_MHZ), -1);
	assert_int_equal(reveal_signal_direction(SYSOM_HOST_TCP_RETRANS_SEGS), 1);
	assert_int_equal(reveal_signal_direction(0), 0);
	reveal_input_free(&in);

	/* A node whose agent stopped is not scored; empty input is fine. */
	assert_int_equal(reveal_score(&in, &(struct reveal_options){ 0 }, out), 0);
}

static void test_threshold(void **state)
{
	(void)state;
	/* Against exact chi-square quantiles at 1e-6 (sqrt): 1 dof 4.89, 2 dof 5.26, 38 dof 9.7;
	 * Wilson-Hilferty errs high (fewer alarms) at 1 dof. */
	assert_true(reveal_threshold(1, 1e-6) >= 4.89 && reveal_threshold(1, 1e-6) < 5.3);
	assert_true(fabs(reveal_threshold(2, 1e-6) - 5.26) < 0.3);
	assert_true(fabs(reveal_threshold(38, 1e-6) - 9.7) < 0.2);
	double prev = 0;
	for (uint32_t d = 1; d <= 38; d++) {
		double t = reveal_threshold(d, 1e-6);
		assert_true(t > prev);
		prev = t;
	}
	assert_true(isinf(reveal_threshold(0, 1e-6)));
}

/* Windows beyond REVEAL_MAX_WINDOWS: the latest are kept. */
static void test_window_cap(void **state)
{
	struct reveal_input in = { 0 };

	(void)state;
	for (int t = 0; t < REVEAL_MAX_WINDOWS + 10; t++)
		assert_int_equal(reveal_input_add(&in, "00000000000000000000000000000001", "h",
						  t, SYSOM_HOST_CPU_MHZ, t), 0);
	assert_int_equal(in.nnodes, 1);
	assert_int_equal(in.nodes[0].nw, REVEAL_MAX_WINDOWS);
	assert_int_equal(in.nodes[0].w[0].time_ms, 10);
	assert_int_equal(in.nodes[0].w[REVEAL_MAX_WINDOWS - 1].time_ms, REVEAL_MAX_WINDOWS + 9);
	reveal_input_free(&in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clear_outlier),
		cmocka_unit_test(test_healthy_peers),
		cmocka_unit_test(test_single_signal),
		cmocka_unit_test(test_not_anomalies),
		cmocka_unit_test(test_constant_signals),
		cmocka_unit_test(test_unknown_and_direction),
		cmocka_unit_test(test_threshold),
		cmocka_unit_test(test_window_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
