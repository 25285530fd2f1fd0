/* SPDX-License-Identifier: Apache-2.0 */
/* The NVML reader against the fake libnvidia-ml.so.1 (tests/fixtures/nvml): windows, unknown
 * fields, the older library's fallbacks, Xid lines. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/gpu/nvml.h"

static char lib_new[PATH_MAX + 64], lib_old[PATH_MAX + 64], ctl[64], kmsg[64];

/* build/X/tests/unit/agent/gpu/test_nvml → build/X/tests/fixtures/nvml/ */
static void find_fixtures(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *cut;

	assert_true(n > 0);
	exe[n] = '\0';
	cut = strstr(exe, "/tests/unit/agent/gpu/");
	assert_non_null(cut);
	*cut = '\0';
	snprintf(lib_new, sizeof(lib_new), "%s/tests/fixtures/nvml/libnvidia-ml.so.1", exe);
	snprintf(lib_old, sizeof(lib_old), "%s/tests/fixtures/nvml/old/libnvidia-ml.so.1", exe);
	if (access(lib_new, R_OK) || access(lib_old, R_OK))
		fail_msg("fake NVML not built: %s", lib_new);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	(void)state;
	find_fixtures();
	snprintf(ctl, sizeof(ctl), "/tmp/test_nvml_ctl.%d", (int)getpid());
	snprintf(kmsg, sizeof(kmsg), "/tmp/test_nvml_kmsg.%d", (int)getpid());
	setenv("SYSOM_FAKE_NVML", ctl, 1);
	write_file(ctl, "");
	write_file(kmsg, "");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(ctl);
	unlink(kmsg);
	return 0;
}

struct seen {
	struct sysom_gpu_health h[8];
	char bus[8][32], uuid[8][96];
	unsigned n;
};

static void collect(void *ctx, const struct nvml_gpu_window *w)
{
	struct seen *s = ctx;

	assert_true(s->n < 8);
	s->h[s->n] = w->h;
	snprintf(s->bus[s->n], sizeof(s->bus[0]), "%s", w->pci_bus_id);
	snprintf(s->uuid[s->n], sizeof(s->uuid[0]), "%s", w->uuid);
	s->n++;
}

