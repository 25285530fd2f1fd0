/* SPDX-License-Identifier: Apache-2.0 */
/* Host signals from /proc and /sys (agent/os/hostsig.h). */
#include "agent/os/hostsig.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PSI_CPU 0
#define PSI_MEM 1
#define PSI_IO 2

/* Raw cumulative readings of one collect; `ok` flags say which parts were read. */
struct raw {
	bool stat_ok, blocked_ok, ctxt_ok;
	uint64_t cpu[8]; /* user nice system idle iowait irq softirq steal */
	uint64_t ctxt, procs_blocked;
	bool softirq_ok;
	uint64_t net_rx, net_tx, softirq_total;
	struct psi {
		bool some_ok, full_ok;
		double some_avg10, full_avg10;
		uint64_t some_total, full_total; /* microseconds */
	} psi[3];
	bool snmp_ok;
	uint64_t out_segs, retrans_segs, in_errs;
	bool lost_ok, timeouts_ok;
	uint64_t lost_retransmit, timeouts;
	bool netdev_ok;
	uint64_t rx_drop, tx_drop, rx_err, tx_err;
	bool disk_ok;
	uint64_t rd_ios, rd_ms, wr_ios, wr_ms;
	bool mem_ok;
	uint64_t mem_total_kb, mem_avail_kb;
	bool vm_ok;
	uint64_t pgmajfault;
	bool freq_ok;
	double freq_mean_mhz, freq_min_mhz;
};

struct hostsig {
	char proc[PATH_MAX / 2], sys[PATH_MAX / 2];
	char *buf; /* HOSTSIG_FILE_MAX + 1 */
	struct raw prev;
	uint64_t prev_ns;
	bool have_prev;
};

int hostsig_open(const struct hostsig_options *o, struct hostsig **out)
{
	const char *proc = o && o->proc_root ? o->proc_root : "/proc";
	const char *sys = o && o->sys_root ? o->sys_root : "/sys";
	struct hostsig *h;

	*out = NULL;
	if (strlen(proc) >= sizeof(h->proc) || strlen(sys) >= sizeof(h->sys))
		return -EINVAL;
	if (!(h = calloc(1, sizeof(*h))) || !(h->buf = malloc(HOSTSIG_FILE_MAX + 1))) {
		free(h);
		return -ENOMEM;
	}
	snprintf(h->proc, sizeof(h->proc), "%s", proc);
	snprintf(h->sys, sizeof(h->sys), "%s", sys);
	*out = h;
	return 0;
}

void hostsig_close(struct hostsig *h)
{
	if (!h)
		return;
	free(h->buf);
	free(h);
}

/* Reads root/rel into h->buf (NUL-terminated, at most HOSTSIG_FILE_MAX bytes). Returns the
 * length, or -errno (counted as missing). */
