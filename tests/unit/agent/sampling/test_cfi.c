/* SPDX-License-Identifier: Apache-2.0 */
/* CFI compiler: compiled rows agree with `readelf --debug-dump=frames-interp` on real system
 * libraries, and hand-made CFI (PLT, signal frames, gaps, hostile programs) compiles as
 * documented. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dwarf.h>
#include <elf.h>
#include <libelf.h>

#include "agent/sampling/cfi.h"
#include "common/error.h"
#include "tests/support/elf_build.h"
#include "tests/support/file_truncator.h"

/* ---------------------------------------------------------------------------------------- */
/* readelf as the oracle */

struct oracle_cie {
	unsigned long offset;
	bool signal;
	char cfa[32], rbp[32], ra[32]; /* its initial row */
};

struct oracle {
	struct oracle_cie cies[64];
	int ncies;
	unsigned long checked_rows, fdes, mismatches, plt_rows, signal_rows;
	unsigned long gaps_checked;
	uint64_t *ends, *starts; /* FDE ranges, to check gaps */
	size_t nranges, cap;
};

/* The row we expect from readelf's column texts. */
static bool expect_row(const char *cfa, const char *rbp, const char *ra, bool signal,
		       const struct unwind_row *got, char *why, size_t whylen)
{
	int cfa_kind = UNWIND_CFA_COMPLEX, rbp_kind = UNWIND_RBP_COMPLEX;
	long cfa_off = 0, rbp_off = 0;

	if (signal) {
		cfa_kind = UNWIND_CFA_SIGNAL;
		rbp_kind = UNWIND_RBP_SAME;
	} else if (strcmp(ra, "u") == 0) {
		cfa_kind = UNWIND_CFA_END;
		rbp_kind = UNWIND_RBP_SAME;
	} else {
		if (sscanf(cfa, "rsp+%ld", &cfa_off) == 1 && cfa_off % 8 == 0)
			cfa_kind = UNWIND_CFA_RSP;
		else if (sscanf(cfa, "rbp+%ld", &cfa_off) == 1 && cfa_off % 8 == 0)
			cfa_kind = UNWIND_CFA_RBP;
		else if (strcmp(cfa, "exp") == 0)
			cfa_kind = -1; /* PLT or COMPLEX: readelf does not print the expression */
		if (strcmp(ra, "c-8") != 0)
			cfa_kind = UNWIND_CFA_COMPLEX;
		if (rbp[0] == '\0' || strcmp(rbp, "u") == 0 || strcmp(rbp, "s") == 0)
			rbp_kind = UNWIND_RBP_SAME;
		else if (sscanf(rbp, "c%ld", &rbp_off) == 1 && rbp_off % 8 == 0)
			rbp_kind = UNWIND_RBP_AT_CFA;
	}
	int gcfa = UNWIND_ROW_CFA(got), grbp = UNWIND_ROW_RBP(got);
	bool ok = grbp == rbp_kind;
	if (cfa_kind == -1)
		ok = ok && (gcfa == UNWIND_CFA_PLT || gcfa == UNWIND_CFA_COMPLEX);
	else
		ok = ok && gcfa == cfa_kind;
	if (ok && (gcfa == UNWIND_CFA_RSP || gcfa == UNWIND_CFA_RBP))
		ok = got->cfa_offset8 * 8 == cfa_off;
	if (ok && grbp == UNWIND_RBP_AT_CFA)
		ok = got->rbp_offset8 * 8 == rbp_off;
	if (!ok)
		snprintf(why, whylen, "readelf cfa=%s rbp=%s ra=%s, got cfa kind %d off8 %u rbp kind %d off8 %d",
			 cfa, rbp[0] ? rbp : "-", ra, gcfa, got->cfa_offset8, grbp, got->rbp_offset8);
	return ok;
}

