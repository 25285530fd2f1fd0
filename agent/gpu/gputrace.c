/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL / CUDA driver probe manager: library discovery, per-file attachment, event delivery. */
#include "agent/gpu/gputrace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <gelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "common/elf_buildid.h"
#include "common/array.h"
#include "agent/gpu/nccl_layout.h"
#include "agent/node/procmaps.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/report.h"
#include "gputrace.skel.h"

#define LIB_NCCL 1
#define LIB_CUDA 2
#define MAX_LIBRARY_USERS 65536

enum probe_prog { PROG_NCCL, PROG_LAUNCH, PROG_NAME };

/* What is attached to each traced function. */
struct probe_spec {
	const char *symbol;
	enum gputrace_fn fn;
	int library;
	enum probe_prog prog; /* NCCL and NAME get an entry and a return probe */
};

static const struct probe_spec probe_specs[] = {
	{ "ncclAllReduce", GT_NCCL_ALL_REDUCE, LIB_NCCL, PROG_NCCL },
	{ "ncclReduceScatter", GT_NCCL_REDUCE_SCATTER, LIB_NCCL, PROG_NCCL },
	{ "ncclAllGather", GT_NCCL_ALL_GATHER, LIB_NCCL, PROG_NCCL },
	{ "ncclBroadcast", GT_NCCL_BROADCAST, LIB_NCCL, PROG_NCCL },
	{ "ncclReduce", GT_NCCL_REDUCE, LIB_NCCL, PROG_NCCL },
	{ "ncclAlltoAll", GT_NCCL_ALL_TO_ALL, LIB_NCCL, PROG_NCCL },
	{ "ncclGather", GT_NCCL_GATHER, LIB_NCCL, PROG_NCCL },
	{ "ncclScatter", GT_NCCL_SCATTER, LIB_NCCL, PROG_NCCL },
	{ "ncclSend", GT_NCCL_SEND, LIB_NCCL, PROG_NCCL },
	{ "ncclRecv", GT_NCCL_RECV, LIB_NCCL, PROG_NCCL },
	{ "ncclGroupStart", GT_NCCL_GROUP_START, LIB_NCCL, PROG_NCCL },
	{ "ncclGroupEnd", GT_NCCL_GROUP_END, LIB_NCCL, PROG_NCCL },
	{ "ncclCommInitRank", GT_NCCL_COMM_INIT_RANK, LIB_NCCL, PROG_NCCL },
	{ "ncclCommInitRankConfig", GT_NCCL_COMM_INIT_RANK_CONFIG, LIB_NCCL, PROG_NCCL },
	{ "ncclCommInitAll", GT_NCCL_COMM_INIT_ALL, LIB_NCCL, PROG_NCCL },
	{ "ncclCommInitRankScalable", GT_NCCL_COMM_INIT_RANK_SCALABLE, LIB_NCCL, PROG_NCCL },
	{ "ncclCommSplit", GT_NCCL_COMM_SPLIT, LIB_NCCL, PROG_NCCL },
	{ "ncclCommDestroy", GT_NCCL_COMM_DESTROY, LIB_NCCL, PROG_NCCL },
	{ "ncclCommAbort", GT_NCCL_COMM_ABORT, LIB_NCCL, PROG_NCCL },
	{ "ncclCommFinalize", GT_NCCL_COMM_FINALIZE, LIB_NCCL, PROG_NCCL },
	{ "cuLaunchKernel", GT_CU_LAUNCH_KERNEL, LIB_CUDA, PROG_LAUNCH },
	{ "cuLaunchKernel_ptsz", GT_CU_LAUNCH_KERNEL_PTSZ, LIB_CUDA, PROG_LAUNCH },
	{ "cuLaunchKernelEx", GT_CU_LAUNCH_KERNEL_EX, LIB_CUDA, PROG_LAUNCH },
	{ "cuLaunchKernelEx_ptsz", GT_CU_LAUNCH_KERNEL_EX_PTSZ, LIB_CUDA, PROG_LAUNCH },
	{ "cuModuleGetFunction", GT_CU_MODULE_GET_FUNCTION, LIB_CUDA, PROG_NAME },
	{ "cuLibraryGetKernel", GT_CU_LIBRARY_GET_KERNEL, LIB_CUDA, PROG_NAME },
	{ "cuKernelGetFunction", GT_CU_KERNEL_GET_FUNCTION, LIB_CUDA, PROG_NAME },
};
#define NSPECS (sizeof(probe_specs) / sizeof(probe_specs[0]))

struct library {
	int kind;
	uint32_t slot;
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	char path[PATH_MAX];     /* as first seen in a process's maps */
	char version[32];
	bool comm_layout;
	int fd;                  /* the file, held open: probes attach through /proc/self/fd */
	uint64_t offsets[NSPECS]; /* symbol file offsets, 0 when absent */
	struct bpf_link **links;
	uint32_t nlinks;
	struct bpf_link **launch_links; /* kernel launch probes, attached only while on */
	uint32_t nlaunch_links;
	uint32_t *users;         /* pids mapping it */
	uint32_t nusers, users_cap;
	uint64_t unused_since_ns; /* 0 while used */
	bool detached;
};

/* An ld.so file with the loader-notification probe. */
struct loader {
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	struct bpf_link *link;
};

