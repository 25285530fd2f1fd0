/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol file writer, ELF input: build IDs, executable segments, .symtab and .dynsym, DWARF. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/elf_buildid.h"
#include "common/error.h"
#include "symrepo/symfile.h"
#include "symrepo/symfile_build.h"
#include "symrepo/symfile_elf.h"
#include "symrepo/symfile_format.h"

#define MAX_SECTIONS 65536u            /* section headers of one ELF file */
#define MAX_SEGMENTS 65536u            /* program headers */
#define MAX_SYMBOLS_PER_TABLE (1u << 26) /* entries of one .symtab/.dynsym */
#define LIBDW_BYTES_PER_ROW 64         /* what libdw keeps per parsed line row (measured ~62) */

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static bool elf_ok;

static void elf_init(void)
{
	elf_ok = elf_version(EV_CURRENT) != EV_NONE;
}

/* What we keep of a section header: its address range and whether it holds code. */
struct secinfo {
	uint64_t addr, end;
	bool exec;
};

/* One ELF file opened with libelf (ELF_C_READ_MMAP: only the pages read are touched). */
struct input {
	const char *path;
	int fd;
	Elf *elf;
	GElf_Ehdr ehdr;
	size_t shnum;
	struct secinfo *secs; /* shnum entries */
};

/* A function symbol candidate from .symtab or .dynsym. */
struct cand {
	uint64_t start, size, sec_end;
	const char *name; /* borrowed from the mapped string table */
	uint8_t bind;     /* 3 global/unique, 2 weak, 1 local, 0 other */
	uint8_t type;     /* 1 FUNC/IFUNC, 0 sized NOTYPE */
	uint8_t source;   /* SYMF_FN_SOURCE_SYMTAB / _DYNSYM */
};

struct cands {
	struct cand *v;
	uint32_t n, cap;
};

static int open_input(struct symb *b, struct input *in, const char *path, const char *role)
{
	size_t phnum;
	struct stat st;

	in->path = path;
	in->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (in->fd < 0)
		return symb__fail(b, -errno, "open %s %s: %s", role, path, strerror(errno));
	if (fstat(in->fd, &st) < 0)
		return symb__fail(b, -errno, "fstat %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return symb__fail(b, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
				  "%s %s is not a regular file", role, path);
	in->elf = elf_begin(in->fd, ELF_C_READ_MMAP, NULL);
	if (!in->elf || elf_kind(in->elf) != ELF_K_ELF || !gelf_getehdr(in->elf, &in->ehdr))
		return symb__fail(b, -SYSOM_ENOTELF, "%s %s is not an ELF file", role, path);
	if (in->ehdr.e_type != ET_EXEC && in->ehdr.e_type != ET_DYN)
		return symb__fail(b, -EINVAL,
				  "%s %s is not an executable or shared object (e_type %u)", role,
				  path, in->ehdr.e_type);
	if (elf_getshdrnum(in->elf, &in->shnum) != 0 || elf_getphdrnum(in->elf, &phnum) != 0)
		return symb__fail(b, -SYSOM_ECORRUPT, "%s: bad ELF headers: %s", path,
				  elf_errmsg(-1));
	if (in->shnum > MAX_SECTIONS || phnum > MAX_SEGMENTS)
		return symb__fail(b, -SYSOM_ELIMIT, "%s: %zu sections, %zu segments (limit %u)",
				  path, in->shnum, phnum, MAX_SECTIONS);
	in->secs = symb__alloc(b, (in->shnum + 1) * sizeof(*in->secs));
	if (!in->secs)
		return b->error;
	for (size_t i = 0; i < in->shnum; i++) {
		GElf_Shdr sh;
		Elf_Scn *scn = elf_getscn(in->elf, i);

		in->secs[i] = (struct secinfo){ 0, 0, false };
		if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_addr + sh.sh_size < sh.sh_addr)
			continue;
		in->secs[i].addr = sh.sh_addr;
		in->secs[i].end = sh.sh_addr + sh.sh_size;
		in->secs[i].exec = (sh.sh_flags & SHF_EXECINSTR) && (sh.sh_flags & SHF_ALLOC) &&
				   sh.sh_size > 0;
	}
	return 0;
}

static void close_input(struct symb *b, struct input *in)
{
	if (in->elf)
		elf_end(in->elf);
	if (in->fd >= 0)
		close(in->fd);
	symb__free(b, in->secs);
	in->elf = NULL;
	in->fd = -1;
	in->secs = NULL;
}

