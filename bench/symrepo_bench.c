/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol repository benchmarks: lookups per second from mapped symbol files against baselines,
 * open+lookup cost and memory at 1,000 vs 170,000 Build IDs, writer time and peak memory. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/elf_buildid.h"
#include "common/error.h"
#include "symrepo/repo.h"

#define MAX_FRAMES 16
#define MAX_SEGMENTS 64
#define MAX_JOBS 64
#define NAME_MAX_LEN 96

/* ------------------------------------------------------------------------------------------ */
/* Small helpers */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: deterministic pseudo-random numbers (the same in every process). */
static uint64_t mix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A value of /proc/self/status in KiB ("VmRSS", "VmHWM", "RssAnon", ...), or 0. */
static uint64_t status_kib(const char *key)
{
	char line[256];
	size_t n = strlen(key);
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtoull(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int remove_tree(const char *dir)
{
	char cmd[4400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

/* ------------------------------------------------------------------------------------------ */
/* (1) lookups per second over a real library */

struct elf_func {
	uint64_t start, size;
};

struct elf_table {
	struct elf_func *funcs;   /* in symbol table order (what a naive scan walks) */
	struct elf_func *sorted;  /* by start (a binary-search baseline) */
	size_t n;
	struct { uint64_t off, vaddr, size; } seg[MAX_SEGMENTS];
	unsigned nseg;
	uint64_t lo, hi;          /* the span of the functions */
	bool from_symtab;
};

static int func_cmp(const void *a, const void *b)
{
	const struct elf_func *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Function symbols of `path` (.symtab when present, else .dynsym) and executable PT_LOADs. */
static int elf_table_read(const char *path, struct elf_table *t)
{
	Elf *e = NULL;
	Elf_Scn *scn = NULL, *dyn = NULL, *sym = NULL;
	Elf_Data *d;
	GElf_Shdr sh;
	size_t nph, count;
	int fd, rc = -1;

	memset(t, 0, sizeof(*t));
	elf_version(EV_CURRENT);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e || elf_getphdrnum(e, &nph))
		goto cleanup;
	for (size_t i = 0; i < nph && t->nseg < MAX_SEGMENTS; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
			t->seg[t->nseg].off = ph.p_offset;
			t->seg[t->nseg].vaddr = ph.p_vaddr;
			t->seg[t->nseg++].size = ph.p_filesz;
		}
	}
	while ((scn = elf_nextscn(e, scn)) != NULL) {
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB)
			sym = scn;
		else if (sh.sh_type == SHT_DYNSYM)
			dyn = scn;
	}
	t->from_symtab = sym != NULL;
	scn = sym ? sym : dyn;
	if (!scn || !gelf_getshdr(scn, &sh) || !sh.sh_entsize)
		goto cleanup;
	d = elf_getdata(scn, NULL);
	count = sh.sh_size / sh.sh_entsize;

	t->funcs = calloc(count ? count : 1, sizeof(*t->funcs));
	if (!d || !t->funcs)
		goto cleanup;
	t->lo = UINT64_MAX;
	for (size_t i = 0; i < count; i++) {
		GElf_Sym s;

		if (!gelf_getsym(d, (int)i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC ||
		    s.st_shndx == SHN_UNDEF || !s.st_size)
			continue;
		t->funcs[t->n].start = s.st_value;
		t->funcs[t->n++].size = s.st_size;
		if (s.st_value < t->lo)
			t->lo = s.st_value;
		if (s.st_value + s.st_size > t->hi)
			t->hi = s.st_value + s.st_size;
	}
	t->sorted = malloc((t->n ? t->n : 1) * sizeof(*t->sorted));
	if (!t->sorted || !t->n)
		goto cleanup;
	memcpy(t->sorted, t->funcs, t->n * sizeof(*t->sorted));
	qsort(t->sorted, t->n, sizeof(*t->sorted), func_cmp);
	rc = 0;
cleanup:
	if (e)
		elf_end(e);
	close(fd);
	return rc;
}

static bool table_vaddr(const struct elf_table *t, uint64_t off, uint64_t *v)
{
	for (unsigned i = 0; i < t->nseg; i++) {
		if (off >= t->seg[i].off && off - t->seg[i].off < t->seg[i].size) {
			*v = off - t->seg[i].off + t->seg[i].vaddr;
			return true;
		}
	}
	return false;
}

static bool table_offset(const struct elf_table *t, uint64_t v, uint64_t *off)
{
	for (unsigned i = 0; i < t->nseg; i++) {
		if (v >= t->seg[i].vaddr && v - t->seg[i].vaddr < t->seg[i].size) {
			*off = v - t->seg[i].vaddr + t->seg[i].off;
			return true;
		}
	}
	return false;
}

/* Binary search over the sorted in-memory table (what the file format's search costs without
 * the file: a lower bound for the function-only part of a lookup). */
static const struct elf_func *bsearch_lookup(const struct elf_table *t, uint64_t off)
{
	size_t lo = 0, hi = t->n;
	uint64_t v;

	if (!table_vaddr(t, off, &v))
		return NULL;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->sorted[mid].start <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo && v - t->sorted[lo - 1].start < t->sorted[lo - 1].size)
		return &t->sorted[lo - 1];
	return NULL;
}

/* Keeps the compiler from dropping the measured loops. */
static volatile uint64_t bench_sink;

/* Naive baseline: every symbol checked, first containing one wins. */
static const struct elf_func *linear_lookup(const struct elf_table *t, uint64_t off)
{
	uint64_t v;

	if (!table_vaddr(t, off, &v))
		return NULL;
	for (size_t i = 0; i < t->n; i++)
		if (v - t->funcs[i].start < t->funcs[i].size)
			return &t->funcs[i];
	return NULL;
}

static int run_addr2line(const char *lib, const uint64_t *vaddrs, size_t n, double *seconds)
{
	char path[] = "/tmp/h-repo-bench-a2l-XXXXXX", cmd[4400];
	double t0;
	FILE *f;
	int fd, rc;

	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "0x%" PRIx64 "\n", vaddrs[i]);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "addr2line -f -C -i -e '%s' < '%s' > /dev/null", lib, path);
	t0 = now_s();
	rc = system(cmd);
	*seconds = now_s() - t0;
	unlink(path);
	return rc == 0 ? 0 : -EIO;
}

