/* SPDX-License-Identifier: Apache-2.0 */
/* CFI compiler: runs the DWARF call-frame programs of every FDE and keeps what BPF needs. */
#include "agent/sampling/cfi.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dwarf.h>
#include <elfutils/libdw.h>

#include "common/elf_buildid.h"
#include "common/array.h"
#include "common/error.h"

/* DWARF register numbers on x86-64 (System V psABI, figure 3.36). */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

/* Pointer encodings of .eh_frame (LSB, "DWARF Extensions", DW_EH_PE_*). */
#define PE_ABSPTR 0x00
#define PE_ULEB128 0x01
#define PE_UDATA2 0x02
#define PE_UDATA4 0x03
#define PE_UDATA8 0x04
#define PE_SLEB128 0x09
#define PE_SDATA2 0x0a
#define PE_SDATA4 0x0b
#define PE_SDATA8 0x0c
#define PE_PCREL 0x10
#define PE_DATAREL 0x30
#define PE_INDIRECT 0x80
#define PE_OMIT 0xff

/* ---------------------------------------------------------------------------------------- */
/* Bounded reads */

struct cursor {
	const uint8_t *pos, *end;
	bool bad; /* a read ran past the end or overflowed: everything after it is garbage */
};

static uint64_t read_uleb(struct cursor *c)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (c->pos < c->end) {
		uint8_t b = *c->pos++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		else if (b & 0x7f)
			c->bad = true; /* does not fit 64 bits */
		shift += 7;
		if (!(b & 0x80))
			return v;
	}
	c->bad = true;
	return 0;
}

static int64_t read_sleb(struct cursor *c)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (c->pos < c->end) {
		uint8_t b = *c->pos++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (shift < 64 && (b & 0x40))
				v |= ~(uint64_t)0 << shift;
			return (int64_t)v;
		}
	}
	c->bad = true;
	return 0;
}

static uint64_t read_fixed(struct cursor *c, size_t n)
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->pos) < n) {
		c->bad = true;
		c->pos = c->end;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)c->pos[i] << (8 * i); /* x86-64: little-endian */
	c->pos += n;
	return v;
}

static uint8_t read_u8(struct cursor *c)
{
	return (uint8_t)read_fixed(c, 1);
}

/* A block (uleb length + bytes); returns its start and sets *len, or NULL when truncated. */
static const uint8_t *read_block(struct cursor *c, uint64_t *len)
{
	uint64_t n = read_uleb(c);
	const uint8_t *p = c->pos;

	if (c->bad || n > (uint64_t)(c->end - c->pos)) {
		c->bad = true;
		return NULL;
	}
	c->pos += n;
	*len = n;
	return p;
}

/*
 * Reads a pointer in `encoding`. `pc_base` is the virtual address of the section byte at
 * `section_start`, for PC-relative values. Returns false for encodings we do not support
 * (indirect, data/text/func-relative, aligned, omit).
 */
static bool read_encoded(struct cursor *c, uint8_t encoding, const uint8_t *section_start,
			 uint64_t pc_base, uint64_t *value)
{
	const uint8_t *at = c->pos;
	uint64_t v;

	if (encoding == PE_OMIT || (encoding & PE_INDIRECT))
		return false;
	switch (encoding & 0x0f) {
	case PE_ABSPTR:
	case PE_UDATA8:
	case PE_SDATA8:
		v = read_fixed(c, 8);
		break;
	case PE_UDATA2:
		v = read_fixed(c, 2);
		break;
	case PE_SDATA2:
		v = (uint64_t)(int64_t)(int16_t)read_fixed(c, 2);
		break;
	case PE_UDATA4:
		v = read_fixed(c, 4);
		break;
	case PE_SDATA4:
		v = (uint64_t)(int64_t)(int32_t)read_fixed(c, 4);
		break;
	case PE_ULEB128:
		v = read_uleb(c);
		break;
	case PE_SLEB128:
		v = (uint64_t)read_sleb(c);
		break;
	default:
		return false;
	}
	if (c->bad)
		return false;
	switch (encoding & 0x70) {
	case 0:
		break;
	case PE_PCREL:
		v += pc_base + (uint64_t)(at - section_start);
		break;
	default:
		return false;
	}
	*value = v;
	return true;
}

/* ---------------------------------------------------------------------------------------- */
/* CIEs */

struct cie {
	uint64_t offset;              /* in the section */
	bool usable;
	bool has_z;                   /* FDEs carry an augmentation-data block */
	bool signal;                  /* 'S': signal trampoline */
	uint8_t fde_encoding;         /* 'R', else absptr */
	uint64_t code_align;
	int64_t data_align;
	const uint8_t *insns, *insns_end;
};