/* Executable PT_LOAD segments (file offset → vaddr), and the executable address ranges. */
static int read_segments(struct symb *b, const struct input *in, struct symb_run **runs_out,
			 uint32_t *nruns_out)
{
	size_t phnum = 0, nsec_exec = 0;
	struct symb_run *runs = NULL;
	uint32_t n = 0;

	elf_getphdrnum(in->elf, &phnum);
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(in->elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    !(ph.p_flags & PF_X) || ph.p_filesz == 0)
			continue;
		if (symb__add_segment(b, ph.p_offset, ph.p_vaddr, ph.p_filesz) < 0)
			return b->error;
	}
	for (size_t i = 0; i < in->shnum; i++)
		nsec_exec += in->secs[i].exec;
	runs = symb__alloc(b, (nsec_exec + phnum + 1) * sizeof(*runs));
	if (!runs)
		return b->error;
	if (nsec_exec) {
		for (size_t i = 0; i < in->shnum; i++) {
			if (in->secs[i].exec)
				runs[n++] = (struct symb_run){ in->secs[i].addr, in->secs[i].end };
		}
	} else {
		/* No section headers: the executable segments stand in for the sections. */
		for (size_t i = 0; i < phnum; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(in->elf, (int)i, &ph) && ph.p_type == PT_LOAD &&
			    (ph.p_flags & PF_X) && ph.p_memsz &&
			    ph.p_vaddr + ph.p_memsz > ph.p_vaddr)
				runs[n++] =
					(struct symb_run){ ph.p_vaddr, ph.p_vaddr + ph.p_memsz };
		}
	}
	/* Sort (insertion: a handful of entries) and merge. */
	for (uint32_t i = 1; i < n; i++) {
		struct symb_run r = runs[i];
		uint32_t j = i;
		for (; j > 0 && runs[j - 1].start > r.start; j--)
			runs[j] = runs[j - 1];
		runs[j] = r;
	}
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (m && runs[i].start <= runs[m - 1].end) {
			if (runs[i].end > runs[m - 1].end)
				runs[m - 1].end = runs[i].end;
		} else {
			runs[m++] = runs[i];
		}
	}
	*runs_out = runs;
	*nruns_out = m;
	return 0;
}

static Elf_Scn *find_section(Elf *elf, Elf64_Word type, size_t *index)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		if (gelf_getshdr(scn, &sh) && sh.sh_type == type) {
			*index = elf_ndxscn(scn);
			return scn;
		}
	}
	return NULL;
}

/* The SHT_SYMTAB_SHNDX section of symbol table `symtab_index`, if any. */
static Elf_Data *find_xindex(Elf *elf, size_t symtab_index)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB_SHNDX &&
		    sh.sh_link == symtab_index)
			return elf_getdata(scn, NULL);
	}
	return NULL;
}

static uint8_t bind_rank(unsigned bind)
{
	switch (bind) {
	case STB_GLOBAL:
	case STB_GNU_UNIQUE:
		return 3;
	case STB_WEAK:
		return 2;
	case STB_LOCAL:
		return 1;
	default:
		return 0;
	}
}

/*
 * Reads one symbol table: function symbols (STT_FUNC, STT_GNU_IFUNC, sized STT_NOTYPE)
 * defined in executable sections become candidates; other symbols there become bounds for
 * sizeless functions. Only the table and its string table are read.
 */