static int bench_lookup_one(const char *lib, double seconds, size_t a2l_count)
{
	char dir[] = "/tmp/h-repo-bench-lookup-XXXXXX", sym[4200], err[512];
	struct symfile_write_options wo = { 0 };
	struct symfile_write_stats ws = { 0 };
	struct symfile_frame fr[MAX_FRAMES];
	struct symfile_info info;
	struct symfile *f = NULL;
	struct elf_table t;
	uint64_t *offs = NULL, *vaddrs = NULL, seed = 42, sink = 0, agree = 0, hits = 0;
	size_t n = 1u << 20, lookups = 0, lin_lookups = 0, bs_lookups = 0;
	double c0, sym_cpu, lin_cpu, bs_cpu, a2l_s = 0, sym_rate, lin_rate, bs_rate, a2l_rate;
	bool made_dir = false;
	int rc = 1;

	if (elf_table_read(lib, &t)) {
		fprintf(stderr, "%s: cannot read its function symbols\n", lib);
		goto cleanup;
	}
	if (!mkdtemp(dir))
		goto cleanup;
	made_dir = true;
	snprintf(sym, sizeof(sym), "%s/lib.sym", dir);
	wo.executable_path = lib;
	wo.inline_frames = true;
	wo.line_table = true;
	if (symfile_write(&wo, sym, &ws, err, sizeof(err)) || symfile_open(sym, &f, NULL)) {
		fprintf(stderr, "%s: symfile_write: %s\n", lib, err);
		goto cleanup;
	}
	symfile_info_get(f, &info);
	/* Random file offsets over the span of the library's functions (gaps included). */
	offs = malloc(n * sizeof(*offs));
	vaddrs = malloc(n * sizeof(*vaddrs));
	if (!offs || !vaddrs || t.hi <= t.lo) {
		fprintf(stderr, "%s: out of memory or no function span\n", lib);
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t v;

		do {
			v = t.lo + mix64(&seed) % (t.hi - t.lo);
		} while (!table_offset(&t, v, &offs[i]));
		vaddrs[i] = v;
	}
	/* Agreement with the ELF table where it names a function (a sanity check of the run). */
	for (size_t i = 0; i < 100000; i++) {
		const struct elf_func *b = linear_lookup(&t, offs[i]);
		uint64_t v;
		int k;

		if (!b || symfile_offset_to_vaddr(f, offs[i], &v))
			continue;
		hits++;
		k = symfile_lookup(f, v, fr, MAX_FRAMES);
		if (k > 0 && v >= fr[k - 1].function_start &&
		    v - fr[k - 1].function_start < fr[k - 1].function_size)
			agree++;
	}
	/* symfile: offset → vaddr → frames, single thread, CPU time of this thread. */
	c0 = cpu_s();
	do {
		for (size_t i = 0; i < 65536; i++, lookups++) {
			uint64_t v;
			size_t j = lookups & (n - 1);

			if (symfile_offset_to_vaddr(f, offs[j], &v) == 0)
				sink += (uint64_t)symfile_lookup(f, v, fr, MAX_FRAMES);
		}
	} while (cpu_s() - c0 < seconds);
	sym_cpu = cpu_s() - c0;
	/* Baseline: a naive linear scan over the same function table, same offsets. */
	c0 = cpu_s();
	do {
		for (size_t i = 0; i < 256; i++, lin_lookups++) {
			const struct elf_func *b = linear_lookup(&t, offs[lin_lookups & (n - 1)]);

			sink += b ? b->start : 0;
		}
	} while (cpu_s() - c0 < seconds);
	lin_cpu = cpu_s() - c0;
	/* Reference: binary search in a sorted in-memory array (function only, no lines). */
	c0 = cpu_s();
	do {
		for (size_t i = 0; i < 65536; i++, bs_lookups++) {
			const struct elf_func *b = bsearch_lookup(&t, offs[bs_lookups & (n - 1)]);

			sink += b ? b->start : 0;
		}
	} while (cpu_s() - c0 < seconds);
	bs_cpu = cpu_s() - c0;
	bench_sink = sink;
	sym_rate = (double)lookups / sym_cpu;
	lin_rate = (double)lin_lookups / lin_cpu;
	bs_rate = (double)bs_lookups / bs_cpu;
	a2l_rate = run_addr2line(lib, vaddrs, a2l_count, &a2l_s) ? 0 : (double)a2l_count / a2l_s;

	printf("| %s | %u functions (%s), %u inline ranges, %u line rows, %.1f MiB .sym | "
	       "%.2f M/s (%.0f ns) | %.3f M/s | %.0fx | %.3f M/s | %.0fx | %.2f M/s | %.2f%% |\n",
	       lib, info.functions, t.from_symtab ? ".symtab" : ".dynsym", info.inline_ranges,
	       info.line_rows, (double)info.file_bytes / 1048576.0, sym_rate / 1e6, 1e9 / sym_rate,
	       lin_rate / 1e6, sym_rate / lin_rate, a2l_rate / 1e6,
	       a2l_rate > 0 ? sym_rate / a2l_rate : 0, bs_rate / 1e6,
	       hits ? 100.0 * (double)agree / (double)hits : 0);
	rc = 0;
cleanup:
	symfile_close(f);
	free(offs);
	free(vaddrs);
	free(t.funcs);
	free(t.sorted);
	if (made_dir)
		remove_tree(dir);
	return rc;
}

