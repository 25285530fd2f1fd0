/* SPDX-License-Identifier: Apache-2.0 */
/* A rank's GPU as an NVML index: CUDA_VISIBLE_DEVICES entries and mapping, the device files a
 * process holds open (a fake /proc tree), and the environment variables jobenv keeps. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/gpu/gpumap.h"
#include "agent/ranks/jobenv.h"

/* Eight GPUs with distinct UUIDs, minor numbers 10+i (not the index). */
static struct gpumap_device devs[8];

static int setup(void **state)
{
	(void)state;
	for (unsigned i = 0; i < 8; i++) {
		devs[i].has_minor = true;
		devs[i].minor = 10 + i;
		snprintf(devs[i].uuid, sizeof(devs[i].uuid),
			 "GPU-%x%x3f1c2d-0000-4000-8000-00000000000%u", i, i, i);
	}
	return 0;
}

static struct gpumap_env env_of(const char *cvd)
{
	struct gpumap_env e = { .cvd_set = cvd != NULL };

	if (cvd)
		snprintf(e.cvd, sizeof(e.cvd), "%s", cvd);
	return e;
}

static int pick(const char *cvd, int32_t local_rank, enum gpumap_how *how)
{
	struct gpumap_env e = env_of(cvd);

	return gpumap_from_env(devs, 8, &e, local_rank, how);
}

