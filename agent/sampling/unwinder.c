/* SPDX-License-Identifier: Apache-2.0 */
/* Unwind tables per Build ID and process mappings, published to the BPF hybrid unwinder. */
#include "agent/sampling/unwinder.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "common/clock.h"
#include "common/array.h"
#include "agent/sampling/cfi.h"
#include "agent/node/host.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/report.h"

#define MAX_LOADS 16
#define PAGE_MASK_4K (~(uint64_t)0xfff)

/* A PT_LOAD segment: file offsets [offset, offset + filesz) load at vaddr. */
struct load_segment {
	uint64_t offset, vaddr, filesz;
};

enum file_state {
	FILE_PENDING, /* table not compiled yet (unwinder_work does it) */
	FILE_READY,   /* compiled: file_id != 0 has a table, 0 means none possible */
	FILE_NO_ROOM, /* compiled, but its table did not fit: retried once tables are dropped */
};

/* One file (by Build ID or content hash), with or without a loaded table. */
struct unwind_file {
	struct sysom_build_id id;
	enum file_state state;
	bool vdso;
	char *path;             /* for logs */
	uint32_t src_tgid;      /* a process mapping it at [src_start, src_end), to open it by */
	uint64_t src_start, src_end;
	uint32_t file_id;   /* key in the BPF tables map; 0 = no table */
	uint32_t nrows;
	uint64_t fdes;
	uint64_t table_base;
	struct load_segment loads[MAX_LOADS];
	uint32_t nloads;
	uint32_t refs;      /* published processes mapping it */
	uint64_t loaded_in; /* the unwinder_work call that loaded its table (0: none) */
	uint64_t unused_since;
};

/* A mapping as published: enough to publish it again once its file's table is ready. */
struct published_mapping {
	uint64_t start, end, file_offset;
	struct unwind_file *file; /* NULL: no file (anonymous, unknown) */
	uint32_t flags;
};

/* A published process: the files its BPF entry refers to, and its mappings. */
struct unwind_process {
	uint32_t tgid, generation;
	struct unwind_file **files;
	uint32_t nfiles;
	struct published_mapping *mappings;
	uint32_t nmappings;
};

struct unwinder {
	struct unwinder_options opts;
	struct sampler_unwind_maps maps;
	struct unwind_file **files;
	uint32_t nfiles, files_cap;
	struct hash_index file_index; /* Build ID → files index */
	struct unwind_process *procs;
	uint32_t nprocs, procs_cap;
	uint32_t next_file_id;
	uint32_t pending;            /* files in FILE_PENDING */
	uint64_t work_calls;         /* unwinder_work calls so far */
	struct unwind_proc *scratch; /* the BPF value being assembled (20 KiB) */
	struct unwinder_stats stats;
};

void unwinder_options_default(struct unwinder_options *opts)
{
	*opts = (struct unwinder_options){
		.proc_root = "/proc",
		.max_rows = 32u << 20, /* 256 MiB: the agent's --unwind-table-memory default */
		.max_tables = 4096,
		.unused_grace_ns = 60ULL * 1000000000ULL,
	};
}

static uint64_t id_hash(const struct sysom_build_id *id)
{
	return sysom_hash64(id->bytes, id->len, id->kind);
}

static bool same_id(const struct sysom_build_id *a, const struct sysom_build_id *b)
{
	return a->kind == b->kind && a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

struct file_lookup {
	const struct unwinder *u;
	const struct sysom_build_id *id;
};

static bool file_eq(const void *ctx, uint32_t idx)
{
	const struct file_lookup *l = ctx;

	return same_id(&l->u->files[idx]->id, l->id);
}

static struct unwind_file *find_file(const struct unwinder *u, const struct sysom_build_id *id)
{
	struct file_lookup l = { .u = u, .id = id };
	uint32_t idx = hash_index_find(&u->file_index, id_hash(id), file_eq, &l);

	return idx == HASH_INDEX_NONE ? NULL : u->files[idx];
}

/* ---- building a table ------------------------------------------------------------------------ */

static int read_loads(Elf *elf, struct unwind_file *f)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -SYSOM_ENOTELF;
	for (size_t i = 0; i < n && f->nloads < MAX_LOADS; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		f->loads[f->nloads++] = (struct load_segment){
			.offset = ph.p_offset, .vaddr = ph.p_vaddr, .filesz = ph.p_filesz
		};
	}
	return f->nloads ? 0 : -SYSOM_ENOTELF;
}

