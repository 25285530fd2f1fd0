/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU layer's hardware evidence: windows folded per device, the rank's GPU picked, causes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/gpuhealth.h"

static struct store_gpu_health healthy(uint32_t device)
{
	struct store_gpu_health g = { .hostname = "n1", .uuid = "GPU-x", .pci_bus_id = "00000000:18:00.0",
				      .name = "H200" };
	g.h = (struct sysom_gpu_health){
		.device = device, .samples = 30, .reasons_any = 0, .reasons_last = 0,
		.sm_clock_min = 1980, .sm_clock_last = 1980, .sm_clock_max = 1980,
		.temp_max = 50, .temp_last = 50, .temp_slowdown = 90, .temp_shutdown = 95,
		.power_max_mw = 300000, .power_last_mw = 300000, .power_limit_mw = 700000,
		.ecc_corrected = 0, .ecc_uncorrected = 0, .retired_dbe = 0,
	};
	return g;
}

static void test_thermal_confirmed_by_local_rank(void **state)
{
	struct gpuhealth_acc a;
	struct diagnosis_gpu_hw hw;
	struct store_gpu_health g;

	(void)state;
	gpuhealth_acc_init(&a);
	for (uint32_t d = 0; d < 4; d++) {
		g = healthy(d);
		gpuhealth_add(&a, &g);
	}
	g = healthy(2);
	g.h.reasons_any = SYSOM_GPU_REASON_HW_THERMAL | SYSOM_GPU_REASON_IDLE;
	g.h.slowdown_samples = 12;
	g.h.sm_clock_min = 1005;
	g.h.temp_max = 92;
	gpuhealth_add(&a, &g);
	gpuhealth_pick(&a, -1, 2, &hw);
	assert_true(hw.present && hw.confirmed && hw.by_local_rank);
	assert_int_equal(hw.picked_by, DIAGNOSIS_GPU_PICKED_LOCAL_RANK);
	assert_string_equal(gpuhealth_picked_name(hw.picked_by), "local rank");
	assert_int_equal(hw.device, 2);
	assert_int_equal(hw.windows, 2);
	assert_int_equal(hw.samples, 60);
	assert_int_equal(hw.sm_clock_min, 1005);
	assert_string_equal(hw.reasons, "hw_thermal_slowdown");
	assert_non_null(strstr(hw.cause, "thermal throttling (hw_thermal_slowdown, in 12 of 60"));
	assert_non_null(strstr(hw.cause, "temperature 92 C at its slowdown threshold (90 C)"));
	assert_non_null(strstr(hw.cause, "SM clock down to 1005 of 1980 MHz"));
	/* The rank's own GPU is healthy: not confirmed, even though another GPU throttles. */
	gpuhealth_pick(&a, -1, 1, &hw);
	assert_true(hw.present && !hw.confirmed && hw.by_local_rank);
	assert_string_equal(hw.cause, "");
	/* Local rank unknown: the GPU with the strongest evidence. */
	gpuhealth_pick(&a, -1, -1, &hw);
	assert_true(hw.confirmed && !hw.by_local_rank);
	assert_int_equal(hw.picked_by, DIAGNOSIS_GPU_PICKED_WORST);
	assert_string_equal(gpuhealth_picked_name(hw.picked_by), "worst device");
	assert_int_equal(hw.device, 2);
}

/* CUDA_VISIBLE_DEVICES remapped: local rank 1 runs on NVML device 2 (the agent said so). */
static void test_rank_device_before_local_rank(void **state)
{
	struct gpuhealth_acc a;
	struct diagnosis_gpu_hw hw;
	struct store_gpu_health g;

	(void)state;
	gpuhealth_acc_init(&a);
	for (uint32_t d = 0; d < 4; d++) {
		g = healthy(d);
		if (d == 2) {
			g.h.reasons_any = SYSOM_GPU_REASON_SW_THERMAL;
			g.h.slowdown_samples = 5;
		}
		gpuhealth_add(&a, &g);
	}
	/* The old rule (local rank 1 is NVML device 1) would call the rank's GPU healthy. */
	gpuhealth_pick(&a, -1, 1, &hw);
	assert_true(hw.present && !hw.confirmed);
	assert_int_equal(hw.device, 1);
	gpuhealth_pick(&a, 2, 1, &hw);
	assert_true(hw.present && hw.confirmed && hw.by_local_rank);
	assert_int_equal(hw.device, 2);
	assert_int_equal(hw.picked_by, DIAGNOSIS_GPU_PICKED_RANK_DEVICE);
	assert_string_equal(gpuhealth_picked_name(hw.picked_by), "nvml index from the rank");
	/* The rank's device is healthy: not confirmed by another GPU's throttling. */
	gpuhealth_pick(&a, 3, 2, &hw);
	assert_true(hw.present && !hw.confirmed);
	assert_int_equal(hw.device, 3);
	/* A known device without windows: not the local rank's (a guess), the worst device. */
	gpuhealth_pick(&a, 7, 0, &hw);
	assert_int_equal(hw.picked_by, DIAGNOSIS_GPU_PICKED_WORST);
	assert_int_equal(hw.device, 2);
	assert_false(hw.by_local_rank);
	gpuhealth_pick(&a, SYSOM_GPU_MAX_DEVICES, 0, &hw);
	assert_int_equal(hw.picked_by, DIAGNOSIS_GPU_PICKED_WORST);
}

static void test_errors_and_unknowns(void **state)
{
	struct gpuhealth_acc a;
	struct diagnosis_gpu_hw hw;
	struct store_gpu_health g = healthy(0);

	(void)state;
	gpuhealth_acc_init(&a);
	gpuhealth_pick(&a, -1, 0, &hw);
	assert_false(hw.present); /* no window */
	/* Everything unknown: present, nothing confirmed; idle low clocks are not evidence. */
	g.h.reasons_any = g.h.reasons_last = SYSOM_GPU_UNKNOWN64;
	g.h.temp_max = g.h.temp_last = g.h.temp_slowdown = SYSOM_GPU_UNKNOWN;
	g.h.ecc_uncorrected = SYSOM_GPU_UNKNOWN64;
	gpuhealth_add(&a, &g);
	g = healthy(0);
	g.h.reasons_any = SYSOM_GPU_REASON_IDLE;
	g.h.sm_clock_min = 345;
	gpuhealth_add(&a, &g);
	gpuhealth_pick(&a, -1, 0, &hw);
	assert_true(hw.present);
	assert_false(hw.confirmed);
	/* Uncorrected ECC errors and an Xid confirm a hardware cause. */
	g = healthy(0);
	g.h.ecc_uncorrected = 2;
	g.h.xid_count = 1;
	g.h.xid_last = 48;
	gpuhealth_add(&a, &g);
	gpuhealth_pick(&a, -1, 0, &hw);
	assert_true(hw.confirmed);
	assert_non_null(strstr(hw.cause, "2 uncorrected ECC errors"));
	assert_non_null(strstr(hw.cause, "1 Xid events (last Xid 48)"));
	/* Out-of-range devices are ignored. */
	g.h.device = SYSOM_GPU_MAX_DEVICES;
	gpuhealth_add(&a, &g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_thermal_confirmed_by_local_rank),
		cmocka_unit_test(test_rank_device_before_local_rank),
		cmocka_unit_test(test_errors_and_unknowns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