struct gputrace {
	struct gputrace_options opts;
	struct loader loaders[GT_LOADER_MAX];
	uint32_t nloaders;
	struct bpf_link *exec_link;   /* resets the probe's per-process state on exec */
	uint64_t dl_events, dl_resumed, dl_attach_ns_max, dl_attach_ns_total;
	bool closing;                 /* events only resume held processes */
	struct gputrace_bpf *skel;
	struct ring_buffer *ring;
	struct library libs[GPUTRACE_MAX_LIBRARIES];
	uint32_t nlibs;          /* slots used, ever (slots are not reused) */
	uint64_t attach_errors;
	uint64_t read_errors;    /* files unreadable: changed while read, or over a limit */
	bool hybrid;             /* launch stacks by the sampler's unwinder */
	bool launch_on;          /* kernel launch probes attached */
	uint64_t launch_on_since_ns;
	uint64_t launch_on_total_ns;
};

void gputrace_options_default(struct gputrace_options *o)
{
	*o = (struct gputrace_options){
		.proc_root = "/proc",
		.exec_generation_fd = -1,
		.unwind_tables_fd = -1,
		.unwind_procs_fd = -1,
		.unwind_markers_fd = -1,
		.py_procs_fd = -1,
		.ring_bytes = 4u << 20,
		.detach_grace_ns = 60ull * 1000000000ull,
		.launch_tracing = true,
		.loader = GPUTRACE_LOADER_NOTIFY,
		.loader_paths = "/lib64/ld-linux-x86-64.so.2:/lib/ld-linux-aarch64.so.1",
	};
}

int gputrace_loader_mode_parse(const char *s, enum gputrace_loader_mode *out)
{
	static const char *const names[] = { "off", "notify", "hold" };

	for (int i = 0; i < 3; i++)
		if (s && strcmp(s, names[i]) == 0) {
			*out = (enum gputrace_loader_mode)i;
			return 0;
		}
	return -EINVAL;
}

const char *gputrace_loader_mode_name(enum gputrace_loader_mode m)
{
	return m == GPUTRACE_LOADER_HOLD ? "hold" : m == GPUTRACE_LOADER_NOTIFY ? "notify" : "off";
}

int gputrace_library_kind(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (strncmp(base, "libnccl.so", 10) == 0)
		return LIB_NCCL;
	if (strncmp(base, "libcuda.so", 10) == 0)
		return LIB_CUDA;
	return 0;
}

/* The loader mapped NCCL/CUDA into a process: attach now, tell the owner (which re-reads
 * the process's mappings for the unwinder), then let a held process go: its first launches
 * are probed and unwound in the library it just mapped. */
static void on_dl_event(struct gputrace *g, const struct gt_dl_event *e, size_t len)
{
	int rc = g->closing ? 0 : gputrace_scan_process(g, e->tgid);
	uint64_t took;

	if (g->opts.on_event && !g->closing)
		g->opts.on_event(g->opts.ctx, e, len);
	if (e->flags & GT_DL_HELD) {
		if (kill((pid_t)e->tgid, SIGCONT) == 0)
			g->dl_resumed++;
		else
			sysom_report(&g->opts.report, SYSOM_REPORT_WARN,
				     "gputrace: cannot resume pid %u: %s", e->tgid,
				     sysom_strerror(-errno));
	}
	took = sysom_monotonic_ns() - e->ktime_ns;
	g->dl_events++;
	g->dl_attach_ns_total += took;
	if (took > g->dl_attach_ns_max)
		g->dl_attach_ns_max = took;
	sysom_report(&g->opts.report, SYSOM_REPORT_INFO,
		     "gputrace: pid %u mapped %s%s%s: %d library files newly traced, %.3f ms after "
		     "the loader's notification%s", e->tgid, e->kinds & GT_DL_NCCL ? "NCCL" : "",
		     e->kinds == (GT_DL_NCCL | GT_DL_CUDA) ? "+" : "",
		     e->kinds & GT_DL_CUDA ? "CUDA" : "", rc, (double)took / 1e6,
		     e->flags & GT_DL_HELD ? " (held until then)" : "");
}

/* True for a dynamic loader's file name (ld-linux-x86-64.so.2, ld-linux-aarch64.so.1). */
static bool is_loader_path(const char *path)
{
	const char *base = strrchr(path, '/');

	return strncmp(base ? base + 1 : path, "ld-linux", 8) == 0;
}

static int on_ring_event(void *ctx, void *data, size_t len)
{
	struct gputrace *g = ctx;

	if (len >= sizeof(struct gt_dl_event) && *(const uint32_t *)data == GT_EVENT_DL_LOAD)
		on_dl_event(g, data, len);
	else if (g->opts.on_event && !g->closing)
		g->opts.on_event(g->opts.ctx, data, len);
	return 0;
}

