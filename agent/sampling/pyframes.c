/* SPDX-License-Identifier: Apache-2.0 */
/* CPython interpreters: detection, per-version offsets, BPF publication, frame names. */
#include "agent/sampling/pyframes.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/report.h"

/* ---- per-version tables ---------------------------------------------------------------------
 *
 * 3.10–3.12 have no _Py_DebugOffsets. These offsets were read from the DWARF of the pyenv
 * builds (gdb: `p &((PyThreadState *)0)->thread_id` ...) of 3.10.13, 3.11.7 and 3.12.1 and
 * are checked against every interpreter on the machine by tests/unit/agent/sampling/
 * test_pyframes.c (a live process's frame chain walked with them must name the expected
 * functions); CPython keeps these internal layouts fixed within a minor version.
 */
struct py_version_table {
	uint32_t minor;
	uint32_t layout;
	uint16_t runtime_interp; /* _PyRuntimeState: interpreters.main */
	uint16_t interp_threads, ts_next, ts_thread_id, ts_frame, cframe_current;
	uint16_t frame_code, frame_previous, frame_instr, frame_entry, code_adaptive;
	struct py_code_offsets code;
	uint16_t code_name; /* co_name: the frame check's (bpf/pyframes.h) */
};

static const struct py_version_table py_tables[] = {
	{ 10, PY_LAYOUT_310, 0x28, 0x08, 0x08, 0xb0, 0x18, 0, 0x20, 0x18, 0x60, 0, 0,
	  { .qualname = 0x70 /* co_name */, .filename = 0x68, .firstlineno = 0x28,
	    .linetable = 0x78, .ascii_size = 48, .compact_size = 72 }, 0x70 },
	{ 11, PY_LAYOUT_311, 0x30, 0x10, 0x08, 0x98, 0x38, 0x08, 0x20, 0x30, 0x38, 0x44, 0xb8,
	  { .qualname = 0x80, .filename = 0x70, .firstlineno = 0x48, .linetable = 0x88,
	    .ascii_size = 48, .compact_size = 72 }, 0x78 },
	{ 12, PY_LAYOUT_312, 0x30, 0x48, 0x08, 0x88, 0x38, 0x00, 0x00, 0x08, 0x38, 0x46, 0xc0,
	  { .qualname = 0x80, .filename = 0x70, .firstlineno = 0x44, .linetable = 0x88,
	    .ascii_size = 40, .compact_size = 56 }, 0x78 },
};

/* _Py_DebugOffsets (3.13.0 layout, Include/internal/pycore_runtime.h): the fields used. */
#define DBG_COOKIE "xdebugpy"
#define DBG_SIZE 584
#define DBG_VERSION 8
#define DBG_RUNTIME_INTERP_HEAD 40
#define DBG_INTERP_THREADS_HEAD 72
#define DBG_TS_NEXT 168
#define DBG_TS_CURRENT_FRAME 184
#define DBG_TS_THREAD_ID 192
#define DBG_FRAME_PREVIOUS 232
#define DBG_FRAME_EXECUTABLE 240
#define DBG_FRAME_INSTR_PTR 248
#define DBG_FRAME_OWNER 264
#define DBG_CODE_FILENAME 280
#define DBG_CODE_NAME 288
#define DBG_CODE_QUALNAME 296
#define DBG_CODE_LINETABLE 304
#define DBG_CODE_FIRSTLINENO 312
#define DBG_CODE_ADAPTIVE 344
#define DBG_UNICODE_ASCII_SIZE 560

/* Limits on what a (possibly corrupted) process makes us read. */
#define PY_MAX_STRING 1024
#define PY_MAX_LINETABLE (256 * 1024)

void pyframes_options_default(struct pyframes_options *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->proc_root = "/proc";
	opts->max_processes = 1024;
	opts->cache_slots = 4096;
}

/* ---- process memory ---------------------------------------------------------------------- */