static void check_at(struct oracle *o, const struct cfi_table *t, unsigned long loc,
		     const char *cfa, const char *rbp, const char *ra, bool signal)
{
	char why[256];
	const struct unwind_row *r = cfi_table_lookup(t, loc);

	o->checked_rows++;
	if (!r) {
		if (o->mismatches++ < 10)
			print_message("%#lx: no row (readelf cfa=%s)\n", loc, cfa);
		return;
	}
	if (UNWIND_ROW_CFA(r) == UNWIND_CFA_PLT)
		o->plt_rows++;
	if (UNWIND_ROW_CFA(r) == UNWIND_CFA_SIGNAL)
		o->signal_rows++;
	if (!expect_row(cfa, rbp, ra, signal, r, why, sizeof(why)) && o->mismatches++ < 10)
		print_message("%#lx: %s\n", loc, why);
}

static void add_range(struct oracle *o, uint64_t lo, uint64_t hi)
{
	if (o->nranges == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 1024;
		o->starts = realloc(o->starts, o->cap * sizeof(*o->starts));
		o->ends = realloc(o->ends, o->cap * sizeof(*o->ends));
		assert_non_null(o->starts);
		assert_non_null(o->ends);
	}
	o->starts[o->nranges] = lo;
	o->ends[o->nranges] = hi;
	o->nranges++;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Splits a readelf table line into LOC and columns named by `names`. */
static int split(char *line, char cols[][32], int max)
{
	int n = 0;
	for (char *tok = strtok(line, " \t\n"); tok && n < max; tok = strtok(NULL, " \t\n")) {
		snprintf(cols[n], 32, "%s", tok);
		n++;
	}
	return n;
}

/* Compares the .eh_frame of `path` row by row with readelf's interpretation. */
static void compare_with_readelf(const char *path, unsigned long min_fdes)
{
	struct cfi_table t = { 0 };
	char err[256] = "", cmd[512], line[1024];
	struct oracle o = { 0 };

	if (access(path, R_OK) != 0) {
		print_message("skipping %s: %s\n", path, strerror(errno));
		return;
	}
	int rc = cfi_table_build_path(path, &t, err, sizeof(err));
	if (rc)
		fail_msg("%s: %s", path, err);
	snprintf(cmd, sizeof(cmd), "readelf -wN --wide --debug-dump=frames-interp '%s' 2>/dev/null", path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);

	enum { NONE, IN_CIE, IN_FDE } state = NONE;
	bool in_eh = false, fde_has_rows = false, signal = false;
	char names[24][32];
	int nnames = 0;
	unsigned long fde_lo = 0, fde_hi = 0, cie_off = 0;
	struct oracle_cie *cie = NULL;

	while (fgets(line, sizeof(line), p)) {
		char cols[24][32];
		unsigned long off, len, id, lo, hi;

		if (strncmp(line, "Contents of the ", 16) == 0) {
			in_eh = strstr(line, ".eh_frame") != NULL;
			state = NONE;
			continue;
		}
		if (!in_eh)
			continue;
		if (sscanf(line, "%lx %lx %lx CIE", &off, &len, &id) == 3 && strstr(line, " CIE ")) {
			assert_true(o.ncies < 64);
			cie = &o.cies[o.ncies++];
			memset(cie, 0, sizeof(*cie));
			cie->offset = off;
			char *aug = strchr(line, '"');
			char *aug_end = aug ? strchr(aug + 1, '"') : NULL;
			cie->signal = aug && aug_end && memchr(aug, 'S', (size_t)(aug_end - aug));
			state = IN_CIE;
			nnames = 0;
			continue;
		}
		if (strstr(line, " FDE ") &&
		    sscanf(strstr(line, "cie="), "cie=%lx pc=%lx..%lx", &cie_off, &lo, &hi) == 3) {
			cie = NULL;
			for (int i = 0; i < o.ncies; i++)
				if (o.cies[i].offset == cie_off)
					cie = &o.cies[i];
			assert_non_null(cie);
			state = IN_FDE;
			fde_lo = lo;
			fde_hi = hi;
			fde_has_rows = false;
			signal = cie->signal;
			nnames = 0;
			if (hi > lo) {
				o.fdes++;
				add_range(&o, lo, hi);
			}
			continue;
		}
		if (strstr(line, "   LOC ")) {
			nnames = split(line, names, 24);
			continue;
		}
		if (line[0] == '\n' || line[0] == '\0') {
			/* An FDE without a table of its own keeps the CIE's initial row. */
			if (state == IN_FDE && !fde_has_rows && fde_hi > fde_lo)
				check_at(&o, &t, fde_lo, cie->cfa, cie->rbp, cie->ra, signal);
			state = NONE;
			continue;
		}
		if (state == NONE || nnames == 0)
			continue;
		int n = split(line, cols, 24);
		if (n != nnames)
			continue;
		const char *cfa = "", *rbp = "", *ra = "";
		for (int i = 1; i < n; i++) {
			if (strcmp(names[i], "CFA") == 0)
				cfa = cols[i];
			else if (strcmp(names[i], "rbp") == 0)
				rbp = cols[i];
			else if (strcmp(names[i], "ra") == 0)
				ra = cols[i];
		}
		if (state == IN_CIE) {
			snprintf(cie->cfa, sizeof(cie->cfa), "%s", cfa);
			snprintf(cie->rbp, sizeof(cie->rbp), "%s", rbp);
			snprintf(cie->ra, sizeof(cie->ra), "%s", ra);
			continue;
		}
		unsigned long loc = strtoul(cols[0], NULL, 16);
		fde_has_rows = true;
		if (loc >= fde_lo && loc < fde_hi)
			check_at(&o, &t, loc, cfa, rbp, ra, signal);
	}
	assert_int_equal(pclose(p), 0);

	/* Between FDEs: NONE rows, so BPF falls back to validated frame pointers. */
	qsort(o.starts, o.nranges, sizeof(*o.starts), u64_cmp);
	qsort(o.ends, o.nranges, sizeof(*o.ends), u64_cmp);
	for (size_t i = 0; i + 1 < o.nranges; i++) {
		uint64_t gap = o.ends[i];
		/* Only real gaps: no FDE starts at the end of this one. */
		if (bsearch(&gap, o.starts, o.nranges, sizeof(*o.starts), u64_cmp) || gap >= o.starts[i + 1])
			continue;
		const struct unwind_row *r = cfi_table_lookup(&t, gap);
		o.gaps_checked++;
		if ((!r || UNWIND_ROW_CFA(r) != UNWIND_CFA_NONE) && o.mismatches++ < 10)
			print_message("gap at %#llx is not NONE\n", (unsigned long long)gap);
	}

	print_message("%s: %lu FDEs, %lu rows checked, %lu gaps, %u table rows (%.1f bytes/FDE), "
		      "%lu PLT rows, %lu signal rows, %lu complex CFA rows, %lu mismatches\n",
		      path, o.fdes, o.checked_rows, o.gaps_checked, t.nrows,
		      o.fdes ? (double)t.nrows * sizeof(struct unwind_row) / (double)o.fdes : 0.0,
		      o.plt_rows, o.signal_rows, (unsigned long)t.stats.complex_cfa_rows, o.mismatches);
	uint64_t kept = t.stats.fdes + t.stats.overlapping_fdes;
	free(o.starts);
	free(o.ends);
	cfi_table_free(&t);
	assert_int_equal(o.mismatches, 0);
	assert_true(o.fdes >= min_fdes);
	assert_int_equal(kept, o.fdes);
}

static void test_libc_matches_readelf(void **state)
{
	(void)state;
	compare_with_readelf("/lib/x86_64-linux-gnu/libc.so.6", 1000);
}

static void test_libstdcxx_matches_readelf(void **state)
{
	(void)state;
	compare_with_readelf("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", 1000);
}

static void test_libpython_matches_readelf(void **state)
{
	(void)state;
	compare_with_readelf("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", 1000);
}

static void test_ld_so_matches_readelf(void **state)
{
	(void)state;
	compare_with_readelf("/lib64/ld-linux-x86-64.so.2", 100);
}

static void test_nccl_matches_readelf(void **state)
{
	(void)state;
	compare_with_readelf("/usr/local/cuda/lib/libnccl.so.2", 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Hand-made CFI */

#define TEXT 0x401000ull   /* where the synthetic functions live */
#define EH_ADDR 0x500000ull /* .eh_frame's address */

struct cfi_buf {
	uint8_t b[8192];
	size_t n;
	bool debug_frame; /* .debug_frame layout: CIE id ~0, absolute CIE pointers and addresses */
};

static void put(struct cfi_buf *c, const void *p, size_t n)
{
	assert_true(c->n + n <= sizeof(c->b));
	if (n == 0)
		return;
	memcpy(c->b + c->n, p, n);
	c->n += n;
}

static void put_u32(struct cfi_buf *c, uint32_t v)
{
	put(c, &v, 4);
}

static void put_u64(struct cfi_buf *c, uint64_t v)
{
	put(c, &v, 8);
}

static void pad_entry(struct cfi_buf *c, size_t start)
{
	while ((c->n - start) % 8)
		put(c, "\0", 1); /* DW_CFA_nop */
	uint32_t len = (uint32_t)(c->n - start - 4);
	memcpy(c->b + start, &len, 4);
}

/* A CIE: cf=1, df=-8, ra=16, initial CFA rsp+8 and ra at c-8 unless `init` replaces them. */
static size_t add_cie(struct cfi_buf *c, const char *aug, const uint8_t *aug_data, size_t aug_len,
		      const uint8_t *init, size_t init_len)
{
	static const uint8_t standard[] = { DW_CFA_def_cfa, 7, 8, DW_CFA_offset | 16, 1 };
	size_t start = c->n;

	put_u32(c, 0);
	put_u32(c, c->debug_frame ? 0xffffffffu : 0);
	put(c, "\1", 1);
	put(c, aug, strlen(aug) + 1);
	put(c, "\1\x78\x10", 3);
	if (aug[0] == 'z') {
		uint8_t l = (uint8_t)aug_len;
		put(c, &l, 1);
		put(c, aug_data, aug_len);
	}
	if (init)
		put(c, init, init_len);
	else
		put(c, standard, sizeof(standard));
	pad_entry(c, start);
	return start;
}

static size_t add_zr_cie(struct cfi_buf *c)
{
	static const uint8_t pcrel_sdata4 = 0x1b;
	return add_cie(c, "zR", &pcrel_sdata4, 1, NULL, 0);
}

static void add_fde(struct cfi_buf *c, size_t cie, uint64_t start, uint32_t range,
		    const uint8_t *insns, size_t len)
{
	size_t at = c->n;

	put_u32(c, 0);
	if (c->debug_frame) {
		put_u32(c, (uint32_t)cie);
		put_u64(c, start);
		put_u64(c, range);
	} else {
		put_u32(c, (uint32_t)(c->n - cie));
		int32_t rel = (int32_t)(start - (EH_ADDR + c->n));
		put(c, &rel, 4);
		put_u32(c, range);
		put(c, "\0", 1); /* augmentation data length */
	}
	put(c, insns, len);
	pad_entry(c, at);
}

/* Compiles `c` as the .eh_frame (or .debug_frame) of an ET_DYN image. */
static int compile(const struct cfi_buf *c, uint16_t e_type, struct cfi_table *t)
{
	struct elf_build_section sec = {
		c->debug_frame ? ".debug_frame" : ".eh_frame", SHT_PROGBITS,
		c->debug_frame ? 0 : SHF_ALLOC, c->debug_frame ? 0 : EH_ADDR, c->b, c->n,
	};
	size_t size;
	uint8_t *img = elf_build_image(e_type, &sec, 1, &size);
	char err[256];

	assert_non_null(img);
	elf_version(EV_CURRENT);
	Elf *elf = elf_memory((char *)img, size);
	assert_non_null(elf);
	int rc = cfi_table_build(elf, NULL, t, err, sizeof(err));
	elf_end(elf);
	free(img);
	return rc;
}

static const struct unwind_row *at(const struct cfi_table *t, uint64_t vaddr)
{
	const struct unwind_row *r = cfi_table_lookup(t, vaddr);
	assert_non_null(r);
	return r;
}

static void assert_row(const struct unwind_row *r, int cfa, unsigned cfa8, int rbp, int rbp8)
{
	assert_int_equal(UNWIND_ROW_CFA(r), cfa);
	assert_int_equal(r->cfa_offset8, cfa8);
	assert_int_equal(UNWIND_ROW_RBP(r), rbp);
	assert_int_equal(r->rbp_offset8, rbp8);
}

/* push rbp; mov rbp,rsp; ...; pop rbp; ret — with remember/restore around the epilogue. */
static void test_frame_pointer_function(void **state)
{
	static const uint8_t insns[] = {
		DW_CFA_advance_loc | 1, DW_CFA_def_cfa_offset, 16, DW_CFA_offset | 6, 2,
		DW_CFA_advance_loc | 3, DW_CFA_def_cfa_register, 6,
		DW_CFA_advance_loc | 10, DW_CFA_remember_state, DW_CFA_def_cfa, 7, 8,
		DW_CFA_restore | 6, DW_CFA_advance_loc | 1, DW_CFA_restore_state,
	};
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;

	(void)state;
	add_fde(&c, add_zr_cie(&c), TEXT, 32, insns, sizeof(insns));
	assert_int_equal(compile(&c, ET_DYN, &t), 0);
	assert_int_equal(t.base, TEXT);
	assert_int_equal(t.end, TEXT + 32);
	assert_row(at(&t, TEXT), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 1), UNWIND_CFA_RSP, 2, UNWIND_RBP_AT_CFA, -2);
	assert_row(at(&t, TEXT + 4), UNWIND_CFA_RBP, 2, UNWIND_RBP_AT_CFA, -2);
	assert_row(at(&t, TEXT + 14), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	/* restore_state brings back the CFA rule too. */
	assert_row(at(&t, TEXT + 15), UNWIND_CFA_RBP, 2, UNWIND_RBP_AT_CFA, -2);
	assert_row(at(&t, TEXT + 31), UNWIND_CFA_RBP, 2, UNWIND_RBP_AT_CFA, -2);
	assert_null(cfi_table_lookup(&t, TEXT + 32));
	assert_null(cfi_table_lookup(&t, TEXT - 1));
	assert_int_equal(t.stats.fdes, 1);
	assert_int_equal(t.stats.bad_fdes, 0);
	cfi_table_free(&t);
}

static void test_plt_signal_and_outermost(void **state)
{
	/* GNU ld's .plt expression with threshold 11. */
	static const uint8_t plt[] = {
		DW_CFA_def_cfa_offset, 16, DW_CFA_advance_loc | 6, DW_CFA_def_cfa_offset, 24,
		DW_CFA_advance_loc | 10, DW_CFA_def_cfa_expression, 11, DW_OP_breg7, 8,
		DW_OP_breg16, 0, DW_OP_lit15, DW_OP_and, DW_OP_lit11, DW_OP_ge, DW_OP_lit3,
		DW_OP_shl, DW_OP_plus,
	};
	/* Another expression: not a PLT, so COMPLEX. */
	static const uint8_t other_expr[] = { DW_CFA_def_cfa_expression, 2, DW_OP_breg6, 16 };
	static const uint8_t start[] = { DW_CFA_undefined, 16 };
	static const uint8_t pcrel_sdata4 = 0x1b;
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;

	(void)state;
	size_t cie = add_zr_cie(&c);
	size_t sig = add_cie(&c, "zRS", &pcrel_sdata4, 1, NULL, 0);
	add_fde(&c, cie, TEXT, 0x40, plt, sizeof(plt));
	add_fde(&c, sig, TEXT + 0x40, 0x10, NULL, 0);
	add_fde(&c, cie, TEXT + 0x50, 0x10, start, sizeof(start));
	add_fde(&c, cie, TEXT + 0x60, 0x10, other_expr, sizeof(other_expr));
	assert_int_equal(compile(&c, ET_DYN, &t), 0);
	assert_row(at(&t, TEXT), UNWIND_CFA_RSP, 2, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 6), UNWIND_CFA_RSP, 3, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x10), UNWIND_CFA_PLT, 11, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x3f), UNWIND_CFA_PLT, 11, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x40), UNWIND_CFA_SIGNAL, 0, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x55), UNWIND_CFA_END, 0, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x60), UNWIND_CFA_COMPLEX, 0, UNWIND_RBP_SAME, 0);
	assert_int_equal(t.stats.plt_fdes, 1);
	assert_int_equal(t.stats.signal_fdes, 1);
	assert_int_equal(t.stats.end_rows, 1);
	assert_int_equal(t.stats.complex_cfa_rows, 1);
	cfi_table_free(&t);
}