/* Parses the augmentation of `e` into `out`; false when we cannot decode its FDEs. */
static bool parse_cie(const Dwarf_CIE *e, bool eh_frame, uint64_t offset, struct cie *out)
{
	memset(out, 0, sizeof(*out));
	out->offset = offset;
	out->code_align = e->code_alignment_factor;
	out->data_align = e->data_alignment_factor;
	out->insns = e->initial_instructions;
	out->insns_end = e->initial_instructions_end;
	out->fde_encoding = PE_ABSPTR;
	/* Factors beyond these are hostile; they would only overflow the arithmetic. */
	if (e->return_address_register != REG_RA || out->code_align == 0 ||
	    out->code_align > (1u << 20) || out->data_align < -(1 << 20) ||
	    out->data_align > (1 << 20) || !out->insns || out->insns_end < out->insns)
		return false;

	const char *aug = e->augmentation ? e->augmentation : "";
	if (!eh_frame || aug[0] == '\0')
		return aug[0] == '\0';
	if (aug[0] != 'z')
		return false; /* without a length we cannot find the instructions safely */
	out->has_z = true;
	struct cursor c = { e->augmentation_data,
			    e->augmentation_data + e->augmentation_data_size, false };
	if (!e->augmentation_data && e->augmentation_data_size)
		return false;
	for (const char *a = aug + 1; *a; a++) {
		switch (*a) {
		case 'R':
			out->fde_encoding = read_u8(&c);
			break;
		case 'P': {
			uint8_t enc = read_u8(&c);
			uint64_t ignored;
			/* The personality routine's address: skipped, whatever its relocation. */
			if (!read_encoded(&c, enc & 0x0f, c.pos, 0, &ignored))
				return false;
			break;
		}
		case 'L':
			(void)read_u8(&c);
			break;
		case 'S':
			out->signal = true;
			break;
		case 'B': /* AArch64 BTI: no data */
		case 'G': /* MTE tagged frames: no data */
			break;
		default:
			return false;
		}
		if (c.bad)
			return false;
	}
	return true;
}

/* ---------------------------------------------------------------------------------------- */
/* Interpreting call-frame instructions */

enum rule_how { RULE_SAME, RULE_UNDEFINED, RULE_OFFSET, RULE_OTHER };

struct reg_rule {
	uint8_t how;
	int64_t offset; /* RULE_OFFSET: saved at CFA + offset */
};

struct frame_state {
	bool cfa_is_expr;
	uint64_t cfa_reg;
	int64_t cfa_offset;
	int plt_threshold;        /* cfa_is_expr: the PLT stub pattern's literal, or -1 */
	struct reg_rule rbp, ra;
};

/* A row before packing, at an absolute pc. */
struct raw_row {
	uint64_t pc;
	struct unwind_row row; /* .pc unused */
};

struct row_vec {
	struct raw_row *v;
	size_t n, cap;
};

struct fde_span {
	uint64_t start, end;
	uint32_t first, count;   /* rows in the row vector */
	uint8_t source;          /* 0 = .eh_frame of the file, 1 = .debug_frame */
	uint64_t order;          /* discovery order, to keep sorting stable */
	bool plt;
};

struct builder {
	struct row_vec rows;
	struct fde_span *fdes;
	size_t nfdes, fdes_cap;
	struct cfi_stats stats;
	int error; /* a fatal error (ENOMEM, limits) */
	char *err;
	size_t errlen;
};

/* Recognises the x86-64 PLT CFA expression of GNU ld:
 * DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge; DW_OP_lit3;
 * DW_OP_shl; DW_OP_plus — CFA = RSP + 8 + ((RIP & 15) >= N) << 3. Returns N or -1. */
static int plt_pattern(const uint8_t *e, uint64_t len)
{
	static const uint8_t head[] = { DW_OP_breg7, 8, DW_OP_breg16, 0, DW_OP_lit15, DW_OP_and };
	static const uint8_t tail[] = { DW_OP_ge, DW_OP_lit3, DW_OP_shl, DW_OP_plus };

	if (len != sizeof(head) + 1 + sizeof(tail) || memcmp(e, head, sizeof(head)) ||
	    memcmp(e + sizeof(head) + 1, tail, sizeof(tail)))
		return -1;
	uint8_t lit = e[sizeof(head)];
	if (lit < DW_OP_lit0 || lit > DW_OP_lit15)
		return -1;
	return lit - DW_OP_lit0;
}

