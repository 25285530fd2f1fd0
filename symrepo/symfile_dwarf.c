/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol file writer, DWARF pass (libdw): DWARF-only functions, inlined calls, line rows. */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <string.h>

#include "common/error.h"
#include "symrepo/symfile_elf.h"
#include "symrepo/symfile_format.h"

#define MAX_DIE_DEPTH 256         /* DIE nesting followed; deeper subtrees are skipped */
#define MAX_RANGES_PER_DIE 65536  /* pieces of one DW_AT_ranges list */
#define FILE_UNSET (UINT32_MAX - 1)

bool symfile__exec_contains(const struct symfile_exec *ex, uint64_t start, uint64_t end)
{
	uint32_t lo = 0, hi = ex->count;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (ex->runs[mid].start <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && start < ex->runs[lo - 1].end && end <= ex->runs[lo - 1].end &&
	       start < end;
}

/* Per compile unit state. */
struct unit {
	struct symb *b;
	const struct symfile_exec *ex;
	Dwarf_Die cu;
	int version;
	bool inlines, lines;
	Dwarf_Files *files; /* the unit's file table (NULL: none) */
	size_t nfiles;
	uint32_t *file_index; /* unit file index → FILES index (FILE_UNSET until looked up) */
	const char *comp_dir; /* DW_AT_comp_dir: relative paths are made absolute with it */
	uint32_t functions;
};

/* The name of a function DIE: linkage name, else name, following abstract_origin and
 * specification. */
static const char *die_name(Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name;

	name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
	if (!name)
		name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
	if (!name)
		name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
	return name && *name ? name : NULL;
}

/* FILES index of `path`, made absolute with the unit's compilation directory when it is
 * relative (as eu-addr2line -A shows it); SYMF_NONE on failure. */
static uint32_t unit_path(struct unit *u, const char *path)
{
	char local[1024];
	size_t dlen, plen;

	if (!path || !*path)
		return SYMF_NONE;
	if (path[0] == '/' || !u->comp_dir || !*u->comp_dir)
		return symb__file(u->b, path);
	dlen = strlen(u->comp_dir);
	plen = strlen(path);
	if (dlen + plen + 2 > sizeof(local))
		return symb__file(u->b, path);
	memcpy(local, u->comp_dir, dlen);
	local[dlen] = '/';
	memcpy(local + dlen + 1, path, plen + 1);
	return symb__file(u->b, local);
}

/* FILES index for entry `idx` of the unit's file table, or SYMF_NONE. */
static uint32_t unit_file(struct unit *u, Dwarf_Word idx)
{
	if (!u->files || idx >= u->nfiles || (u->version < 5 && idx == 0))
		return SYMF_NONE;
	if (!u->file_index) {
		u->file_index = symb__alloc(u->b, u->nfiles * sizeof(uint32_t));
		if (!u->file_index)
			return SYMF_NONE;
		for (size_t i = 0; i < u->nfiles; i++)
			u->file_index[i] = FILE_UNSET;
	}
	if (u->file_index[idx] == FILE_UNSET) {
		u->file_index[idx] = unit_path(u, dwarf_filesrc(u->files, idx, NULL, NULL));
	}
	return u->file_index[idx];
}

static void subprogram(struct unit *u, Dwarf_Die *die)
{
	Dwarf_Addr base, start, end;
	ptrdiff_t off = 0;
	const char *name = NULL;
	int pieces = 0;

	while ((off = dwarf_ranges(die, off, &base, &start, &end)) > 0 &&
	       ++pieces <= MAX_RANGES_PER_DIE) {
		if (!symfile__exec_contains(u->ex, start, end) ||
		    symb__covered(u->b, start, end))
			continue; /* outside the code, or the symbol tables have it */
		if (!name && !(name = die_name(die)))
			return;
		uint32_t fi = symb__add_function(u->b, start, end - start, name,
						 SYMF_FN_SOURCE_DWARF);
		if (fi == SYMF_NONE || symb__add_interval(u->b, start, end, fi, 0) < 0)
			return;
		u->functions++;
	}
}

static void inlined(struct unit *u, Dwarf_Die *die, uint32_t depth)
{
	Dwarf_Addr base, start, end;
	Dwarf_Attribute attr;
	Dwarf_Word file = 0, line = 0;
	ptrdiff_t off = 0;
	uint32_t callee = SYMF_NONE, call_file = SYMF_NONE;
	int pieces = 0;

	while ((off = dwarf_ranges(die, off, &base, &start, &end)) > 0 &&
	       ++pieces <= MAX_RANGES_PER_DIE) {
		if (!symfile__exec_contains(u->ex, start, end))
			continue;
		if (callee == SYMF_NONE) {
			/* Without a name (GCC 8 emits some inlined calls without an abstract
			 * origin) the frame still exists: "??", as addr2line prints it, keeps
			 * the call sites of the frames around it right. */
			const char *name = die_name(die);
			callee = symb__callee(u->b, name ? name : "??");
			if (callee == SYMF_NONE)
				return;
			if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &attr), &file) == 0)
				call_file = unit_file(u, file);
			if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &attr), &line) != 0 ||
			    line > UINT32_MAX)
				line = 0;
		}
		symb__add_inline(u->b, start, end, callee, call_file, (uint32_t)line, depth);
	}
}

