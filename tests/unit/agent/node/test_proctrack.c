/* SPDX-License-Identifier: Apache-2.0 */
/* agent/node/proctrack.c: the rescan after the dynamic loader's notification of a new library
 * (proctrack_rescan_loaded) and after the unwinder met an unknown address (proctrack_rescan),
 * on this test's own process. */
#include <dlfcn.h>
#include <sys/prctl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/node/proctrack.h"
#include "common/clock.h"

static int scans;

static void on_mappings(void *ctx, const struct pt_process *proc)
{
	(void)ctx;
	(void)proc;
	scans++;
}

static bool maps_file(const struct pt_process *p, const char *suffix)
{
	size_t n = strlen(suffix);

	for (uint32_t i = 0; i < p->mapping_count; i++) {
		const char *path = p->mappings[i].object ? p->mappings[i].object->path : NULL;
		size_t len = path ? strlen(path) : 0;
		if (len >= n && !strcmp(path + len - n, suffix))
			return true;
	}
	return false;
}

static void test_rescan_loaded(void **state)
{
	const char *build = getenv("SYSOM_BUILD");
	char lib[2][4096];
	struct proctrack_options po;
	struct proctrack *pt = NULL;
	uint32_t pid = (uint32_t)getpid();
	void *h[2] = { NULL, NULL };

	(void)state;
	snprintf(lib[0], sizeof(lib[0]), "%s/tests/fixtures/simjob/libcuda.so.1", build ? build : "build");
	snprintf(lib[1], sizeof(lib[1]), "%s/tests/fixtures/simjob/libnccl.so.2", build ? build : "build");
	if (access(lib[0], R_OK) != 0 || access(lib[1], R_OK) != 0)
		skip(); /* the fake GPU libraries are built only with cuda.h and nccl.h */
	scans = 0;
	proctrack_options_default(&po);
	po.on_mappings = on_mappings;
	assert_int_equal(proctrack_new(&po, &pt), 0);
	struct pt_process *p = proctrack_get(pt, pid, 0);
	assert_non_null(p);
	assert_int_equal(scans, 1);
	assert_false(maps_file(p, "/libcuda.so.1"));

	/* A load the last scan already saw: nothing to do. */
	assert_false(proctrack_rescan_loaded(pt, pid, 0, p->last_scan_ns - 1));
	proctrack_after_drain(pt);
	assert_int_equal(scans, 1);

	/* Loaded right after the first scan (a launcher that dlopens libcuda as it starts, then
	 * launches at once): rescanned now, not at the next drain. */
	assert_non_null(h[0] = dlopen(lib[0], RTLD_NOW | RTLD_LOCAL));
	uint64_t loaded = sysom_monotonic_ns();
	assert_true(loaded - p->last_scan_ns < po.rescan_interval_ns / 10);
	assert_true(proctrack_rescan_loaded(pt, pid, 0, loaded));
	assert_int_equal(scans, 2);
	assert_true(maps_file(p, "/libcuda.so.1"));
	/* Seen now: the same notification again, or the next drain, scans no more. */
	assert_false(proctrack_rescan_loaded(pt, pid, 0, loaded));
	proctrack_after_drain(pt);
	assert_int_equal(scans, 2);

	/* A second load within a tenth of the rescan interval of the first one's scan:
	 * deferred to the first drain past that floor, not dropped. */
	assert_non_null(h[1] = dlopen(lib[1], RTLD_NOW | RTLD_LOCAL));
	loaded = sysom_monotonic_ns();
	if (loaded - p->last_load_scan_ns < po.rescan_interval_ns / 10) {
		assert_false(proctrack_rescan_loaded(pt, pid, 0, loaded));
		assert_int_equal(scans, 2);
		usleep((useconds_t)(po.rescan_interval_ns / 10 / 1000) + 20000);
		proctrack_after_drain(pt);
	} else {
		assert_true(proctrack_rescan_loaded(pt, pid, 0, loaded));
	}
	assert_int_equal(scans, 3);
	assert_true(maps_file(p, "/libnccl.so.2"));
	/* An unknown incarnation is left alone. */
	assert_false(proctrack_rescan_loaded(pt, pid, 7, sysom_monotonic_ns()));
	dlclose(h[1]);
	dlclose(h[0]);
	proctrack_free(pt);
}

