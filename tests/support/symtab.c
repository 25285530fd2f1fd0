/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: runtime address → function name for a running process (maps + ELF symbols). */
#include "tests/support/symtab.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DELETED_SUFFIX " (deleted)"
#define LOOKBACK 16 /* earlier symbols checked when the nearest one ends before addr */

/* One executable mapping of /proc/PID/maps. */
struct mapping {
	uint64_t start, end, offset;
	const char *path;
};

static int add_name(struct symtab *t, const char *name, uint32_t *off)
{
	size_t len = strlen(name) + 1;

	if (t->names_len + len > SYMTAB_MAX_NAMES)
		return -E2BIG;
	if (t->names_len + len > t->names_capacity) {
		size_t cap = t->names_capacity ? t->names_capacity : 4096;
		while (cap < t->names_len + len)
			cap *= 2;
		if (cap > SYMTAB_MAX_NAMES)
			cap = SYMTAB_MAX_NAMES;
		char *names = realloc(t->names, cap);
		if (!names)
			return -ENOMEM;
		t->names = names;
		t->names_capacity = cap;
	}
	memcpy(t->names + t->names_len, name, len);
	*off = (uint32_t)t->names_len;
	t->names_len += len;
	return 0;
}

static int add_symbol(struct symtab *t, uint64_t start, uint64_t end, const char *name)
{
	if (t->count >= SYMTAB_MAX_SYMBOLS)
		return -E2BIG;
	if (t->count == t->capacity) {
		size_t cap = t->capacity ? t->capacity * 2 : 1024;
		struct symtab_symbol *symbols = reallocarray(t->symbols, cap, sizeof(*symbols));
		if (!symbols)
			return -ENOMEM;
		t->symbols = symbols;
		t->capacity = cap;
	}
	struct symtab_symbol *s = &t->symbols[t->count];
	int rc = add_name(t, name, &s->name);
	if (rc)
		return rc;
	s->start = start;
	s->end = end;
	t->count++;
	return 0;
}

/* The PT_LOAD segment the mapping's file offset falls in; false if none. */
static bool find_segment(Elf *elf, uint64_t map_offset, GElf_Phdr *seg)
{
	size_t n;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	if (elf_getphdrnum(elf, &n))
		return false;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || ph.p_filesz == 0)
			continue;
		if (map_offset >= (ph.p_offset & ~(page - 1)) && map_offset < ph.p_offset + ph.p_filesz) {
			*seg = ph;
			return true;
		}
	}
	return false;
}

/* .symtab if the file has one, else .dynsym; NULL if neither. */
static Elf_Scn *find_symbols(Elf *elf, GElf_Shdr *shdr)
{
	Elf_Scn *scn = NULL, *dynsym = NULL;
	GElf_Shdr dyn_shdr;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_entsize == 0)
			continue;
		if (sh.sh_type == SHT_SYMTAB) {
			*shdr = sh;
			return scn;
		}
		if (sh.sh_type == SHT_DYNSYM && !dynsym) {
			dynsym = scn;
			dyn_shdr = sh;
		}
	}
	if (dynsym)
		*shdr = dyn_shdr;
	return dynsym;
}

/* Adds the function symbols of one file mapping; an unreadable file adds nothing. */
static int load_mapping(struct symtab *t, const struct mapping *m, pid_t pid)
{
	char path[PATH_MAX + 64];
	Elf *elf = NULL;
	int rc = 0, fd;

	/* The path is in the process's mount namespace: try through /proc/PID/root first. */
	snprintf(path, sizeof(path), "/proc/%d/root%s", (int)pid, m->path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	GElf_Phdr seg;
	GElf_Shdr shdr;
	Elf_Scn *scn;
	Elf_Data *data;
	if (!elf || elf_kind(elf) != ELF_K_ELF || !find_segment(elf, m->offset, &seg) ||
	    !(scn = find_symbols(elf, &shdr)) || !(data = elf_getdata(scn, NULL)))
		goto cleanup;

	uint64_t bias = m->start - m->offset + seg.p_offset - seg.p_vaddr;
	size_t n = shdr.sh_size / shdr.sh_entsize;
	for (size_t i = 0; i < n && i <= INT_MAX; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym))
			continue;
		int type = GELF_ST_TYPE(sym.st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF ||
		    sym.st_size == 0 || sym.st_value < seg.p_vaddr ||
		    sym.st_value >= seg.p_vaddr + seg.p_memsz)
			continue;
		uint64_t start = sym.st_value + bias, end = start + sym.st_size;
		if (start < m->start)
			start = m->start;
		if (end > m->end)
			end = m->end;
		if (start >= end)
			continue;
		const char *name = elf_strptr(elf, shdr.sh_link, sym.st_name);
		if (!name || !*name)
			continue;
		rc = add_symbol(t, start, end, name);
		if (rc)
			goto cleanup;
	}