static void test_cvd_entries(void **state)
{
	struct gpumap_cvd_entry e;
	const char *s = "4, 5 ,GPU-8a3f,6";

	(void)state;
	assert_int_equal(gpumap_cvd_entry(s, strlen(s), 0, &e), 0);
	assert_int_equal(e.kind, GPUMAP_CVD_INDEX);
	assert_int_equal(e.index, 4);
	assert_int_equal(gpumap_cvd_entry(s, strlen(s), 1, &e), 0);
	assert_int_equal(e.index, 5);
	assert_int_equal(gpumap_cvd_entry(s, strlen(s), 2, &e), 0);
	assert_int_equal(e.kind, GPUMAP_CVD_UUID);
	assert_string_equal(e.uuid, "GPU-8a3f");
	assert_int_equal(gpumap_cvd_entry(s, strlen(s), 3, &e), 0);
	assert_int_equal(e.index, 6);
	assert_int_equal(gpumap_cvd_entry(s, strlen(s), 4, &e), -ENOENT);
	/* Not NUL-terminated: only `len` bytes count. */
	assert_int_equal(gpumap_cvd_entry("1,2,3", 3, 2, &e), -ENOENT);
	/* Empty list, "-1", MIG, garbage, an empty entry: CUDA stops at the first invalid one. */
	assert_int_equal(gpumap_cvd_entry("", 0, 0, &e), -ENOENT);
	assert_int_equal(gpumap_cvd_entry("-1", 2, 0, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry("0,-1,2", 6, 2, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry("0,-1,2", 6, 0, &e), 0);
	assert_int_equal(gpumap_cvd_entry("MIG-0b1c2d3e", 12, 0, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry("GPU-", 4, 0, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry("GPU-xyz", 7, 0, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry("0,,1", 4, 1, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry("1234567890", 10, 0, &e), -EINVAL);
	assert_int_equal(gpumap_cvd_entry(NULL, 0, 0, &e), -ENOENT);
}

static void test_cvd_mapping(void **state)
{
	enum gpumap_how how;
	char uuid[GPUMAP_UUID_MAX + 8];

	(void)state;
	/* Index lists: the local rank is the position. */
	assert_int_equal(pick("4,5,6,7", 2, &how), 6);
	assert_int_equal(how, GPUMAP_VISIBLE_DEVICES);
	assert_int_equal(pick("7,6,5,4,3,2,1,0", 3, &how), 4);
	/* The local rank beyond the list; an index the node lacks. */
	assert_int_equal(pick("4,5", 2, &how), -1);
	assert_int_equal(how, GPUMAP_UNKNOWN);
	assert_int_equal(pick("4,9", 1, &how), -1);
	/* A whole UUID, a unique prefix, case-insensitively. */
	snprintf(uuid, sizeof(uuid), "0,%s", devs[5].uuid);
	assert_int_equal(pick(uuid, 1, &how), 5);
	assert_int_equal(how, GPUMAP_VISIBLE_DEVICES);
	assert_int_equal(pick("GPU-333f,GPU-22", 0, &how), 3);
	assert_int_equal(pick("GPU-333f,GPU-22", 1, &how), 2);
	assert_int_equal(pick("gpu-66", 0, &how), 6);
	/* An ambiguous prefix ("GPU-" followed by what every UUID shares is not possible; two
	 * devices sharing a prefix are), one no device has. */
	snprintf(devs[1].uuid, sizeof(devs[1].uuid), "GPU-777f0000");
	assert_int_equal(pick("GPU-77", 0, &how), -1);
	assert_int_equal(how, GPUMAP_UNKNOWN);
	assert_int_equal(pick("GPU-777f0", 0, &how), 1);
	setup(NULL);
	assert_int_equal(pick("GPU-deadbeef", 0, &how), -1);
	/* MIG, -1, empty: unknown. */
	assert_int_equal(pick("MIG-GPU-0b1c/1/0", 0, &how), -1);
	assert_int_equal(pick("-1", 0, &how), -1);
	assert_int_equal(pick("", 0, &how), -1);
	assert_int_equal(pick("0,1,-1,3", 3, &how), -1);
	/* Unset: the local rank itself, when the node has it. */
	assert_int_equal(pick(NULL, 3, &how), 3);
	assert_int_equal(how, GPUMAP_LOCAL_RANK);
	assert_int_equal(pick(NULL, 8, &how), -1);
	assert_int_equal(how, GPUMAP_UNKNOWN);
	assert_int_equal(gpumap_from_env(devs, 8, NULL, 2, &how), 2);
	/* No local rank: nothing to go by. */
	assert_int_equal(pick("4,5", -1, &how), -1);
	assert_int_equal(pick(NULL, -1, &how), -1);
	/* Too long to have been kept: unknown. */
	struct gpumap_env e = env_of("0");
	e.cvd_too_long = true;
	assert_int_equal(gpumap_from_env(devs, 8, &e, 0, &how), -1);
	/* By minor number. */
	assert_int_equal(gpumap_from_minor(devs, 8, 14), 4);
	assert_int_equal(gpumap_from_minor(devs, 8, 4), -1);
	assert_string_equal(gpumap_how_name(GPUMAP_DEVICE_FILE), "device file");
}

static void test_device_paths(void **state)
{
	uint32_t m = 99;

	(void)state;
	assert_int_equal(gpumap_device_path("/dev/nvidia0", &m), 1);
	assert_int_equal(m, 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia15", &m), 1);
	assert_int_equal(m, 15);
	assert_int_equal(gpumap_device_path("/dev/nvidiactl", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia-uvm", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia-uvm-tools", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia-modeset", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia-caps/nvidia-cap1", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia3 (deleted)", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia03", &m), 0);
	assert_int_equal(gpumap_device_path("/dev/nvidia", &m), 0);
	assert_int_equal(gpumap_device_path("/tmp/dev/nvidia1", &m), 0);
	assert_int_equal(gpumap_device_path("socket:[1234]", &m), 0);
	assert_int_equal(m, 15);
}

/* A fake /proc tree: <root>/<pid>/fd/<n> symbolic links. */
static char root[PATH_MAX];

static void fd_link(uint32_t pid, int fd, const char *target)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%u", root, pid);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%u/fd", root, pid);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%u/fd/%d", root, pid, fd);
	assert_int_equal(symlink(target, path), 0);
}

static void test_scan_fds(void **state)
{
	uint32_t minor = 0;

	(void)state;
	snprintf(root, sizeof(root), "/tmp/sysom-gpumap-XXXXXX");
	assert_non_null(mkdtemp(root));
	/* One GPU among the control and UVM devices, opened twice. */
	fd_link(100, 0, "/dev/null");
	fd_link(100, 3, "/dev/nvidiactl");
	fd_link(100, 4, "/dev/nvidia-uvm");
	fd_link(100, 5, "/dev/nvidia6");
	fd_link(100, 6, "/dev/nvidia6");
	fd_link(100, 7, "socket:[99]");
	assert_int_equal(gpumap_scan_fds(root, 100, &minor), 1);
	assert_int_equal(minor, 6);
	/* Two GPUs open: no single answer. */
	fd_link(101, 3, "/dev/nvidia1");
	fd_link(101, 4, "/dev/nvidia2");
	assert_int_equal(gpumap_scan_fds(root, 101, &minor), 0);
	/* Only the control devices (no CUDA context yet). */
	fd_link(102, 3, "/dev/nvidiactl");
	fd_link(102, 4, "/dev/nvidia-caps/nvidia-cap2");
	assert_int_equal(gpumap_scan_fds(root, 102, &minor), 0);
	/* Gone. */
	assert_int_equal(gpumap_scan_fds(root, 103, &minor), -ESRCH);
	/* More descriptors than are looked at: bounded, no failure. */
	for (int fd = 0; fd < GPUMAP_MAX_FDS + 10; fd++)
		fd_link(104, fd, "/dev/null");
	assert_int_equal(gpumap_scan_fds(root, 104, &minor), 0);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
}

static void test_jobenv_keeps_cvd(void **state)
{
	static const char block[] = "RANK=1\0WORLD_SIZE=2\0LOCAL_RANK=1\0LOCAL_WORLD_SIZE=2\0"
				    "CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb\0CUDA_DEVICE_ORDER=PCI_BUS_ID";
	struct job_identity id;
	char *big;

	(void)state;
	assert_int_equal(jobenv_parse(block, sizeof(block) - 1, &id), 0);
	assert_true(id.has_rank && id.gpu.cvd_set && !id.gpu.cvd_too_long && id.gpu.order_pci);
	assert_string_equal(id.gpu.cvd, "GPU-aa,GPU-bb");
	assert_int_equal(jobenv_parse("RANK=0\0CUDA_VISIBLE_DEVICES=", 28, &id), 0);
	assert_true(id.gpu.cvd_set && !id.gpu.order_pci);
	assert_string_equal(id.gpu.cvd, "");
	assert_int_equal(jobenv_parse("RANK=0", 6, &id), 0);
	assert_false(id.gpu.cvd_set);
	/* Longer than kept. */
	size_t n = strlen("CUDA_VISIBLE_DEVICES=") + GPUMAP_CVD_MAX;
	big = malloc(n);
	assert_non_null(big);
	memcpy(big, "CUDA_VISIBLE_DEVICES=", 21);
	memset(big + 21, '1', n - 21);
	assert_int_equal(jobenv_parse(big, n, &id), 0);
	assert_true(id.gpu.cvd_set && id.gpu.cvd_too_long);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cvd_entries),
		cmocka_unit_test(test_cvd_mapping),
		cmocka_unit_test(test_device_paths),
		cmocka_unit_test(test_scan_fds),
		cmocka_unit_test(test_jobenv_keeps_cvd),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