static int read_mem(int fd, uint64_t addr, void *buf, size_t len)
{
	ssize_t n;

	if (addr == 0 || addr + len < addr || addr >= (1ULL << 47))
		return -EFAULT;
	n = pread(fd, buf, len, (off_t)addr);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

static int read_u64(int fd, uint64_t addr, uint64_t *out)
{
	return read_mem(fd, addr, out, sizeof(*out));
}

static int open_mem(const char *proc_root, uint32_t tgid)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%u/mem", proc_root, tgid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Appends code point `cp` as UTF-8; returns the new length or 0 when it does not fit. */
static size_t put_utf8(char *out, size_t n, size_t cap, uint32_t cp)
{
	if (cp < 0x80) {
		if (n + 1 >= cap)
			return 0;
		out[n++] = (char)cp;
	} else if (cp < 0x800) {
		if (n + 2 >= cap)
			return 0;
		out[n++] = (char)(0xc0 | cp >> 6);
		out[n++] = (char)(0x80 | (cp & 63));
	} else if (cp < 0x10000) {
		if (n + 3 >= cap)
			return 0;
		out[n++] = (char)(0xe0 | cp >> 12);
		out[n++] = (char)(0x80 | ((cp >> 6) & 63));
		out[n++] = (char)(0x80 | (cp & 63));
	} else if (cp < 0x110000) {
		if (n + 4 >= cap)
			return 0;
		out[n++] = (char)(0xf0 | cp >> 18);
		out[n++] = (char)(0x80 | ((cp >> 12) & 63));
		out[n++] = (char)(0x80 | ((cp >> 6) & 63));
		out[n++] = (char)(0x80 | (cp & 63));
	} else {
		return 0;
	}
	return n;
}

/*
 * Reads a compact str object into `out` as UTF-8 (at most PY_MAX_STRING bytes, cut at a
 * code point). Layout shared by 3.10–3.13: length at 16, state bits at 32 (kind bits 2–4,
 * compact bit 5, ascii bit 6). 0 or -EFAULT (unreadable, not compact, NUL inside).
 */
static int read_str(int fd, const struct py_code_offsets *co, uint64_t addr, char *out,
		    size_t cap)
{
	uint8_t raw[PY_MAX_STRING * 4];
	int64_t length;
	uint32_t state, kind;
	size_t n = 0, unit;

	if (read_mem(fd, addr + 16, &length, sizeof(length)) ||
	    read_mem(fd, addr + 32, &state, sizeof(state)))
		return -EFAULT;
	kind = (state >> 2) & 7;
	if (!((state >> 5) & 1) || length < 0)
		return -EFAULT; /* not compact: never for code object names */
	if ((state >> 6) & 1) {
		unit = 1;
		kind = 0; /* ASCII */
	} else if (kind == 1 || kind == 2 || kind == 4) {
		unit = kind;
	} else {
		return -EFAULT;
	}
	if (length > PY_MAX_STRING)
		length = PY_MAX_STRING;
	if (length && read_mem(fd, addr + (kind ? co->compact_size : co->ascii_size), raw,
			       (size_t)length * unit))
		return -EFAULT;
	for (int64_t i = 0; i < length; i++) {
		uint32_t cp = unit == 1 ? raw[i]
			      : unit == 2 ? (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8
					  : (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
						    (uint32_t)raw[4 * i + 2] << 16 |
						    (uint32_t)raw[4 * i + 3] << 24;
		size_t next;

		if (cp == 0 || (kind == 0 && cp >= 0x80))
			return -EFAULT;
		next = put_utf8(out, n, cap, cp);
		if (!next)
			break;
		n = next;
	}
	out[n] = '\0';
	return 0;
}

/* ---- finding the interpreter ------------------------------------------------------------- */

struct py_symbols {
	uint64_t runtime, eval, eval_size, cold, cold_size, version_sym;
	bool has_version_sym;
};

static void scan_symbols(Elf *elf, struct py_symbols *s)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data, *strs;

		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) ||
		    sh.sh_entsize == 0)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data || !elf_getscn(elf, sh.sh_link))
			continue;
		strs = elf_getdata(elf_getscn(elf, sh.sh_link), NULL);
		if (!strs)
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym) || sym.st_value == 0 ||
			    sym.st_shndx == SHN_UNDEF)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name)
				continue;
			if (!strcmp(name, "_PyRuntime")) {
				s->runtime = sym.st_value;
			} else if (!strcmp(name, "_PyEval_EvalFrameDefault")) {
				s->eval = sym.st_value;
				s->eval_size = sym.st_size;
			} else if (!strcmp(name, "_PyEval_EvalFrameDefault.cold")) {
				s->cold = sym.st_value;
				s->cold_size = sym.st_size;
			} else if (!strcmp(name, "Py_Version")) {
				s->version_sym = sym.st_value;
				s->has_version_sym = true;
			}
		}
	}
}

/* File offset of virtual address `vaddr`, or -1. */
static int64_t vaddr_to_offset(Elf *elf, uint64_t vaddr)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz)
			return (int64_t)(vaddr - ph.p_vaddr + ph.p_offset);
	}
	return -1;
}

/* Load bias of the object whose mapping `m` maps file offset m->file_offset at m->start. */
static int load_bias(Elf *elf, const struct pt_mapping *m, uint64_t *bias)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		if (m->file_offset >= (ph.p_offset & ~0xfffULL) &&
		    m->file_offset < ph.p_offset + ph.p_filesz) {
			*bias = m->start - (ph.p_vaddr + (m->file_offset - ph.p_offset));
			return 0;
		}
	}
	return -1;
}

/* "python3.N" or "libpython3.N..." in the base name: *minor = N. */
static bool python_name(const char *path, uint32_t *minor)
{
	const char *base = strrchr(path, '/');
	unsigned long n;
	char *end;

	base = base ? base + 1 : path;
	if (!strncmp(base, "lib", 3))
		base += 3;
	if (strncmp(base, "python3.", 8))
		return false;
	n = strtoul(base + 8, &end, 10);
	if (end == base + 8 || n > 99)
		return false;
	*minor = (uint32_t)n;
	return true;
}