static void test_gaps_overlaps_and_merging(void **state)
{
	static const uint8_t push[] = { DW_CFA_advance_loc | 1, DW_CFA_def_cfa_offset, 16 };
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;

	(void)state;
	size_t cie = add_zr_cie(&c);
	add_fde(&c, cie, TEXT + 0x20, 0x10, NULL, 0);        /* out of order on purpose */
	add_fde(&c, cie, TEXT, 0x10, NULL, 0);
	add_fde(&c, cie, TEXT + 0x10, 0x10, push, sizeof(push)); /* adjacent: no gap row */
	add_fde(&c, cie, TEXT + 0x18, 0x10, NULL, 0);        /* overlaps the previous one */
	add_fde(&c, cie, TEXT + 0x40, 0, NULL, 0);           /* empty */
	add_fde(&c, cie, TEXT + 0x80, 0x10, NULL, 0);        /* after a gap */
	assert_int_equal(compile(&c, ET_DYN, &t), 0);
	assert_int_equal(t.stats.fdes, 4);
	assert_int_equal(t.stats.overlapping_fdes, 1);
	assert_int_equal(t.stats.empty_fdes, 1);
	assert_row(at(&t, TEXT + 0x0f), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x10), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x11), UNWIND_CFA_RSP, 2, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x20), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x30), UNWIND_CFA_NONE, 0, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x7f), UNWIND_CFA_NONE, 0, UNWIND_RBP_SAME, 0);
	assert_row(at(&t, TEXT + 0x80), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	/* Equal neighbours merged: rsp+8 @0, rsp+16 @0x11, rsp+8 @0x20, NONE @0x30, rsp+8
	 * @0x80, NONE @0x90. */
	assert_int_equal(t.nrows, 6);
	for (uint32_t i = 1; i < t.nrows; i++)
		assert_true(t.rows[i].pc > t.rows[i - 1].pc);
	cfi_table_free(&t);
}