/* Copies the rows into a new BPF array and adds it to the tables map under a new id. */
static int load_table(struct unwinder *u, struct unwind_file *f, const struct cfi_table *t)
{
	LIBBPF_OPTS(bpf_map_create_opts, create, .map_flags = (__u32)u->maps.table_template_flags);
	size_t bytes = ((size_t)t->nrows * sizeof(struct unwind_row) + 4095) & ~(size_t)4095;
	uint32_t file_id = u->next_file_id;
	void *mem = MAP_FAILED;
	int fd, rc = 0;

	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "sysom_unwind", sizeof(uint32_t),
			    sizeof(struct unwind_row), t->nrows, &create);
	if (fd < 0)
		return -errno;
	mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		rc = -errno;
		goto cleanup;
	}
	memcpy(mem, t->rows, (size_t)t->nrows * sizeof(struct unwind_row));
	if (bpf_map_update_elem(u->maps.tables, &file_id, &fd, BPF_NOEXIST)) {
		rc = -errno;
		goto cleanup;
	}
	/* Ids are never reused: markers of a dropped table can then never apply to another. */
	u->next_file_id++;
	f->file_id = file_id;
	f->nrows = t->nrows;
	f->table_base = t->base;
	f->fdes = t->stats.fdes;
cleanup:
	if (mem != MAP_FAILED)
		munmap(mem, bytes);
	close(fd);
	return rc;
}

/* The vDSO is the same image in every process: compile it from our own. */
static Elf *open_vdso(void)
{
	unsigned long image = getauxval(AT_SYSINFO_EHDR);
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)image;
	size_t size;

	if (!image || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64)
		return NULL;
	size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	if (size < sizeof(*eh) || size > (1u << 20))
		return NULL;
	return elf_memory((char *)image, size);
}

/*
 * Compiles and loads the table of `f`, opened through the mapping of its source process (so a
 * deleted or replaced file is read as mapped). Returns 0 when done (failures leave file_id 0),
 * -ESRCH when the source process is gone (the file stays pending until another process that
 * maps it is published).
 */
static int build_file(struct unwinder *u, struct unwind_file *f)
{
	char path[PATH_MAX], err[256] = "";
	struct cfi_table t = { 0 };
	uint64_t started = sysom_monotonic_ns();
	Elf *elf = NULL;
	int fd = -1, rc;

	if (f->vdso) {
		elf = open_vdso();
	} else {
		snprintf(path, sizeof(path), "%s/%u/map_files/%lx-%lx", u->opts.proc_root,
			 f->src_tgid, (unsigned long)f->src_start, (unsigned long)f->src_end);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && (errno == ENOENT || errno == ESRCH)) {
			f->src_tgid = 0;
			return -ESRCH;
		}
		/* pread, not mmap: a file truncated meanwhile is a failed build, not SIGBUS. */
		if (fd >= 0)
			elf = elf_begin(fd, ELF_C_READ, NULL);
	}
	if (!elf) {
		rc = fd < 0 && errno ? -errno : -SYSOM_ENOTELF;
		snprintf(err, sizeof(err), "cannot open: %s", sysom_strerror(rc));
		goto failed;
	}
	if ((rc = read_loads(elf, f))) {
		snprintf(err, sizeof(err), "no loadable segments");
		goto failed;
	}
	rc = cfi_table_build(elf, NULL, &t, err, sizeof(err));
	if (rc)
		goto failed;
	if (t.nrows == 0) {
		u->stats.no_cfi++;
		goto cleanup;
	}
	if (u->stats.rows + t.nrows > u->opts.max_rows || u->stats.tables >= u->opts.max_tables) {
		/* Said at warning level a few times (the first names the option), then at debug:
		 * a PyTorch process alone maps hundreds of libraries. Counted either way. */
		u->stats.over_budget++;
		sysom_report(&u->opts.report,
			     u->stats.over_budget <= 3 ? SYSOM_REPORT_WARN : SYSOM_REPORT_DEBUG,
			     "unwinder: no room for the %u-row table of %s (%llu rows in %llu tables "
			     "loaded, limit %llu%s): frame pointers only there until tables are "
			     "dropped", t.nrows, f->path, (unsigned long long)u->stats.rows,
			     (unsigned long long)u->stats.tables, (unsigned long long)u->opts.max_rows,
			     u->stats.over_budget == 1 ? "; --unwind-table-memory raises it" : "");
		rc = -ENOSPC;
		goto cleanup;
	}
	if ((rc = load_table(u, f, &t))) {
		snprintf(err, sizeof(err), "cannot load into BPF: %s", sysom_strerror(rc));
		goto failed;
	}
	u->stats.tables++;
	u->stats.rows += t.nrows;
	u->stats.fdes += f->fdes;
	u->stats.builds++;
	u->stats.build_ns += sysom_monotonic_ns() - started;
	/* Large tables are named at info level: they are what sizes --unwind-table-memory. */
	sysom_report(&u->opts.report,
		     t.nrows >= UNWINDER_LARGE_TABLE_ROWS ? SYSOM_REPORT_INFO : SYSOM_REPORT_DEBUG,
		     "unwinder: %s: %u rows from %llu FDEs in %.1f ms (%llu rows loaded)", f->path,
		     t.nrows, (unsigned long long)t.stats.fdes,
		     (sysom_monotonic_ns() - started) / 1e6, (unsigned long long)u->stats.rows);
	goto cleanup;