int gputrace_open(const struct gputrace_options *o, struct gputrace **out, char *err,
		  size_t errlen)
{
	struct gputrace *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return -ENOMEM;
	g->opts = *o;
	g->launch_on = o->launch_tracing;
	g->launch_on_since_ns = sysom_monotonic_ns();
	g->skel = gputrace_bpf__open();
	if (!g->skel) {
		rc = -errno;
		snprintf(err, errlen, "cannot open the GPU tracing BPF object: %s", sysom_strerror(rc));
		goto cleanup;
	}
	if (o->ring_bytes && (rc = bpf_map__set_max_entries(g->skel->maps.events, o->ring_bytes))) {
		snprintf(err, errlen, "ring buffer size %u: %s", o->ring_bytes, sysom_strerror(rc));
		goto cleanup;
	}
	if (o->exec_generation_fd >= 0 &&
	    (rc = bpf_map__reuse_fd(g->skel->maps.exec_generation, o->exec_generation_fd))) {
		snprintf(err, errlen, "cannot share the sampler's generation map: %s",
			 sysom_strerror(rc));
		goto cleanup;
	}
	if (o->unwind_tables_fd >= 0 && o->unwind_procs_fd >= 0 && o->unwind_markers_fd >= 0) {
		struct gputrace_bpf *k = g->skel;

		if ((rc = bpf_map__reuse_fd(k->maps.unwind_tables, o->unwind_tables_fd)) ||
		    (rc = bpf_map__reuse_fd(k->maps.unwind_procs, o->unwind_procs_fd)) ||
		    (rc = bpf_map__reuse_fd(k->maps.unwind_markers, o->unwind_markers_fd))) {
			snprintf(err, errlen, "cannot share the unwinder's maps: %s",
				 sysom_strerror(rc));
			goto cleanup;
		}
		if (o->py_procs_fd >= 0 && (rc = bpf_map__reuse_fd(k->maps.py_procs, o->py_procs_fd))) {
			snprintf(err, errlen, "cannot share the Python process map: %s",
				 sysom_strerror(rc));
			goto cleanup;
		}
		if (o->py_procs_fd < 0)
			bpf_map__set_max_entries(k->maps.py_procs, 1); /* empty: no Python frames */
		k->rodata->hybrid_unwind = true;
		g->hybrid = true;
	} else {
		/* Frame-pointer launch stacks: the unwinder's maps stay unused, keep them tiny. */
		bpf_map__set_max_entries(g->skel->maps.unwind_tables, 1);
		bpf_map__set_max_entries(g->skel->maps.unwind_procs, 1);
		bpf_map__set_max_entries(g->skel->maps.unwind_markers, 1);
		bpf_map__set_max_entries(g->skel->maps.py_procs, 1);
	}
	g->skel->rodata->dl_hold = o->loader == GPUTRACE_LOADER_HOLD;
	if ((rc = gputrace_bpf__load(g->skel))) {
		snprintf(err, errlen, "cannot load the GPU tracing BPF programs: %s",
			 sysom_strerror(rc));
		goto cleanup;
	}
	g->ring = ring_buffer__new(bpf_map__fd(g->skel->maps.events), on_ring_event, g, NULL);
	if (!g->ring) {
		rc = -errno;
		snprintf(err, errlen, "cannot map the GPU event ring buffer: %s", sysom_strerror(rc));
		goto cleanup;
	}
	if (o->loader != GPUTRACE_LOADER_OFF) {
		g->exec_link = bpf_program__attach(g->skel->progs.sysom_dl_exec);
		if (!g->exec_link) {
			rc = -errno;
			snprintf(err, errlen, "cannot attach the exec tracepoint: %s",
				 sysom_strerror(rc));
			goto cleanup;
		}
		for (const char *s = o->loader_paths; s && *s;) {
			const char *end = strchr(s, ':');
			size_t n = end ? (size_t)(end - s) : strlen(s);
			char path[PATH_MAX];

			if (n && n < sizeof(path)) {
				memcpy(path, s, n);
				path[n] = '\0';
				gputrace_attach_loader(g, path); /* absent on this architecture: fine */
			}
			s = end ? end + 1 : s + n;
		}
	}
	*out = g;
	return 0;
cleanup:
	gputrace_close(g);
	return rc;
}

static void detach_launches(struct library *l)
{
	for (uint32_t i = 0; i < l->nlaunch_links; i++)
		bpf_link__destroy(l->launch_links[i]);
	free(l->launch_links);
	l->launch_links = NULL;
	l->nlaunch_links = 0;
}

static void detach_library(struct library *l)
{
	for (uint32_t i = 0; i < l->nlinks; i++)
		bpf_link__destroy(l->links[i]);
	free(l->links);
	l->links = NULL;
	l->nlinks = 0;
	detach_launches(l);
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	l->detached = true;
}

void gputrace_close(struct gputrace *g)
{
	if (!g)
		return;
	/* No new stops; then a process the probe stopped whose event is still in the ring is
	 * let go. */
	g->closing = true;
	for (uint32_t i = 0; i < g->nloaders; i++)
		bpf_link__destroy(g->loaders[i].link);
	bpf_link__destroy(g->exec_link);
	if (g->ring)
		ring_buffer__consume(g->ring);
	for (uint32_t i = 0; i < g->nlibs; i++) {
		detach_library(&g->libs[i]);
		free(g->libs[i].users);
	}
	ring_buffer__free(g->ring);
	gputrace_bpf__destroy(g->skel);
	free(g);
}

/* The symbol table (and its string table) is read whole into memory: bounded. */
#define MAX_SYMTAB_BYTES (256u << 20)

/* Section data of `scn` no larger than MAX_SYMTAB_BYTES: 0, -SYSOM_ELIMIT, -EIO (short read:
 * the file changed while read). */
static int read_section(Elf_Scn *scn, Elf_Data **out)
{
	GElf_Shdr sh;

	if (!scn || !gelf_getshdr(scn, &sh))
		return -SYSOM_ECORRUPT;
	if (sh.sh_size > MAX_SYMTAB_BYTES)
		return -SYSOM_ELIMIT;
	*out = elf_getdata(scn, NULL);
	return *out || sh.sh_size == 0 || sh.sh_type == SHT_NOBITS ? 0 : -EIO;
}

/* True when every NCCL probe's symbol is "nccl" + the name include/sysom/nccl_ops.h gives
 * its op: the table spells the symbols out, the header numbers and names them once. */