/* The first scan may precede the dynamic loader's work: a second look comes after a tenth of
 * the rescan interval; later ones once per interval. */
static void test_rescan_unmapped(void **state)
{
	const char *build = getenv("SYSOM_BUILD");
	char lib[2][4096];
	struct proctrack_options po;
	struct proctrack *pt = NULL;
	uint32_t pid = (uint32_t)getpid();
	void *h[2] = { NULL, NULL };

	(void)state;
	snprintf(lib[0], sizeof(lib[0]), "%s/tests/fixtures/simjob/libnccl.so.2", build ? build : "build");
	snprintf(lib[1], sizeof(lib[1]), "%s/tests/fixtures/simjob/libcupti.so", build ? build : "build");
	if (access(lib[0], R_OK) != 0 || access(lib[1], R_OK) != 0)
		skip(); /* the fake GPU libraries are built only with cuda.h and nccl.h */
	scans = 0;
	proctrack_options_default(&po);
	po.on_mappings = on_mappings;
	assert_int_equal(proctrack_new(&po, &pt), 0);
	struct pt_process *p = proctrack_get(pt, pid, 0);
	assert_non_null(p);
	assert_int_equal(scans, 1);
	assert_false(maps_file(p, "/libnccl.so.2"));

	assert_non_null(h[0] = dlopen(lib[0], RTLD_NOW | RTLD_LOCAL));
	usleep((useconds_t)(po.rescan_interval_ns / 10 / 1000) + 20000);
	assert_true(proctrack_rescan(pt, pid, 0));
	assert_int_equal(scans, 2);
	assert_true(maps_file(p, "/libnccl.so.2"));

	/* The second scan saw the loader's work: the next rescan waits the whole interval. */
	assert_non_null(h[1] = dlopen(lib[1], RTLD_NOW | RTLD_LOCAL));
	usleep((useconds_t)(po.rescan_interval_ns / 10 / 1000) + 20000);
	if (sysom_monotonic_ns() - p->last_scan_ns < po.rescan_interval_ns) {
		assert_false(proctrack_rescan(pt, pid, 0));
		assert_int_equal(scans, 2);
	}
	/* An unknown incarnation is left alone. */
	assert_false(proctrack_rescan(pt, pid, 7));
	dlclose(h[1]);
	dlclose(h[0]);
	proctrack_free(pt);
}

/* A process renamed after exec: its main thread's sampled name, and /proc/<tgid>/comm at the
 * next rescan, become its name. */
static void test_renamed(void **state)
{
	struct proctrack_options po;
	struct proctrack *pt = NULL;
	uint32_t pid = (uint32_t)getpid();
	char before[16] = "";

	(void)state;
	assert_int_equal(prctl(PR_GET_NAME, before), 0);
	proctrack_options_default(&po);
	po.on_mappings = on_mappings;
	assert_int_equal(proctrack_new(&po, &pt), 0);
	struct pt_process *p = proctrack_get(pt, pid, 0);
	assert_non_null(p);
	assert_string_equal(p->comm, before);
	/* A sample of the main thread under a new name. */
	assert_true(proctrack_note_comm(p, "trainer-rank0"));
	assert_string_equal(p->comm, "trainer-rank0");
	assert_false(proctrack_note_comm(p, "trainer-rank0"));
	assert_false(proctrack_note_comm(p, "")); /* an empty name is no name */
	assert_true(proctrack_note_comm(p, "a-name-longer-than-fifteen-bytes"));
	assert_string_equal(p->comm, "a-name-longer-t");
	/* Renamed for real: the next rescan reads it. */
	assert_int_equal(prctl(PR_SET_NAME, "renamed-proc"), 0);
	usleep((useconds_t)(po.rescan_interval_ns / 1000) + 20000);
	assert_true(proctrack_rescan(pt, pid, 0));
	assert_string_equal(p->comm, "renamed-proc");
	assert_int_equal(prctl(PR_SET_NAME, before), 0);
	proctrack_free(pt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rescan_loaded),
		cmocka_unit_test(test_rescan_unmapped),
		cmocka_unit_test(test_renamed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