static struct unwind_row pack(const struct frame_state *s, bool signal)
{
	struct unwind_row r = { 0 };
	uint8_t cfa = UNWIND_CFA_COMPLEX, rbp = UNWIND_RBP_COMPLEX;

	if (signal) {
		cfa = UNWIND_CFA_SIGNAL;
		rbp = UNWIND_RBP_SAME; /* restored from the sigframe, not by the rule */
	} else if (s->ra.how == RULE_UNDEFINED) {
		cfa = UNWIND_CFA_END;
		rbp = UNWIND_RBP_SAME;
	} else {
		if (s->cfa_is_expr) {
			if (s->plt_threshold >= 0) {
				cfa = UNWIND_CFA_PLT;
				r.cfa_offset8 = (uint16_t)s->plt_threshold;
			}
		} else if ((s->cfa_reg == REG_RSP || s->cfa_reg == REG_RBP) && s->cfa_offset >= 0 &&
			   s->cfa_offset % 8 == 0 && s->cfa_offset / 8 <= UINT16_MAX) {
			cfa = s->cfa_reg == REG_RSP ? UNWIND_CFA_RSP : UNWIND_CFA_RBP;
			r.cfa_offset8 = (uint16_t)(s->cfa_offset / 8);
		}
		/* Our unwinder reads the return address at CFA - 8 and nowhere else. */
		if (s->ra.how != RULE_OFFSET || s->ra.offset != -8)
			cfa = UNWIND_CFA_COMPLEX;
		if (s->rbp.how == RULE_SAME) {
			rbp = UNWIND_RBP_SAME;
		} else if (s->rbp.how == RULE_OFFSET && s->rbp.offset % 8 == 0 &&
			   s->rbp.offset / 8 >= INT8_MIN && s->rbp.offset / 8 <= INT8_MAX) {
			rbp = UNWIND_RBP_AT_CFA;
			r.rbp_offset8 = (int8_t)(s->rbp.offset / 8);
		}
	}
	if (cfa == UNWIND_CFA_COMPLEX)
		r.cfa_offset8 = 0;
	r.kinds = UNWIND_ROW_KINDS(cfa, rbp);
	return r;
}