static int from_debug_offsets(int memfd, struct py_target *t, char *why, size_t whylen)
{
	uint8_t d[DBG_SIZE];
	uint64_t v;

#define DBG(off) (memcpy(&v, d + (off), 8), v)
	if (read_mem(memfd, t->runtime_addr, d, sizeof(d))) {
		snprintf(why, whylen, "_Py_DebugOffsets unreadable");
		return PY_UNSUPPORTED;
	}
	if (memcmp(d, DBG_COOKIE, 8)) {
		snprintf(why, whylen, "no _Py_DebugOffsets cookie at _PyRuntime");
		return PY_UNSUPPORTED;
	}
	if ((DBG(DBG_VERSION) >> 16) != 0x030d) {
		snprintf(why, whylen, "_Py_DebugOffsets of version %#llx, not 3.13",
			 (unsigned long long)DBG(DBG_VERSION));
		return PY_UNSUPPORTED;
	}
	const unsigned fields[] = { DBG_RUNTIME_INTERP_HEAD, DBG_INTERP_THREADS_HEAD,
				    DBG_TS_NEXT, DBG_TS_CURRENT_FRAME, DBG_TS_THREAD_ID,
				    DBG_FRAME_PREVIOUS, DBG_FRAME_EXECUTABLE, DBG_FRAME_INSTR_PTR,
				    DBG_FRAME_OWNER, DBG_CODE_FILENAME, DBG_CODE_NAME, DBG_CODE_QUALNAME,
				    DBG_CODE_LINETABLE, DBG_CODE_FIRSTLINENO, DBG_CODE_ADAPTIVE,
				    DBG_UNICODE_ASCII_SIZE };
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (DBG(fields[i]) >= 0x8000) {
			snprintf(why, whylen, "_Py_DebugOffsets field at %u implausible (%#llx)",
				 fields[i], (unsigned long long)v);
			return PY_UNSUPPORTED;
		}
	t->proc.version_hex = (uint32_t)DBG(DBG_VERSION);
	t->proc.layout = PY_LAYOUT_313;
	t->proc.interp_addr = t->runtime_addr + DBG(DBG_RUNTIME_INTERP_HEAD);
	t->proc.interp_threads = (uint16_t)DBG(DBG_INTERP_THREADS_HEAD);
	t->proc.ts_next = (uint16_t)DBG(DBG_TS_NEXT);
	t->proc.ts_thread_id = (uint16_t)DBG(DBG_TS_THREAD_ID);
	t->proc.ts_frame = (uint16_t)DBG(DBG_TS_CURRENT_FRAME);
	t->proc.frame_code = (uint16_t)DBG(DBG_FRAME_EXECUTABLE);
	t->proc.frame_previous = (uint16_t)DBG(DBG_FRAME_PREVIOUS);
	t->proc.frame_instr = (uint16_t)DBG(DBG_FRAME_INSTR_PTR);
	t->proc.frame_entry = (uint16_t)DBG(DBG_FRAME_OWNER);
	t->proc.code_adaptive = (uint16_t)DBG(DBG_CODE_ADAPTIVE);
	t->proc.code_name = (uint16_t)DBG(DBG_CODE_NAME);
	t->code.qualname = (uint16_t)DBG(DBG_CODE_QUALNAME);
	t->code.filename = (uint16_t)DBG(DBG_CODE_FILENAME);
	t->code.firstlineno = (uint16_t)DBG(DBG_CODE_FIRSTLINENO);
	t->code.linetable = (uint16_t)DBG(DBG_CODE_LINETABLE);
	t->code.ascii_size = (uint16_t)DBG(DBG_UNICODE_ASCII_SIZE);
	/* PyCompactUnicodeObject: the ASCII header, utf8_length, utf8 (no wstr since 3.12). */
	t->code.compact_size = (uint16_t)(t->code.ascii_size + 16);
	t->debug_offsets = true;
#undef DBG
	return 0;
}