static int read_symbols(struct symb *b, const struct input *in, Elf_Scn *scn, size_t index,
			uint8_t source, struct cands *out)
{
	GElf_Shdr sh;
	Elf_Data *data, *xndx;
	size_t entsize = gelf_fsize(in->elf, ELF_T_SYM, 1, EV_CURRENT);

	if (!gelf_getshdr(scn, &sh) || !(data = elf_getdata(scn, NULL)) || !entsize)
		return 0; /* unreadable table: as if absent */
	size_t n = data->d_size / entsize;
	if (n > MAX_SYMBOLS_PER_TABLE)
		return symb__fail(b, -SYSOM_ELIMIT, "%s: %zu symbols (limit %u)", in->path, n,
				  MAX_SYMBOLS_PER_TABLE);
	xndx = find_xindex(in->elf, index);
	for (size_t i = 1; i < n && !b->error; i++) {
		GElf_Sym sym;
		Elf32_Word xshndx = 0;

		if (!gelf_getsymshndx(data, xndx, (int)i, &sym, &xshndx))
			continue;
		unsigned type = GELF_ST_TYPE(sym.st_info);
		if (type == STT_SECTION || type == STT_FILE || type == STT_TLS)
			continue;
		size_t shndx = sym.st_shndx == SHN_XINDEX ? xshndx : sym.st_shndx;
		if (shndx == SHN_UNDEF ||
		    (sym.st_shndx >= SHN_LORESERVE && sym.st_shndx != SHN_XINDEX) ||
		    shndx >= in->shnum || !in->secs[shndx].exec)
			continue;
		const char *name = elf_strptr(in->elf, sh.sh_link, sym.st_name);
		if (!name || !*name || name[0] == '$')
			continue; /* unnamed, or an ARM/AArch64 mapping symbol */
		uint64_t value = sym.st_value;
		if (in->ehdr.e_machine == EM_ARM && type == STT_FUNC)
			value &= ~(uint64_t)1; /* Thumb bit */
		const struct secinfo *sec = &in->secs[shndx];
		if (value < sec->addr || value >= sec->end)
			continue;
		bool func = type == STT_FUNC || type == STT_GNU_IFUNC ||
			    (type == STT_NOTYPE && sym.st_size > 0);
		if (!func) {
			symb__add_bound(b, value);
			continue;
		}
		uint64_t size = sym.st_size;
		if (size > sec->end - value)
			size = sec->end - value; /* never beyond its section */
		struct cand *v = symb__grow(b, out->v, &out->cap, sizeof(*v), (uint64_t)out->n + 1);
		if (!v)
			return b->error;
		out->v = v;
		v[out->n++] = (struct cand){ .start = value, .size = size, .sec_end = sec->end,
					     .name = name,
					     .bind = bind_rank(GELF_ST_BIND(sym.st_info)),
					     .type = type != STT_NOTYPE, .source = source };
	}
	return b->error;
}

/* ---- PLT stubs: "name@plt" -------------------------------------------------------------- */

#define MAX_PLT_ENTRIES (1u << 20)      /* stubs named in one file */
#define MAX_PLT_SLOTS (1u << 22)        /* GOT slots with a symbol (JUMP_SLOT, GLOB_DAT) */
#define PLT_NAME_SUFFIX "@plt"

/* A GOT slot that the dynamic linker fills with a symbol's address. */
struct plt_slot {
	uint64_t got;     /* r_offset */
	const char *name; /* borrowed from .dynstr */
};

struct plt_names {
	struct plt_slot *slots; /* sorted by got */
	uint32_t nslots, cap;
	const char **jump;      /* .rela.plt's names by relocation index (NULL: none) */
	uint32_t njump;
	char *strings;          /* "name@plt" strings of the candidates, one block */
	size_t strings_len, strings_cap;
};

static int cmp_slot(const void *pa, const void *pb)
{
	const struct plt_slot *a = pa, *b = pb;

	return (a->got > b->got) - (a->got < b->got);
}

static const char *slot_name(const struct plt_names *p, uint64_t got)
{
	uint32_t lo = 0, hi = p->nslots;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (p->slots[mid].got < got)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->nslots && p->slots[lo].got == got ? p->slots[lo].name : NULL;
}

/*
 * The symbols of one relocation section against .dynsym: R_X86_64_JUMP_SLOT and
 * R_X86_64_GLOB_DAT name the GOT slot they fill; .rela.plt's are also kept by index (the
 * lazy-binding stub pushes its index). Relocations naming no symbol (IRELATIVE, RELATIVE)
 * or a symbol outside the table are left out.
 */