static int bench_lookup(int argc, char **argv)
{
	double seconds = 3;
	size_t a2l = 20000;
	int i = 0, rc = 0;

	while (i < argc && !strncmp(argv[i], "--", 2)) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--addr2line") && i + 1 < argc)
			a2l = strtoull(argv[++i], NULL, 10);
		else
			return 2;
		i++;
	}
	if (i >= argc)
		return 2;
	printf("| library | symbol file | symfile lookups/s per core (per lookup) | naive linear scan | "
	       "ratio | addr2line -f -C -i (batch, incl. startup) | ratio | in-memory binary search "
	       "(function only) | agree with ELF table |\n");
	printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (; i < argc; i++)
		rc |= bench_lookup_one(argv[i], seconds, a2l);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* (2) a synthetic repository of N Build IDs */

static void synth_id(uint64_t i, struct sysom_build_id *id)
{
	uint64_t s = i * 0x2545f4914f6cdd1dULL + 7;

	memset(id, 0, sizeof(*id));
	id->kind = SYSOM_OBJECT_ELF;
	id->len = 20;
	for (unsigned k = 0; k < 20; k += 8) {
		uint64_t v = mix64(&s);

		memcpy(id->bytes + k, &v, k + 8 <= 20 ? 8 : 20 - k);
	}
}