static void test_parse_xid(void **state)
{
	uint32_t d, b, v, x;
	const char *ok = "4,1234,5678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
			 "GPU has fallen off the bus.";
	const char *bad[] = {
		"NVRM: Xid (PCI:0000:3b:00): , pid=1",    /* no code */
		"NVRM: Xid (PCI:0000:3bb:00): 79, pid=1", /* bus too long */
		"NVRM: Xid (PCI:0000:3b:00) 79",          /* no colon */
		"NVRM: Xid (PCI:0000:3b:00): 12345678, x",/* code too long */
		"NVRM: Xid (PCI:0000:3b:00): 0, x",       /* no Xid 0 */
		"NVRM: Xid (PCI:",                        /* cut */
	};

	(void)state;
	assert_int_equal(nvml_parse_xid(ok, strlen(ok), &d, &b, &v, &x), 1);
	assert_int_equal(d, 0);
	assert_int_equal(b, 0x3b);
	assert_int_equal(v, 0);
	assert_int_equal(x, 79);
	const char *fn = "NVRM: Xid (PCI:0001:c1:02.0): 48, An uncorrectable ECC error";
	assert_int_equal(nvml_parse_xid(fn, strlen(fn), &d, &b, &v, &x), 1);
	assert_int_equal(d, 1);
	assert_int_equal(b, 0xc1);
	assert_int_equal(v, 2);
	assert_int_equal(x, 48);
	assert_int_equal(nvml_parse_xid("eth0: link up", 13, &d, &b, &v, &x), 0);
	/* Bounded by len: the Xid marker past len is not seen. */
	assert_int_equal(nvml_parse_xid(ok, 10, &d, &b, &v, &x), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (nvml_parse_xid(bad[i], strlen(bad[i]), &d, &b, &v, &x) != -EINVAL)
			fail_msg("bad Xid line %zu accepted", i);
	assert_int_equal(nvml_parse_bus_id("00000000:3B:00.0", &d, &b, &v), 0);
	assert_int_equal(b, 0x3b);
	assert_int_equal(nvml_parse_bus_id("zz", &d, &b, &v), -EINVAL);
}

static void test_absent_and_init_failure(void **state)
{
	struct nvml_options o = { .library = "/nonexistent/libnvidia-ml.so.1", .kmsg = "" };
	struct nvml *n = (struct nvml *)1;
	char err[256];

	(void)state;
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), -ENOENT);
	assert_null(n);
	assert_non_null(strstr(err, "not loadable"));
	o.library = "libc.so.6"; /* loads, but is not NVML */
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), -ENOENT);
	o.library = lib_new;
	write_file(ctl, "init_fail\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), -ENODEV);
	assert_non_null(strstr(err, "Driver Not Loaded"));
	write_file(ctl, "devices 0\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), -ENODEV);
	nvml_collect(NULL, collect, NULL, NULL); /* no reader: nothing */
}

/* A throttle seen in one sample of three shows in the window: reasons, lowest clock. */
static void test_short_throttle_in_window(void **state)
{
	struct nvml_options o = { .library = lib_new, .kmsg = "" };
	struct nvml_window_counters c;
	struct seen s = { 0 };
	struct nvml *n;
	char err[256];

	(void)state;
	write_file(ctl, "devices 2\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), 0);
	assert_int_equal(nvml_device_count(n), 2);
	nvml_sample(n);
	write_file(ctl, "devices 2\ngpu 1 reasons=0x40 sm=1005 temp=92 power=710000\n");
	nvml_sample(n);
	write_file(ctl, "devices 2\n");
	nvml_sample(n);
	nvml_collect(n, collect, &s, &c);
	assert_int_equal(s.n, 2);
	assert_int_equal(c.samples, 6);
	assert_int_equal(c.errors, 0);
	const struct sysom_gpu_health *g = &s.h[1];
	assert_int_equal(g->device, 1);
	assert_string_equal(s.bus[1], "00000000:29:00.0");
	assert_string_equal(s.uuid[1], "GPU-fa4e0000-0000-4000-8000-000000000001");
	assert_int_equal(g->samples, 3);
	assert_int_equal(g->slowdown_samples, 1);
	assert_int_equal(g->reasons_any, SYSOM_GPU_REASON_HW_THERMAL);
	assert_int_equal(g->reasons_last, 0);
	assert_int_equal(g->sm_clock_min, 1005);
	assert_int_equal(g->sm_clock_last, 1980);
	assert_int_equal(g->sm_clock_max, 1980);
	assert_int_equal(g->temp_max, 92);
	assert_int_equal(g->temp_last, 45);
	assert_int_equal(g->temp_slowdown, 90);
	assert_int_equal(g->power_max_mw, 710000);
	assert_int_equal(g->power_limit_mw, 700000);
	assert_int_equal(g->flags, SYSOM_GPU_REMAPPED_ROWS);
	assert_int_equal(g->nvlink_errors, 0);
	assert_int_equal(s.h[0].slowdown_samples, 0);
	assert_int_equal(s.h[0].reasons_any, 0);
	/* The next window starts empty: no sample, no record. */
	s.n = 0;
	nvml_collect(n, collect, &s, &c);
	assert_int_equal(s.n, 0);
	assert_int_equal(c.samples, 0);
	nvml_close(n);
}

/* Not supported is normal (unknown, not an error); a failure is unknown and counted. */
static void test_unknown_fields(void **state)
{
	struct nvml_options o = { .library = lib_new, .kmsg = "" };
	struct nvml_window_counters c;
	struct seen s = { 0 };
	struct nvml *n;
	char err[256];

	(void)state;
	write_file(ctl, "devices 1\ngpu 0 unsupported=reasons unsupported=ecc_corr fail=temp "
			"unsupported=nvlinks nvlinks=0 fail=pcie_replay sbe=2 nvlink_err=1\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), 0);
	nvml_sample(n);
	nvml_sample(n);
	nvml_collect(n, collect, &s, &c);
	assert_int_equal(s.n, 1);
	const struct sysom_gpu_health *g = &s.h[0];
	assert_true(g->reasons_any == SYSOM_GPU_UNKNOWN64);
	assert_true(g->reasons_last == SYSOM_GPU_UNKNOWN64);
	assert_true(g->ecc_corrected == SYSOM_GPU_UNKNOWN64);
	assert_int_equal(g->ecc_uncorrected, 0);
	assert_int_equal(g->temp_max, SYSOM_GPU_UNKNOWN);
	assert_int_equal(g->pcie_replays, SYSOM_GPU_UNKNOWN);
	assert_true(g->nvlink_errors == SYSOM_GPU_UNKNOWN64); /* no link answered */
	assert_int_equal(g->retired_sbe, 2);
	assert_int_equal(c.errors, 2 + 1); /* temperature twice, PCIe replays once */
	nvml_close(n);
}

/* A driver before 535: ThrottleReasons and retired pages (more than the address buffer). */
static void test_old_library(void **state)
{
	struct nvml_options o = { .library = lib_old, .kmsg = "" };
	struct seen s = { 0 };
	struct nvml *n;
	char err[256];

	(void)state;
	write_file(ctl, "devices 1\ngpu 0 reasons=0x4 sbe=70 dbe=1 nvlinks=2 nvlink_err=3\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), 0);
	nvml_sample(n);
	nvml_collect(n, collect, &s, NULL);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.h[0].reasons_any, SYSOM_GPU_REASON_SW_POWER_CAP);
	assert_int_equal(s.h[0].flags, 0);
	assert_int_equal(s.h[0].retired_sbe, 70);
	assert_int_equal(s.h[0].retired_dbe, 1);
	assert_int_equal(s.h[0].nvlink_errors, 2 * 5 * 3);
	nvml_close(n);
}

/* Each device's minor number (/dev/nvidia<minor>) and UUID, for mapping ranks to GPUs. */
static void test_device_table(void **state)
{
	struct nvml_options o = { .library = lib_new, .kmsg = "" };
	struct gpumap_device d[4];
	struct nvml *n;
	char err[256];

	(void)state;
	assert_int_equal(nvml_devices(NULL, d, 4), 0);
	write_file(ctl, "devices 3\ngpu 1 minor=7\ngpu 2 unsupported=minor\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), 0);
	assert_int_equal(nvml_devices(n, d, 4), 3);
	assert_true(d[0].has_minor && d[1].has_minor && !d[2].has_minor);
	assert_int_equal(d[0].minor, 0);
	assert_int_equal(d[1].minor, 7);
	assert_string_equal(d[1].uuid, "GPU-fa4e0000-0000-4000-8000-000000000001");
	assert_int_equal(gpumap_from_minor(d, 3, 7), 1);
	assert_int_equal(nvml_devices(n, d, 2), 2); /* bounded by the caller's table */
	nvml_close(n);
}

static void test_xid_from_kernel_log(void **state)
{
	struct nvml_options o = { .library = lib_new, .kmsg = kmsg, .kmsg_from_start = true };
	struct nvml_window_counters c;
	struct seen s = { 0 };
	struct nvml *n;
	char err[256], big[5000];
	FILE *f;

	(void)state;
	write_file(ctl, "devices 2\n");
	write_file(kmsg, "6,1,1,-;eth0: link up\n"
			 "4,2,2,-;NVRM: Xid (PCI:0000:29:00): 13, pid=7, Graphics Exception\n");
	assert_int_equal(nvml_open(&o, &n, err, sizeof(err)), 0);
	nvml_sample(n);
	/* Appended later: one for GPU 1, one for no GPU, one unparsable, one too long. */
	assert_non_null(f = fopen(kmsg, "a"));
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	fprintf(f, "4,3,3,-;NVRM: Xid (PCI:0000:29:00): 79, pid=7, GPU has fallen off the bus.\n"
		   "4,4,4,-;NVRM: Xid (PCI:0000:99:00): 31, pid=7\n"
		   "4,5,5,-;NVRM: Xid (PCI:0000:29:00) oops\n%s\n", big);
	fclose(f);
	nvml_collect(n, collect, &s, &c);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.h[1].xid_count, 2);
	assert_int_equal(s.h[1].xid_last, 79);
	assert_int_equal(s.h[0].xid_count, 0);
	assert_int_equal(c.xid, 2);
	assert_int_equal(c.xid_unmatched, 2);
	nvml_close(n);
}

static void test_probe_json(void **state)
{
	struct nvml_options o = { .library = lib_new, .kmsg = "" };
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	(void)state;
	write_file(ctl, "devices 1\ngpu 0 reasons=0x20 minor=5\n");
	assert_int_equal(nvml_probe(&o, 2, 1, out), 0);
	fclose(out);
	assert_non_null(strstr(buf, "\"nvml\":\"ok\""));
	assert_non_null(strstr(buf, "\"reasons_any_names\":\"sw_thermal_slowdown\""));
	assert_non_null(strstr(buf, "\"samples\":2"));
	assert_non_null(strstr(buf, "\"device_file\":\"/dev/nvidia5\""));
	free(buf);
	o.library = "/nonexistent.so";
	out = open_memstream(&buf, &len);
	assert_int_equal(nvml_probe(&o, 1, 1, out), -ENOENT);
	fclose(out);
	assert_non_null(strstr(buf, "\"nvml\":\"absent\""));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_xid),
		cmocka_unit_test(test_absent_and_init_failure),
		cmocka_unit_test(test_short_throttle_in_window),
		cmocka_unit_test(test_unknown_fields),
		cmocka_unit_test(test_old_library),
		cmocka_unit_test(test_device_table),
		cmocka_unit_test(test_xid_from_kernel_log),
		cmocka_unit_test(test_probe_json),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