static bool nccl_specs_match_ops(void)
{
	for (size_t k = 0; k < NSPECS; k++) {
		const char *name = sysom_nccl_op_name((unsigned)probe_specs[k].fn);
		if (probe_specs[k].library == LIB_NCCL &&
		    (!name || strncmp(probe_specs[k].symbol, "nccl", 4) ||
		     strcmp(probe_specs[k].symbol + 4, name)))
			return false;
	}
	return true;
}

/* File offsets of the wanted symbols (0 when absent), from .dynsym, else .symtab. Read with
 * pread (ELF_C_READ), never mmap: a file truncated meanwhile is -EIO, not SIGBUS. */
static int find_symbols(const char *path, int kind, uint64_t offsets[NSPECS])
{
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	int fd, rc = -ENOENT;
	bool have_dynsym = false;

	memset(offsets, 0, NSPECS * sizeof(offsets[0]));
	if (kind == LIB_NCCL && !nccl_specs_match_ops())
		return -EINVAL; /* a probe table out of step with nccl_ops.h: caught by the tests */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if ((rc = sysom_elf_open_read(fd, &elf)))
		goto cleanup;
	rc = -ENOENT; /* until a probed symbol is found */
	while ((scn = elf_nextscn(elf, scn)))  {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh)) {
			rc = -EIO; /* the section headers are read on demand: a short read */
			goto cleanup;
		}
		if (sh.sh_type == SHT_DYNSYM)
			have_dynsym = true;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data, *strs;
		int err;

		if (!gelf_getshdr(scn, &sh) ||
		    sh.sh_type != (have_dynsym ? SHT_DYNSYM : SHT_SYMTAB) || sh.sh_entsize == 0)
			continue;
		if ((err = read_section(scn, &data)) ||
		    (err = read_section(elf_getscn(elf, sh.sh_link), &strs))) {
			rc = err;
			goto cleanup;
		}
		if (!data)
			continue;
		size_t n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Sym sym;
			GElf_Shdr tsh;
			Elf_Scn *tscn;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
			    sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name)
				continue;
			for (size_t k = 0; k < NSPECS; k++) {
				if (probe_specs[k].library != kind || offsets[k] ||
				    strcmp(name, probe_specs[k].symbol) != 0)
					continue;
				tscn = elf_getscn(elf, sym.st_shndx);
				if (!tscn || !gelf_getshdr(tscn, &tsh) || sym.st_value < tsh.sh_addr ||
				    sym.st_value - tsh.sh_addr >= tsh.sh_size)
					continue;
				offsets[k] = sym.st_value - tsh.sh_addr + tsh.sh_offset;
				rc = 0;
			}
		}
	}
cleanup:
	if (elf)
		elf_end(elf);
	close(fd);
	return rc;
}

int gputrace_library_symbols(const char *path)
{
	uint64_t offsets[NSPECS];
	int kind = gputrace_library_kind(path), n = 0, rc;

	if (!kind)
		return -EINVAL;
	if (access(path, R_OK))
		return -errno; /* find_symbols' -ENOENT means no symbols */
	rc = find_symbols(path, kind, offsets);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	for (size_t k = 0; k < NSPECS; k++)
		n += offsets[k] != 0;
	return n;
}

static int add_link(struct bpf_link ***links, uint32_t *n, struct bpf_link *link)
{
	struct bpf_link **grown = realloc(*links, (*n + 1) * sizeof(*grown));

	if (!grown) {
		bpf_link__destroy(link);
		return -ENOMEM;
	}
	*links = grown;
	(*links)[(*n)++] = link;
	return 0;
}

static int attach_one(struct gputrace *g, struct library *l, const char *path, uint64_t offset,
		      const struct probe_spec *spec)
{
	struct bpf_program *entry, *ret = NULL;
	int rc;

	switch (spec->prog) {
	case PROG_NCCL:
		entry = g->skel->progs.sysom_nccl_enter;
		ret = g->skel->progs.sysom_nccl_exit;
		break;
	case PROG_LAUNCH:
		entry = g->skel->progs.sysom_cu_launch;
		break;
	default:
		entry = g->skel->progs.sysom_cu_name_enter;
		ret = g->skel->progs.sysom_cu_name_exit;
		break;
	}
	for (int pass = 0; pass < 2; pass++) {
		struct bpf_program *prog = pass ? ret : entry;
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = GPUTRACE_COOKIE(spec->fn, l->slot),
			    .retprobe = pass == 1);
		struct bpf_link *link;

		if (!prog)
			continue;
		link = bpf_program__attach_uprobe_opts(prog, -1, path, (size_t)offset, &uo);
		if (!link) {
			rc = -errno;
			g->attach_errors++;
			sysom_report(&g->opts.report, SYSOM_REPORT_WARN,
				     "gputrace: cannot attach %s%s in %s: %s", spec->symbol,
				     pass ? " (return)" : "", l->path, sysom_strerror(rc));
			return rc;
		}
		if (spec->prog == PROG_LAUNCH)
			rc = add_link(&l->launch_links, &l->nlaunch_links, link);
		else
			rc = add_link(&l->links, &l->nlinks, link);
		if (rc)
			return rc;
	}
	return 0;
}