static ssize_t read_file(struct hostsig *h, const char *root, const char *rel,
			 struct hostsig_window *w)
{
	char path[PATH_MAX];
	size_t len = 0;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", root, rel) >= sizeof(path)) {
		w->files_missing++;
		return -ENAMETOOLONG;
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		w->files_missing++;
		return -errno;
	}
	while (len < HOSTSIG_FILE_MAX) {
		ssize_t n = read(fd, h->buf + len, HOSTSIG_FILE_MAX - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;
			close(fd);
			w->files_missing++;
			return err;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	h->buf[len] = '\0';
	return (ssize_t)len;
}

/* The next line of *pos (NUL-terminated in place), NULL at the end. */
static char *next_line(char **pos)
{
	char *s = *pos, *nl;

	if (!s || !*s)
		return NULL;
	if ((nl = strchr(s, '\n'))) {
		*nl = '\0';
		*pos = nl + 1;
	} else {
		*pos = s + strlen(s);
	}
	return s;
}

/* A decimal u64 at *p (leading blanks skipped); advances *p. False when none. */
static bool parse_u64(const char **p, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	while (*s == ' ' || *s == '\t')
		s++;
	if (*s < '0' || *s > '9')
		return false;
	while (*s >= '0' && *s <= '9') {
		unsigned d = (unsigned)(*s++ - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*p = s;
	*out = v;
	return true;
}

static void read_stat(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char *pos, *line;
	bool bad = false;

	if (read_file(h, h->proc, "stat", w) < 0)
		return;
	pos = h->buf;
	while ((line = next_line(&pos))) {
		const char *p;
		if (!strncmp(line, "cpu ", 4)) {
			p = line + 4;
			int n = 0;
			while (n < 8 && parse_u64(&p, &r->cpu[n]))
				n++;
			/* Kernels before 2.6.11 have no steal column: 7 is enough. */
			r->stat_ok = n >= 7;
			bad |= n < 7;
		} else if (!strncmp(line, "ctxt ", 5)) {
			p = line + 5;
			r->ctxt_ok = parse_u64(&p, &r->ctxt);
			bad |= !r->ctxt_ok;
		} else if (!strncmp(line, "procs_blocked ", 14)) {
			p = line + 14;
			r->blocked_ok = parse_u64(&p, &r->procs_blocked);
			bad |= !r->blocked_ok;
		}
	}
	if (bad || !r->stat_ok)
		w->parse_errors++;
}

static void read_softirqs(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char *pos, *line;
	bool rx = false, tx = false;

	if (read_file(h, h->proc, "softirqs", w) < 0)
		return;
	pos = h->buf;
	next_line(&pos); /* "CPU0 CPU1 ..." */
	while ((line = next_line(&pos))) {
		char *colon = strchr(line, ':');
		const char *p;
		uint64_t sum = 0, v;
		if (!colon)
			continue;
		*colon = '\0';
		p = colon + 1;
		while (parse_u64(&p, &v))
			sum += v;
		const char *name = line;
		while (*name == ' ')
			name++;
		r->softirq_total += sum;
		if (!strcmp(name, "NET_RX")) {
			r->net_rx = sum;
			rx = true;
		} else if (!strcmp(name, "NET_TX")) {
			r->net_tx = sum;
			tx = true;
		}
	}
	r->softirq_ok = rx && tx;
	if (!r->softirq_ok)
		w->parse_errors++;
}

/* "some avg10=0.12 avg60=0.05 avg300=0.01 total=12345" */
static bool parse_psi_line(const char *line, double *avg10, uint64_t *total)
{
	const char *a = strstr(line, "avg10="), *t = strstr(line, "total=");
	char *end;

	if (!a || !t)
		return false;
	*avg10 = strtod(a + 6, &end);
	if (end == a + 6 || !isfinite(*avg10) || *avg10 < 0)
		return false;
	t += 6;
	return parse_u64(&t, total);
}

static void read_psi(struct hostsig *h, int which, struct raw *r, struct hostsig_window *w)
{
	static const char *const files[] = { "pressure/cpu", "pressure/memory", "pressure/io" };
	struct psi *s = &r->psi[which];
	char *pos, *line;

	if (read_file(h, h->proc, files[which], w) < 0)
		return;
	pos = h->buf;
	while ((line = next_line(&pos))) {
		if (!strncmp(line, "some ", 5))
			s->some_ok = parse_psi_line(line, &s->some_avg10, &s->some_total);
		else if (!strncmp(line, "full ", 5))
			s->full_ok = parse_psi_line(line, &s->full_avg10, &s->full_total);
	}
	if (!s->some_ok) /* "full" is absent for cpu before 5.13 */
		w->parse_errors++;
}

/*
 * /proc/net/snmp and /proc/net/netstat: pairs of lines "Prefix: Name1 Name2 ..." and
 * "Prefix: v1 v2 ...". Finds `names[i]` of `prefix` into out[i], found[i].
 */
static bool find_pair_fields(char *text, const char *prefix, const char *const *names,
			     uint64_t *out, bool *found, int n)
{
	size_t plen = strlen(prefix);
	char *pos = text, *line, *header = NULL;
	bool any = false;

	while ((line = next_line(&pos))) {
		if (strncmp(line, prefix, plen) || line[plen] != ':')
			continue;
		if (!header) {
			header = line;
			continue;
		}
		/* header and values: walk both */
		char *hsave = NULL, *vsave = NULL;
		char *hn = strtok_r(header + plen + 1, " \t", &hsave);
		char *vn = strtok_r(line + plen + 1, " \t", &vsave);
		while (hn && vn) {
			for (int i = 0; i < n; i++) {
				const char *p = vn;
				if (!found[i] && !strcmp(hn, names[i]) && parse_u64(&p, &out[i]) &&
				    *p == '\0')
					found[i] = any = true;
			}
			hn = strtok_r(NULL, " \t", &hsave);
			vn = strtok_r(NULL, " \t", &vsave);
		}
		header = NULL;
	}
	return any;
}

static void read_snmp(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	static const char *const tcp[] = { "OutSegs", "RetransSegs", "InErrs" };
	static const char *const ext[] = { "TCPLostRetransmit", "TCPTimeouts" };
	uint64_t v[3] = { 0 };
	bool f[3] = { false };

	if (read_file(h, h->proc, "net/snmp", w) >= 0) {
		find_pair_fields(h->buf, "Tcp", tcp, v, f, 3);
		r->snmp_ok = f[0] && f[1] && f[2];
		r->out_segs = v[0];
		r->retrans_segs = v[1];
		r->in_errs = v[2];
		if (!r->snmp_ok)
			w->parse_errors++;
	}
	memset(f, 0, sizeof(f));
	if (read_file(h, h->proc, "net/netstat", w) >= 0) {
		if (!find_pair_fields(h->buf, "TcpExt", ext, v, f, 2))
			w->parse_errors++;
		r->lost_ok = f[0];
		r->lost_retransmit = v[0];
		r->timeouts_ok = f[1];
		r->timeouts = v[1];
	}
}

static void read_netdev(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char *pos, *line;
	int devices = 0;
	bool bad = false;

	if (read_file(h, h->proc, "net/dev", w) < 0)
		return;
	pos = h->buf;
	while ((line = next_line(&pos))) {
		char *colon = strchr(line, ':');
		uint64_t f[12];
		int n = 0;
		if (!colon || strchr(line, '|'))
			continue; /* the two header lines */
		*colon = '\0';
		const char *name = line, *p = colon + 1;
		while (*name == ' ')
			name++;
		while (n < 12 && parse_u64(&p, &f[n]))
			n++;
		if (n < 12) {
			bad = true;
			continue;
		}
		devices++;
		if (!strcmp(name, "lo"))
			continue;
		r->rx_err += f[2];
		r->rx_drop += f[3];
		r->tx_err += f[10];
		r->tx_drop += f[11];
	}
	r->netdev_ok = devices > 0 && !bad;
	if (!r->netdev_ok)
		w->parse_errors++;
}

/* Whether block device `name` is a whole disk worth counting. */
static bool whole_disk(const struct hostsig *h, const char *name, bool sys_block)
{
	char path[PATH_MAX];

	if (!strncmp(name, "loop", 4) || !strncmp(name, "ram", 3) || !strncmp(name, "zram", 4))
		return false;
	if (!sys_block)
		return true;
	if ((size_t)snprintf(path, sizeof(path), "%s/block/%s", h->sys, name) >= sizeof(path))
		return false;
	return access(path, F_OK) == 0;
}

static void read_diskstats(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char path[PATH_MAX], *pos, *line;
	bool sys_block, bad = false;

	snprintf(path, sizeof(path), "%s/block", h->sys);
	sys_block = access(path, F_OK) == 0;
	if (read_file(h, h->proc, "diskstats", w) < 0)
		return;
	pos = h->buf;
	while ((line = next_line(&pos))) {
		const char *p = line;
		uint64_t major, minor, f[8];
		char name[64];
		int n = 0;
		if (!parse_u64(&p, &major) || !parse_u64(&p, &minor)) {
			bad |= *line != '\0';
			continue;
		}
		while (*p == ' ')
			p++;
		size_t len = strcspn(p, " \t");
		if (!len || len >= sizeof(name)) {
			bad = true;
			continue;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		p += len;
		while (n < 8 && parse_u64(&p, &f[n]))
			n++;
		if (n < 8) {
			bad = true;
			continue;
		}
		if (!whole_disk(h, name, sys_block))
			continue;
		r->rd_ios += f[0];
		r->rd_ms += f[3];
		r->wr_ios += f[4];
		r->wr_ms += f[7];
	}
	r->disk_ok = !bad;
	if (bad)
		w->parse_errors++;
}

static void read_meminfo(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char *pos, *line;
	bool total = false, avail = false;

	if (read_file(h, h->proc, "meminfo", w) < 0)
		return;
	pos = h->buf;
	while ((line = next_line(&pos))) {
		const char *p;
		if (!strncmp(line, "MemTotal:", 9)) {
			p = line + 9;
			total = parse_u64(&p, &r->mem_total_kb);
		} else if (!strncmp(line, "MemAvailable:", 13)) {
			p = line + 13;
			avail = parse_u64(&p, &r->mem_avail_kb);
		}
	}
	r->mem_ok = total && avail && r->mem_total_kb > 0;
	if (!r->mem_ok)
		w->parse_errors++;
}

static void read_vmstat(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char *pos, *line;

	if (read_file(h, h->proc, "vmstat", w) < 0)
		return;
	pos = h->buf;
	while ((line = next_line(&pos))) {
		if (!strncmp(line, "pgmajfault ", 11)) {
			const char *p = line + 11;
			r->vm_ok = parse_u64(&p, &r->pgmajfault);
		}
	}
	if (!r->vm_ok)
		w->parse_errors++;
}

static void read_cpufreq(struct hostsig *h, struct raw *r, struct hostsig_window *w)
{
	char pattern[PATH_MAX];
	glob_t g;
	double sum = 0, min = INFINITY;
	uint32_t n = 0;

	if ((size_t)snprintf(pattern, sizeof(pattern),
			     "%s/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq",
			     h->sys) >= sizeof(pattern))
		return;
	if (glob(pattern, GLOB_NOSORT, NULL, &g)) {
		w->files_missing++; /* a VM: no cpufreq */
		return;
	}
	for (size_t i = 0; i < g.gl_pathc && i < HOSTSIG_MAX_CPUS; i++) {
		const char *p;
		uint64_t khz;
		ssize_t len = read_file(h, "", g.gl_pathv[i], w);
		if (len < 0)
			continue;
		p = h->buf;
		if (!parse_u64(&p, &khz) || khz == 0) {
			w->parse_errors++;
			continue;
		}
		double mhz = (double)khz / 1000.0;
		sum += mhz;
		min = mhz < min ? mhz : min;
		n++;
	}
	globfree(&g);
	if (n) {
		r->freq_ok = true;
		r->freq_mean_mhz = sum / n;
		r->freq_min_mhz = min;
	}
}

static void set(struct hostsig_window *w, uint16_t s, double v)
{
	if (!isfinite(v) || v < 0)
		return;
	w->value[s] = v;
	w->known[s] = true;
}

/* Rate per second of a cumulative counter; unknown when it went backwards. */
static void rate(struct hostsig_window *w, uint16_t s, uint64_t prev, uint64_t cur, double dt)
{
	if (cur >= prev && dt > 0)
		set(w, s, (double)(cur - prev) / dt);
}

void hostsig_collect(struct hostsig *h, uint64_t now_ns, struct hostsig_window *w)
{
	struct raw r = { 0 };
	const struct raw *p = &h->prev;
	double dt = 0;
	bool rates;

	memset(w, 0, sizeof(*w));
	read_stat(h, &r, w);
	read_softirqs(h, &r, w);
	for (int i = 0; i < 3; i++)
		read_psi(h, i, &r, w);
	read_snmp(h, &r, w);
	read_netdev(h, &r, w);
	read_diskstats(h, &r, w);
	read_meminfo(h, &r, w);
	read_vmstat(h, &r, w);
	read_cpufreq(h, &r, w);

	rates = h->have_prev && now_ns > h->prev_ns;
	if (rates)
		dt = (double)(now_ns - h->prev_ns) / 1e9;

	/* Levels. */
	if (r.freq_ok) {
		set(w, SYSOM_HOST_CPU_MHZ, r.freq_mean_mhz);
		set(w, SYSOM_HOST_CPU_MHZ_MIN, r.freq_min_mhz);
	}
	if (r.blocked_ok)
		set(w, SYSOM_HOST_PROCS_BLOCKED, (double)r.procs_blocked);
	if (r.mem_ok) {
		set(w, SYSOM_HOST_MEM_AVAILABLE, (double)r.mem_avail_kb * 1024.0);
		set(w, SYSOM_HOST_MEM_AVAILABLE_SHARE,
		    (double)r.mem_avail_kb / (double)r.mem_total_kb);
	}
	for (int i = 0; i < 3; i++) {
		static const uint16_t base[3] = { SYSOM_HOST_PSI_CPU_SOME_AVG10,
						  SYSOM_HOST_PSI_MEM_SOME_AVG10,
						  SYSOM_HOST_PSI_IO_SOME_AVG10 };
		const struct psi *c = &r.psi[i], *q = &p->psi[i];
		if (c->some_ok)
			set(w, base[i], c->some_avg10);
		if (c->full_ok)
			set(w, (uint16_t)(base[i] + 2), c->full_avg10);
		if (!rates)
			continue;
		/* Stalled microseconds per microsecond of the window. */
		if (c->some_ok && q->some_ok && c->some_total >= q->some_total)
			set(w, (uint16_t)(base[i] + 1), (double)(c->some_total - q->some_total) /
							 (dt * 1e6));
		if (c->full_ok && q->full_ok && c->full_total >= q->full_total)
			set(w, (uint16_t)(base[i] + 3), (double)(c->full_total - q->full_total) /
							 (dt * 1e6));
	}

	/* Deltas. */
	if (rates) {
		if (r.stat_ok && p->stat_ok) {
			uint64_t d[8], total = 0;
			bool back = false;
			for (int i = 0; i < 8; i++) {
				back |= r.cpu[i] < p->cpu[i];
				d[i] = r.cpu[i] - p->cpu[i];
				total += d[i];
			}
			if (!back && total) {
				set(w, SYSOM_HOST_CPU_BUSY,
				    (double)(total - d[3] - d[4]) / (double)total);
				set(w, SYSOM_HOST_CPU_IOWAIT, (double)d[4] / (double)total);
				set(w, SYSOM_HOST_CPU_STEAL, (double)d[7] / (double)total);
			}
		}
		if (r.ctxt_ok && p->ctxt_ok)
			rate(w, SYSOM_HOST_CONTEXT_SWITCHES, p->ctxt, r.ctxt, dt);
		if (r.softirq_ok && p->softirq_ok) {
			rate(w, SYSOM_HOST_SOFTIRQ_NET_RX, p->net_rx, r.net_rx, dt);
			rate(w, SYSOM_HOST_SOFTIRQ_NET_TX, p->net_tx, r.net_tx, dt);
			rate(w, SYSOM_HOST_SOFTIRQ_TOTAL, p->softirq_total, r.softirq_total, dt);
		}
		if (r.snmp_ok && p->snmp_ok) {
			rate(w, SYSOM_HOST_TCP_OUT_SEGS, p->out_segs, r.out_segs, dt);
			rate(w, SYSOM_HOST_TCP_RETRANS_SEGS, p->retrans_segs, r.retrans_segs, dt);
			rate(w, SYSOM_HOST_TCP_IN_ERRS, p->in_errs, r.in_errs, dt);
		}
		if (r.lost_ok && p->lost_ok)
			rate(w, SYSOM_HOST_TCP_LOST_RETRANSMIT, p->lost_retransmit,
			     r.lost_retransmit, dt);
		if (r.timeouts_ok && p->timeouts_ok)
			rate(w, SYSOM_HOST_TCP_TIMEOUTS, p->timeouts, r.timeouts, dt);
		if (r.netdev_ok && p->netdev_ok) {
			rate(w, SYSOM_HOST_NET_RX_DROPS, p->rx_drop, r.rx_drop, dt);
			rate(w, SYSOM_HOST_NET_TX_DROPS, p->tx_drop, r.tx_drop, dt);
			rate(w, SYSOM_HOST_NET_RX_ERRS, p->rx_err, r.rx_err, dt);
			rate(w, SYSOM_HOST_NET_TX_ERRS, p->tx_err, r.tx_err, dt);
		}
		if (r.disk_ok && p->disk_ok && r.rd_ios >= p->rd_ios && r.wr_ios >= p->wr_ios &&
		    r.rd_ms >= p->rd_ms && r.wr_ms >= p->wr_ms) {
			uint64_t rd = r.rd_ios - p->rd_ios, wr = r.wr_ios - p->wr_ios;
			set(w, SYSOM_HOST_DISK_READ_IOPS, (double)rd / dt);
			set(w, SYSOM_HOST_DISK_WRITE_IOPS, (double)wr / dt);
			if (rd)
				set(w, SYSOM_HOST_DISK_READ_MS, (double)(r.rd_ms - p->rd_ms) / rd);
			if (wr)
				set(w, SYSOM_HOST_DISK_WRITE_MS, (double)(r.wr_ms - p->wr_ms) / wr);
		}
		if (r.vm_ok && p->vm_ok)
			rate(w, SYSOM_HOST_PGMAJFAULT, p->pgmajfault, r.pgmajfault, dt);
	}
	for (int s = 1; s <= SYSOM_HOST_SIGNAL_MAX; s++)
		w->nknown += w->known[s];
	h->prev = r;
	h->prev_ns = now_ns;
	h->have_prev = true;
}