int pyframes_inspect(const char *proc_root, const struct pt_process *proc, struct py_target *out,
		     char *why, size_t whylen)
{
	const struct pt_object *tried[8] = { 0 };
	uint32_t ntried = 0, minor = 0;
	int rc = PY_NOT_PYTHON, memfd = -1;

	memset(out, 0, sizeof(*out));
	if (whylen)
		why[0] = '\0';
	for (uint32_t i = 0; i < proc->mapping_count && rc != 0; i++) {
		const struct pt_mapping *m = &proc->mappings[i];
		struct py_symbols s = { 0 };
		char path[PATH_MAX];
		bool seen = false;
		Elf *elf = NULL;
		uint64_t bias;
		int fd;

		if (!m->object || !m->object->path || !python_name(m->object->path, &minor))
			continue;
		for (uint32_t k = 0; k < ntried; k++)
			seen |= tried[k] == m->object;
		if (seen || ntried == 8)
			continue;
		tried[ntried++] = m->object;
		snprintf(path, sizeof(path), "%s/%u/map_files/%lx-%lx", proc_root, proc->tgid,
			 (unsigned long)m->start, (unsigned long)m->end);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno;
			break;
		}
		elf = elf_begin(fd, ELF_C_READ, NULL);
		if (elf && elf_kind(elf) == ELF_K_ELF)
			scan_symbols(elf, &s);
		if (!s.runtime || !s.eval) {
			/* An executable linked to libpython: the library has the symbols. */
			if (rc == PY_NOT_PYTHON || rc == PY_UNSUPPORTED) {
				rc = PY_UNSUPPORTED;
				snprintf(why, whylen, "%s: no _PyRuntime/_PyEval_EvalFrameDefault symbol",
					 m->object->path);
			}
			goto next;
		}
		if (load_bias(elf, m, &bias)) {
			rc = PY_UNSUPPORTED;
			snprintf(why, whylen, "%s: mapping not in an executable segment",
				 m->object->path);
			goto next;
		}
		if (s.has_version_sym) {
			int64_t off = vaddr_to_offset(elf, s.version_sym);
			uint32_t hex;

			if (off < 0 || pread(fd, &hex, sizeof(hex), off) != (ssize_t)sizeof(hex)) {
				rc = PY_UNSUPPORTED;
				snprintf(why, whylen, "%s: Py_Version unreadable", m->object->path);
				goto next;
			}
			out->proc.version_hex = hex;
			minor = (hex >> 16) & 0xff;
			if ((hex >> 24) != 3) {
				rc = PY_UNSUPPORTED;
				snprintf(why, whylen, "%s: Python %#x", m->object->path, hex);
				goto next;
			}
		} else {
			out->proc.version_hex = 0x03000000 | minor << 16;
		}
		out->runtime_addr = s.runtime + bias;
		out->proc.eval_start = s.eval + bias;
		out->proc.eval_end = s.eval + bias + (s.eval_size ? s.eval_size : 1);
		if (s.cold) {
			out->proc.cold_start = s.cold + bias;
			out->proc.cold_end = s.cold + bias + (s.cold_size ? s.cold_size : 1);
		}
		snprintf(out->path, sizeof(out->path), "%s", m->object->path);
		rc = PY_UNSUPPORTED;
		if (minor >= 13) {
			if (memfd < 0 && (memfd = open_mem(proc_root, proc->tgid)) < 0) {
				rc = memfd;
				goto next;
			}
			if (minor == 13)
				rc = from_debug_offsets(memfd, out, why, whylen);
			else
				snprintf(why, whylen, "%s: Python 3.%u: no known offsets",
					 m->object->path, minor);
		} else {
			const struct py_version_table *t = NULL;

			for (size_t k = 0; k < sizeof(py_tables) / sizeof(py_tables[0]); k++)
				if (py_tables[k].minor == minor)
					t = &py_tables[k];
			if (!t) {
				snprintf(why, whylen, "%s: Python 3.%u: no known offsets",
					 m->object->path, minor);
			} else {
				out->proc.layout = t->layout;
				out->proc.interp_addr = out->runtime_addr + t->runtime_interp;
				out->proc.interp_threads = t->interp_threads;
				out->proc.ts_next = t->ts_next;
				out->proc.ts_thread_id = t->ts_thread_id;
				out->proc.ts_frame = t->ts_frame;
				out->proc.cframe_current = t->cframe_current;
				out->proc.frame_code = t->frame_code;
				out->proc.frame_previous = t->frame_previous;
				out->proc.frame_instr = t->frame_instr;
				out->proc.frame_entry = t->frame_entry;
				out->proc.code_adaptive = t->code_adaptive;
				out->proc.code_name = t->code_name;
				out->code = t->code;
				rc = 0;
			}
		}
next:
		if (elf)
			elf_end(elf);
		close(fd);
		if (rc < 0)
			break;
	}
	if (memfd >= 0)
		close(memfd);
	return rc;
}

/* ---- tracked processes and the name cache ------------------------------------------------ */

struct py_tracked {
	uint32_t tgid, generation;
	bool used, supported;
	struct py_target target;
	char why[160];
};

/* One code object of one process generation: its names and (when small) its line table, so
 * a new instruction of it, or a frame drained after the process exited, needs no read. */
#define PY_CACHED_LINETABLE 4096
#define PY_CACHE_RECHECK_NS 1000000000ull /* 1 s */
struct py_cache_slot {
	uint32_t tgid, generation;
	uint64_t code;
	/* Which code object the address held when read: a freed code object's address can be
	 * reused by another; a hit older than PY_CACHE_RECHECK_NS re-reads these to notice. */
	uint64_t qualname_obj, filename_obj;
	/* The frame checks it matches (bpf/pyframes.h, py_frame_check_name): of its co_name's
	 * hash (0: not computed when read) and of its co_name's address. */
	unsigned check_hash, check_addr;
	uint64_t checked_ns;
	bool used;
	bool table_cached;  /* linetable holds the whole table (else read it when needed) */
	int32_t firstlineno;
	uint32_t table_len;
	char *qualname, *filename;
	uint8_t *linetable;
	int line;           /* of the last lookup (returned through struct py_name) */
};

struct pyframes {
	struct pyframes_options opts;
	int procs_fd;
	struct py_tracked *procs; /* open addressing by tgid, max_processes * 2 slots */
	uint32_t nslots;
	struct py_cache_slot *cache;
	struct pyframes_stats stats;
	uint8_t *linebuf;
};