static int plt_read_relocs(struct symb *b, const struct input *in, Elf_Scn *scn,
			   const GElf_Shdr *sh, bool jump_table, struct plt_names *p)
{
	Elf_Scn *symscn = elf_getscn(in->elf, sh->sh_link);
	GElf_Shdr symsh;
	Elf_Data *rel = elf_getdata(scn, NULL), *syms;
	size_t relsize = gelf_fsize(in->elf, ELF_T_RELA, 1, EV_CURRENT);
	size_t symsize = gelf_fsize(in->elf, ELF_T_SYM, 1, EV_CURRENT);

	if (!symscn || !gelf_getshdr(symscn, &symsh) || symsh.sh_type != SHT_DYNSYM || !rel ||
	    !relsize || !symsize || !(syms = elf_getdata(symscn, NULL)))
		return 0; /* not against .dynsym, or unreadable: nothing to name */
	size_t n = rel->d_size / relsize, nsyms = syms->d_size / symsize;
	if (n > MAX_PLT_SLOTS)
		return symb__fail(b, -SYSOM_ELIMIT, "%s: %zu dynamic relocations (limit %u)",
				  in->path, n, MAX_PLT_SLOTS);
	if (jump_table) {
		p->jump = symb__alloc(b, (n ? n : 1) * sizeof(*p->jump));
		if (!p->jump)
			return b->error;
		p->njump = (uint32_t)n;
	}
	for (size_t i = 0; i < n; i++) {
		GElf_Rela r;
		GElf_Sym sym;
		const char *name;

		if (!gelf_getrela(rel, (int)i, &r))
			continue;
		uint64_t type = GELF_R_TYPE(r.r_info), index = GELF_R_SYM(r.r_info);
		if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || index == 0 ||
		    index >= nsyms || !gelf_getsym(syms, (int)index, &sym) ||
		    !(name = elf_strptr(in->elf, symsh.sh_link, sym.st_name)) || !*name)
			continue;
		if (jump_table)
			p->jump[i] = name;
		if (p->nslots >= MAX_PLT_SLOTS)
			continue;
		struct plt_slot *v = symb__grow(b, p->slots, &p->cap, sizeof(*v),
						 (uint64_t)p->nslots + 1);
		if (!v)
			return b->error;
		p->slots = v;
		v[p->nslots++] = (struct plt_slot){ r.r_offset, name };
	}
	return 0;
}

/*
 * Which symbol one x86-64 PLT stub of `len` bytes at `addr` reaches: the GOT slot of its
 * indirect jump (`[endbr64] [bnd] jmp *disp32(%rip)`: .plt without IBT, .plt.sec, .plt.got),
 * else the .rela.plt index it pushes (`[endbr64] push imm32`: the lazy-binding half of an IBT
 * .plt). The .plt header jumps through a slot no relocation names: NULL.
 */
static const char *plt_stub_target(const struct plt_names *p, const uint8_t *code, size_t len,
				   uint64_t addr)
{
	size_t i = 0;

	if (len >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa)
		i = 4; /* endbr64 */
	if (i < len && code[i] == 0xf2)
		i++; /* bnd */
	if (i + 6 <= len && code[i] == 0xff && code[i + 1] == 0x25) {
		int32_t disp;
		memcpy(&disp, code + i + 2, sizeof(disp));
		return slot_name(p, addr + i + 6 + (uint64_t)(int64_t)disp);
	}
	if (i + 5 <= len && code[i] == 0x68) {
		uint32_t index;
		memcpy(&index, code + i + 1, sizeof(index));
		return index < p->njump ? p->jump[index] : NULL;
	}
	return NULL;
}

/* Appends "name@plt" to p->strings; its offset, or SIZE_MAX on failure (b->error set). */
static size_t plt_name_add(struct symb *b, struct plt_names *p, const char *name)
{
	size_t n = strlen(name), need = n + sizeof(PLT_NAME_SUFFIX);
	size_t off = p->strings_len;

	if (need > p->strings_cap - p->strings_len) {
		size_t cap = p->strings_cap ? p->strings_cap : 4096;
		while (cap - p->strings_len < need)
			cap *= 2;
		char *v = symb__alloc(b, cap);
		if (!v)
			return SIZE_MAX;
		if (p->strings_len)
			memcpy(v, p->strings, p->strings_len);
		symb__free(b, p->strings);
		p->strings = v;
		p->strings_cap = cap;
	}
	memcpy(p->strings + off, name, n);
	memcpy(p->strings + off + n, PLT_NAME_SUFFIX, sizeof(PLT_NAME_SUFFIX));
	p->strings_len += need;
	return off;
}

/*
 * PLT stubs have no symbol of their own, so a sample in one (a call into a shared library
 * before or instead of the lazy binding's jump) would stay file+offset. As perf does, each
 * stub of .plt, .plt.sec and .plt.got becomes a function "name@plt", sized one entry, from
 * the relocation its jump goes through (x86-64 only; other machines keep file+offset).
 * The candidates' names point into p->strings (offsets until every stub is read).
 */