cleanup:
	elf_end(elf);
	close(fd);
	return rc;
}

/* Leading underscores, so that `qsort` wins over an alias `__qsort` at the same address. */
static size_t underscores(const char *s)
{
	size_t n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

/* By start; among equal starts the largest, then the fewest underscores, then by name. */
static int compare_symbols(const void *pa, const void *pb, void *arg)
{
	const struct symtab_symbol *a = pa, *b = pb;
	const char *names = arg;

	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	if (a->end != b->end)
		return a->end > b->end ? -1 : 1;
	size_t ua = underscores(names + a->name), ub = underscores(names + b->name);
	if (ua != ub)
		return ua < ub ? -1 : 1;
	return strcmp(names + a->name, names + b->name);
}

/* Parses one maps line; returns false if it is not an executable mapping. */
static bool parse_line(char *line, struct mapping *m)
{
	char perms[8];
	int pos = -1;

	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &m->start, &m->end,
		   perms, &m->offset, &pos) != 4 ||
	    pos < 0 || strlen(perms) < 3 || perms[2] != 'x' || m->start >= m->end)
		return false;
	char *path = line + pos;
	size_t len = strcspn(path, "\n");
	path[len] = '\0';
	size_t dl = strlen(DELETED_SUFFIX);
	if (len >= dl && strcmp(path + len - dl, DELETED_SUFFIX) == 0)
		path[len - dl] = '\0';
	m->path = path;
	return true;
}

int symtab_load_process(struct symtab *t, pid_t pid)
{
	char maps_path[64];
	char *line = NULL;
	size_t line_size = 0, mappings = 0;
	FILE *maps = NULL;
	int rc = 0;

	memset(t, 0, sizeof(*t));
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOTSUP;
	snprintf(maps_path, sizeof(maps_path), "/proc/%d/maps", (int)pid);
	maps = fopen(maps_path, "re");
	if (!maps) {
		rc = -errno;
		goto cleanup;
	}
	while (getline(&line, &line_size, maps) > 0) {
		struct mapping m;
		if (!parse_line(line, &m))
			continue;
		if (++mappings > SYMTAB_MAX_MAPPINGS) {
			rc = -E2BIG;
			goto cleanup;
		}
		if (m.path[0] == '/') {
			rc = load_mapping(t, &m, pid);
			if (rc)
				goto cleanup;
		} else if (m.path[0] == '\0' || strncmp(m.path, "[anon", 5) == 0) {
			if (t->anon_count >= SYMTAB_MAX_ANON) {
				rc = -E2BIG;
				goto cleanup;
			}
			t->anon[t->anon_count].start = m.start;
			t->anon[t->anon_count].end = m.end;
			t->anon_count++;
		} /* else [vdso], [vsyscall], [uprobes]: no names */
	}
	if (ferror(maps)) {
		rc = -EIO;
		goto cleanup;
	}
	if (t->count) {
		qsort_r(t->symbols, t->count, sizeof(t->symbols[0]), compare_symbols, t->names);
		size_t kept = 1;
		for (size_t i = 1; i < t->count; i++)
			if (t->symbols[i].start != t->symbols[kept - 1].start)
				t->symbols[kept++] = t->symbols[i];
		t->count = kept;
	}
cleanup:
	free(line);
	if (maps)
		fclose(maps);
	if (rc)
		symtab_free(t);
	return rc;
}

const char *symtab_name_at(const struct symtab *t, uint64_t addr)
{
	size_t lo = 0, hi = t->count;

	/* First symbol starting after addr; the candidates are just before it. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->symbols[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo, seen = 0; i > 0 && seen < LOOKBACK; i--, seen++) {
		const struct symtab_symbol *s = &t->symbols[i - 1];
		if (addr < s->end)
			return t->names + s->name;
	}
	for (size_t i = 0; i < t->anon_count; i++)
		if (addr >= t->anon[i].start && addr < t->anon[i].end)
			return "[jit]";
	return NULL;
}

void symtab_free(struct symtab *t)
{
	free(t->symbols);
	free(t->names);
	memset(t, 0, sizeof(*t));
}