/* Makes room for `extra` more rows (growing at least geometrically). */
static int reserve_rows(struct builder *b, size_t extra)
{
	struct row_vec *v = &b->rows;

	if (extra > CFI_MAX_ROWS)
		extra = CFI_MAX_ROWS;
	if (v->cap - v->n >= extra)
		return 0;
	size_t cap = v->n + extra;
	if (cap < v->cap * 2)
		cap = v->cap * 2;
	struct raw_row *nv = realloc(v->v, cap * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	v->v = nv;
	v->cap = cap;
	return 0;
}

static int push_row(struct builder *b, uint32_t first, uint64_t pc, struct unwind_row row)
{
	struct row_vec *v = &b->rows;

	/* Two rows at one pc (advance by 0): the later rule wins. */
	if (v->n > first && v->v[v->n - 1].pc == pc) {
		v->v[v->n - 1].row = row;
		return 0;
	}
	if (v->n >= CFI_MAX_ROWS) {
		sysom_errorf(b->err, b->errlen, "more than %u unwind rows", CFI_MAX_ROWS);
		return -SYSOM_ELIMIT;
	}
	if (v->n == v->cap) {
		int err = reserve_rows(b, v->cap ? v->cap : 4096);
		if (err)
			return err;
	}
	v->v[v->n].pc = pc;
	v->v[v->n].row = row;
	v->n++;
	return 0;
}

struct fde_ctx {
	const struct cie *cie;
	const uint8_t *section;   /* start of the section data */
	uint64_t section_vaddr;   /* its address, for pc-relative pointers */
	uint64_t start, end;      /* the FDE's range */
};

static struct reg_rule *tracked(struct frame_state *s, uint64_t reg)
{
	return reg == REG_RBP ? &s->rbp : reg == REG_RA ? &s->ra : NULL;
}

static void set_rule(struct frame_state *s, uint64_t reg, uint8_t how, int64_t offset)
{
	struct reg_rule *r = tracked(s, reg);

	if (r) {
		r->how = how;
		r->offset = offset;
	}
}

/* Where a program runs: a CIE's initial instructions (no rows) or an FDE's. */
struct program {
	const struct cie *cie;
	const uint8_t *section;       /* section data start, for pc-relative DW_CFA_set_loc */
	uint64_t section_vaddr;
	bool emit;                    /* FDE: advancing the location emits rows */
	uint64_t end;                 /* FDE range end: rows at or past it are not emitted */
	uint32_t first_row;           /* the FDE's first row in the builder */
	const struct frame_state *initial; /* state after the CIE program, for DW_CFA_restore */
};

/* a * b without overflow (hostile factors); false when it does not fit. */
static bool scaled(int64_t a, int64_t b, int64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

static int emit_row(struct builder *b, const struct program *pr, uint64_t loc,
		    const struct frame_state *s)
{
	if (!pr->emit || loc >= pr->end)
		return 0;
	return push_row(b, pr->first_row, loc, pack(s, pr->cie->signal));
}

/*
 * Runs the call-frame instructions [p, end) on `s`, `*loc` being the current location.
 * Returns 0, 1 when the instructions are malformed or use something we do not support (the
 * caller drops the FDE), or a negative errno from emitting rows.
 */
static int run_program(struct builder *b, const struct program *pr, const uint8_t *p,
		       const uint8_t *end, struct frame_state *s, uint64_t *loc)
{
	struct frame_state saved[CFI_MAX_STATE_DEPTH];
	unsigned depth = 0;
	struct cursor c = { p, end, false };
	const int64_t daf = pr->cie->data_align;
	const uint64_t caf = pr->cie->code_align;

	while (c.pos < c.end && !c.bad) {
		uint8_t op = read_u8(&c);
		uint64_t reg, delta, len, v;
		int64_t off;
		const uint8_t *expr;
		int err;

		switch (op >> 6) {
		case 1: /* DW_CFA_advance_loc */
			delta = op & 0x3f;
			goto advance;
		case 2: /* DW_CFA_offset */
			if (!scaled((int64_t)read_uleb(&c), daf, &off))
				return 1;
			set_rule(s, op & 0x3f, RULE_OFFSET, off);
			continue;
		case 3: /* DW_CFA_restore */
			if (!pr->initial)
				return 1; /* not allowed in a CIE */
			if (tracked(s, op & 0x3f))
				*tracked(s, op & 0x3f) =
					*tracked((struct frame_state *)pr->initial, op & 0x3f);
			continue;
		}
		switch (op) {
		case DW_CFA_nop:
			continue;
		case DW_CFA_set_loc:
			if (!pr->emit || !read_encoded(&c, pr->cie->fde_encoding, pr->section,
						       pr->section_vaddr, &v) || v < *loc)
				return 1;
			err = emit_row(b, pr, *loc, s);
			if (err)
				return err;
			*loc = v;
			continue;
		case DW_CFA_advance_loc1:
			delta = read_fixed(&c, 1);
			goto advance;
		case DW_CFA_advance_loc2:
			delta = read_fixed(&c, 2);
			goto advance;
		case DW_CFA_advance_loc4:
			delta = read_fixed(&c, 4);
			goto advance;
		case DW_CFA_offset_extended:
			reg = read_uleb(&c);
			if (!scaled((int64_t)read_uleb(&c), daf, &off))
				return 1;
			set_rule(s, reg, RULE_OFFSET, off);
			continue;
		case DW_CFA_offset_extended_sf:
			reg = read_uleb(&c);
			if (!scaled(read_sleb(&c), daf, &off))
				return 1;
			set_rule(s, reg, RULE_OFFSET, off);
			continue;
		case DW_CFA_GNU_negative_offset_extended:
			reg = read_uleb(&c);
			if (!scaled((int64_t)read_uleb(&c), -daf, &off))
				return 1;
			set_rule(s, reg, RULE_OFFSET, off);
			continue;
		case DW_CFA_restore_extended:
			reg = read_uleb(&c);
			if (!pr->initial)
				return 1;
			if (tracked(s, reg))
				*tracked(s, reg) = *tracked((struct frame_state *)pr->initial, reg);
			continue;
		case DW_CFA_undefined:
			set_rule(s, read_uleb(&c), RULE_UNDEFINED, 0);
			continue;
		case DW_CFA_same_value:
			set_rule(s, read_uleb(&c), RULE_SAME, 0);
			continue;
		case DW_CFA_register:
			reg = read_uleb(&c);
			(void)read_uleb(&c);
			set_rule(s, reg, RULE_OTHER, 0);
			continue;
		case DW_CFA_val_offset:
			reg = read_uleb(&c);
			(void)read_uleb(&c);
			set_rule(s, reg, RULE_OTHER, 0);
			continue;
		case DW_CFA_val_offset_sf:
			reg = read_uleb(&c);
			(void)read_sleb(&c);
			set_rule(s, reg, RULE_OTHER, 0);
			continue;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			reg = read_uleb(&c);
			if (!read_block(&c, &len))
				return 1;
			set_rule(s, reg, RULE_OTHER, 0);
			continue;
		case DW_CFA_remember_state:
			if (depth == CFI_MAX_STATE_DEPTH)
				return 1;
			saved[depth++] = *s;
			continue;
		case DW_CFA_restore_state:
			if (depth == 0)
				return 1;
			/* The CFA rule comes back too, as GCC's epilogues expect and libgcc does. */
			*s = saved[--depth];
			continue;
		case DW_CFA_def_cfa:
			s->cfa_reg = read_uleb(&c);
			s->cfa_offset = (int64_t)read_uleb(&c);
			s->cfa_is_expr = false;
			continue;
		case DW_CFA_def_cfa_sf:
			s->cfa_reg = read_uleb(&c);
			if (!scaled(read_sleb(&c), daf, &s->cfa_offset))
				return 1;
			s->cfa_is_expr = false;
			continue;
		case DW_CFA_def_cfa_register:
			s->cfa_reg = read_uleb(&c);
			s->cfa_is_expr = false; /* only valid after a register rule; be lenient */
			continue;
		case DW_CFA_def_cfa_offset:
			s->cfa_offset = (int64_t)read_uleb(&c);
			continue;
		case DW_CFA_def_cfa_offset_sf:
			if (!scaled(read_sleb(&c), daf, &s->cfa_offset))
				return 1;
			continue;
		case DW_CFA_def_cfa_expression:
			expr = read_block(&c, &len);
			if (!expr)
				return 1;
			s->cfa_is_expr = true;
			s->plt_threshold = plt_pattern(expr, len);
			continue;
		case DW_CFA_GNU_args_size:
			(void)read_uleb(&c);
			continue;
		default:
			return 1; /* unknown or not for x86-64 (window save, MIPS advance_loc8) */
		}
advance:
		if (c.bad)
			return 1;
		if (!pr->emit)
			return 1; /* a CIE's initial program cannot advance */
		err = emit_row(b, pr, *loc, s);
		if (err)
			return err;
		if (delta > (UINT64_MAX - *loc) / caf)
			return 1;
		*loc += delta * caf;
	}
	return c.bad ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* FDEs and sections */

struct section {
	Elf_Data *data;
	const uint8_t *bytes;
	uint64_t vaddr;
	bool eh_frame;
	uint8_t source;
	const unsigned char *e_ident;
	struct cie *cies;        /* sorted by offset (the order we meet them) */
	size_t ncies, cies_cap;
};

static const struct cie *find_cie(struct section *sec, uint64_t offset, struct cie *scratch)
{
	size_t lo = 0, hi = sec->ncies;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sec->cies[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < sec->ncies && sec->cies[lo].offset == offset)
		return &sec->cies[lo];
	/* A forward reference (rare): parse it on the spot, uncached. */
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	if (dwarf_next_cfi(sec->e_ident, sec->data, sec->eh_frame, offset, &next, &e) != 0 ||
	    e.CIE_id != DW_CIE_ID_64)
		return NULL;
	scratch->usable = parse_cie(&e.cie, sec->eh_frame, offset, scratch);
	return scratch;
}

static int add_cie(struct builder *b, struct section *sec, const Dwarf_CIE *e, uint64_t offset)
{
	struct cie c;

	c.usable = parse_cie(e, sec->eh_frame, offset, &c);
	b->stats.cies++;
	if (!c.usable)
		b->stats.bad_cies++;
	if (sec->ncies && sec->cies[sec->ncies - 1].offset >= offset)
		return 0; /* out of order (cannot happen with dwarf_next_cfi): looked up on demand */
	if (SYSOM_ARRAY_RESERVE(sec->cies, sec->cies_cap, sec->ncies, 8))
		return -ENOMEM;
	sec->cies[sec->ncies++] = c;
	return 0;
}

static int add_span(struct builder *b, const struct fde_span *span)
{
	if (b->nfdes >= CFI_MAX_FDES) {
		sysom_errorf(b->err, b->errlen, "more than %u FDEs", CFI_MAX_FDES);
		return -SYSOM_ELIMIT;
	}
	if (SYSOM_ARRAY_RESERVE(b->fdes, b->fdes_cap, b->nfdes, 1024))
		return -ENOMEM;
	b->fdes[b->nfdes++] = *span;
	return 0;
}

/* Decodes one FDE and runs its program; an FDE we cannot use is counted and dropped. */
static int add_fde(struct builder *b, struct section *sec, const Dwarf_FDE *e)
{
	struct cie scratch;
	const struct cie *cie = find_cie(sec, e->CIE_pointer, &scratch);
	struct cursor c = { e->start, e->end, false };
	uint64_t start, range, len;
	int rc;

	if (!cie || !cie->usable || e->end < e->start ||
	    !read_encoded(&c, cie->fde_encoding, sec->bytes, sec->vaddr, &start) ||
	    !read_encoded(&c, cie->fde_encoding & 0x0f, sec->bytes, 0, &range) ||
	    (cie->has_z && !read_block(&c, &len))) {
		b->stats.bad_fdes++;
		return 0;
	}
	if (range == 0) {
		b->stats.empty_fdes++;
		return 0;
	}
	if (start > UINT64_MAX - range) {
		b->stats.bad_fdes++;
		return 0;
	}

	struct frame_state initial = { .plt_threshold = -1 };
	struct program pr = { .cie = cie, .section = sec->bytes, .section_vaddr = sec->vaddr };
	uint64_t loc = start;
	rc = run_program(b, &pr, cie->insns, cie->insns_end, &initial, &loc);
	if (rc < 0)
		return rc;
	if (rc > 0) {
		b->stats.bad_fdes++;
		return 0;
	}

	struct frame_state s = initial;
	uint32_t first = (uint32_t)b->rows.n;
	pr.emit = true;
	pr.end = start + range;
	pr.first_row = first;
	pr.initial = &initial;
	rc = run_program(b, &pr, c.pos, e->end, &s, &loc);
	if (rc == 0)
		rc = emit_row(b, &pr, loc, &s);
	if (rc > 0 || (rc == 0 && b->rows.n == first)) {
		b->rows.n = first; /* drop what it emitted */
		b->stats.bad_fdes++;
		return 0;
	}
	if (rc < 0)
		return rc;

	struct fde_span span = {
		.start = start,
		.end = start + range,
		.first = first,
		.count = (uint32_t)(b->rows.n - first),
		.source = sec->source,
		.order = b->nfdes,
	};
	return add_span(b, &span);
}

static int add_section(struct builder *b, Elf *elf, Elf_Scn *scn, bool eh_frame, uint8_t source)
{
	struct section sec = { .eh_frame = eh_frame, .source = source };
	GElf_Shdr shdr;
	Dwarf_Off off = 0, next;
	uint64_t entries = 0;
	int err = 0;

	if (!gelf_getshdr(scn, &shdr) || shdr.sh_type == SHT_NOBITS)
		return 0;
	/* The ELF is read with pread (ELF_C_READ): a section is read whole into memory. */
	if (shdr.sh_size > CFI_MAX_SECTION_BYTES) {
		sysom_errorf(b->err, b->errlen, "a %llu-byte CFI section (limit %u)",
			     (unsigned long long)shdr.sh_size, CFI_MAX_SECTION_BYTES);
		return -SYSOM_ELIMIT;
	}
	if (shdr.sh_flags & SHF_COMPRESSED) {
		GElf_Chdr ch;
		if (!gelf_getchdr(scn, &ch) || ch.ch_size > CFI_MAX_SECTION_BYTES ||
		    elf_compress(scn, 0, 0) < 0)
			return 0; /* undecodable or oversized optional section: frame pointers remain */
	}
	sec.data = elf_getdata(scn, NULL);
	if (!sec.data && shdr.sh_size) {
		/* A short read: the file changed (truncated) while being read. */
		sysom_errorf(b->err, b->errlen, "cannot read a CFI section: %s", elf_errmsg(-1));
		return -EIO;
	}
	if (!sec.data || !sec.data->d_buf || sec.data->d_size == 0)
		return 0;
	sec.bytes = sec.data->d_buf;
	sec.vaddr = shdr.sh_addr;
	/* Compilers emit a row per 7-8 bytes of CFI: reserve once instead of growing (growing
	 * a large block costs a copy and fresh page faults). */
	err = reserve_rows(b, sec.data->d_size / 6 + 16);
	if (err)
		return err;
	sec.e_ident = (const unsigned char *)elf_getident(elf, NULL);

	for (;;) {
		Dwarf_CFI_Entry e;
		int rc = dwarf_next_cfi(sec.e_ident, sec.data, eh_frame, off, &next, &e);
		if (rc != 0)
			break; /* 1: the end; -1: malformed from here on, keep what came before */
		if (++entries > 2ull * CFI_MAX_FDES) {
			sysom_errorf(b->err, b->errlen, "more than %u CFI entries", 2 * CFI_MAX_FDES);
			err = -SYSOM_ELIMIT;
			goto cleanup;
		}
		if (e.CIE_id == DW_CIE_ID_64)
			err = add_cie(b, &sec, &e.cie, off);
		else
			err = add_fde(b, &sec, &e.fde);
		if (err)
			goto cleanup;
		if (next == (Dwarf_Off)-1 || next <= off)
			break;
		off = next;
	}
cleanup:
	free(sec.cies);
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* The table */

static int span_cmp(const void *a, const void *b)
{
	const struct fde_span *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->source != y->source)
		return x->source < y->source ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static bool same_rule(const struct unwind_row *a, const struct unwind_row *b)
{
	return a->kinds == b->kinds && a->rbp_offset8 == b->rbp_offset8 &&
	       a->cfa_offset8 == b->cfa_offset8;
}

static void count_row(struct cfi_stats *st, const struct unwind_row *r)
{
	switch (UNWIND_ROW_CFA(r)) {
	case UNWIND_CFA_COMPLEX:
		st->complex_cfa_rows++;
		break;
	case UNWIND_CFA_END:
		st->end_rows++;
		break;
	default:
		break;
	}
	if (UNWIND_ROW_RBP(r) == UNWIND_RBP_COMPLEX)
		st->complex_rbp_rows++;
}

/* Sorts the FDEs, drops overlaps, fills gaps with NONE rows, merges equal neighbours. */
static int assemble(struct builder *b, struct cfi_table *t)
{
	struct unwind_row *rows = NULL;
	size_t n = 0, cap = 0;
	uint64_t base = 0, end = 0;
	bool any = false;

	if (b->nfdes)
		qsort(b->fdes, b->nfdes, sizeof(*b->fdes), span_cmp);
	/* First pass: which FDEs stay, and the span they cover. */
	for (size_t i = 0; i < b->nfdes; i++) {
		struct fde_span *f = &b->fdes[i];
		if (any && f->start < end) {
			b->stats.overlapping_fdes++;
			f->count = 0;
			f->end = 0; /* marks it dropped */
			continue;
		}
		if (!any)
			base = f->start;
		any = true;
		end = f->end;
	}
	if (!any)
		goto done;
	if (end - base > CFI_MAX_SPAN) {
		sysom_errorf(b->err, b->errlen, "CFI covers %#llx bytes, more than 4 GiB",
			  (unsigned long long)(end - base));
		return -SYSOM_ELIMIT;
	}

	/* At most: every FDE's rows, a gap row after each FDE. */
	cap = b->rows.n + b->nfdes + 1;
	rows = malloc(cap * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	uint64_t prev_end = base;
	for (size_t i = 0; i < b->nfdes + 1; i++) {
		const struct fde_span *f = i < b->nfdes ? &b->fdes[i] : NULL;
		if (f && f->end == 0)
			continue;
		/* Room for this FDE's rows plus a gap row (reserved above). */
		if (n + (f ? f->count : 0) + 1 > cap) {
			free(rows);
			return -EOVERFLOW; /* cannot happen: cap counts every row and gap */
		}
		/* A gap before this FDE (or the end of the last one): NONE. */
		if (n > 0 && (!f || f->start > prev_end)) {
			struct unwind_row none = { (uint32_t)(prev_end - base),
						   UNWIND_ROW_KINDS(UNWIND_CFA_NONE, UNWIND_RBP_SAME),
						   0, 0 };
			if (!same_rule(&rows[n - 1], &none))
				rows[n++] = none;
		}
		if (!f)
			break;
		b->stats.fdes++;
		if (f->source == 0)
			b->stats.eh_frame_fdes++;
		else
			b->stats.debug_frame_fdes++;
		bool plt = false, signal = false;
		for (uint32_t k = 0; k < f->count; k++) {
			const struct raw_row *r = &b->rows.v[f->first + k];
			struct unwind_row row = r->row;
			b->stats.rows_raw++;
			plt |= UNWIND_ROW_CFA(&row) == UNWIND_CFA_PLT;
			signal |= UNWIND_ROW_CFA(&row) == UNWIND_CFA_SIGNAL;
			row.pc = (uint32_t)(r->pc - base);
			if (n > 0 && same_rule(&rows[n - 1], &row))
				continue;
			if (n > 0 && rows[n - 1].pc == row.pc)
				rows[n - 1] = row; /* an FDE starting where a gap row was put */
			else
				rows[n++] = row;
		}
		b->stats.plt_fdes += plt;
		b->stats.signal_fdes += signal;
		prev_end = f->end;
	}
	if (n > CFI_MAX_ROWS) {
		sysom_errorf(b->err, b->errlen, "more than %u unwind rows", CFI_MAX_ROWS);
		free(rows);
		return -SYSOM_ELIMIT;
	}
	for (size_t i = 0; i < n; i++)
		count_row(&b->stats, &rows[i]);
	if (n < cap) {
		struct unwind_row *shrunk = realloc(rows, n * sizeof(*rows));
		if (shrunk)
			rows = shrunk;
	}
done:
	b->stats.rows = n;
	t->base = base;
	t->end = end;
	t->rows = rows;
	t->nrows = (uint32_t)n;
	t->stats = b->stats;
	return 0;
}

static bool is_x86_64(Elf *elf, bool need_loadable)
{
	GElf_Ehdr eh;

	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh))
		return false;
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh.e_machine != EM_X86_64)
		return false;
	return !need_loadable || eh.e_type == ET_EXEC || eh.e_type == ET_DYN;
}

/* Adds the CFI sections of `elf`: .eh_frame (when `eh_frame`) and .debug_frame. */
static int add_file(struct builder *b, Elf *elf, bool eh_frame)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;
	Elf_Scn *eh = NULL, *debug = NULL;

	size_t sections = 0, named = 0;

	if (sysom_elf_sections_missing(elf)) {
		sysom_errorf(b->err, b->errlen, "section headers past the end of the file");
		return -EIO;
	}
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return 0; /* no section headers: nothing to read (frame pointers remain) */
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr shdr;
		const char *name;
		sections++;
		if (!gelf_getshdr(scn, &shdr) || !(name = elf_strptr(elf, shstrndx, shdr.sh_name)))
			continue;
		named++;
		if (!eh && strcmp(name, ".eh_frame") == 0)
			eh = scn;
		else if (!debug && strcmp(name, ".debug_frame") == 0)
			debug = scn;
	}
	if (sections && !named) {
		/* Headers or their names unreadable: a short read (the file changed while read). */
		sysom_errorf(b->err, b->errlen, "cannot read the section headers: %s",
			     elf_errmsg(-1));
		return -EIO;
	}
	int err = 0;
	if (eh_frame && eh)
		err = add_section(b, elf, eh, true, 0);
	if (!err && debug)
		err = add_section(b, elf, debug, false, 1);
	return err;
}