static int read_plt(struct symb *b, const struct input *in, struct plt_names *p,
		    struct cands *out)
{
	size_t shstrndx, first = out->n, added = 0;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	if (in->ehdr.e_machine != EM_X86_64 || elf_getshdrstrndx(in->elf, &shstrndx) < 0)
		return 0;
	while ((scn = elf_nextscn(in->elf, scn)) != NULL && !b->error) {
		const char *name;
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_RELA &&
		    (name = elf_strptr(in->elf, shstrndx, sh.sh_name)) != NULL &&
		    plt_read_relocs(b, in, scn, &sh, strcmp(name, ".rela.plt") == 0, p) < 0)
			return b->error;
	}
	if (!p->nslots && !p->njump)
		return 0;
	symb__sort(p->slots, p->nslots, sizeof(*p->slots), cmp_slot);
	while ((scn = elf_nextscn(in->elf, scn)) != NULL && !b->error) {
		const char *sname;
		Elf_Data *data;
		size_t index = elf_ndxscn(scn);

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS || index >= in->shnum ||
		    !in->secs[index].exec ||
		    !(sname = elf_strptr(in->elf, shstrndx, sh.sh_name)) ||
		    (strcmp(sname, ".plt") && strcmp(sname, ".plt.sec") && strcmp(sname, ".plt.got")) ||
		    !(data = elf_getdata(scn, NULL)) || !data->d_buf)
			continue;
		size_t stride = sh.sh_entsize == 8 || sh.sh_entsize == 16 ? sh.sh_entsize : 16;
		size_t size = data->d_size < sh.sh_size ? data->d_size : sh.sh_size;
		for (size_t off = 0; off + stride <= size; off += stride) {
			const char *target = plt_stub_target(p, (const uint8_t *)data->d_buf + off,
							     stride, sh.sh_addr + off);
			if (!target)
				continue;
			if (added >= MAX_PLT_ENTRIES)
				return symb__fail(b, -SYSOM_ELIMIT, "%s: over %u PLT entries",
						  in->path, MAX_PLT_ENTRIES);
			size_t name_off = plt_name_add(b, p, target);
			struct cand *v = name_off == SIZE_MAX
						 ? NULL
						 : symb__grow(b, out->v, &out->cap, sizeof(*v),
							      (uint64_t)out->n + 1);
			if (!v)
				return b->error;
			out->v = v;
			v[out->n++] = (struct cand){ .start = sh.sh_addr + off, .size = stride,
						     .sec_end = in->secs[index].end,
						     .name = (const char *)(uintptr_t)name_off,
						     .bind = 3, .type = 1,
						     .source = SYMF_FN_SOURCE_DYNSYM };
			added++;
		}
	}
	for (size_t i = first; i < out->n; i++) /* the strings stop moving: offsets to names */
		out->v[i].name = p->strings + (uintptr_t)out->v[i].name;
	return b->error;
}