failed:
	u->stats.build_failures++;
	sysom_report(&u->opts.report, SYSOM_REPORT_DEBUG, "unwinder: %s: %s (frame pointers only)",
		     f->path, err);
cleanup:
	cfi_table_free(&t);
	if (elf)
		elf_end(elf);
	if (fd >= 0)
		close(fd);
	return rc == -ENOSPC ? rc : 0;
}

static void set_source(struct unwind_file *f, uint32_t tgid, const struct pt_mapping *m)
{
	f->src_tgid = tgid;
	f->src_start = m->start;
	f->src_end = m->end;
}

/* The file of `obj`, created pending (its table is compiled later by unwinder_work). */
static struct unwind_file *get_file(struct unwinder *u, const struct pt_object *obj,
				    uint32_t tgid, const struct pt_mapping *m)
{
	struct unwind_file *f = find_file(u, &obj->id);

	if (f) {
		if ((f->state == FILE_PENDING && !f->src_tgid) || f->state == FILE_NO_ROOM)
			set_source(f, tgid, m); /* a live process to open it by, when it is built */
		return f;
	}
	if (SYSOM_ARRAY_RESERVE(u->files, u->files_cap, u->nfiles, 64))
		return NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->id = obj->id;
	f->state = FILE_PENDING;
	f->vdso = strcmp(obj->path, "[vdso]") == 0;
	f->path = strdup(obj->path);
	if (!f->path || hash_index_insert(&u->file_index, id_hash(&f->id), u->nfiles)) {
		free(f->path);
		free(f);
		return NULL;
	}
	u->files[u->nfiles++] = f;
	u->pending++;
	set_source(f, tgid, m);
	return f;
}

/* ---- publishing processes -------------------------------------------------------------------- */

static struct unwind_process *find_process(struct unwinder *u, uint32_t tgid)
{
	for (uint32_t i = 0; i < u->nprocs; i++)
		if (u->procs[i].tgid == tgid)
			return &u->procs[i];
	return NULL;
}

static void release_files(struct unwind_process *p)
{
	uint64_t now = sysom_monotonic_ns();

	for (uint32_t i = 0; i < p->nfiles; i++)
		if (p->files[i]->refs && --p->files[i]->refs == 0)
			p->files[i]->unused_since = now;
	free(p->files);
	p->files = NULL;
	p->nfiles = 0;
}

/* The BPF view of mapping `m` (0 file id while its file has no usable table). */
static void describe_mapping(const struct published_mapping *m, struct unwind_mapping *out)
{
	const struct unwind_file *f = m->file;

	*out = (struct unwind_mapping){ .start = m->start, .end = m->end, .flags = m->flags };
	if (!f || !f->file_id)
		return;
	for (uint32_t i = 0; i < f->nloads; i++) {
		const struct load_segment *l = &f->loads[i];
		uint64_t seg_start = l->offset & PAGE_MASK_4K;
		if (m->file_offset < seg_start || m->file_offset >= l->offset + l->filesz)
			continue;
		/* vaddr(addr) = addr - start + file_offset - p_offset + p_vaddr; row pc =
		 * vaddr - table base. */
		out->bias = m->start - m->file_offset + l->offset - l->vaddr + f->table_base;
		out->file_id = f->file_id;
		out->nrows = f->nrows;
		return;
	}
}