int cfi_table_build(Elf *elf, Elf *debug_elf, struct cfi_table *out, char *err, size_t errlen)
{
	struct builder b = { .err = err, .errlen = errlen };
	struct cfi_table t = { 0 };
	int rc;

	if (!is_x86_64(elf, true)) {
		sysom_errorf(err, errlen, "not an x86-64 ELF executable or shared object");
		return -SYSOM_ENOTELF;
	}
	rc = add_file(&b, elf, true);
	if (!rc && debug_elf) {
		if (!is_x86_64(debug_elf, false)) {
			sysom_errorf(err, errlen, "debug file is not x86-64 ELF");
			rc = -SYSOM_ENOTELF;
			goto cleanup;
		}
		rc = add_file(&b, debug_elf, false);
	}
	if (rc)
		goto cleanup;
	rc = assemble(&b, &t);
	if (rc)
		goto cleanup;
	*out = t;
cleanup:
	if (rc == -ENOMEM)
		sysom_errorf(err, errlen, "out of memory");
	free(b.rows.v);
	free(b.fdes);
	return rc;
}

int cfi_table_build_path(const char *path, struct cfi_table *out, char *err, size_t errlen)
{
	Elf *elf = NULL;
	int fd, rc;

	elf_version(EV_CURRENT);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	/* pread, not mmap: a file truncated meanwhile is a read error, not SIGBUS. */
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf) {
		sysom_errorf(err, errlen, "%s: %s", path, elf_errmsg(-1));
		rc = -SYSOM_ENOTELF;
		goto cleanup;
	}
	rc = cfi_table_build(elf, NULL, out, err, errlen);
cleanup:
	elf_end(elf);
	close(fd);
	return rc;
}

const struct unwind_row *cfi_table_lookup(const struct cfi_table *t, uint64_t vaddr)
{
	if (!t->nrows || vaddr < t->base || vaddr >= t->end)
		return NULL;
	uint32_t pc = (uint32_t)(vaddr - t->base);
	size_t lo = 0, hi = t->nrows; /* first row with pc > target */

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->rows[mid].pc <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &t->rows[lo - 1] : NULL;
}

void cfi_table_free(struct cfi_table *t)
{
	if (!t)
		return;
	free(t->rows);
	t->rows = NULL;
	t->nrows = 0;
}