static size_t leading_underscores(const char *s)
{
	size_t n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

/* A name with a non-default symbol version ("name@VER", not "name@@VER"). */
static bool hidden_version(const char *s)
{
	const char *at = strchr(s, '@');
	return at && at[1] != '@';
}

/* The same symbol seen in .symtab and .dynsym: .dynsym names carry no "@VERSION" (the
 * version lives in .gnu.version), .symtab names of versioned symbols do. */
static bool same_symbol(const struct cand *a, const struct cand *b)
{
	const char *sym = a->source == SYMF_FN_SOURCE_SYMTAB ? a->name : b->name;
	const char *dyn = a->source == SYMF_FN_SOURCE_SYMTAB ? b->name : a->name;
	size_t n = strcspn(sym, "@");

	return a->size == b->size && strncmp(sym, dyn, n) == 0 && dyn[n] == 0;
}

/*
 * Which alias names a function at one address (negative: `a` is better). The same symbol
 * in .symtab and .dynsym: the .symtab entry (it has the version). Otherwise in order: a
 * sized symbol over a sizeless one; GLOBAL over WEAK over LOCAL; a function type over
 * NOTYPE; a C++ mangled name over a plain one (it carries the signature); the default
 * symbol version over a hidden one; fewer leading underscores (the public name rather than
 * __libc_malloc or __GI_*); then the longer name; .symtab over .dynsym; byte order.
 */
static int cand_better(const struct cand *a, const struct cand *b)
{
	int c;

	if (a->source != b->source && same_symbol(a, b))
		return a->source == SYMF_FN_SOURCE_SYMTAB ? -1 : 1;
	if ((a->size > 0) != (b->size > 0))
		return a->size > 0 ? -1 : 1;
	if (a->bind != b->bind)
		return a->bind > b->bind ? -1 : 1;
	if (a->type != b->type)
		return a->type > b->type ? -1 : 1;
	bool ma = a->name[0] == '_' && a->name[1] == 'Z';
	bool mb = b->name[0] == '_' && b->name[1] == 'Z';
	if (ma != mb)
		return ma ? -1 : 1;
	bool ha = hidden_version(a->name), hb = hidden_version(b->name);
	if (ha != hb)
		return ha ? 1 : -1;
	if (!ma) {
		size_t ua = leading_underscores(a->name), ub = leading_underscores(b->name);
		if (ua != ub)
			return ua < ub ? -1 : 1;
	}
	size_t la = strlen(a->name), lb = strlen(b->name);
	if (la != lb)
		return la > lb ? -1 : 1;
	if (a->source != b->source)
		return a->source == SYMF_FN_SOURCE_SYMTAB ? -1 : 1;
	c = strcmp(a->name, b->name);
	return c ? c : (a->size > b->size) - (a->size < b->size);
}

static int cmp_cand(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return cand_better(a, b);
}

/*
 * One function per address: the best alias (cand_better) names it. When a worse alias at
 * the same address is longer, that alias keeps the extra bytes (as a second function), so
 * no address a symbol table covers is lost. Sizeless winners are bounded later.
 */
static int add_symbols(struct symb *b, struct cands *c)
{
	symb__sort(c->v, c->n, sizeof(*c->v), cmp_cand);
	for (uint32_t i = 0; i < c->n && !b->error;) {
		uint32_t j = i + 1;
		while (j < c->n && c->v[j].start == c->v[i].start)
			j++;
		const struct cand *w = &c->v[i];
		uint32_t fi = symb__add_function(b, w->start, w->size, w->name, w->source);
		if (fi == SYMF_NONE)
			break;
		if (w->size) {
			symb__add_interval(b, w->start, w->start + w->size, fi, 0);
			const struct cand *longest = NULL;
			for (uint32_t k = i + 1; k < j; k++) {
				if (c->v[k].size > w->size &&
				    (!longest || c->v[k].size > longest->size))
					longest = &c->v[k];
			}
			if (longest) {
				uint32_t li = symb__add_function(b, longest->start, longest->size,
								 longest->name, longest->source);
				if (li == SYMF_NONE)
					break;
				symb__add_interval(b, longest->start,
						   longest->start + longest->size, li, 0);
			}
		} else {
			symb__add_sizeless(b, w->start, w->sec_end, fi);
		}
		i = j;
	}
	return b->error;
}

static int identify(struct symb *b, struct input *exe, struct input *dbg, bool have_dbg)
{
	struct sysom_build_id exe_id, dbg_id;
	char hex1[2 * SYSOM_BUILD_ID_MAX + 1], hex2[2 * SYSOM_BUILD_ID_MAX + 1];
	int rc = sysom_elf_build_id(exe->fd, &exe_id);

	if (rc == -SYSOM_ENOBUILDID && !have_dbg)
		rc = sysom_file_content_hash(exe->fd, &exe_id); /* identified by its bytes */
	if (rc < 0)
		return symb__fail(b, rc, "%s: no usable build ID: %s", exe->path,
				  sysom_strerror(rc));
	if (have_dbg) {
		rc = sysom_elf_build_id(dbg->fd, &dbg_id);
		if (rc < 0)
			return symb__fail(b, rc, "debug file %s: no usable build ID: %s", dbg->path,
					  sysom_strerror(rc));
		if (dbg_id.len != exe_id.len || memcmp(dbg_id.bytes, exe_id.bytes, exe_id.len)) {
			sysom_build_id_hex(&exe_id, hex1, sizeof(hex1));
			sysom_build_id_hex(&dbg_id, hex2, sizeof(hex2));
			return symb__fail(b, -SYSOM_ECORRUPT,
					  "build ID mismatch: executable %s has %s, debug file %s "
					  "has %s",
					  exe->path, hex1, dbg->path, hex2);
		}
	}
	b->id = exe_id;
	return 0;
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

int symfile_write(const struct symfile_write_options *opts, const char *out_path,
		  struct symfile_write_stats *stats, char *err, size_t errlen)
{
	struct input exe = { .fd = -1 }, dbg = { .fd = -1 };
	struct cands cands = { 0 };
	struct plt_names plt = { 0 };
	struct symb_run *runs = NULL;
	uint32_t nruns = 0;
	struct symfile_dwarf_stats ds = { 0 };
	struct symfile_exec ex = { NULL, 0 };
	uint64_t libdw_rows;
	struct timespec t0;
	struct symb b;
	uint64_t bytes = 0;
	size_t index = 0;
	Elf_Scn *scn;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	symb__init(&b, opts ? opts->memory_budget : 0, err, errlen);
	if (!opts || !opts->executable_path || !out_path) {
		symb__fail(&b, -EINVAL, "executable and output paths are required");
		goto cleanup;
	}
	pthread_once(&elf_once, elf_init);
	if (!elf_ok) {
		symb__fail(&b, -ENOSYS, "libelf version mismatch");
		goto cleanup;
	}
	b.inline_on = opts->inline_frames;
	b.lines_on = opts->line_table;
	if (open_input(&b, &exe, opts->executable_path, "executable") < 0)
		goto cleanup;
	if (opts->debug_path && open_input(&b, &dbg, opts->debug_path, "debug file") < 0)
		goto cleanup;
	if (identify(&b, &exe, &dbg, opts->debug_path != NULL) < 0)
		goto cleanup;
	if (read_segments(&b, &exe, &runs, &nruns) < 0)
		goto cleanup;

	/* .symtab: the debug file's when it has one (the executable's may be stripped). */
	scn = dbg.elf ? find_section(dbg.elf, SHT_SYMTAB, &index) : NULL;
	if (scn) {
		if (read_symbols(&b, &dbg, scn, index, SYMF_FN_SOURCE_SYMTAB, &cands) < 0)
			goto cleanup;
	} else if ((scn = find_section(exe.elf, SHT_SYMTAB, &index)) != NULL) {
		if (read_symbols(&b, &exe, scn, index, SYMF_FN_SOURCE_SYMTAB, &cands) < 0)
			goto cleanup;
	}
	if ((scn = find_section(exe.elf, SHT_DYNSYM, &index)) != NULL &&
	    read_symbols(&b, &exe, scn, index, SYMF_FN_SOURCE_DYNSYM, &cands) < 0)
		goto cleanup;
	if (read_plt(&b, &exe, &plt, &cands) < 0)
		goto cleanup;
	if (add_symbols(&b, &cands) < 0)
		goto cleanup;
	symb__free(&b, cands.v);
	cands.v = NULL;

	/* DWARF: functions the symbol tables lack, inlined calls, lines. */
	if (symb__coverage(&b) < 0)
		goto cleanup;
	ex = (struct symfile_exec){ runs, nruns };
	libdw_rows = b.budget / 8 / LIBDW_BYTES_PER_ROW;
	if (dbg.elf && symfile__dwarf(&b, dbg.elf, &ex, b.inline_on, b.lines_on, libdw_rows,
				      &ds) < 0)
		goto cleanup;
	if (ds.units == 0 && symfile__dwarf(&b, exe.elf, &ex, b.inline_on, b.lines_on,
					    libdw_rows, &ds) < 0)
		goto cleanup;

	if (symb__finish(&b, out_path, &bytes) < 0)
		goto cleanup;
	if (stats) {
		memset(stats, 0, sizeof(*stats));
		stats->from_symtab = b.from_symtab;
		stats->from_dynsym = b.from_dynsym;
		stats->from_dwarf = b.from_dwarf;
		stats->inline_ranges = b.ninl;
		stats->line_rows = b.nlines;
		stats->inlines_dropped = b.inline_dropped;
		stats->lines_dropped = b.lines_dropped;
		stats->peak_heap_bytes = b.mem_peak;
		stats->output_bytes = bytes;
		stats->seconds = seconds_since(&t0);
	}
cleanup:
	symb__free(&b, cands.v);
	symb__free(&b, plt.slots);
	symb__free(&b, plt.jump);
	symb__free(&b, plt.strings);
	symb__free(&b, runs);
	close_input(&b, &dbg);
	close_input(&b, &exe);
	symb__destroy(&b);
	return b.error;
}