static void set_layout(struct gputrace *g, struct library *l, const char *path)
{
	struct nccl_comm_layout layout;
	struct gt_comm_layout bl = { 0 };
	uint32_t key = l->slot;
	uint64_t t0 = sysom_monotonic_ns();
	int rc;

	rc = nccl_layout_resolve(path, &layout);
	if (rc == -EIO)
		g->read_errors++;
	if (rc == 0) {
		bl.valid = 1;
		bl.rank_offset = layout.rank_offset;
		bl.nranks_offset = layout.nranks_offset;
		bl.comm_hash_offset = layout.comm_hash_offset;
		bl.comm_hash_size = layout.comm_hash_size;
		l->comm_layout = true;
		snprintf(l->version, sizeof(l->version), "%u.%u.%u", layout.version.major,
			 layout.version.minor, layout.version.patch);
		bpf_map_update_elem(bpf_map__fd(g->skel->maps.nccl_layouts), &key, &bl, BPF_ANY);
	} else {
		struct nccl_version v;
		if (nccl_version_read(path, &v) == 0)
			snprintf(l->version, sizeof(l->version), "%u.%u.%u", v.major, v.minor,
				 v.patch);
	}
	sysom_report(&g->opts.report, SYSOM_REPORT_INFO,
		     "gputrace: NCCL %s at %s: communicator fields %s (%.1f ms)",
		     l->version[0] ? l->version : "(version unknown)", l->path,
		     rc == 0 ? (layout.source == NCCL_LAYOUT_DWARF ? "from DWARF"
							    : "from the version table")
			     : "unknown (keys from init arguments only)",
		     (double)(sysom_monotonic_ns() - t0) / 1e6);
}

/* Attaches every probe the file has; a file with none of the symbols is still recorded (so it
 * is not examined again) but has no links. */
/* Attaches the probes of one kind (launch probes, or all the others) of a library. */
static int attach_specs(struct gputrace *g, struct library *l, bool launches)
{
	char path[64];
	int attached = 0;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", l->fd);
	for (size_t k = 0; k < NSPECS; k++) {
		bool duplicate = false;

		if (!l->offsets[k] || (probe_specs[k].prog == PROG_LAUNCH) != launches)
			continue;
		for (size_t j = 0; j < k; j++)
			duplicate |= l->offsets[j] == l->offsets[k]; /* aliases: attach once */
		if (duplicate)
			continue;
		if (attach_one(g, l, path, l->offsets[k], &probe_specs[k]) == 0)
			attached++;
	}
	return attached;
}

/* Opens the file (kept open, so the probes always name this very file) and attaches. */
static int attach_library(struct gputrace *g, struct library *l, const char *path)
{
	int rc, attached;

	l->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (l->fd < 0) {
		rc = -errno;
		sysom_report(&g->opts.report, SYSOM_REPORT_WARN, "gputrace: cannot open %s: %s",
			     l->path, sysom_strerror(rc));
		return rc;
	}
	rc = find_symbols(path, l->kind, l->offsets);
	if (rc) {
		if (rc != -ENOENT)
			g->read_errors++;
		sysom_report(&g->opts.report, SYSOM_REPORT_WARN,
			     "gputrace: %s: no traceable symbols (%s)", l->path,
			     sysom_strerror(rc));
		return rc;
	}
	if (l->kind == LIB_NCCL)
		set_layout(g, l, path);
	attached = attach_specs(g, l, false);
	if (g->launch_on)
		attached += attach_specs(g, l, true);
	sysom_report(&g->opts.report, SYSOM_REPORT_INFO,
		     "gputrace: %s: %d functions traced (%u probes)", l->path, attached,
		     l->nlinks + l->nlaunch_links);
	return 0;
}

void gputrace_set_launch_tracing(struct gputrace *g, bool on)
{
	uint64_t now = sysom_monotonic_ns();

	if (on == g->launch_on)
		return;
	if (g->launch_on)
		g->launch_on_total_ns += now - g->launch_on_since_ns;
	g->launch_on = on;
	g->launch_on_since_ns = now;
	for (uint32_t i = 0; i < g->nlibs; i++) {
		struct library *l = &g->libs[i];
		if (l->detached || l->kind != LIB_CUDA)
			continue;
		if (on)
			attach_specs(g, l, true);
		else
			detach_launches(l);
	}
}

uint64_t gputrace_launch_traced_ns(const struct gputrace *g)
{
	return g->launch_on_total_ns +
	       (g->launch_on ? sysom_monotonic_ns() - g->launch_on_since_ns : 0);
}

static int add_user(struct library *l, uint32_t pid)
{
	for (uint32_t i = 0; i < l->nusers; i++)
		if (l->users[i] == pid)
			return 0;
	if (l->nusers >= MAX_LIBRARY_USERS)
		return -E2BIG;
	if (SYSOM_ARRAY_RESERVE(l->users, l->users_cap, l->nusers, 16))
		return -ENOMEM;
	l->users[l->nusers++] = pid;
	l->unused_since_ns = 0;
	return 0;
}

struct scan_ctx {
	struct gputrace *g;
	uint32_t pid;
	int attached;
};