static void test_unrepresentable_rules_are_complex(void **state)
{
	static const uint8_t big[] = { DW_CFA_def_cfa_offset, 0x80, 0x80, 0x40 }; /* 1 MiB */
	static const uint8_t odd[] = { DW_CFA_def_cfa_offset, 12 };
	static const uint8_t r10[] = { DW_CFA_def_cfa, 10, 0 };
	static const uint8_t ra_elsewhere[] = { DW_CFA_offset | 16, 2 };
	static const uint8_t rbp_in_reg[] = { DW_CFA_register, 6, 3 };
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;

	(void)state;
	size_t cie = add_zr_cie(&c);
	add_fde(&c, cie, TEXT, 0x10, big, sizeof(big));
	add_fde(&c, cie, TEXT + 0x10, 0x10, odd, sizeof(odd));
	add_fde(&c, cie, TEXT + 0x20, 0x10, r10, sizeof(r10));
	add_fde(&c, cie, TEXT + 0x30, 0x10, ra_elsewhere, sizeof(ra_elsewhere));
	add_fde(&c, cie, TEXT + 0x40, 0x10, rbp_in_reg, sizeof(rbp_in_reg));
	assert_int_equal(compile(&c, ET_DYN, &t), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(UNWIND_ROW_CFA(at(&t, TEXT + 0x10 * i)), UNWIND_CFA_COMPLEX);
	assert_row(at(&t, TEXT + 0x40), UNWIND_CFA_RSP, 1, UNWIND_RBP_COMPLEX, 0);
	assert_int_equal(t.stats.complex_rbp_rows, 1);
	cfi_table_free(&t);
}

static void test_hostile_programs_drop_only_their_fde(void **state)
{
	uint8_t deep[2 * (CFI_MAX_STATE_DEPTH + 1)];
	static const uint8_t underflow[] = { DW_CFA_restore_state };
	static const uint8_t bad_op[] = { 0x3f };
	static const uint8_t truncated[] = { DW_CFA_def_cfa_expression, 50, DW_OP_breg7 };
	/* 2^61 * data alignment -8 does not fit 64 bits. */
	static const uint8_t overflow[] = { DW_CFA_offset_extended, 6, 0x80, 0x80, 0x80, 0x80,
					    0x80, 0x80, 0x80, 0x80, 0x20 };
	static const uint8_t backwards[] = { DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff,
					     DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff,
					     DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff,
					     DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff,
					     DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff };
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;

	(void)state;
	for (size_t i = 0; i < sizeof(deep); i += 2) {
		deep[i] = DW_CFA_remember_state;
		deep[i + 1] = DW_CFA_nop;
	}
	size_t cie = add_zr_cie(&c);
	add_fde(&c, cie, TEXT, 0x10, deep, sizeof(deep));
	add_fde(&c, cie, TEXT + 0x10, 0x10, underflow, sizeof(underflow));
	add_fde(&c, cie, TEXT + 0x20, 0x10, bad_op, sizeof(bad_op));
	add_fde(&c, cie, TEXT + 0x30, 0x10, truncated, sizeof(truncated));
	add_fde(&c, cie, TEXT + 0x40, 0x10, overflow, sizeof(overflow));
	add_fde(&c, cie, TEXT + 0x50, 0x10, backwards, sizeof(backwards));
	add_fde(&c, cie, TEXT + 0x60, 0x10, NULL, 0); /* a good one after them */
	add_fde(&c, 4, TEXT + 0x70, 0x10, NULL, 0);   /* CIE pointer into the middle of a CIE */
	assert_int_equal(compile(&c, ET_DYN, &t), 0);
	/* The advances run past the FDE's end: the rows there are ignored, the FDE is kept. */
	assert_int_equal(t.stats.bad_fdes, 6);
	assert_int_equal(t.stats.fdes, 2);
	assert_row(at(&t, TEXT + 0x60), UNWIND_CFA_RSP, 1, UNWIND_RBP_SAME, 0);
	cfi_table_free(&t);
}

static void test_debug_frame_only(void **state)
{
	static const uint8_t push[] = { DW_CFA_advance_loc | 1, DW_CFA_def_cfa_offset, 16 };
	struct cfi_buf c = { .debug_frame = true };
	struct cfi_table t;

	(void)state;
	size_t cie = add_cie(&c, "", NULL, 0, NULL, 0);
	add_fde(&c, cie, TEXT, 0x10, push, sizeof(push));
	assert_int_equal(compile(&c, ET_DYN, &t), 0);
	assert_int_equal(t.stats.debug_frame_fdes, 1);
	assert_int_equal(t.stats.eh_frame_fdes, 0);
	assert_row(at(&t, TEXT + 1), UNWIND_CFA_RSP, 2, UNWIND_RBP_SAME, 0);
	cfi_table_free(&t);
}

static void test_files_without_cfi_or_not_ours(void **state)
{
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;
	char err[128];

	(void)state;
	/* No CFI: an empty table (frame pointers alone). */
	assert_int_equal(compile(&c, ET_EXEC, &t), 0);
	assert_int_equal(t.nrows, 0);
	assert_null(cfi_table_lookup(&t, TEXT));
	cfi_table_free(&t);
	/* Relocatable objects are not loaded code. */
	add_fde(&c, add_zr_cie(&c), TEXT, 0x10, NULL, 0);
	assert_int_equal(compile(&c, ET_REL, &t), -SYSOM_ENOTELF);
	/* Not ELF at all. */
	char junk[] = "not an ELF file at all";
	Elf *elf = elf_memory(junk, sizeof(junk));
	assert_int_equal(cfi_table_build(elf, NULL, &t, err, sizeof(err)), -SYSOM_ENOTELF);
	elf_end(elf);
	assert_int_equal(cfi_table_build_path("/nonexistent/x", &t, err, sizeof(err)), -ENOENT);
	/* Freeing twice or a zeroed table is fine. */
	struct cfi_table z = { 0 };
	cfi_table_free(&z);
	cfi_table_free(&z);
	cfi_table_free(NULL);
}

static void test_truncated_sections_keep_what_came_before(void **state)
{
	struct cfi_buf c = { .n = 0 };
	struct cfi_table t;

	(void)state;
	size_t cie = add_zr_cie(&c);
	add_fde(&c, cie, TEXT, 0x10, NULL, 0);
	size_t good = c.n;
	add_fde(&c, cie, TEXT + 0x10, 0x10, NULL, 0);
	for (size_t cut = good; cut < c.n; cut++) {
		struct cfi_buf d = c;
		d.n = cut;
		assert_int_equal(compile(&d, ET_DYN, &t), 0);
		assert_int_equal(t.stats.fdes, 1);
		assert_non_null(cfi_table_lookup(&t, TEXT));
		cfi_table_free(&t);
	}
	/* A length field pointing far past the end. */
	struct cfi_buf d = c;
	uint32_t huge = 0x7ffffff0;
	memcpy(d.b + good, &huge, 4);
	assert_int_equal(compile(&d, ET_DYN, &t), 0);
	assert_int_equal(t.stats.fdes, 1);
	cfi_table_free(&t);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A library truncated and restored by another thread while its CFI is compiled: each build
 * fails cleanly (a read error, counted by the caller) or gives the whole table; never SIGBUS
 * (the file is read with pread, not mapped). */
static void test_file_truncated_while_read(void **state)
{
	char dir[] = "/tmp/sysom-cfi-trunc-XXXXXX", path[64], err[256];
	struct file_truncator *tr;
	struct cfi_table t;
	uint32_t whole;
	unsigned builds = 0, failures = 0;

	(void)state;
	assert_int_equal(cfi_table_build_path("/lib/x86_64-linux-gnu/libc.so.6", &t, err,
					      sizeof(err)), 0);
	whole = t.nrows;
	cfi_table_free(&t);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/libc.so.6", dir);
	assert_int_equal(file_truncator_start("/lib/x86_64-linux-gnu/libc.so.6", path, &tr), 0);
	/* Until the reads have met the truncations (a loaded machine may starve either). */
	for (double end = now_s() + 10; now_s() < end && (builds < 400 || !failures); builds++) {
		int rc = cfi_table_build_path(path, &t, err, sizeof(err));
		if (rc == 0) {
			assert_int_equal(t.nrows, whole); /* never a partial (or empty) table */
			cfi_table_free(&t);
			continue;
		}
		assert_true(rc < 0);
		failures++;
	}
	assert_true(file_truncator_stop(tr) > 0);
	print_message("%u builds while truncated, %u failed cleanly\n", builds, failures);
	assert_true(failures > 0);
	/* Whole again: the same table as the original file. */
	assert_int_equal(cfi_table_build_path(path, &t, err, sizeof(err)), 0);
	assert_int_equal(t.nrows, whole);
	cfi_table_free(&t);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_libc_matches_readelf),
		cmocka_unit_test(test_libstdcxx_matches_readelf),
		cmocka_unit_test(test_libpython_matches_readelf),
		cmocka_unit_test(test_ld_so_matches_readelf),
		cmocka_unit_test(test_nccl_matches_readelf),
		cmocka_unit_test(test_frame_pointer_function),
		cmocka_unit_test(test_plt_signal_and_outermost),
		cmocka_unit_test(test_gaps_overlaps_and_merging),
		cmocka_unit_test(test_unrepresentable_rules_are_complex),
		cmocka_unit_test(test_hostile_programs_drop_only_their_fde),
		cmocka_unit_test(test_debug_frame_only),
		cmocka_unit_test(test_files_without_cfi_or_not_ours),
		cmocka_unit_test(test_truncated_sections_keep_what_came_before),
		cmocka_unit_test(test_file_truncated_while_read),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