/* Writes the process's BPF entry from its stored mappings. 0 or -errno (counted). */
static int write_process(struct unwinder *u, struct unwind_process *p)
{
	memset(u->scratch, 0, sizeof(*u->scratch));
	u->scratch->generation = p->generation;
	u->scratch->count = p->nmappings;
	for (uint32_t i = 0; i < p->nmappings; i++)
		describe_mapping(&p->mappings[i], &u->scratch->mappings[i]);
	if (bpf_map_update_elem(u->maps.procs, &p->tgid, u->scratch, BPF_ANY)) {
		u->stats.publish_failures++;
		return -errno;
	}
	u->stats.publishes++;
	return 0;
}

static struct unwind_process *add_process(struct unwinder *u, uint32_t tgid)
{
	if (SYSOM_ARRAY_RESERVE(u->procs, u->procs_cap, u->nprocs, 64))
		return NULL;
	struct unwind_process *p = &u->procs[u->nprocs++];
	*p = (struct unwind_process){ .tgid = tgid };
	return p;
}

int unwinder_publish(struct unwinder *u, const struct pt_process *proc)
{
	struct unwind_process *p = find_process(u, proc->tgid);
	uint32_t n = proc->mapping_count < UNWIND_MAX_MAPPINGS ? proc->mapping_count
							       : UNWIND_MAX_MAPPINGS;
	struct unwind_file **files = calloc(n ? n : 1, sizeof(*files));
	struct published_mapping *maps = calloc(n ? n : 1, sizeof(*maps));
	uint32_t nfiles = 0;

	if (!files || !maps || (!p && !(p = add_process(u, proc->tgid)))) {
		free(files);
		free(maps);
		return -ENOMEM;
	}
	u->stats.mappings_dropped += proc->mapping_count - n;
	for (uint32_t i = 0; i < n; i++) {
		const struct pt_mapping *m = &proc->mappings[i];
		const struct pt_object *obj = m->object;
		struct unwind_file *f = NULL;

		if (obj->id.kind == SYSOM_OBJECT_ELF || obj->id.kind == SYSOM_OBJECT_FILE_HASH) {
			f = get_file(u, obj, proc->tgid, m);
			bool seen = false;
			for (uint32_t j = 0; f && j < nfiles && !seen; j++)
				seen = files[j] == f;
			if (f && !seen)
				files[nfiles++] = f;
		}
		maps[i] = (struct published_mapping){
			.start = m->start,
			.end = m->end,
			.file_offset = m->file_offset,
			.file = f,
			.flags = obj->id.kind == SYSOM_OBJECT_ANON ? UNWIND_MAPPING_ANON : 0,
		};
	}
	/* Take the new references before dropping the old ones: a file both lists share must
	 * not look unused in between. */
	for (uint32_t i = 0; i < nfiles; i++)
		files[i]->refs++;
	release_files(p);
	free(p->mappings);
	p->generation = proc->generation;
	p->files = files;
	p->nfiles = nfiles;
	p->mappings = maps;
	p->nmappings = n;
	return write_process(u, p);
}

uint32_t unwinder_work(struct unwinder *u, uint64_t budget_ns)
{
	uint64_t started = sysom_monotonic_ns(), call = ++u->work_calls;
	bool built = false, loaded = false;

	/* Newest first: the files of a process that just started (a training job being launched)
	 * get their tables before the long tail of everything else the node mapped earlier, which
	 * on a busy node (or a test process linking fifty libraries) would otherwise delay them by
	 * a second or more; each file is built once, so the older ones still all get their turn. */
	for (uint32_t i = u->nfiles; i-- > 0 && u->pending;) {
		struct unwind_file *f = u->files[i];
		if (f->state != FILE_PENDING || (!f->vdso && !f->src_tgid))
			continue;
		if (built && sysom_monotonic_ns() - started >= budget_ns)
			break;
		int rc = build_file(u, f);
		if (rc == -ESRCH)
			continue; /* its source process is gone: wait for another */
		f->state = rc == -ENOSPC ? FILE_NO_ROOM : FILE_READY;
		u->pending--;
		built = true;
		if (f->file_id) {
			f->loaded_in = call;
			loaded = true;
		}
	}
	/* One pass: every process mapping a file loaded by this call gets its entry rewritten. */
	for (uint32_t j = 0; loaded && j < u->nprocs; j++) {
		struct unwind_process *p = &u->procs[j];
		for (uint32_t k = 0; k < p->nfiles; k++) {
			if (p->files[k]->loaded_in == call) {
				write_process(u, p);
				break;
			}
		}
	}
	return u->pending;
}