static int scan_visit(void *ctx, const struct procmaps_entry *e)
{
	struct scan_ctx *sc = ctx;
	struct gputrace *g = sc->g;
	struct library *l = NULL;
	char path[128];
	int kind = gputrace_library_kind(e->path);

	if (!kind && e->path[0] == '/' && g->opts.loader != GPUTRACE_LOADER_OFF &&
	    g->nloaders < GT_LOADER_MAX && is_loader_path(e->path)) {
		bool known = false;
		for (uint32_t i = 0; i < g->nloaders; i++)
			known |= g->loaders[i].inode == e->inode &&
				 g->loaders[i].dev_major == e->dev_major &&
				 g->loaders[i].dev_minor == e->dev_minor;
		snprintf(path, sizeof(path), "%s/%u/map_files/%llx-%llx", g->opts.proc_root,
			 sc->pid, (unsigned long long)e->start, (unsigned long long)e->end);
		if (!known)
			gputrace_attach_loader(g, path); /* a container's own glibc */
		return 0;
	}
	if (!kind || e->path[0] != '/')
		return 0;
	for (uint32_t i = 0; i < g->nlibs; i++) {
		struct library *c = &g->libs[i];
		if (!c->detached && c->inode == e->inode && c->dev_major == e->dev_major &&
		    c->dev_minor == e->dev_minor) {
			l = c;
			break;
		}
	}
	if (!l) {
		if (g->nlibs >= GPUTRACE_MAX_LIBRARIES) {
			g->attach_errors++;
			sysom_report(&g->opts.report, SYSOM_REPORT_WARN,
				     "gputrace: %s not traced: %d library files already traced",
				     e->path, GPUTRACE_MAX_LIBRARIES);
			return 0;
		}
		l = &g->libs[g->nlibs];
		*l = (struct library){ .kind = kind, .slot = g->nlibs, .dev_major = e->dev_major,
				       .dev_minor = e->dev_minor, .inode = e->inode, .fd = -1 };
		snprintf(l->path, sizeof(l->path), "%s", e->path);
		g->nlibs++;
		/* Through map_files: the very file mapped, also when deleted or in a container. */
		snprintf(path, sizeof(path), "%s/%u/map_files/%llx-%llx", g->opts.proc_root,
			 sc->pid, (unsigned long long)e->start, (unsigned long long)e->end);
		attach_library(g, l, path);
		sc->attached++;
	}
	return add_user(l, sc->pid) == -ENOMEM ? -ENOMEM : 0;
}

/* _dl_debug_state (address and file offset) and _r_debug (address) of an ld.so, from its
 * .dynsym (pread, never mmap). 0, -ENOENT, -errno. */
static int find_loader_symbols(int fd, uint64_t *hook_vaddr, uint64_t *hook_off,
			       uint64_t *r_debug_vaddr)
{
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	int rc;

	*hook_vaddr = *hook_off = *r_debug_vaddr = 0;
	if ((rc = sysom_elf_open_read(fd, &elf)))
		return rc;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || sh.sh_entsize == 0)
			continue;
		if ((rc = read_section(scn, &data)) || !data)
			break;
		for (size_t i = 0, n = sh.sh_size / sh.sh_entsize; i < n; i++) {
			GElf_Sym sym;
			GElf_Shdr tsh;
			Elf_Scn *tscn;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    !(name = elf_strptr(elf, sh.sh_link, sym.st_name)))
				continue;
			if (strcmp(name, "_r_debug") == 0 && GELF_ST_TYPE(sym.st_info) == STT_OBJECT)
				*r_debug_vaddr = sym.st_value;
			if (strcmp(name, "_dl_debug_state") != 0 ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC)
				continue;
			tscn = elf_getscn(elf, sym.st_shndx);
			if (!tscn || !gelf_getshdr(tscn, &tsh) || sym.st_value < tsh.sh_addr ||
			    sym.st_value - tsh.sh_addr >= tsh.sh_size)
				continue;
			*hook_vaddr = sym.st_value;
			*hook_off = sym.st_value - tsh.sh_addr + tsh.sh_offset;
		}
	}
	elf_end(elf);
	if (rc)
		return rc;
	return *hook_vaddr && *r_debug_vaddr ? 0 : -ENOENT;
}

int gputrace_attach_loader(struct gputrace *g, const char *path)
{
	struct gt_dl_layout dl = { 0 };
	struct loader *l;
	struct stat st;
	uint64_t off, hook = 0, r_debug = 0;
	uint32_t slot;
	char fdpath[64];
	int fd, rc;

	if (g->opts.loader == GPUTRACE_LOADER_OFF)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		rc = -errno;
		goto cleanup;
	}
	for (uint32_t i = 0; i < g->nloaders; i++)
		if (g->loaders[i].inode == st.st_ino && g->loaders[i].dev_major == major(st.st_dev) &&
		    g->loaders[i].dev_minor == minor(st.st_dev)) {
			rc = 0;
			goto cleanup;
		}
	if (g->nloaders >= GT_LOADER_MAX) {
		rc = -E2BIG;
		goto cleanup;
	}
	if ((rc = find_loader_symbols(fd, &hook, &off, &r_debug)))
		goto cleanup;
	dl.debug_state_vaddr = hook;
	dl.r_debug_vaddr = r_debug;
	slot = g->nloaders;
	l = &g->loaders[slot];
	*l = (struct loader){ .dev_major = major(st.st_dev), .dev_minor = minor(st.st_dev),
			      .inode = st.st_ino };
	if (bpf_map_update_elem(bpf_map__fd(g->skel->maps.dl_layouts), &slot, &dl, BPF_ANY)) {
		rc = -errno;
		goto cleanup;
	}
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = slot);
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	l->link = bpf_program__attach_uprobe_opts(g->skel->progs.sysom_dl_debug_state, -1, fdpath,
						  (size_t)off, &uo);
	if (!l->link) {
		rc = -errno;
		g->attach_errors++;
		goto cleanup;
	}
	g->nloaders++;
	sysom_report(&g->opts.report, SYSOM_REPORT_INFO,
		     "gputrace: loader notifications from %s (%s)", path,
		     gputrace_loader_mode_name(g->opts.loader));
	rc = 1;
cleanup:
	close(fd);
	return rc;
}