int pyframes_new(const struct pyframes_options *opts, int procs_fd, struct pyframes **out)
{
	struct pyframes *pf;

	if (!opts->max_processes || !opts->cache_slots || !opts->proc_root)
		return -EINVAL;
	pf = calloc(1, sizeof(*pf));
	if (!pf)
		return -ENOMEM;
	pf->opts = *opts;
	pf->procs_fd = procs_fd;
	pf->nslots = opts->max_processes * 2;
	pf->procs = calloc(pf->nslots, sizeof(*pf->procs));
	pf->cache = calloc(opts->cache_slots, sizeof(*pf->cache));
	pf->linebuf = malloc(PY_MAX_LINETABLE);
	if (!pf->procs || !pf->cache || !pf->linebuf) {
		pyframes_free(pf);
		return -ENOMEM;
	}
	*out = pf;
	return 0;
}

static void cache_slot_clear(struct py_cache_slot *c)
{
	free(c->qualname);
	free(c->filename);
	free(c->linetable);
	memset(c, 0, sizeof(*c));
}

void pyframes_free(struct pyframes *pf)
{
	if (!pf)
		return;
	if (pf->cache)
		for (uint32_t i = 0; i < pf->opts.cache_slots; i++)
			cache_slot_clear(&pf->cache[i]);
	free(pf->cache);
	free(pf->procs);
	free(pf->linebuf);
	free(pf);
}

/* The slot of `tgid` (used or the first free one on its probe path), or NULL when full. */
static struct py_tracked *find_slot(struct pyframes *pf, uint32_t tgid, bool for_insert)
{
	uint32_t i = (uint32_t)(sysom_hash_mix(0, tgid) % pf->nslots);

	for (uint32_t n = 0; n < pf->nslots; n++, i = (i + 1) % pf->nslots) {
		struct py_tracked *p = &pf->procs[i];

		if (p->used && p->tgid == tgid)
			return p;
		if (!p->used)
			return for_insert ? p : NULL;
	}
	return NULL;
}

static void remove_slot(struct pyframes *pf, struct py_tracked *p)
{
	uint32_t i = (uint32_t)(p - pf->procs);

	if (p->supported)
		pf->stats.processes--;
	memset(p, 0, sizeof(*p));
	/* Re-insert the rest of the probe run (linear probing deletion). */
	for (uint32_t j = (i + 1) % pf->nslots; pf->procs[j].used; j = (j + 1) % pf->nslots) {
		struct py_tracked moved = pf->procs[j];
		struct py_tracked *dst;

		memset(&pf->procs[j], 0, sizeof(pf->procs[j]));
		dst = find_slot(pf, moved.tgid, true);
		*dst = moved;
	}
}

int pyframes_publish(struct pyframes *pf, const struct pt_process *proc)
{
	struct py_tracked *p = find_slot(pf, proc->tgid, false), fresh = { 0 };
	int rc;

	if (p && p->generation == proc->generation && p->supported)
		return 0; /* offsets do not change within an exec generation */
	fresh.tgid = proc->tgid;
	fresh.generation = proc->generation;
	fresh.used = true;
	rc = pyframes_inspect(pf->opts.proc_root, proc, &fresh.target, fresh.why,
			      sizeof(fresh.why));
	if (rc < 0 || rc == PY_NOT_PYTHON) {
		if (p)
			pyframes_forget(pf, proc);
		return 0;
	}
	if (rc == PY_UNSUPPORTED) {
		if (!p || p->generation != proc->generation || strcmp(p->why, fresh.why)) {
			pf->stats.unsupported++;
			sysom_report(&pf->opts.report, SYSOM_REPORT_WARN,
				     "python: pid %u: %s: sampled natively", proc->tgid, fresh.why);
		}
	} else {
		fresh.supported = true;
		fresh.target.proc.generation = proc->generation;
		if (pf->procs_fd >= 0) {
			uint32_t key = proc->tgid;

			if (bpf_map_update_elem(pf->procs_fd, &key, &fresh.target.proc, BPF_ANY)) {
				pf->stats.publish_failures++;
				return -errno;
			}
		}
		pf->stats.published++;
		sysom_report(&pf->opts.report, SYSOM_REPORT_DEBUG,
			     "python: pid %u: %s %#x, offsets from %s", proc->tgid,
			     fresh.target.path, fresh.target.proc.version_hex,
			     fresh.target.debug_offsets ? "_Py_DebugOffsets" : "the version table");
	}
	if (p) {
		if (p->supported)
			pf->stats.processes--;
		*p = fresh;
	} else {
		p = find_slot(pf, proc->tgid, true);
		if (!p)
			return 0; /* table full: the process stays native (not published) */
		*p = fresh;
	}
	if (p->supported)
		pf->stats.processes++;
	return 0;
}

void pyframes_forget(struct pyframes *pf, const struct pt_process *proc)
{
	struct py_tracked *p = find_slot(pf, proc->tgid, false);

	if (!p || p->generation != proc->generation)
		return;
	if (p->supported && pf->procs_fd >= 0) {
		uint32_t key = proc->tgid;
		struct py_proc cur;

		if (!bpf_map_lookup_elem(pf->procs_fd, &key, &cur) &&
		    cur.generation == proc->generation)
			bpf_map_delete_elem(pf->procs_fd, &key);
	}
	remove_slot(pf, p);
}

