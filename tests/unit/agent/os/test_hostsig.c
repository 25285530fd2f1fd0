/* SPDX-License-Identifier: Apache-2.0 */
/* Host signals from a fixture /proc and /sys tree (agent/os/hostsig.c): rates over two
 * collects, levels, what is excluded, and unknown for what is missing, malformed or reset. */
#include <errno.h>
#include <math.h>
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

#include "agent/os/hostsig.h"

static char root[64];

static void put(const char *rel, const char *fmt, ...)
{
	char path[256], dir[256];
	va_list ap;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
		snprintf(dir, sizeof(dir), "%.*s", (int)(s - path), path);
		mkdir(dir, 0755);
	}
	assert_non_null(f = fopen(path, "w"));
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

/* A tree whose counters are `k` times a base. */
static void write_tree(uint64_t k, uint64_t retrans)
{
	put("proc/stat", "cpu  %lu 0 %lu %lu %lu 0 0 %lu 0 0\ncpu0 1 2 3 4 5 6 7 8\n"
			 "intr 5 1 2\nctxt %lu\nbtime 1\nprocs_running 3\nprocs_blocked 2\n",
	    100 * k, 100 * k, 700 * k, 50 * k, 50 * k, 1000 * k);
	put("proc/softirqs", "                    CPU0       CPU1\n"
			     "          HI:          1          1\n"
			     "      NET_TX:     %5lu     %5lu\n"
			     "      NET_RX:     %5lu     %5lu\n",
	    10 * k, 10 * k, 100 * k, 300 * k);
	put("proc/pressure/cpu", "some avg10=1.50 avg60=0.00 avg300=0.00 total=%lu\n"
				 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 200000 * k);
	put("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
				    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
	put("proc/pressure/io", "some avg10=2.25 avg60=0.00 avg300=0.00 total=%lu\n"
				"full avg10=1.00 avg60=0.00 avg300=0.00 total=%lu\n",
	    1000 * k, 500 * k);
	put("proc/net/snmp", "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
			     "Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs InErrs OutRsts\n"
			     "Tcp: 1 200 %lu %lu %lu 0\n", 1000 * k, retrans, 2 * k);
	put("proc/net/netstat", "TcpExt: SyncookiesSent TCPLostRetransmit TCPTimeouts\n"
				"TcpExt: 0 %lu %lu\nIpExt: InNoRoutes\nIpExt: 0\n", 3 * k, 4 * k);
	put("proc/net/dev",
	    "Inter-|   Receive                                                |  Transmit\n"
	    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	    "    lo: 100 1 999 999 0 0 0 0 100 1 999 999 0 0 0 0\n"
	    "  eth0: 100 1 %lu %lu 0 0 0 0 100 1 %lu %lu 0 0 0 0\n",
	    1 * k, 2 * k, 3 * k, 4 * k);
	put("proc/diskstats",
	    "   8       0 sda %lu 0 0 %lu %lu 0 0 %lu 0 0 0 0 0 0 0 0 0\n"
	    "   8       1 sda1 999 0 0 999 999 0 0 999 0 0 0 0\n"
	    "   7       0 loop0 999 0 0 999 999 0 0 999 0 0 0 0\n",
	    10 * k, 50 * k, 20 * k, 400 * k);
	put("sys/block/sda/size", "1\n");
	put("sys/block/loop0/size", "1\n");
	put("proc/meminfo", "MemTotal:       1000 kB\nMemFree:  1 kB\nMemAvailable:    %lu kB\n",
	    k > 1 ? 250ul : 500ul);
	put("proc/vmstat", "nr_free_pages 1\npgmajfault %lu\npgfault 1\n", 6 * k);
	put("sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "2000000\n");
	put("sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", "1000000\n");
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/hostsig-XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static struct hostsig *open_tree(void)
{
	char proc[128], sys[128];
	struct hostsig *h;

	snprintf(proc, sizeof(proc), "%s/proc", root);
	snprintf(sys, sizeof(sys), "%s/sys", root);
	assert_int_equal(hostsig_open(&(struct hostsig_options){ proc, sys }, &h), 0);
	return h;
}

#define KNOWN(w, s, v) do { double want_ = (v); assert_true((w).known[s]); \
	if (fabs((w).value[s] - want_) > 1e-9 * (1 + fabs(want_))) \
		fail_msg("%s = %g, want %g", sysom_host_signal_name(s), (w).value[s], want_); \
	} while (0)

static void test_rates_and_levels(void **state)
{
	struct hostsig *h;
	struct hostsig_window w;

	(void)state;
	write_tree(1, 10);
	h = open_tree();
	hostsig_collect(h, 1000000000ull, &w);
	/* First collect: levels only. */
	KNOWN(w, SYSOM_HOST_CPU_MHZ, 1500);
	KNOWN(w, SYSOM_HOST_CPU_MHZ_MIN, 1000);
	KNOWN(w, SYSOM_HOST_PSI_CPU_SOME_AVG10, 1.5);
	KNOWN(w, SYSOM_HOST_PSI_IO_FULL_AVG10, 1.0);
	KNOWN(w, SYSOM_HOST_MEM_AVAILABLE_SHARE, 0.5);
	KNOWN(w, SYSOM_HOST_MEM_AVAILABLE, 500 * 1024.0);
	KNOWN(w, SYSOM_HOST_PROCS_BLOCKED, 2);
	assert_false(w.known[SYSOM_HOST_TCP_RETRANS_SEGS]);
	assert_false(w.known[SYSOM_HOST_CPU_BUSY]);
	assert_int_equal(w.files_missing, 0);
	assert_int_equal(w.parse_errors, 0);

	write_tree(3, 110); /* 2 s later */
	hostsig_collect(h, 3000000000ull, &w);
	assert_int_equal(w.parse_errors, 0);
	KNOWN(w, SYSOM_HOST_TCP_RETRANS_SEGS, 50);     /* 100 in 2 s */
	KNOWN(w, SYSOM_HOST_TCP_OUT_SEGS, 1000);
	KNOWN(w, SYSOM_HOST_TCP_IN_ERRS, 2);
	KNOWN(w, SYSOM_HOST_TCP_LOST_RETRANSMIT, 3);
	KNOWN(w, SYSOM_HOST_TCP_TIMEOUTS, 4);
	KNOWN(w, SYSOM_HOST_NET_RX_ERRS, 1);           /* lo's 999 not counted */
	KNOWN(w, SYSOM_HOST_NET_RX_DROPS, 2);
	KNOWN(w, SYSOM_HOST_NET_TX_ERRS, 3);
	KNOWN(w, SYSOM_HOST_NET_TX_DROPS, 4);
	KNOWN(w, SYSOM_HOST_SOFTIRQ_NET_RX, 400);      /* (100 + 300) * 2 / 2 s */
	KNOWN(w, SYSOM_HOST_SOFTIRQ_NET_TX, 20);
	KNOWN(w, SYSOM_HOST_SOFTIRQ_TOTAL, 420);       /* HI did not change */
	KNOWN(w, SYSOM_HOST_CONTEXT_SWITCHES, 1000);
	/* cpu: user 200, system 200, idle 1400, iowait 100, steal 100 of 2000. */
	KNOWN(w, SYSOM_HOST_CPU_BUSY, 500.0 / 2000);
	KNOWN(w, SYSOM_HOST_CPU_IOWAIT, 100.0 / 2000);
	KNOWN(w, SYSOM_HOST_CPU_STEAL, 100.0 / 2000);
	KNOWN(w, SYSOM_HOST_PSI_CPU_SOME, 400000.0 / 2e6); /* 0.4 s of 2 s stalled */
	KNOWN(w, SYSOM_HOST_PSI_CPU_FULL, 0);
	KNOWN(w, SYSOM_HOST_PSI_IO_SOME, 2000.0 / 2e6);
	KNOWN(w, SYSOM_HOST_PSI_IO_FULL, 1000.0 / 2e6);
	/* sda only: 20 reads in 2 s taking 100 ms, 40 writes taking 800 ms. */
	KNOWN(w, SYSOM_HOST_DISK_READ_IOPS, 10);
	KNOWN(w, SYSOM_HOST_DISK_WRITE_IOPS, 20);
	KNOWN(w, SYSOM_HOST_DISK_READ_MS, 5);
	KNOWN(w, SYSOM_HOST_DISK_WRITE_MS, 20);
	KNOWN(w, SYSOM_HOST_MEM_AVAILABLE_SHARE, 0.25);
	KNOWN(w, SYSOM_HOST_PGMAJFAULT, 6);
	assert_int_equal(w.nknown, SYSOM_HOST_SIGNAL_MAX);

	/* No disk I/O in a window: latency unknown, IOPS 0. Counters going back: unknown. */
	write_tree(3, 5);
	hostsig_collect(h, 4000000000ull, &w);
	KNOWN(w, SYSOM_HOST_DISK_READ_IOPS, 0);
	assert_false(w.known[SYSOM_HOST_DISK_READ_MS]);
	assert_false(w.known[SYSOM_HOST_TCP_RETRANS_SEGS]);
	KNOWN(w, SYSOM_HOST_TCP_OUT_SEGS, 0);
	/* The same time again: no rates (no division by zero). */
	hostsig_collect(h, 4000000000ull, &w);
	assert_false(w.known[SYSOM_HOST_TCP_OUT_SEGS]);
	KNOWN(w, SYSOM_HOST_CPU_MHZ, 1500);
	hostsig_close(h);
}

/* A VM-like tree: no cpufreq, no PSI, no /sys/block; malformed files are errors, not crashes. */
static void test_missing_and_malformed(void **state)
{
	struct hostsig *h;
	struct hostsig_window w;
	char cmd[160];

	(void)state;
	write_tree(1, 1);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/sys' '%s/proc/pressure'", root, root);
	assert_int_equal(system(cmd), 0);
	put("proc/net/snmp", "Tcp: OutSegs RetransSegs\nTcp: 12x 3\n");
	put("proc/net/dev", "garbage: 1 2 3\n");
	put("proc/stat", "cpu  1 2\nctxt many\n");
	put("proc/meminfo", "MemTotal: 0 kB\nMemAvailable: 0 kB\n");
	char big[8192];
	memset(big, '9', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	put("proc/vmstat", "pgmajfault %s\n", big); /* overflows u64 */
	h = open_tree();
	hostsig_collect(h, 1, &w);
	hostsig_collect(h, 1000000001ull, &w);
	assert_false(w.known[SYSOM_HOST_CPU_MHZ]);
	assert_false(w.known[SYSOM_HOST_PSI_CPU_SOME_AVG10]);
	assert_false(w.known[SYSOM_HOST_TCP_RETRANS_SEGS]);
	assert_false(w.known[SYSOM_HOST_NET_RX_DROPS]);
	assert_false(w.known[SYSOM_HOST_CPU_BUSY]);
	assert_false(w.known[SYSOM_HOST_CONTEXT_SWITCHES]);
	assert_false(w.known[SYSOM_HOST_MEM_AVAILABLE_SHARE]);
	assert_false(w.known[SYSOM_HOST_PGMAJFAULT]);
	assert_true(w.known[SYSOM_HOST_SOFTIRQ_NET_RX]); /* well-formed files still count */
	/* Without /sys/block, whole disks are guessed: sda and sda1 both counted, loop not. */
	KNOWN(w, SYSOM_HOST_DISK_READ_IOPS, 0);
	assert_int_equal(w.files_missing, 4); /* 3 PSI files and cpufreq */
	assert_int_equal(w.parse_errors, 5);  /* stat, snmp, dev, meminfo, vmstat */
	hostsig_close(h);

	/* A root that does not exist: everything unknown, nothing crashes. */
	assert_int_equal(hostsig_open(&(struct hostsig_options){ "/nonexistent/p", "/nonexistent/s" },
				      &h), 0);
	hostsig_collect(h, 1, &w);
	hostsig_collect(h, 2, &w);
	assert_int_equal(w.nknown, 0);
	assert_true(w.files_missing >= 10);
	hostsig_close(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rates_and_levels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_and_malformed, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