int gputrace_attach_path(struct gputrace *g, const char *path)
{
	int kind = gputrace_library_kind(path);
	struct library *l;
	struct stat st;

	if (!kind)
		return -EINVAL;
	if (stat(path, &st))
		return -errno;
	for (uint32_t i = 0; i < g->nlibs; i++) {
		l = &g->libs[i];
		if (!l->detached && l->inode == st.st_ino && l->dev_major == major(st.st_dev) &&
		    l->dev_minor == minor(st.st_dev))
			return 0;
	}
	if (g->nlibs >= GPUTRACE_MAX_LIBRARIES)
		return -E2BIG;
	l = &g->libs[g->nlibs];
	*l = (struct library){ .kind = kind, .slot = g->nlibs, .dev_major = major(st.st_dev),
			       .dev_minor = minor(st.st_dev), .inode = st.st_ino, .fd = -1 };
	snprintf(l->path, sizeof(l->path), "%s", path);
	g->nlibs++;
	attach_library(g, l, path);
	return 1;
}

int gputrace_scan_process(struct gputrace *g, uint32_t pid)
{
	struct scan_ctx sc = { g, pid, 0 };
	char maps[64];
	int rc;

	snprintf(maps, sizeof(maps), "%s/%u/maps", g->opts.proc_root, pid);
	rc = procmaps_read((int)pid, maps, true, 1u << 16, scan_visit, &sc, NULL);
	if (rc < 0 && rc != -SYSOM_ELIMIT)
		return rc == -ENOENT ? -ESRCH : rc;
	return sc.attached;
}

struct scan_all {
	struct gputrace *g;
	int attached;
};

static void scan_one(void *arg, uint32_t pid)
{
	struct scan_all *a = arg;
	int n;

	if (pid == (uint32_t)getpid())
		return;
	if ((n = gputrace_scan_process(a->g, pid)) > 0)
		a->attached += n;
}

int gputrace_scan_all(struct gputrace *g)
{
	struct scan_all a = { g, 0 };
	int rc = procmaps_each_pid(g->opts.proc_root, scan_one, &a);

	return rc ? rc : a.attached;
}

void gputrace_forget_process(struct gputrace *g, uint32_t pid)
{
	uint64_t now = sysom_monotonic_ns();

	for (uint32_t i = 0; i < g->nlibs; i++) {
		struct library *l = &g->libs[i];
		for (uint32_t j = 0; j < l->nusers; j++) {
			if (l->users[j] != pid)
				continue;
			l->users[j] = l->users[--l->nusers];
			if (l->nusers == 0)
				l->unused_since_ns = now;
			break;
		}
	}
}

void gputrace_sweep(struct gputrace *g, uint64_t now_ns)
{
	for (uint32_t i = 0; i < g->nlibs; i++) {
		struct library *l = &g->libs[i];
		/* Users that exited without the caller hearing of it. */
		for (uint32_t j = 0; j < l->nusers;) {
			char dir[64];
			snprintf(dir, sizeof(dir), "%s/%u", g->opts.proc_root, l->users[j]);
			if (access(dir, F_OK) == 0) {
				j++;
				continue;
			}
			l->users[j] = l->users[--l->nusers];
			if (l->nusers == 0)
				l->unused_since_ns = now_ns;
		}
		if (l->detached || l->nusers || !l->unused_since_ns ||
		    now_ns - l->unused_since_ns < g->opts.detach_grace_ns)
			continue;
		sysom_report(&g->opts.report, SYSOM_REPORT_INFO,
			     "gputrace: %s: no process maps it any more, probes detached", l->path);
		detach_library(l);
	}
}

bool gputrace_process_traced(const struct gputrace *g, uint32_t pid)
{
	for (uint32_t i = 0; i < g->nlibs; i++)
		for (uint32_t j = 0; j < g->libs[i].nusers; j++)
			if (g->libs[i].users[j] == pid)
				return true;
	return false;
}

int gputrace_event_fd(const struct gputrace *g)
{
	return ring_buffer__epoll_fd(g->ring);
}

int gputrace_consume(struct gputrace *g)
{
	return ring_buffer__consume(g->ring);
}

/* The communicator argument of a pending call (as the BPF side's comm_of). */
static uint64_t pending_comm(const struct pending_call *c)
{
	switch (c->fn) {
	case GT_NCCL_ALL_REDUCE:
	case GT_NCCL_REDUCE_SCATTER:
	case GT_NCCL_BROADCAST:
	case GT_NCCL_GATHER:
	case GT_NCCL_SCATTER:
		return c->args[5];
	case GT_NCCL_REDUCE:
		return c->stack_args[0];
	case GT_NCCL_ALL_GATHER:
	case GT_NCCL_ALL_TO_ALL:
		return c->args[4];
	}
	return 0;
}