/* Reads code object `code` of process `p` (names, first line, line table) into `slot`. */
static int read_code(struct pyframes *pf, const struct py_tracked *p, uint64_t code,
		     struct py_cache_slot *slot)
{
	const struct py_code_offsets *co = &p->target.code;
	char qual[PY_MAX_STRING + 8], file[PY_MAX_STRING + 8], tname[8] = "";
	uint64_t type, tp_name, linetable, name_obj, hash;
	int64_t tlen;
	int fd, rc = -EFAULT;

	fd = open_mem(pf->opts.proc_root, p->tgid);
	if (fd < 0)
		return fd == -ENOENT || fd == -ESRCH ? -ENOENT : fd;
	/* A code object: its type is named "code" (a freed or reused address is not). */
	if (read_u64(fd, code + 8, &type) || read_u64(fd, type + 24, &tp_name) ||
	    read_mem(fd, tp_name, tname, 5) || memcmp(tname, "code", 5))
		goto cleanup;
	if (read_u64(fd, code + p->target.proc.code_name, &name_obj) ||
	    read_u64(fd, name_obj + PY_STR_HASH_OFFSET, &hash) ||
	    read_u64(fd, code + co->qualname, &slot->qualname_obj) ||
	    read_str(fd, co, slot->qualname_obj, qual, sizeof(qual)) ||
	    read_u64(fd, code + co->filename, &slot->filename_obj) ||
	    read_str(fd, co, slot->filename_obj, file, sizeof(file)) ||
	    read_mem(fd, code + co->firstlineno, &slot->firstlineno, sizeof(slot->firstlineno)))
		goto cleanup;
	if (!read_u64(fd, code + co->linetable, &linetable) &&
	    !read_mem(fd, linetable + 16, &tlen, sizeof(tlen)) && tlen >= 0 &&
	    tlen <= PY_CACHED_LINETABLE) {
		slot->linetable = malloc(tlen ? (size_t)tlen : 1);
		if (!slot->linetable) {
			rc = -ENOMEM;
			goto cleanup;
		}
		if (!read_mem(fd, linetable + 32, slot->linetable, (size_t)tlen)) {
			slot->table_cached = true;
			slot->table_len = (uint32_t)tlen;
		}
	}
	slot->check_hash = hash != UINT64_MAX ? (unsigned)py_frame_check_name(hash, name_obj) : 0;
	slot->check_addr = (unsigned)py_frame_check_name(UINT64_MAX, name_obj);
	slot->qualname = strdup(qual);
	slot->filename = strdup(file);
	rc = slot->qualname && slot->filename ? 0 : -ENOMEM;
cleanup:
	close(fd);
	return rc;
}

/* The line of `instr` in the cached code object; a table too big to cache is read again. */
static int code_line(struct pyframes *pf, const struct py_tracked *p, uint64_t code,
		     const struct py_cache_slot *slot, long long instr)
{
	const struct py_code_offsets *co = &p->target.code;
	uint64_t linetable;
	int64_t tlen;
	int fd, line = -1;

	if (slot->table_cached || instr < 0)
		return py_linetable_line(p->target.proc.layout, slot->linetable, slot->table_len,
					 slot->firstlineno, instr);
	fd = open_mem(pf->opts.proc_root, p->tgid);
	if (fd < 0)
		return -1;
	if (!read_u64(fd, code + co->linetable, &linetable) &&
	    !read_mem(fd, linetable + 16, &tlen, sizeof(tlen)) && tlen >= 0 &&
	    tlen <= PY_MAX_LINETABLE && !read_mem(fd, linetable + 32, pf->linebuf, (size_t)tlen))
		line = py_linetable_line(p->target.proc.layout, pf->linebuf, (size_t)tlen,
					 slot->firstlineno, instr);
	close(fd);
	return line;
}

/* Whether the cached code object at `slot->code` is still the one read: same type name, same
 * qualified-name and file-name objects and first line (a reused address almost never keeps
 * all of them). True when the process or the address is gone (frames are drained after their
 * process exited, and nothing can have reused an address that no longer exists). */
static bool cache_slot_still_same(const struct pyframes *pf, const struct py_tracked *p,
				  const struct py_cache_slot *slot)
{
	const struct py_code_offsets *co = &p->target.code;
	uint64_t type, tp_name, qual, file;
	int32_t first;
	char tname[8] = "";
	bool same = false;
	int fd = open_mem(pf->opts.proc_root, p->tgid);

	if (fd < 0)
		return fd == -ENOENT || fd == -ESRCH;
	/* Unreadable (an exited process not yet reaped has no memory; an unmapped arena): nothing
	 * else can live at that address now, so the name stays. */
	if (read_u64(fd, slot->code + 8, &type)) {
		close(fd);
		return true;
	}
	if (!read_u64(fd, type + 24, &tp_name) &&
	    !read_mem(fd, tp_name, tname, 5) && !memcmp(tname, "code", 5) &&
	    !read_u64(fd, slot->code + co->qualname, &qual) &&
	    !read_u64(fd, slot->code + co->filename, &file) &&
	    !read_mem(fd, slot->code + co->firstlineno, &first, sizeof(first)))
		same = qual == slot->qualname_obj && file == slot->filename_obj &&
		       first == slot->firstlineno;
	close(fd);
	return same;
}