/* Context of a DIE's children. */
struct ctx {
	bool in_function;
	uint32_t depth; /* inlined_subroutine ancestors below the current subprogram */
};

/* Handles one DIE; returns whether to visit its children and with which context. */
static bool visit(struct unit *u, Dwarf_Die *die, struct ctx *ctx)
{
	switch (dwarf_tag(die)) {
	case DW_TAG_subprogram:
		ctx->depth = 0;
		if (!dwarf_hasattr(die, DW_AT_low_pc) && !dwarf_hasattr(die, DW_AT_ranges)) {
			/* A declaration or an abstract instance: no code of its own, but the
			 * concrete instances of local classes' members (lambdas in templates)
			 * are nested inside it. */
			ctx->in_function = false;
			return true;
		}
		subprogram(u, die);
		ctx->in_function = true;
		return true;
	case DW_TAG_inlined_subroutine:
		if (!ctx->in_function || !u->inlines)
			return false;
		inlined(u, die, ctx->depth);
		ctx->depth++;
		return true;
	case DW_TAG_lexical_block:
	case DW_TAG_namespace:
	case DW_TAG_module:
		return true;
	case DW_TAG_class_type:
	case DW_TAG_structure_type:
	case DW_TAG_union_type:
		/* Out-of-line member definitions usually sit at namespace scope, but a
		 * local class (a lambda's closure) may hold its members' code. */
		ctx->in_function = false;
		return true;
	default:
		return false;
	}
}

static void walk_dies(struct unit *u)
{
	struct frame {
		Dwarf_Die die;
		struct ctx ctx;
	} stack[MAX_DIE_DEPTH];
	uint32_t sp = 0;

	if (dwarf_child(&u->cu, &stack[0].die) != 0)
		return;
	stack[0].ctx = (struct ctx){ false, 0 };
	sp = 1;
	while (sp > 0 && !u->b->error) {
		struct frame *fr = &stack[sp - 1];
		struct ctx child = fr->ctx;

		if (visit(u, &fr->die, &child) && sp < MAX_DIE_DEPTH &&
		    dwarf_child(&fr->die, &stack[sp].die) == 0) {
			stack[sp].ctx = child;
			sp++;
			continue;
		}
		while (sp > 0) {
			Dwarf_Die next;
			if (dwarf_siblingof(&stack[sp - 1].die, &next) == 0) {
				stack[sp - 1].die = next;
				break;
			}
			sp--;
		}
	}
}

