/* SPDX-License-Identifier: Apache-2.0 */
/* Unwind tables per Build ID and process mappings, published to the BPF hybrid unwinder. */
#include "agent/unwinder.h"

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

#include "agent/cfi.h"
#include "agent/host.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"

#define MAX_LOADS 16
#define PAGE_MASK_4K (~(uint64_t)0xfff)

/* A PT_LOAD segment: file offsets [offset, offset + filesz) load at vaddr. */
struct load_segment {
	uint64_t offset, vaddr, filesz;
};

/* One file (by Build ID or content hash), with or without a loaded table. */
struct unwind_file {
	struct sysom_build_id id;
	uint32_t file_id;   /* key in the BPF tables map; 0 = no table */
	uint32_t nrows;
	uint64_t fdes;
	uint64_t table_base;
	struct load_segment loads[MAX_LOADS];
	uint32_t nloads;
	uint32_t refs;      /* published processes mapping it */
	uint64_t unused_since;
};

/* A published process: the files its BPF entry refers to. */
struct unwind_process {
	uint32_t tgid, generation;
	struct unwind_file **files;
	uint32_t nfiles;
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
	struct unwind_proc *scratch; /* the BPF value being assembled (20 KiB) */
	struct unwinder_stats stats;
};

void unwinder_options_default(struct unwinder_options *opts)
{
	*opts = (struct unwinder_options){
		.proc_root = "/proc",
		.max_rows = 8u << 20,
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

/* Compiles and loads the table of `f`, opened through the mapping [start, end) of `tgid`
 * (so a deleted or replaced file is read as mapped). Failures leave f->file_id 0. */
static void build_file(struct unwinder *u, struct unwind_file *f, const struct pt_object *obj,
		       uint32_t tgid, const struct pt_mapping *m)
{
	char path[PATH_MAX], err[256] = "";
	struct cfi_table t = { 0 };
	uint64_t started = host_monotonic_ns();
	Elf *elf = NULL;
	int fd = -1, rc;

	if (strcmp(obj->path, "[vdso]") == 0) {
		elf = open_vdso();
	} else {
		snprintf(path, sizeof(path), "%s/%u/map_files/%lx-%lx", u->opts.proc_root, tgid,
			 (unsigned long)m->start, (unsigned long)m->end);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
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
		u->stats.over_budget++;
		log_warn("unwinder: no room for the %u-row table of %s (%llu rows loaded, limit "
			 "%llu): frame pointers only there", t.nrows, obj->path,
			 (unsigned long long)u->stats.rows, (unsigned long long)u->opts.max_rows);
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
	u->stats.build_ns += host_monotonic_ns() - started;
	log_debug("unwinder: %s: %u rows from %llu FDEs in %.1f ms", obj->path, t.nrows,
		  (unsigned long long)t.stats.fdes, (host_monotonic_ns() - started) / 1e6);
	goto cleanup;
failed:
	u->stats.build_failures++;
	log_debug("unwinder: %s: %s (frame pointers only)", obj->path, err);
cleanup:
	cfi_table_free(&t);
	if (elf)
		elf_end(elf);
	if (fd >= 0)
		close(fd);
}

static struct unwind_file *get_file(struct unwinder *u, const struct pt_object *obj,
				    uint32_t tgid, const struct pt_mapping *m)
{
	struct unwind_file *f = find_file(u, &obj->id);

	if (f)
		return f;
	if (u->nfiles == u->files_cap) {
		uint32_t cap = u->files_cap ? u->files_cap * 2 : 64;
		struct unwind_file **grown = realloc(u->files, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		u->files = grown;
		u->files_cap = cap;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->id = obj->id;
	if (hash_index_insert(&u->file_index, id_hash(&f->id), u->nfiles)) {
		free(f);
		return NULL;
	}
	u->files[u->nfiles++] = f;
	build_file(u, f, obj, tgid, m);
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
	uint64_t now = host_monotonic_ns();

	for (uint32_t i = 0; i < p->nfiles; i++)
		if (p->files[i]->refs && --p->files[i]->refs == 0)
			p->files[i]->unused_since = now;
	free(p->files);
	p->files = NULL;
	p->nfiles = 0;
}

/* The BPF view of mapping `m` backed by `f` (0 file id when there is no usable table). */
static void describe_mapping(const struct pt_mapping *m, const struct unwind_file *f,
			     struct unwind_mapping *out)
{
	*out = (struct unwind_mapping){ .start = m->start, .end = m->end };
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

int unwinder_publish(struct unwinder *u, const struct pt_process *proc)
{
	struct unwind_process *p = find_process(u, proc->tgid);
	struct unwind_file **files = NULL;
	uint32_t nfiles = 0, n = 0;
	int rc = 0;

	files = calloc(proc->mapping_count ? proc->mapping_count : 1, sizeof(*files));
	if (!files)
		return -ENOMEM;
	memset(u->scratch, 0, sizeof(*u->scratch));
	u->scratch->generation = proc->generation;
	for (uint32_t i = 0; i < proc->mapping_count; i++) {
		const struct pt_mapping *m = &proc->mappings[i];
		const struct pt_object *obj = m->object;
		struct unwind_file *f = NULL;

		if (n == UNWIND_MAX_MAPPINGS) {
			u->stats.mappings_dropped += proc->mapping_count - i;
			break;
		}
		if (obj->id.kind == SYSOM_OBJECT_ELF || obj->id.kind == SYSOM_OBJECT_FILE_HASH) {
			f = get_file(u, obj, proc->tgid, m);
			if (f) {
				bool seen = false;
				for (uint32_t j = 0; j < nfiles && !seen; j++)
					seen = files[j] == f;
				if (!seen)
					files[nfiles++] = f;
			}
		}
		describe_mapping(m, f, &u->scratch->mappings[n]);
		if (obj->id.kind == SYSOM_OBJECT_ANON)
			u->scratch->mappings[n].flags = UNWIND_MAPPING_ANON;
		n++;
	}
	u->scratch->count = n;
	if (bpf_map_update_elem(u->maps.procs, &proc->tgid, u->scratch, BPF_ANY)) {
		rc = -errno;
		u->stats.publish_failures++;
		free(files);
		return rc;
	}
	u->stats.publishes++;
	for (uint32_t i = 0; i < nfiles; i++)
		files[i]->refs++;
	if (!p) {
		if (u->nprocs == u->procs_cap) {
			uint32_t cap = u->procs_cap ? u->procs_cap * 2 : 64;
			struct unwind_process *grown = realloc(u->procs, cap * sizeof(*grown));
			if (!grown) {
				/* Published but untracked: withdraw it rather than leak refs. */
				for (uint32_t i = 0; i < nfiles; i++)
					files[i]->refs--;
				bpf_map_delete_elem(u->maps.procs, &proc->tgid);
				free(files);
				return -ENOMEM;
			}
			u->procs = grown;
			u->procs_cap = cap;
		}
		p = &u->procs[u->nprocs++];
		*p = (struct unwind_process){ .tgid = proc->tgid };
	} else {
		release_files(p);
	}
	p->generation = proc->generation;
	p->files = files;
	p->nfiles = nfiles;
	return 0;
}

void unwinder_forget(struct unwinder *u, const struct pt_process *proc)
{
	struct unwind_process *p = find_process(u, proc->tgid);

	/* A newer incarnation of the pid may own the entry already. */
	if (!p || p->generation != proc->generation)
		return;
	bpf_map_delete_elem(u->maps.procs, &proc->tgid);
	release_files(p);
	*p = u->procs[--u->nprocs];
}

void unwinder_sweep(struct unwinder *u, uint64_t now_ns)
{
	uint32_t kept = 0;
	bool removed = false;

	for (uint32_t i = 0; i < u->nfiles; i++) {
		struct unwind_file *f = u->files[i];
		if (f->refs || now_ns - f->unused_since < u->opts.unused_grace_ns) {
			u->files[kept++] = f;
			continue;
		}
		if (f->file_id) {
			bpf_map_delete_elem(u->maps.tables, &f->file_id);
			u->stats.tables--;
			u->stats.rows -= f->nrows;
			u->stats.fdes -= f->fdes;
			u->stats.tables_dropped++;
		}
		free(f);
		removed = true;
	}
	u->nfiles = kept;
	if (removed) {
		hash_index_clear(&u->file_index);
		for (uint32_t i = 0; i < u->nfiles; i++)
			hash_index_insert(&u->file_index, id_hash(&u->files[i]->id), i);
	}
}

void unwinder_stats_read(const struct unwinder *u, struct unwinder_stats *out)
{
	*out = u->stats;
	out->files = u->nfiles;
	out->processes = u->nprocs;
}

int unwinder_file_info(const struct unwinder *u, const struct sysom_build_id *id,
		       struct unwinder_file_info *out)
{
	const struct unwind_file *f = find_file(u, id);

	if (!f)
		return -ENOENT;
	*out = (struct unwinder_file_info){ .file_id = f->file_id, .nrows = f->nrows, .refs = f->refs };
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
	}
	for (uint32_t i = 0; i < u->nfiles; i++) {
		if (u->files[i]->file_id)
			bpf_map_delete_elem(u->maps.tables, &u->files[i]->file_id);
		free(u->files[i]);
	}
	free(u->procs);
	free(u->files);
	free(u->scratch);
	hash_index_free(&u->file_index);
	free(u);
}