/*
 * cache_slot_still_same in one system call (process_vm_readv of the three fields compared),
 * for every hit: within the recheck interval a code object freed at start-up (a .pth line's
 * "<module>" of "<string>") had its address reused by a function of the script, whose frames
 * were then named after it for a second (stop 29's CI: level5 shown as "<module>", half of a
 * 3-s run's samples). Other proc roots (tests) take the slow check.
 */
static bool cache_slot_still_here(const struct pyframes *pf, const struct py_tracked *p,
				  const struct py_cache_slot *slot)
{
	const struct py_code_offsets *co = &p->target.code;
	uint64_t qual = 0, file = 0;
	int32_t first = 0;
	struct iovec local[3] = { { &qual, sizeof(qual) }, { &file, sizeof(file) },
				  { &first, sizeof(first) } };
	struct iovec remote[3] = {
		{ (void *)(uintptr_t)(slot->code + co->qualname), sizeof(qual) },
		{ (void *)(uintptr_t)(slot->code + co->filename), sizeof(file) },
		{ (void *)(uintptr_t)(slot->code + co->firstlineno), sizeof(first) },
	};
	ssize_t n;

	if (strcmp(pf->opts.proc_root, "/proc"))
		return cache_slot_still_same(pf, p, slot);
	n = process_vm_readv((pid_t)p->tgid, local, 3, remote, 3, 0);
	if (n < 0 && (errno == ESRCH || errno == EFAULT))
		return true; /* gone, or the address unmapped: nothing else can live there now */
	if (n != (ssize_t)(sizeof(qual) + sizeof(file) + sizeof(first)))
		return cache_slot_still_same(pf, p, slot);
	return qual == slot->qualname_obj && file == slot->filename_obj &&
	       first == slot->firstlineno;
}

int pyframes_resolve(struct pyframes *pf, uint32_t tgid, uint32_t generation, uint64_t value,
		     struct py_name *out)
{
	struct py_tracked *p = find_slot(pf, tgid, false);
	uint64_t code = PY_FRAME_CODE(value), h;
	unsigned want = PY_FRAME_CHECK(value); /* the code object when sampled (0: unknown) */
	struct py_cache_slot *slot;
	int rc;

	pf->stats.lookups++;
	if (!p || !p->supported || p->generation != generation)
		return -ENOENT;
	h = sysom_hash_mix(sysom_hash_mix(tgid, generation), code);
	slot = &pf->cache[h % pf->opts.cache_slots];
	uint64_t now = sysom_monotonic_ns();
	bool hit = slot->used && slot->tgid == tgid && slot->generation == generation &&
		   slot->code == code;

	/* The cached object is not the one that ran: the sample's was freed before it was read
	 * (and the cache holds its successor), or the cache holds the freed one. Read again. */
	if (hit && want && slot->check_hash != want && slot->check_addr != want)
		hit = false;
	if (hit) {
		hit = now - slot->checked_ns >= PY_CACHE_RECHECK_NS ? cache_slot_still_same(pf, p, slot)
								     : cache_slot_still_here(pf, p, slot);
		slot->checked_ns = now;
	}
	if (hit) {
		pf->stats.cache_hits++;
	} else {
		cache_slot_clear(slot);
		rc = read_code(pf, p, code, slot);
		if (rc) {
			cache_slot_clear(slot);
			pf->stats.resolve_failures++;
			return rc;
		}
		slot->used = true;
		slot->tgid = tgid;
		slot->generation = generation;
		slot->code = code;
		slot->checked_ns = now;
		if (want && slot->check_hash != want && slot->check_addr != want) {
			/* Another code object lives at the address now (kept: it is valid for its
			 * own frames); the one sampled is gone. */
			pf->stats.reused++;
			return -ESTALE;
		}
	}
	slot->line = code_line(pf, p, code, slot, PY_FRAME_INSTR(value));
	if (slot->line < 0)
		pf->stats.no_line++;
	out->qualname = slot->qualname;
	out->filename = slot->filename;
	out->line = slot->line;
	return 0;
}

size_t pyframes_describe(const struct pyframes *pf, char *buf, size_t len)
{
	size_t n = 0;

	for (uint32_t i = 0; i < pf->nslots; i++) {
		const struct py_tracked *p = &pf->procs[i];
		int w;

		if (!p->used)
			continue;
		if (p->supported)
			w = snprintf(buf + (n < len ? n : len), n < len ? len - n : 0,
				     "python: pid %u: %s %u.%u, Python frames stitched (offsets from %s)\n",
				     p->tgid, p->target.path, p->target.proc.version_hex >> 24,
				     (p->target.proc.version_hex >> 16) & 0xff,
				     p->target.debug_offsets ? "_Py_DebugOffsets" : "version table");
		else
			w = snprintf(buf + (n < len ? n : len), n < len ? len - n : 0,
				     "python: pid %u: %s: sampled natively\n", p->tgid, p->why);
		if (w > 0)
			n += (size_t)w;
	}
	return n;
}