int gputrace_pending_calls(struct gputrace *g, const char *proc_root, uint64_t now_mono_ns,
			   uint64_t min_age_ns, gputrace_pending_fn fn, void *ctx)
{
	int fd = bpf_map__fd(g->skel->maps.threads);
	struct thread_state *t = malloc(sizeof(*t));
	uint64_t key = 0, next;
	bool first = true;
	int n = 0;

	if (!t)
		return -ENOMEM;
	while (bpf_map_get_next_key(fd, first ? NULL : &key, &next) == 0) {
		char task[96];
		first = false;
		key = next;
		if (bpf_map_lookup_elem(fd, &key, t) || t->depth == 0)
			continue;
		/* A thread that died inside a call leaves its entry behind (LRU): not in flight. */
		snprintf(task, sizeof(task), "%s/%u/task/%u", proc_root ? proc_root : "/proc",
			 (uint32_t)(key >> 32), (uint32_t)key);
		if (access(task, F_OK))
			continue;
		for (uint32_t i = 0; i < t->depth && i < GT_MAX_NESTING; i++) {
			const struct pending_call *c = &t->calls[i];
			uint64_t comm = pending_comm(c);
			if (!comm || c->entry_ns > now_mono_ns || now_mono_ns - c->entry_ns < min_age_ns)
				continue;
			struct gt_nccl_event e = {
				.type = GT_EVENT_NCCL_CALL, .tgid = (uint32_t)(key >> 32),
				.tid = (uint32_t)key, .fn = (uint8_t)c->fn, .flags = (uint8_t)c->flags,
				.entry_ns = c->entry_ns, .exit_ns = now_mono_ns, .comm = comm,
				.seq = c->seq, .comm_hash = c->comm_hash, .datatype = -1,
				.redop = -1, .peer = -1, .result = 0, .rank = c->rank,
				.nranks = c->nranks, .color = -1, .key = -1,
			};
			fn(ctx, &e);
			n++;
		}
	}
	free(t);
	return n;
}

int gputrace_drain_launches(struct gputrace *g, gputrace_launch_fn fn, void *ctx)
{
	enum { CHUNK = 128 };
	int fd = bpf_map__fd(g->skel->maps.launches);
	struct gt_launch_key *keys = malloc(CHUNK * sizeof(*keys));
	struct gt_launch_value v;
	int n = 0;

	if (!keys)
		return -ENOMEM;
	/* Take up to CHUNK keys, then read-and-delete each (an increment racing with it makes a
	 * new entry, drained next time); repeat until the map is empty. Bounded by the map size
	 * so that launches arriving faster than the drain cannot keep it here. */
	for (uint32_t rounds = bpf_map__max_entries(g->skel->maps.launches) / CHUNK + 1; rounds--;) {
		uint32_t got = 0;

		while (got < CHUNK &&
		       bpf_map_get_next_key(fd, got ? &keys[got - 1] : NULL, &keys[got]) == 0)
			got++;
		if (got == 0)
			break;
		for (uint32_t i = 0; i < got; i++) {
			if (bpf_map_lookup_and_delete_elem(fd, &keys[i], &v) == 0) {
				fn(ctx, &keys[i], &v);
				n++;
			}
		}
	}
	free(keys);
	return n;
}

void gputrace_stats_read(const struct gputrace *g, struct gputrace_stats *out)
{
	int ncpus = libbpf_num_possible_cpus();
	uint32_t zero = 0;

	memset(out, 0, sizeof(*out));
	if (ncpus > 0) {
		struct gt_stats *per = calloc((size_t)ncpus, sizeof(*per));
		if (per && bpf_map_lookup_elem(bpf_map__fd(g->skel->maps.stats), &zero, per) == 0) {
			for (int c = 0; c < ncpus; c++) {
				out->bpf.calls += per[c].calls;
				out->bpf.events_lost += per[c].events_lost;
				out->bpf.unmatched += per[c].unmatched;
				out->bpf.nesting_overflow += per[c].nesting_overflow;
				out->bpf.launches += per[c].launches;
				out->bpf.launch_map_full += per[c].launch_map_full;
				out->bpf.names += per[c].names;
				out->bpf.stack_errors += per[c].stack_errors;
				out->bpf.launch_stacks_hybrid += per[c].launch_stacks_hybrid;
				out->bpf.dl_notifications += per[c].dl_notifications;
				out->bpf.dl_loads += per[c].dl_loads;
				out->bpf.dl_held += per[c].dl_held;
				out->bpf.unwind.unwinds += per[c].unwind.unwinds;
				out->bpf.unwind.fallback_no_proc += per[c].unwind.fallback_no_proc;
				out->bpf.unwind.frames += per[c].unwind.frames;
				for (int r = 0; r < UNWIND_STOP_REASONS; r++)
					out->bpf.unwind.stops[r] += per[c].unwind.stops[r];
			}
		}
		free(per);
	}
	for (uint32_t i = 0; i < g->nlibs; i++) {
		if (g->libs[i].detached)
			continue;
		out->libraries += g->libs[i].nlinks + g->libs[i].nlaunch_links > 0;
		out->probes += g->libs[i].nlinks + g->libs[i].nlaunch_links;
		out->processes += g->libs[i].nusers;
	}
	out->attach_errors = g->attach_errors;
	out->read_errors = g->read_errors;
	out->loaders = g->nloaders;
	out->dl_events = g->dl_events;
	out->dl_resumed = g->dl_resumed;
	out->dl_attach_ns_max = g->dl_attach_ns_max;
	out->dl_attach_ns_total = g->dl_attach_ns_total;
	out->hybrid_launch_stacks = g->hybrid;
}

int gputrace_library(const struct gputrace *g, uint32_t i, struct gputrace_library_info *out)
{
	const struct library *l;

	if (i >= g->nlibs)
		return -ENOENT;
	l = &g->libs[i];
	memset(out, 0, sizeof(*out));
	out->kind = l->kind;
	out->slot = l->slot;
	snprintf(out->path, sizeof(out->path), "%.*s", (int)sizeof(out->path) - 1, l->path);
	out->probes = l->nlinks + l->nlaunch_links;
	out->comm_layout = l->comm_layout;
	snprintf(out->version, sizeof(out->version), "%s", l->version);
	return 0;
}