#define SYNTH_VADDR 0x400000ULL

/* Functions of synthetic file i: count and layout follow from i. */
static int synth_write(const char *root, uint64_t i, unsigned mean_funcs, struct symfile_symbol *syms,
		       char (*names)[NAME_MAX_LEN], uint64_t *span)
{
	struct sysom_build_id id;
	struct symfile_segment seg;
	char path[1400], dir[1200], err[256], hex[129];
	uint64_t s = i ^ 0xabcdef, addr = SYNTH_VADDR;
	unsigned n = mean_funcs / 2 + (unsigned)(mix64(&s) % (mean_funcs + 1));
	int rc;

	synth_id(i, &id);
	for (unsigned k = 0; k < n; k++) {
		unsigned len = 8 + (unsigned)(mix64(&s) % 48);

		addr += mix64(&s) % 64; /* gaps */
		syms[k].start = addr;
		syms[k].size = 16 + mix64(&s) % 2048;
		addr += syms[k].size;
		snprintf(names[k], NAME_MAX_LEN, "fn_%" PRIu64 "_%u_%.*s", i, k, (int)len,
			 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
		syms[k].name = names[k];
	}
	seg.file_offset = 0x1000;
	seg.vaddr = SYNTH_VADDR;
	seg.size = addr - SYNTH_VADDR;
	*span = seg.size;
	sysom_build_id_hex(&id, hex, sizeof(hex));
	snprintf(dir, sizeof(dir), "%s/.build-id/%.2s", root, hex);
	if (mkdir(dir, 0750) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/%s.sym", dir, hex + 2);
	rc = symfile_write_table(&id, &seg, 1, syms, n, path, err, sizeof(err));
	if (rc)
		fprintf(stderr, "symfile_write_table: %s\n", err);
	return rc;
}

static int generate(const char *root, uint64_t from, uint64_t to, unsigned mean_funcs)
{
	struct symfile_symbol *syms = calloc(2 * mean_funcs + 2, sizeof(*syms));
	char (*names)[NAME_MAX_LEN] = calloc(2 * mean_funcs + 2, NAME_MAX_LEN);
	uint64_t span;
	int rc = 0;

	if (!syms || !names)
		return -ENOMEM;
	for (uint64_t i = from; i < to && !rc; i++)
		rc = synth_write(root, i, mean_funcs, syms, names, &span);
	free(syms);
	free(names);
	return rc;
}

/* One acquire + lookup (a random address of the synthetic layout) + release. */
static int synth_op(struct symrepo *r, uint64_t i, uint64_t *seed, uint64_t *sink)
{
	struct symfile_frame fr[MAX_FRAMES];
	struct sysom_build_id id;
	struct symfile *f;
	int e;

	synth_id(i, &id);
	f = symrepo_symbols_acquire(r, &id, &e);
	if (!f) {
		fprintf(stderr, "acquire of synthetic id %" PRIu64 ": %s\n", i, sysom_strerror(e));
		return -1;
	}
	*sink += (uint64_t)symfile_lookup(f, SYNTH_VADDR + mix64(seed) % (1u << 20), fr, MAX_FRAMES);
	symrepo_symbols_release(r, f);
	return 0;
}

/*
 * Measures in a fresh process, and prints one table row:
 *   cold:   `cold` distinct random Build IDs, each opened for the first time (all misses);
 *   warm:   the last max_open of those again and again (all hits: the lookup path alone);
 *   steady: `steady` uniformly random Build IDs through the LRU (hits as the ratio allows);
 *   memory: VmRSS (RssAnon + RssFile) and VmHWM afterwards.
 */
static int measure(const char *root, uint64_t ids, uint32_t max_open, size_t cold, size_t steady,
		   double gen_s, uint64_t disk_kib)
{
	struct symrepo_options o;
	struct symrepo_cache_stats cs0, cs;
	struct symrepo *r = NULL;
	uint64_t seed = 99 + ids, sink = 0, *order = NULL;
	double *lat = NULL, t0, open_s, cold_mean = 0, warm_op, steady_op;
	size_t warm_n, warm_ops = 0;
	struct rusage ru0, ru1;
	int rc = 1;

	symrepo_options_default(&o, root);
	o.max_open_files = max_open;
	t0 = now_s();
	if (symrepo_open(&o, &r))
		goto cleanup;
	open_s = now_s() - t0;
	cold = cold > ids ? ids : cold;
	cold = cold > 20000 ? 20000 : cold;
	lat = calloc(cold, sizeof(*lat));
	order = calloc(cold, sizeof(*order));
	if (!lat || !order)
		goto cleanup;
	for (size_t k = 0; k < cold; k++) {
		bool dup;

		do {
			order[k] = mix64(&seed) % ids;
			dup = false;
			for (size_t j = 0; j < k && !dup; j++)
				dup = order[j] == order[k];
		} while (dup);
	}
	getrusage(RUSAGE_SELF, &ru0);
	for (size_t k = 0; k < cold; k++) {
		t0 = now_s();
		if (synth_op(r, order[k], &seed, &sink))
			goto cleanup;
		lat[k] = now_s() - t0;
		cold_mean += lat[k];
	}
	getrusage(RUSAGE_SELF, &ru1);
	cold_mean /= (double)cold;
	qsort(lat, cold, sizeof(*lat), cmp_double);

	symrepo_cache_stats_get(r, &cs0);
	warm_n = cold < max_open ? cold : max_open;
	t0 = now_s();
	do {
		for (size_t k = cold - warm_n; k < cold; k++, warm_ops++)
			if (synth_op(r, order[k], &seed, &sink))
				goto cleanup;
	} while (now_s() - t0 < 1.0);
	warm_op = (now_s() - t0) / (double)warm_ops;
	symrepo_cache_stats_get(r, &cs);
	if (cs.misses != cs0.misses) {
		fprintf(stderr, "warm phase missed the cache %" PRIu64 " times\n",
			cs.misses - cs0.misses);
		goto cleanup;
	}

	cs0 = cs;
	t0 = now_s();
	for (size_t k = 0; k < steady; k++)
		if (synth_op(r, mix64(&seed) % ids, &seed, &sink))
			goto cleanup;
	steady_op = (now_s() - t0) / (double)(steady ? steady : 1);
	symrepo_cache_stats_get(r, &cs);
	printf("| %" PRIu64 " | %.0f s | %.2f GiB | %.2f ms | %.0f µs | %.0f µs | %.0f µs | %.2f | "
	       "%.2f µs | %.0f µs (%.1f%% hits) | %u | %.1f (%.1f + %.1f) MiB | %.1f MiB |\n",
	       ids, gen_s, (double)disk_kib / 1048576.0, open_s * 1e3, cold_mean * 1e6,
	       lat[cold / 2] * 1e6, lat[cold * 99 / 100] * 1e6,
	       (double)(ru1.ru_majflt - ru0.ru_majflt) / (double)cold, warm_op * 1e6, steady_op * 1e6,
	       100.0 * (double)(cs.hits - cs0.hits) / (double)(steady ? steady : 1), cs.cached,
	       (double)status_kib("VmRSS") / 1024.0, (double)status_kib("RssAnon") / 1024.0,
	       (double)status_kib("RssFile") / 1024.0, (double)status_kib("VmHWM") / 1024.0);
	bench_sink = sink;
	rc = 0;
cleanup:
	free(lat);
	free(order);
	symrepo_close(r);
	return rc;
}

static uint64_t du_kib(const char *dir)
{
	char cmd[4400], line[128];
	uint64_t v = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "du -sk '%s'", dir);
	p = popen(cmd, "r");
	if (p && fgets(line, sizeof(line), p))
		v = strtoull(line, NULL, 10);
	if (p)
		pclose(p);
	return v;
}

static int bench_repo(int argc, char **argv)
{
	uint64_t counts[8];
	unsigned ncounts = 0, funcs = 2000, jobs = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t max_open = 256;
	size_t cold = 2000, steady = 200000;
	const char *base = "/tmp";
	char root[1024];
	bool keep = false;
	int rc = 0;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--ids") && i + 1 < argc && ncounts < 8)
			counts[ncounts++] = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--functions") && i + 1 < argc)
			funcs = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--max-open") && i + 1 < argc)
			max_open = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--cold") && i + 1 < argc)
			cold = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--steady") && i + 1 < argc)
			steady = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--jobs") && i + 1 < argc)
			jobs = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			base = argv[++i];
		else if (!strcmp(argv[i], "--keep"))
			keep = true;
		else
			return 2;
	}
	if (!ncounts) {
		counts[ncounts++] = 1000;
		counts[ncounts++] = 170000;
	}
	if (!funcs || funcs > 1000000 || !jobs || jobs > MAX_JOBS || !cold || strlen(base) > 900)
		return 2;
	printf("| Build IDs | generation (%u jobs) | on disk | symrepo_open | cold acquire+lookup "
	       "(mean) | p50 | p99 | major faults per cold op | warm (cached) acquire+lookup | "
	       "random acquire+lookup (LRU %u) | cached | VmRSS (anon + file) | VmHWM |\n", jobs,
	       max_open);
	printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	fflush(stdout);
	for (unsigned c = 0; c < ncounts && !rc; c++) {
		struct symrepo_options o;
		struct symrepo *r = NULL;
		pid_t pids[MAX_JOBS];
		double t0, gen_s;
		int status;

		snprintf(root, sizeof(root), "%s/h-repo-bench-%" PRIu64 "-XXXXXX", base, counts[c]);
		if (!mkdtemp(root))
			return 1;
		symrepo_options_default(&o, root); /* creates the layout */
		if (symrepo_open(&o, &r))
			return 1;
		symrepo_close(r);
		t0 = now_s();
		for (unsigned j = 0; j < jobs; j++) {
			uint64_t from = counts[c] * j / jobs, to = counts[c] * (j + 1) / jobs;

			pids[j] = fork();
			if (pids[j] == 0)
				_exit(generate(root, from, to, funcs) ? 1 : 0);
		}
		for (unsigned j = 0; j < jobs; j++)
			if (waitpid(pids[j], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
				rc = 1;
		gen_s = now_s() - t0;
		if (!rc) {
			uint64_t kib = du_kib(root);
			pid_t m;

			fflush(stdout);
			m = fork();
			if (m == 0)
				_exit(measure(root, counts[c], max_open, cold, steady, gen_s, kib) ||
				      fflush(stdout));
			if (waitpid(m, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
				rc = 1;
		}
		if (keep)
			fprintf(stderr, "kept %s\n", root);
		else
			remove_tree(root);
	}
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* (3) writer time and peak memory */

struct writer_report {
	int rc;
	struct symfile_write_stats st;
	uint64_t hwm_kib, anon_kib;
	char err[256];
};

static int bench_writer(int argc, char **argv)
{
	uint64_t budget = 0;
	bool lines = true, inl = true;
	int i = 0, rc = 0;

	while (i < argc && !strncmp(argv[i], "--", 2)) {
		if (!strcmp(argv[i], "--budget") && i + 1 < argc)
			budget = strtoull(argv[++i], NULL, 10) << 20;
		else if (!strcmp(argv[i], "--no-lines"))
			lines = false;
		else if (!strcmp(argv[i], "--no-inline"))
			inl = false;
		else
			return 2;
		i++;
	}
	if (i >= argc)
		return 2;
	printf("| input | size | writer time (wall) | writer peak heap (own) | child VmHWM | "
	       "child ru_maxrss | .sym size | functions (symtab/dynsym/DWARF) | inline ranges | "
	       "line rows | dropped by budget |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n");
	for (; i < argc; i++) {
		char dir[] = "/tmp/h-repo-bench-writer-XXXXXX", out[4200];
		struct writer_report rep = { 0 };
		struct rusage ru;
		struct stat st;
		int pipefd[2], status;
		double t0, wall;
		pid_t pid;

		if (stat(argv[i], &st) < 0 || !mkdtemp(dir) || pipe(pipefd) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			rc = 1;
			continue;
		}
		snprintf(out, sizeof(out), "%s/out.sym", dir);
		t0 = now_s();
		pid = fork();
		if (pid == 0) {
			struct symfile_write_options wo = { 0 };

			close(pipefd[0]);
			wo.executable_path = argv[i];
			wo.inline_frames = inl;
			wo.line_table = lines;
			wo.memory_budget = budget;
			rep.rc = symfile_write(&wo, out, &rep.st, rep.err, sizeof(rep.err));
			rep.hwm_kib = status_kib("VmHWM");
			rep.anon_kib = status_kib("RssAnon");
			if (write(pipefd[1], &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
				_exit(3);
			_exit(0);
		}
		close(pipefd[1]);
		if (read(pipefd[0], &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
			rep.rc = -EIO;
		close(pipefd[0]);
		if (wait4(pid, &status, 0, &ru) < 0)
			rep.rc = -errno;
		wall = now_s() - t0;
		if (rep.rc) {
			fprintf(stderr, "%s: %s\n", argv[i], rep.err);
			rc = 1;
		} else {
			printf("| %s | %.1f MiB | %.2f s (writer: %.2f s) | %.1f MiB | %.1f MiB | %.1f MiB | "
			       "%.2f MiB | %u / %u / %u | %u | %u | %s |\n",
			       argv[i], (double)st.st_size / 1048576.0, wall, rep.st.seconds,
			       (double)rep.st.peak_heap_bytes / 1048576.0, (double)rep.hwm_kib / 1024.0,
			       (double)ru.ru_maxrss / 1024.0, (double)rep.st.output_bytes / 1048576.0,
			       rep.st.from_symtab, rep.st.from_dynsym, rep.st.from_dwarf,
			       rep.st.inline_ranges, rep.st.line_rows,
			       rep.st.lines_dropped || rep.st.inlines_dropped
				       ? (rep.st.lines_dropped ? "lines" : "inline")
				       : "nothing");
		}
		fflush(stdout);
		remove_tree(dir);
	}
	return rc;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: symrepo_bench lookup [--seconds S] [--addr2line N] LIBRARY...\n"
		"       symrepo_bench repo [--ids N]... [--functions MEAN] [--max-open N] [--cold N]\n"
		"                          [--steady N] [--jobs N] [--dir BASE] [--keep]\n"
		"       symrepo_bench writer [--budget MiB] [--no-lines] [--no-inline] FILE...\n");
}

int main(int argc, char **argv)
{
	int rc = 2;

	if (argc >= 2 && !strcmp(argv[1], "lookup"))
		rc = bench_lookup(argc - 2, argv + 2);
	else if (argc >= 2 && !strcmp(argv[1], "repo"))
		rc = bench_repo(argc - 2, argv + 2);
	else if (argc >= 2 && !strcmp(argv[1], "writer"))
		rc = bench_writer(argc - 2, argv + 2);
	if (rc == 2)
		usage();
	return rc;
}