void pyframes_stats_read(const struct pyframes *pf, struct pyframes_stats *out)
{
	*out = pf->stats;
}

int pyframes_walk(const char *proc_root, uint32_t tgid, const struct py_target *t,
		  uint64_t thread_id, uint64_t *values, size_t max, size_t *count)
{
	const struct py_proc *pp = &t->proc;
	uint64_t interp, ts = 0, frame = 0, cur;
	size_t n = 0;
	int fd, rc = -EFAULT;

	*count = 0;
	fd = open_mem(proc_root, tgid);
	if (fd < 0)
		return fd;
	if (read_u64(fd, pp->interp_addr, &interp) || read_u64(fd, interp + pp->interp_threads, &cur))
		goto cleanup;
	for (uint32_t i = 0; i < PY_MAX_THREADS && cur; i++) {
		uint64_t id;

		if (read_u64(fd, cur + pp->ts_thread_id, &id))
			goto cleanup;
		if (thread_id == 0 || id == thread_id) {
			ts = cur;
			break;
		}
		if (read_u64(fd, cur + pp->ts_next, &cur))
			goto cleanup;
	}
	rc = -ESRCH;
	if (!ts)
		goto cleanup;
	rc = -EFAULT;
	if (read_u64(fd, ts + pp->ts_frame, &frame))
		goto cleanup;
	if (pp->layout == PY_LAYOUT_311 || pp->layout == PY_LAYOUT_312)
		if (frame && read_u64(fd, frame + pp->cframe_current, &frame))
			goto cleanup;
	for (uint32_t i = 0; frame && n < max && i < 4 * 1024; i++) {
		uint64_t code, prev, instr_ptr = 0;
		int32_t lasti = -1;
		uint8_t entry = 0;
		long long instr = -1;

		if (read_u64(fd, frame + pp->frame_code, &code) ||
		    read_u64(fd, frame + pp->frame_previous, &prev))
			goto cleanup;
		if (pp->layout == PY_LAYOUT_310) {
			if (read_mem(fd, frame + pp->frame_instr, &lasti, sizeof(lasti)))
				goto cleanup;
			instr = lasti;
		} else {
			if (read_u64(fd, frame + pp->frame_instr, &instr_ptr) ||
			    read_mem(fd, frame + pp->frame_entry, &entry, 1))
				goto cleanup;
			if (instr_ptr >= code + pp->code_adaptive)
				instr = (long long)(instr_ptr - code - pp->code_adaptive) / 2;
		}
		if (!(pp->layout >= PY_LAYOUT_312 && entry == PY_OWNED_BY_CSTACK)) {
			if ((code & 7) || code >= (1ULL << 47))
				goto cleanup;
			uint64_t name = 0, hash = 0, check = 0;
			if (instr > (long long)PY_FRAME_INSTR_MAX - 1)
				instr = (long long)PY_FRAME_INSTR_MAX - 1;
			if (!read_u64(fd, code + pp->code_name, &name) && name &&
			    !read_u64(fd, name + PY_STR_HASH_OFFSET, &hash))
				check = py_frame_check_name(hash, name);
			values[n++] = PY_FRAME_TAG | check << PY_FRAME_CHECK_SHIFT |
				      (uint64_t)(instr + 1) << PY_FRAME_INSTR_SHIFT | code >> 3;
		}
		frame = prev;
	}
	rc = 0;
cleanup:
	*count = n;
	close(fd);
	return rc;
}

int pyframes_inspect_pid(const char *proc_root, uint32_t tgid, struct py_target *out, char *why,
			 size_t whylen)
{
	enum { MAX_MAPS = 1024 };
	struct pt_mapping *maps = calloc(MAX_MAPS, sizeof(*maps));
	struct pt_object *objs = calloc(MAX_MAPS, sizeof(*objs));
	struct pt_process proc = { .tgid = tgid, .generation = 0, .mappings = maps };
	char path[PATH_MAX], *line = NULL;
	size_t cap = 0;
	FILE *f = NULL;
	int rc = -ENOMEM;

	if (!maps || !objs)
		goto cleanup;
	snprintf(path, sizeof(path), "%s/%u/maps", proc_root, tgid);
	f = fopen(path, "re");
	if (!f) {
		rc = -errno;
		goto cleanup;
	}
	while (getline(&line, &cap, f) > 0 && proc.mapping_count < MAX_MAPS) {
		unsigned long start, end, off;
		char perms[8];
		int pos = 0;
		uint32_t i = proc.mapping_count;

		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &start, &end, perms, &off, &pos) < 4 ||
		    !pos || perms[2] != 'x' || line[pos] != '/')
			continue;
		line[strcspn(line, "\n")] = '\0';
		objs[i].path = strdup(line + pos);
		if (!objs[i].path)
			goto cleanup;
		maps[i] = (struct pt_mapping){ start, end, off, &objs[i] };
		proc.mapping_count++;
	}
	rc = pyframes_inspect(proc_root, &proc, out, why, whylen);
cleanup:
	if (f)
		fclose(f);
	free(line);
	for (uint32_t i = 0; objs && i < proc.mapping_count; i++)
		free(objs[i].path);
	free(objs);
	free(maps);
	return rc;
}