void unwinder_forget(struct unwinder *u, const struct pt_process *proc)
{
	struct unwind_process *p = find_process(u, proc->tgid);

	/* A newer incarnation of the pid may own the entry already. */
	if (!p || p->generation != proc->generation)
		return;
	bpf_map_delete_elem(u->maps.procs, &proc->tgid);
	release_files(p);
	free(p->mappings);
	*p = u->procs[--u->nprocs];
}

/* Room was made: the files that found none get another try (those still mapped). */
static void retry_no_room(struct unwinder *u)
{
	for (uint32_t i = 0; i < u->nfiles; i++) {
		struct unwind_file *f = u->files[i];
		if (f->state == FILE_NO_ROOM && f->refs) {
			f->state = FILE_PENDING;
			u->pending++;
			u->stats.no_room_retries++;
		}
	}
}

void unwinder_sweep(struct unwinder *u, uint64_t now_ns)
{
	uint32_t kept = 0;
	bool removed = false, freed = false;

	for (uint32_t i = 0; i < u->nfiles; i++) {
		struct unwind_file *f = u->files[i];
		if (f->refs || now_ns - f->unused_since < u->opts.unused_grace_ns) {
			u->files[kept++] = f;
			continue;
		}
		if (f->file_id) {
			bpf_map_delete_elem(u->maps.tables, &f->file_id);
			freed = true;
			u->stats.tables--;
			u->stats.rows -= f->nrows;
			u->stats.fdes -= f->fdes;
			u->stats.tables_dropped++;
		}
		if (f->state == FILE_PENDING)
			u->pending--;
		free(f->path);
		free(f);
		removed = true;
	}
	u->nfiles = kept;
	if (removed) {
		hash_index_clear(&u->file_index);
		for (uint32_t i = 0; i < u->nfiles; i++)
			hash_index_insert(&u->file_index, id_hash(&u->files[i]->id), i);
	}
	if (freed)
		retry_no_room(u);
}

void unwinder_set_max_rows(struct unwinder *u, uint64_t max_rows)
{
	bool raised = max_rows > u->opts.max_rows;

	u->opts.max_rows = max_rows; /* lowered: later loads only; loaded tables stay */
	if (raised)
		retry_no_room(u);
}

void unwinder_stats_read(const struct unwinder *u, struct unwinder_stats *out)
{
	*out = u->stats;
	out->files = u->nfiles;
	out->processes = u->nprocs;
	out->pending = u->pending;
}

int unwinder_file_info(const struct unwinder *u, const struct sysom_build_id *id,
		       struct unwinder_file_info *out)
{
	const struct unwind_file *f = find_file(u, id);

	if (!f)
		return -ENOENT;
	*out = (struct unwinder_file_info){
		.file_id = f->file_id, .nrows = f->nrows, .refs = f->refs,
		.pending = f->state == FILE_PENDING,
	};
	return 0;
}

int unwinder_new(const struct unwinder_options *opts, const struct sampler_unwind_maps *maps,
		 struct unwinder **out)
{
	struct unwinder *u;

	if (maps->tables < 0 || maps->procs < 0 || !opts->max_rows || !opts->max_tables)
		return -EINVAL;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->opts = *opts;
	if (!u->opts.proc_root)
		u->opts.proc_root = "/proc";
	u->maps = *maps;
	u->next_file_id = 1;
	u->scratch = malloc(sizeof(*u->scratch));
	if (!u->scratch || hash_index_init(&u->file_index, 256)) {
		unwinder_free(u);
		return -ENOMEM;
	}
	*out = u;
	return 0;
}

void unwinder_free(struct unwinder *u)
{
	if (!u)
		return;
	for (uint32_t i = 0; i < u->nprocs; i++) {
		bpf_map_delete_elem(u->maps.procs, &u->procs[i].tgid);
		free(u->procs[i].files);
		free(u->procs[i].mappings);
	}
	for (uint32_t i = 0; i < u->nfiles; i++) {
		if (u->files[i]->file_id)
			bpf_map_delete_elem(u->maps.tables, &u->files[i]->file_id);
		free(u->files[i]->path);
		free(u->files[i]);
	}
	free(u->procs);
	free(u->files);
	free(u->scratch);
	hash_index_free(&u->file_index);
	free(u);
}