/* Adds the unit's line rows; returns how many libdw parsed (for its cache bound). */
static size_t unit_lines(struct unit *u)
{
	Dwarf_Lines *lines;
	size_t n;
	uint64_t prev_addr = 0, end_addr = 0;
	uint32_t prev_file = SYMF_NONE, prev_line = 0;
	bool have_prev = false, have_end = false;

	if (dwarf_getsrclines(&u->cu, &lines, &n) != 0)
		return 0;
	for (size_t i = 0; i < n && u->b->lines_on && !u->b->error; i++) {
		Dwarf_Line *l = dwarf_onesrcline(lines, i);
		Dwarf_Addr addr;
		bool end = false;
		int lineno = 0;
		uint32_t fi = SYMF_NONE;

		if (!l || dwarf_lineaddr(l, &addr) != 0 || dwarf_lineendsequence(l, &end) != 0)
			continue;
		/* libdw sorts a unit's rows by address with end-of-sequence markers first, so
		 * a row that follows a marker at its own address is either the empty last row
		 * of the ending sequence or the first of another: weak, it loses to a row of
		 * another unit at that address. */
		bool weak = !end && have_end && end_addr == addr;
		if (end) {
			have_end = true;
			end_addr = addr;
			if (!symfile__exec_contains(u->ex, addr ? addr - 1 : 0, addr))
				continue;
		} else {
			Dwarf_Files *files;
			size_t idx;
			if (!symfile__exec_contains(u->ex, addr, addr + 1))
				continue;
			if (dwarf_lineno(l, &lineno) != 0 || lineno < 0)
				lineno = 0; /* an int: never reaches SYMB_LINE_WEAK */
			if (dwarf_line_file(l, &files, &idx) == 0) {
				if (files == u->files) {
					fi = unit_file(u, idx);
				} else {
					fi = unit_path(u, dwarf_filesrc(files, idx, NULL, NULL));
				}
			}
			if (fi == SYMF_NONE)
				continue;
		}
		/* The same dedupe as the final pass, early, to spare memory: a row at the
		 * previous row's address replaces it; a repeat of the previous position is
		 * redundant. (libdw returns a unit's rows sorted by address.) */
		if (have_prev && !end && fi == prev_file && (uint32_t)lineno == prev_line &&
		    addr >= prev_addr)
			continue;
		uint32_t stored = end ? 0 : (uint32_t)lineno | (weak ? SYMB_LINE_WEAK : 0);
		if (have_prev && addr == prev_addr && u->b->nlines > 0 &&
		    u->b->lines[u->b->nlines - 1].addr == addr) {
			u->b->lines[u->b->nlines - 1].file = end ? SYMF_NONE : fi;
			u->b->lines[u->b->nlines - 1].line = stored;
		} else {
			symb__add_line(u->b, addr, end ? SYMF_NONE : fi, stored);
		}
		have_prev = true;
		prev_addr = addr;
		prev_file = end ? SYMF_NONE : fi;
		prev_line = end ? 0 : (uint32_t)lineno;
	}
	return n;
}

int symfile__dwarf(struct symb *b, Elf *elf, const struct symfile_exec *ex, bool inlines,
		   bool lines, uint64_t libdw_rows, struct symfile_dwarf_stats *stats)
{
	Dwarf *dbg = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
	Dwarf_Off off = 0, next;
	size_t hsize;
	uint64_t rows_cached = 0;
	Dwarf_Half version;

	memset(stats, 0, sizeof(*stats));
	if (!dbg)
		return 0; /* no DWARF */
	while (!b->error && dwarf_next_unit(dbg, off, &next, &hsize, &version, NULL, NULL, NULL,
					    NULL, NULL) == 0) {
		struct unit u = { .b = b, .ex = ex, .version = version, .inlines = inlines,
				  .lines = lines };

		if (dwarf_offdie(dbg, off + hsize, &u.cu) &&
		    (dwarf_tag(&u.cu) == DW_TAG_compile_unit ||
		     dwarf_tag(&u.cu) == DW_TAG_partial_unit)) {
			Dwarf_Attribute attr;
			stats->units++;
			u.comp_dir = dwarf_formstring(dwarf_attr(&u.cu, DW_AT_comp_dir, &attr));
			if ((inlines || lines) &&
			    dwarf_getsrcfiles(&u.cu, &u.files, &u.nfiles) != 0) {
				u.files = NULL;
				u.nfiles = 0;
			}
			walk_dies(&u);
			if (lines && b->lines_on) {
				rows_cached += unit_lines(&u);
			} else if (u.files) {
				/* The line program was parsed (and cached) for its file table. */
				Dwarf_Lines *cached;
				size_t n;
				if (dwarf_getsrclines(&u.cu, &cached, &n) == 0)
					rows_cached += n;
			}
			stats->functions += u.functions;
		}
		symb__free(b, u.file_index);
		off = next;
		if (rows_cached > libdw_rows) {
			/* libdw keeps every parsed line program until dwarf_end: start afresh
			 * (all names taken from it are already copied into STRINGS). */
			dwarf_end(dbg);
			rows_cached = 0;
			stats->reopened++;
			dbg = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
			if (!dbg)
				return symb__fail(b, -SYSOM_ECORRUPT,
						  "DWARF could not be re-read: %s",
						  dwarf_errmsg(-1));
		}
	}
	dwarf_end(dbg);
	return b->error;
}
