/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol files: table round trips, hostile files, compiled programs, system libraries. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/error.h"
#include "symrepo/symfile.h"
#include "symrepo/symfile_build.h"
#include "symrepo/symfile_format.h"

#define MAX_FRAMES 16

static char tmpdir[] = "/tmp/sysom-test-symfile-XXXXXX";

/* ------------------------------------------------------------------------------------------ */
/* Helpers: paths, commands, files */

static void tpath(char *out, size_t outlen, const char *name)
{
	snprintf(out, outlen, "%s/%s", tmpdir, name);
}

/* Runs a shell command; returns its exit status (-1 when it did not exit). */
__attribute__((format(printf, 1, 2))) static int sh(const char *fmt, ...)
{
	char cmd[16384];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs a shell command and returns its standard output (malloc'd, NUL-terminated). */
__attribute__((format(printf, 1, 2))) static char *sh_out(const char *fmt, ...)
{
	char cmd[16384];
	va_list ap;
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap);
	FILE *p;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_non_null(buf);
	p = popen(cmd, "r");
	assert_non_null(p);
	for (;;) {
		if (cap - len < 4096) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		size_t n = fread(buf + len, 1, cap - len - 1, p);
		if (n == 0)
			break;
		len += n;
	}
	buf[len] = 0;
	pclose(p);
	return buf;
}

static bool have_tools(const char *tools)
{
	return sh("for t in %s; do command -v $t >/dev/null 2>&1 || exit 1; done", tools) == 0;
}

static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf;
	long n;

	assert_non_null(fp);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	n = ftell(fp);
	assert_true(n >= 0);
	rewind(fp);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

static void write_all(const char *path, const void *data, size_t len)
{
	FILE *fp = fopen(path, "wb");

	assert_non_null(fp);
	assert_int_equal(fwrite(data, 1, len, fp), len);
	assert_int_equal(fclose(fp), 0);
}

static bool file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* Number of entries in tmpdir whose name contains ".tmp." (writer temporaries). */
static int leftover_temporaries(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		n += strstr(de->d_name, ".tmp.") != NULL;
	closedir(d);
	return n;
}

static struct symfile *open_verified(const char *path)
{
	struct symfile_error e = { 0 };
	struct symfile *f = NULL;
	int rc = symfile_open(path, &f, &e);

	if (rc)
		print_message("# open %s: %s at %llu\n", path, e.message,
			      (unsigned long long)e.offset);
	assert_int_equal(rc, 0);
	rc = symfile_verify(f, &e);
	if (rc)
		print_message("# verify %s: %s at %llu\n", path, e.message,
			      (unsigned long long)e.offset);
	assert_int_equal(rc, 0);
	return f;
}

static const char *base_name(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;
	return s ? s + 1 : path;
}

static const struct sysom_build_id test_id = {
	.kind = SYSOM_OBJECT_ELF,
	.len = 20,
	.bytes = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
		   0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05 },
};

static void write_table_ok(const char *path, const struct symfile_segment *segs, uint32_t nsegs,
			   const struct symfile_symbol *syms, uint32_t nsyms)
{
	char err[256] = "";
	int rc = symfile_write_table(&test_id, segs, nsegs, syms, nsyms, path, err, sizeof(err));

	if (rc)
		print_message("# write_table: %s\n", err);
	assert_int_equal(rc, 0);
}

/* Looks up `addr` and checks the outermost frame is `name` (NULL: no frame at all). */
static void expect_name(const struct symfile *f, uint64_t addr, const char *name)
{
	struct symfile_frame fr[MAX_FRAMES];
	int n = symfile_lookup(f, addr, fr, MAX_FRAMES);

	if (!name) {
		if (n != 0)
			print_message("# %#llx: expected a gap, got %s\n", (unsigned long long)addr,
				      fr[n - 1].name);
		assert_int_equal(n, 0);
		return;
	}
	if (n < 1)
		print_message("# %#llx: expected %s, got nothing\n", (unsigned long long)addr,
			      name);
	assert_true(n >= 1);
	assert_string_equal(fr[n - 1].name, name);
	assert_false(fr[n - 1].inlined);
}

/* ------------------------------------------------------------------------------------------ */
/* Table input */

static const struct symfile_segment table_segs[] = {
	{ .file_offset = 0x1000, .vaddr = 0x401000, .size = 0x3000 },
	{ .file_offset = 0x5000, .vaddr = 0x406000, .size = 0x1000 },
};

static const struct symfile_symbol table_syms[] = {
	{ 0x401200, 0x80, "beta" },
	{ 0x401000, 0x100, "alpha" },
	{ 0x401000, 0x100, "alpha_alias" }, /* a duplicate address: the first wins */
	{ 0x401280, 0x80, "gamma" },
	{ 0x402000, 0x10, "_ZN3foo3barEi" },
	{ 0x406f00, 0x100, "last" },
};

static void write_table_file(char *path, size_t pathlen)
{
	tpath(path, pathlen, "table.sym");
	write_table_ok(path, table_segs, 2, table_syms, 6);
}

static void test_table_round_trip(void **state)
{
	struct symfile_frame fr[MAX_FRAMES];
	struct symfile_info info;
	char path[512];
	uint64_t va = 0;
	(void)state;

	write_table_file(path, sizeof(path));
	struct symfile *f = open_verified(path);

	symfile_info_get(f, &info);
	assert_int_equal(info.functions, 5);
	assert_int_equal(info.segments, 2);
	assert_int_equal(info.inline_ranges, 0);
	assert_int_equal(info.line_rows, 0);
	assert_int_equal(info.build_id.kind, test_id.kind);
	assert_int_equal(info.build_id.len, test_id.len);
	assert_memory_equal(info.build_id.bytes, test_id.bytes, test_id.len);

	/* Inside, at both boundaries, in gaps, before the first and after the last. */
	expect_name(f, 0, NULL);
	expect_name(f, 0x400fff, NULL);
	expect_name(f, 0x401000, "alpha");
	expect_name(f, 0x4010ff, "alpha");
	expect_name(f, 0x401100, NULL);
	expect_name(f, 0x4011ff, NULL);
	expect_name(f, 0x401200, "beta");
	expect_name(f, 0x40127f, "beta");
	expect_name(f, 0x401280, "gamma");
	expect_name(f, 0x4012ff, "gamma");
	expect_name(f, 0x401300, NULL);
	expect_name(f, 0x401fff, NULL);
	expect_name(f, 0x402010, NULL);
	expect_name(f, 0x406f00, "last");
	expect_name(f, 0x406fff, "last");
	expect_name(f, 0x407000, NULL);
	expect_name(f, UINT64_MAX, NULL);

	assert_int_equal(symfile_lookup(f, 0x401080, fr, MAX_FRAMES), 1);
	assert_int_equal(fr[0].function_start, 0x401000);
	assert_int_equal(fr[0].function_size, 0x100);
	assert_null(fr[0].demangled);
	assert_null(fr[0].file);
	assert_int_equal(fr[0].line, 0);
	assert_false(fr[0].inlined);
	assert_false(fr[0].size_inferred);

	assert_int_equal(symfile_lookup(f, 0x402008, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "_ZN3foo3barEi");
	assert_non_null(fr[0].demangled);
	assert_string_equal(fr[0].demangled, "foo::bar(int)");

	assert_int_equal(symfile_lookup(f, 0x401000, fr, 0), -EINVAL);
	assert_int_equal(symfile_lookup(f, 0x401000, NULL, 1), -EINVAL);

	/* File offsets → vaddrs, including offsets outside every segment. */
	assert_int_equal(symfile_offset_to_vaddr(f, 0x1000, &va), 0);
	assert_int_equal(va, 0x401000);
	assert_int_equal(symfile_offset_to_vaddr(f, 0x3fff, &va), 0);
	assert_int_equal(va, 0x403fff);
	assert_int_equal(symfile_offset_to_vaddr(f, 0x5800, &va), 0);
	assert_int_equal(va, 0x406800);
	va = 42;
	assert_int_equal(symfile_offset_to_vaddr(f, 0xfff, &va), -ENOENT);
	assert_int_equal(symfile_offset_to_vaddr(f, 0x4000, &va), -ENOENT);
	assert_int_equal(symfile_offset_to_vaddr(f, 0x4fff, &va), -ENOENT);
	assert_int_equal(symfile_offset_to_vaddr(f, 0x6000, &va), -ENOENT);
	assert_int_equal(symfile_offset_to_vaddr(f, 0, &va), -ENOENT);
	assert_int_equal(symfile_offset_to_vaddr(f, UINT64_MAX, &va), -ENOENT);
	assert_int_equal(va, 42); /* untouched on failure */
	symfile_close(f);
	symfile_close(NULL);

	/* An empty table is a valid file in which every address is a gap. */
	tpath(path, sizeof(path), "empty.sym");
	write_table_ok(path, NULL, 0, NULL, 0);
	f = open_verified(path);
	expect_name(f, 0x401000, NULL);
	assert_int_equal(symfile_offset_to_vaddr(f, 0, &va), -ENOENT);
	symfile_close(f);
}

static void test_size_inferred(void **state)
{
	static const struct symfile_segment segs[] = { { 0x0, 0x10000, 0x10000 } };
	static const struct symfile_symbol syms[] = {
		{ 0x10000, 0, "z1" },    /* sizeless: up to s2 */
		{ 0x10100, 0x40, "s2" }, /* sized: the gap after it stays a gap */
		{ 0x10110, 0, "label" }, /* sizeless inside s2: a label, ignored */
		{ 0x10200, 0, "z3" },    /* up to z4 */
		{ 0x10300, 0, "z4" },    /* the last: up to its segment's end */
		{ 0x30000, 0, "zout" },  /* outside every segment, nothing after it: dropped */
	};
	struct symfile_frame fr[MAX_FRAMES];
	char path[512];
	(void)state;

	tpath(path, sizeof(path), "inferred.sym");
	write_table_ok(path, segs, 1, syms, 6);
	struct symfile *f = open_verified(path);

	assert_int_equal(symfile_lookup(f, 0x10000, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "z1");
	assert_true(fr[0].size_inferred);
	assert_int_equal(fr[0].function_start, 0x10000);
	assert_int_equal(fr[0].function_size, 0x100);
	expect_name(f, 0x100ff, "z1");
	assert_int_equal(symfile_lookup(f, 0x10100, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "s2");
	assert_false(fr[0].size_inferred);
	expect_name(f, 0x10110, "s2");
	expect_name(f, 0x10140, NULL); /* never filled by the sized symbol before it */
	expect_name(f, 0x101ff, NULL);
	assert_int_equal(symfile_lookup(f, 0x10250, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "z3");
	assert_true(fr[0].size_inferred);
	assert_int_equal(fr[0].function_size, 0x100);
	assert_int_equal(symfile_lookup(f, 0x1ffff, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "z4");
	assert_int_equal(fr[0].function_size, 0x20000 - 0x10300);
	expect_name(f, 0x20000, NULL);
	expect_name(f, 0x30000, NULL);
	symfile_close(f);
}

static void test_overlapping_symbols(void **state)
{
	static const struct symfile_symbol syms[] = {
		{ 0x1000, 0x100, "outer" },
		{ 0x1040, 0x20, "inner" },   /* nested: wins inside itself */
		{ 0x10f0, 0x20, "partial" }, /* overlaps outer's end */
	};
	struct symfile_frame fr[MAX_FRAMES];
	char path[512];
	(void)state;

	tpath(path, sizeof(path), "overlap.sym");
	write_table_ok(path, NULL, 0, syms, 3);
	struct symfile *f = open_verified(path);

	expect_name(f, 0x1030, "outer");
	expect_name(f, 0x1040, "inner");
	expect_name(f, 0x105f, "inner");
	assert_int_equal(symfile_lookup(f, 0x1060, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "outer");
	assert_int_equal(fr[0].function_start, 0x1000); /* the symbol's extent, not the piece's */
	assert_int_equal(fr[0].function_size, 0x100);
	expect_name(f, 0x10ef, "outer");
	expect_name(f, 0x10f0, "partial");
	expect_name(f, 0x110f, "partial");
	expect_name(f, 0x1110, NULL);
	symfile_close(f);
}

static void test_write_table_errors(void **state)
{
	static const struct symfile_symbol bad_name[] = { { 0x1000, 0x10, NULL } };
	static const struct symfile_symbol wrap[] = { { UINT64_MAX - 4, 0x10, "wrap" } };
	static const struct symfile_segment overlap[] = { { 0, 0x1000, 0x2000 },
							   { 0x1000, 0x9000, 0x1000 } };
	struct sysom_build_id bad_id = test_id;
	char path[512], err[256];
	(void)state;

	tpath(path, sizeof(path), "bad.sym");
	assert_int_equal(
		symfile_write_table(&test_id, NULL, 0, bad_name, 1, path, err, sizeof(err)),
		-EINVAL);
	assert_true(strlen(err) > 0);
	assert_int_equal(symfile_write_table(&test_id, NULL, 0, wrap, 1, path, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(symfile_write_table(&test_id, overlap, 2, NULL, 0, path, err, sizeof(err)),
			 -EINVAL);
	bad_id.len = 0;
	assert_int_equal(symfile_write_table(&bad_id, NULL, 0, NULL, 0, path, err, sizeof(err)),
			 -EINVAL);
	bad_id = test_id;
	bad_id.kind = 0;
	assert_int_equal(symfile_write_table(&bad_id, NULL, 0, NULL, 0, path, err, sizeof(err)),
			 -EINVAL);
	assert_false(file_exists(path));
	/* A directory that does not exist: -ENOENT, and nothing left behind. */
	assert_int_equal(symfile_write_table(&test_id, NULL, 0, NULL, 0, "/nonexistent-dir/x.sym",
					     err, sizeof(err)),
			 -ENOENT);
	assert_int_equal(leftover_temporaries(), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Hostile files */

/* The section table of a valid file, for tests that rewrite it. */
struct sec_view {
	uint32_t n;
	uint32_t type[SYMF_MAX_SECTIONS], rsize[SYMF_MAX_SECTIONS], count[SYMF_MAX_SECTIONS];
	uint64_t off[SYMF_MAX_SECTIONS], size[SYMF_MAX_SECTIONS];
	uint64_t entry_at[SYMF_MAX_SECTIONS]; /* offset of the table entry */
};

static void sections_of(const uint8_t *d, struct sec_view *v)
{
	uint32_t hs = load_le32(d + SYMF_HDR_HEADER_SIZE);

	v->n = load_le32(d + SYMF_HDR_SECTION_COUNT);
	for (uint32_t i = 0; i < v->n; i++) {
		const uint8_t *e = d + hs + i * SYMF_SECTION_ENTRY_SIZE;
		v->entry_at[i] = hs + i * SYMF_SECTION_ENTRY_SIZE;
		v->type[i] = load_le32(e + SYMF_SEC_TYPE);
		v->rsize[i] = load_le32(e + SYMF_SEC_RECORD_SIZE);
		v->off[i] = load_le64(e + SYMF_SEC_OFFSET);
		v->size[i] = load_le64(e + SYMF_SEC_SIZE);
		v->count[i] = load_le32(e + SYMF_SEC_COUNT);
	}
}

static int section_index(const struct sec_view *v, uint32_t type)
{
	for (uint32_t i = 0; i < v->n; i++) {
		if (v->type[i] == type)
			return (int)i;
	}
	fail_msg("no section of type %u", type);
	return -1;
}

/* Opens a private copy of exactly `len` bytes (ASan sees any read past it); on success
 * *copy holds the bytes, which the handle borrows: free them after symfile_close. */
static int open_copy(const uint8_t *d, size_t len, struct symfile **f, struct symfile_error *e,
		     uint8_t **copy)
{
	uint8_t *c = malloc(len ? len : 1);
	int rc;

	assert_non_null(c);
	memcpy(c, d, len);
	rc = symfile_open_memory(c, len, f, e);
	if (rc < 0) {
		free(c);
		return rc;
	}
	*copy = c;
	return 0;
}

static void test_truncated_files(void **state)
{
	char path[512], tpathbuf[512];
	size_t len;
	(void)state;

	write_table_file(path, sizeof(path));
	uint8_t *d = read_all(path, &len);

	for (size_t n = 0; n < len; n++) {
		struct symfile_error e = { .message = "" };
		struct symfile *f = NULL;
		uint8_t *copy = NULL;
		int rc = open_copy(d, n, &f, &e, &copy);
		if (rc == 0)
			fail_msg("a %zu-byte prefix of a %zu-byte file opened", n, len);
		assert_int_equal(rc, -SYSOM_ECORRUPT);
		assert_true(strlen(e.message) > 0);
	}
	/* The same through files (the mmap path and the short-file path). */
	static const size_t cuts[] = { 0, 7, 11, 12, 127, 128, 200 };
	tpath(tpathbuf, sizeof(tpathbuf), "truncated.sym");
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		struct symfile_error e;
		struct symfile *f = NULL;
		write_all(tpathbuf, d, cuts[i] < len ? cuts[i] : len - 1);
		assert_int_equal(symfile_open(tpathbuf, &f, &e), -SYSOM_ECORRUPT);
		assert_null(f);
	}
	write_all(tpathbuf, d, len - 1);
	assert_int_equal(symfile_open(tpathbuf, &(struct symfile *){ NULL }, NULL),
			 -SYSOM_ECORRUPT);
	assert_int_equal(symfile_open("/nonexistent/x.sym", &(struct symfile *){ NULL }, NULL),
			 -ENOENT);
	assert_int_equal(symfile_open(tmpdir, &(struct symfile *){ NULL }, NULL), -EISDIR);
	free(d);
}

/* Builds a file like `d` but in a later minor version's shape: `extra_header` more header
 * bytes, an unknown section, and `extend` more bytes per record of section `ext_type`. */
static uint8_t *relayout(const uint8_t *d, uint32_t extra_header, uint32_t ext_type,
			 uint32_t extend, size_t *out_len)
{
	struct sec_view v;
	uint32_t hs = SYMF_HEADER_SIZE + extra_header, n;
	uint64_t off;
	uint8_t *o;

	sections_of(d, &v);
	n = v.n + 1;
	o = calloc(1, 1 << 20);
	assert_non_null(o);
	memcpy(o, d, SYMF_HEADER_SIZE);
	store_le32(o + SYMF_HDR_HEADER_SIZE, hs);
	store_le32(o + SYMF_HDR_SECTION_COUNT, n);
	off = hs + (uint64_t)n * SYMF_SECTION_ENTRY_SIZE;
	for (uint32_t i = 0; i <= v.n; i++) {
		uint8_t *e = o + hs + i * SYMF_SECTION_ENTRY_SIZE;
		off = (off + 7) & ~7ULL;
		if (i == v.n) { /* the unknown section: skipped by readers */
			store_le32(e + SYMF_SEC_TYPE, 0x7777);
			store_le32(e + SYMF_SEC_RECORD_SIZE, 3);
			store_le64(e + SYMF_SEC_OFFSET, off);
			store_le64(e + SYMF_SEC_SIZE, 9);
			store_le32(e + SYMF_SEC_COUNT, 1);
			memset(o + off, 0xab, 9);
			off += 9;
			break;
		}
		uint32_t rs = v.rsize[i] + (v.type[i] == ext_type ? extend : 0);
		store_le32(e + SYMF_SEC_TYPE, v.type[i]);
		store_le32(e + SYMF_SEC_RECORD_SIZE, rs);
		store_le64(e + SYMF_SEC_OFFSET, off);
		store_le64(e + SYMF_SEC_SIZE, (uint64_t)rs * v.count[i]);
		store_le32(e + SYMF_SEC_COUNT, v.count[i]);
		for (uint32_t r = 0; r < v.count[i]; r++)
			memcpy(o + off + (uint64_t)r * rs, d + v.off[i] + (uint64_t)r * v.rsize[i],
			       v.rsize[i]);
		off += (uint64_t)rs * v.count[i];
	}
	assert_true(off < (1 << 20));
	store_le64(o + SYMF_HDR_FILE_SIZE, off);
	*out_len = off;
	return o;
}

/* Expects open to fail with `code` after `mutate` changed a copy of `d`. */
static void expect_open_error(const uint8_t *d, size_t len, int code, const char *what)
{
	struct symfile_error e = { .message = "" };
	struct symfile *f = NULL;
	int rc = symfile_open_memory(d, len, &f, &e);

	if (rc != code)
		print_message("# %s: expected %d, got %d (%s)\n", what, code, rc, e.message);
	assert_int_equal(rc, code);
	assert_null(f);
	assert_true(strlen(e.message) > 0);
}

static void test_header_and_versions(void **state)
{
	struct symfile_frame fr[MAX_FRAMES];
	struct symfile_error e;
	struct symfile *f;
	struct sec_view v;
	char path[512];
	size_t len, len2;
	(void)state;

	write_table_file(path, sizeof(path));
	uint8_t *d = read_all(path, &len);
	uint8_t *m = malloc(len);
	assert_non_null(m);
	sections_of(d, &v);

#define MUTATE(stmt, code, what)                       \
	do {                                           \
		memcpy(m, d, len);                     \
		stmt;                                  \
		expect_open_error(m, len, code, what); \
	} while (0)

	MUTATE(m[0] = 'X', -SYSOM_ECORRUPT, "magic");
	MUTATE(store_le16(m + SYMF_HDR_MAJOR, 2), -SYSOM_EVERSION, "major 2");
	MUTATE(store_le16(m + SYMF_HDR_MAJOR, 0), -SYSOM_EVERSION, "major 0");
	MUTATE(store_le32(m + SYMF_HDR_HEADER_SIZE, 64), -SYSOM_ECORRUPT, "header size");
	MUTATE(store_le32(m + SYMF_HDR_HEADER_SIZE, 132), -SYSOM_ECORRUPT, "unaligned header");
	MUTATE(store_le32(m + SYMF_HDR_SECTION_COUNT, SYMF_MAX_SECTIONS + 1), -SYSOM_ECORRUPT,
	       "section count");
	MUTATE(store_le32(m + SYMF_HDR_SECTION_ENTRY, 16), -SYSOM_ECORRUPT, "entry size");
	MUTATE(store_le64(m + SYMF_HDR_FILE_SIZE, len + 8), -SYSOM_ECORRUPT, "file size");
	MUTATE(m[SYMF_HDR_BUILD_ID_LEN] = 0, -SYSOM_ECORRUPT, "build ID length 0");
	MUTATE(m[SYMF_HDR_BUILD_ID_LEN] = 65, -SYSOM_ECORRUPT, "build ID length 65");
	MUTATE(m[SYMF_HDR_BUILD_ID_KIND] = 0, -SYSOM_ECORRUPT, "build ID kind");

	int ia = section_index(&v, SYMF_SEC_ADDRESSES), ir = section_index(&v, SYMF_SEC_RANGES);
	int is = section_index(&v, SYMF_SEC_STRINGS), ifn = section_index(&v, SYMF_SEC_FUNCTIONS);
	MUTATE(store_le32(m + v.entry_at[ir] + SYMF_SEC_TYPE, SYMF_SEC_ADDRESSES), -SYSOM_ECORRUPT,
	       "duplicate section");
	MUTATE(store_le32(m + v.entry_at[is] + SYMF_SEC_TYPE, 0x7777), -SYSOM_ECORRUPT,
	       "missing STRINGS");
	MUTATE(store_le32(m + v.entry_at[ia] + SYMF_SEC_COUNT, v.count[ia] + 1), -SYSOM_ECORRUPT,
	       "count vs size");
	MUTATE((store_le32(m + v.entry_at[ia] + SYMF_SEC_COUNT, v.count[ia] - 1),
		store_le64(m + v.entry_at[ia] + SYMF_SEC_SIZE, v.size[ia] - 8)),
	       -SYSOM_ECORRUPT, "addresses vs ranges");
	MUTATE((store_le32(m + v.entry_at[ia] + SYMF_SEC_RECORD_SIZE, 4),
		store_le32(m + v.entry_at[ia] + SYMF_SEC_COUNT, v.count[ia] * 2)),
	       -SYSOM_ECORRUPT, "addresses of 4 bytes");
	MUTATE(store_le64(m + v.entry_at[ifn] + SYMF_SEC_OFFSET, v.off[ifn] + 4), -SYSOM_ECORRUPT,
	       "misaligned section");
	MUTATE(store_le64(m + v.entry_at[ifn] + SYMF_SEC_OFFSET, v.off[ia]), -SYSOM_ECORRUPT,
	       "overlapping sections");
	MUTATE(store_le64(m + v.entry_at[ifn] + SYMF_SEC_OFFSET, 8), -SYSOM_ECORRUPT,
	       "section inside the header");
	MUTATE(store_le64(m + v.entry_at[is] + SYMF_SEC_OFFSET, UINT64_MAX - 7), -SYSOM_ECORRUPT,
	       "section offset overflow");
	MUTATE(m[v.off[is] + v.size[is] - 1] = 'x', -SYSOM_ECORRUPT, "unterminated STRINGS");
	MUTATE(m[v.off[is]] = 'x', -SYSOM_ECORRUPT, "STRINGS not starting with NUL");

	/* A newer minor version opens. */
	memcpy(m, d, len);
	store_le16(m + SYMF_HDR_MINOR, 9);
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	expect_name(f, 0x401200, "beta");
	symfile_close(f);

	/* A later minor version's shape: longer header, unknown section, longer records. */
	uint8_t *r = relayout(d, 16, SYMF_SEC_RANGES, 8, &len2);
	assert_int_equal(symfile_open_memory(r, len2, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), 0);
	expect_name(f, 0x401000, "alpha");
	expect_name(f, 0x401100, NULL);
	expect_name(f, 0x40127f, "beta");
	assert_int_equal(symfile_lookup(f, 0x402004, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].demangled, "foo::bar(int)");
	symfile_close(f);
	free(r);
	r = relayout(d, 0, SYMF_SEC_FUNCTIONS, 24, &len2);
	assert_int_equal(symfile_open_memory(r, len2, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), 0);
	expect_name(f, 0x406f80, "last");
	symfile_close(f);
	free(r);
	/* ADDRESSES is searched as packed u64s: its record size may not grow. */
	r = relayout(d, 0, SYMF_SEC_ADDRESSES, 8, &len2);
	expect_open_error(r, len2, -SYSOM_ECORRUPT, "addresses of 16 bytes");
	free(r);
#undef MUTATE
	free(m);
	free(d);
}

/* Opens a mutated copy, checks lookups fail only with -SYSOM_ECORRUPT and, when verify
 * accepts the file, never fail at all. Returns 1 when verify rejected it, 0 when it
 * accepted, -1 when open rejected it. */
static int probe_mutant(const uint8_t *m, size_t len, const uint64_t *addrs, size_t naddrs)
{
	struct symfile_frame fr[MAX_FRAMES];
	struct symfile_error e;
	struct symfile_info info;
	struct symfile *f = NULL;
	uint8_t *copy = NULL;
	uint64_t va;
	int result;

	if (open_copy(m, len, &f, &e, &copy) != 0)
		return -1;
	symfile_info_get(f, &info);
	struct symfile_error ve;
	result = symfile_verify(f, &ve) == 0 ? 0 : 1;
	for (size_t i = 0; i < naddrs; i++) {
		int n = symfile_lookup(f, addrs[i], fr, MAX_FRAMES);
		if (n < 0 && n != -SYSOM_ECORRUPT)
			fail_msg("lookup returned %d", n);
		if (n < 0 && result == 0)
			fail_msg("verified file, but lookup of %#llx failed",
				 (unsigned long long)addrs[i]);
		for (int k = 0; k < n; k++) {
			/* Touch every string: ASan catches reads outside the copy. */
			assert_true(strlen(fr[k].name) < len);
			if (fr[k].demangled)
				assert_true(strlen(fr[k].demangled) < len);
			if (fr[k].file)
				assert_true(strlen(fr[k].file) < len);
		}
		symfile_offset_to_vaddr(f, addrs[i], &va);
	}
	symfile_close(f);
	free(copy);
	return result;
}

/* Addresses worth probing in a valid file: around every range, inline range and line row. */
static uint64_t *probe_addresses(const uint8_t *d, size_t *n)
{
	struct sec_view v;
	size_t cap = 4096, k = 0;
	uint64_t *a = malloc(cap * sizeof(*a));

	assert_non_null(a);
	sections_of(d, &v);
	for (uint32_t i = 0; i < v.n; i++) {
		if (v.type[i] != SYMF_SEC_ADDRESSES && v.type[i] != SYMF_SEC_INLINE &&
		    v.type[i] != SYMF_SEC_LINES)
			continue;
		for (uint32_t r = 0; r < v.count[i] && k + 3 < cap; r++) {
			uint64_t s = load_le64(d + v.off[i] + (uint64_t)r * v.rsize[i]);
			a[k++] = s;
			a[k++] = s - 1;
			a[k++] = s + 3;
		}
	}
	a[k++] = 0;
	a[k++] = UINT64_MAX;
	*n = k;
	return a;
}

/* Flips every byte of the file (several masks): never a crash, lookups never fail on what
 * verify accepted. */
static void flip_every_byte(const char *path, const char *label)
{
	static const uint8_t masks[] = { 0x01, 0x10, 0x80, 0xff };
	size_t len, naddrs, opened = 0, rejected_by_verify = 0, accepted = 0, total = 0;
	uint8_t *d = read_all(path, &len);
	uint64_t *addrs = probe_addresses(d, &naddrs);
	uint8_t *m = malloc(len);

	assert_non_null(m);
	for (size_t i = 0; i < len; i++) {
		for (size_t k = 0; k < sizeof(masks); k++) {
			memcpy(m, d, len);
			m[i] ^= masks[k];
			int r = probe_mutant(m, len, addrs, naddrs);
			total++;
			opened += r >= 0;
			rejected_by_verify += r == 1;
			accepted += r == 0;
		}
	}
	print_message("# %s: %zu bytes, %zu mutants: %zu refused at open, %zu refused by verify, "
		      "%zu accepted (changed names, addresses or lines)\n",
		      label, len, total, total - opened, rejected_by_verify, accepted);
	assert_true(rejected_by_verify > 0);
	free(m);
	free(addrs);
	free(d);
}

static void test_verify_catches_inconsistencies(void **state)
{
	struct symfile_frame fr[MAX_FRAMES];
	struct symfile_error e;
	struct symfile *f;
	struct sec_view v;
	char path[512];
	size_t len;
	(void)state;

	write_table_file(path, sizeof(path));
	uint8_t *d = read_all(path, &len);
	uint8_t *m = malloc(len);
	assert_non_null(m);
	sections_of(d, &v);
	int ia = section_index(&v, SYMF_SEC_ADDRESSES), ir = section_index(&v, SYMF_SEC_RANGES);
	int ifn = section_index(&v, SYMF_SEC_FUNCTIONS);

	/* Unsorted addresses (with their ranges, so only the order is wrong). */
	memcpy(m, d, len);
	uint8_t tmp[SYMF_RANGE_SIZE];
	memcpy(tmp, m + v.off[ia], 8);
	memcpy(m + v.off[ia], m + v.off[ia] + 8, 8);
	memcpy(m + v.off[ia] + 8, tmp, 8);
	memcpy(tmp, m + v.off[ir], SYMF_RANGE_SIZE);
	memcpy(m + v.off[ir], m + v.off[ir] + SYMF_RANGE_SIZE, SYMF_RANGE_SIZE);
	memcpy(m + v.off[ir] + SYMF_RANGE_SIZE, tmp, SYMF_RANGE_SIZE);
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), -SYSOM_ECORRUPT);
	assert_true(e.offset >= v.off[ia] && e.offset < v.off[ia] + v.size[ia]);
	symfile_close(f);

	/* A range pointing past FUNCTIONS: verify refuses, lookup reports it. */
	memcpy(m, d, len);
	store_le32(m + v.off[ir] + SYMF_RANGE_FUNCTION, 0xfffffff0u);
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), -SYSOM_ECORRUPT);
	assert_int_equal(symfile_lookup(f, 0x401000, fr, MAX_FRAMES), -SYSOM_ECORRUPT);
	expect_name(f, 0x401200, "beta"); /* the rest still works */
	symfile_close(f);

	/* A name outside STRINGS. */
	memcpy(m, d, len);
	for (uint32_t i = 0; i < v.count[ifn]; i++)
		store_le32(m + v.off[ifn] + i * SYMF_FUNCTION_SIZE + SYMF_FUNCTION_NAME,
			   0x7fffffff);
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), -SYSOM_ECORRUPT);
	assert_int_equal(symfile_lookup(f, 0x401000, fr, MAX_FRAMES), -SYSOM_ECORRUPT);
	symfile_close(f);

	/* An empty range, and a range that leaves its function's extent. */
	memcpy(m, d, len);
	store_le64(m + v.off[ir] + SYMF_RANGE_BYTES, 0);
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), -SYSOM_ECORRUPT);
	expect_name(f, 0x401000, NULL);
	symfile_close(f);
	memcpy(m, d, len);
	store_le64(m + v.off[ir] + SYMF_RANGE_BYTES, 0x180);
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), -SYSOM_ECORRUPT);
	symfile_close(f);

	/* A reserved header byte. */
	memcpy(m, d, len);
	m[SYMF_HEADER_SIZE - 1] = 1;
	assert_int_equal(symfile_open_memory(m, len, &f, &e), 0);
	assert_int_equal(symfile_verify(f, &e), -SYSOM_ECORRUPT);
	symfile_close(f);

	free(m);
	free(d);
	flip_every_byte(path, "table file");
}

/* ------------------------------------------------------------------------------------------ */
/* Compiled programs */

static const char prog_src[] =
	"#include <stdio.h>\n"
	"volatile int sink;\n"
	"static inline __attribute__((always_inline)) int inl_leaf(int x)\n"
	"{\n"
	"	int r = x * 3; /* LEAF_BODY */\n"
	"	sink = r;\n"
	"	return r + 1;\n"
	"}\n"
	"static inline __attribute__((always_inline)) int inl_mid(int x)\n"
	"{\n"
	"	return inl_leaf(x + 1) * 2; /* CALL_LEAF */\n"
	"}\n"
	"__attribute__((noinline, noclone)) int outer(int x)\n"
	"{\n"
	"	int s = 0;\n"
	"	for (int i = 0; i < x; i++)\n"
	"		s += inl_mid(i); /* CALL_MID */\n"
	"	return s;\n"
	"}\n"
	"static __attribute__((noinline, noclone)) int static_helper(int x)\n"
	"{\n"
	"	sink = x;\n"
	"	return x ^ 0x55;\n"
	"}\n"
	"int main(int argc, char **argv)\n"
	"{\n"
	"	(void)argv;\n"
	"	printf(\"%d\\n\", outer(argc));\n"
	"	return static_helper(argc);\n"
	"}\n";

/* Line of the first source line containing `marker` (1-based). */
static uint32_t line_of(const char *src, const char *marker)
{
	const char *p = strstr(src, marker);
	uint32_t line = 1;

	assert_non_null(p);
	for (const char *s = src; s < p; s++)
		line += *s == '\n';
	return line;
}

struct nmsym {
	uint64_t addr, size;
	char name[128];
};

/* `nm -S --defined-only` function symbols (T/t/W/i) of an ELF. */
static size_t nm_functions(const char *elf, struct nmsym *out, size_t max)
{
	char *text = sh_out("nm -S --defined-only %s 2>/dev/null", elf);
	size_t n = 0;

	for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n")) {
		unsigned long long a, s = 0;
		char type;
		char name[128];
		/* "ADDR SIZE TYPE NAME", or "ADDR TYPE NAME" for a symbol without size. */
		if (sscanf(line, "%llx %llx %c %127s", &a, &s, &type, name) != 4 &&
		    sscanf(line, "%llx %c %127s", &a, &type, name) != 3)
			continue;
		if (type != 'T' && type != 't' && type != 'W' && type != 'i')
			continue;
		out[n++] = (struct nmsym){ a, s, "" };
		snprintf(out[n - 1].name, sizeof(out[n - 1].name), "%s", name);
	}
	free(text);
	return n;
}

static const struct nmsym *find_nm(const struct nmsym *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i].name, name) == 0)
			return &v[i];
	}
	fail_msg("symbol %s not found by nm", name);
	return NULL;
}

static void write_elf(const char *exe, const char *debug, const char *out, bool inl, bool lines,
		      uint64_t budget, struct symfile_write_stats *st)
{
	struct symfile_write_options o = { .executable_path = exe, .debug_path = debug,
					   .inline_frames = inl, .line_table = lines,
					   .memory_budget = budget };
	char err[512] = "";
	int rc = symfile_write(&o, out, st, err, sizeof(err));

	if (rc)
		print_message("# symfile_write %s: %s (%s)\n", exe, err, sysom_strerror(rc));
	assert_int_equal(rc, 0);
}

/* Compiles prog_src once per flag set into tmpdir/<name>; false when gcc is missing. */
static bool compile_prog(const char *name, const char *flags)
{
	char src[512], out[512];

	if (!have_tools("gcc"))
		return false;
	tpath(src, sizeof(src), "prog.c");
	if (!file_exists(src))
		write_all(src, prog_src, strlen(prog_src));
	tpath(out, sizeof(out), name);
	assert_int_equal(sh("gcc %s -o %s %s", flags, out, src), 0);
	return true;
}

/* The frames binutils addr2line (an independent DWARF reader) gives for each address. */
struct ref_frame {
	char name[512];
	char file[256];
	uint32_t line;
};
struct ref_addr {
	uint64_t addr;
	int n;
	struct ref_frame f[MAX_FRAMES];
};

static size_t addr2line_frames(const char *elf, const uint64_t *addrs, size_t n,
			       struct ref_addr *out)
{
	char list[512];
	FILE *fp;
	size_t k = -1;

	tpath(list, sizeof(list), "addrs.txt");
	fp = fopen(list, "w");
	assert_non_null(fp);
	for (size_t i = 0; i < n; i++)
		fprintf(fp, "%#llx\n", (unsigned long long)addrs[i]);
	fclose(fp);
	char *text = sh_out("addr2line -a -i -f -e %s < %s", elf, list);
	bool want_name = true;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "0x", 2) == 0 && strchr(line, ':') == NULL) {
			k++;
			assert_true(k < n);
			out[k].addr = strtoull(line, NULL, 16);
			out[k].n = 0;
			want_name = true;
			continue;
		}
		struct ref_addr *r = &out[k];
		if (want_name) {
			if (r->n < MAX_FRAMES)
				snprintf(r->f[r->n].name, sizeof(r->f[0].name), "%s", line);
			want_name = false;
		} else {
			char *colon = strrchr(line, ':');
			if (r->n < MAX_FRAMES) {
				*colon = 0;
				snprintf(r->f[r->n].file, sizeof(r->f[0].file), "%s",
					 base_name(line));
				r->f[r->n].line = (uint32_t)strtoul(colon + 1, NULL, 10);
				r->n++;
			}
			want_name = true;
		}
	}
	free(text);
	return k + 1;
}

/*
 * Compares every address of the given functions with addr2line -i: the same chain of
 * function names (the outermost by its symbol, which addr2line names from DWARF) and the
 * same file:line for every frame. Returns the number of addresses compared.
 */
static size_t compare_with_addr2line(const char *elf, const struct symfile *f,
				     const struct nmsym *funcs, size_t nfuncs, size_t *line_diff)
{
	size_t total = 0, ndiff = 0;

	for (size_t i = 0; i < nfuncs; i++) {
		size_t n = funcs[i].size;
		uint64_t *addrs = malloc(n * sizeof(*addrs));
		struct ref_addr *ref = calloc(n, sizeof(*ref));
		assert_true(addrs && ref);
		for (size_t a = 0; a < n; a++)
			addrs[a] = funcs[i].addr + a;
		assert_int_equal(addr2line_frames(elf, addrs, n, ref), n);
		for (size_t a = 0; a < n; a++) {
			struct symfile_frame fr[MAX_FRAMES];
			int got = symfile_lookup(f, addrs[a], fr, MAX_FRAMES);
			if (got != ref[a].n)
				fail_msg("%s+%#zx: %d frames, addr2line %d (innermost %s)",
					 funcs[i].name, a, got, ref[a].n, ref[a].f[0].name);
			for (int k = 0; k < got; k++) {
				const char *want = k == got - 1 ? funcs[i].name : ref[a].f[k].name;
				assert_string_equal(fr[k].name, want);
				assert_true(fr[k].inlined == (k < got - 1));
				if (!fr[k].file ||
				    strcmp(base_name(fr[k].file), ref[a].f[k].file) ||
				    fr[k].line != ref[a].f[k].line) {
					if (ndiff++ < 5)
						print_message(
							"# %s+%#zx frame %d: %s:%u, addr2line "
							"%s:%u\n",
							funcs[i].name, a, k,
							fr[k].file ? base_name(fr[k].file) : "?",
							fr[k].line, ref[a].f[k].file,
							ref[a].f[k].line);
				}
			}
			total++;
		}
		free(addrs);
		free(ref);
	}
	*line_diff = ndiff;
	return total;
}

/* Finds an address in `outer` whose chain is inl_leaf → inl_mid → outer and checks it. */
static void check_inline_chain(const struct symfile *f, const struct nmsym *outer)
{
	struct symfile_frame fr[MAX_FRAMES];
	bool found = false;

	for (uint64_t a = outer->addr; a < outer->addr + outer->size && !found; a++) {
		int n = symfile_lookup(f, a, fr, MAX_FRAMES);
		if (n != 3 || strcmp(fr[0].name, "inl_leaf") != 0)
			continue;
		found = true;
		assert_true(fr[0].inlined);
		assert_string_equal(fr[1].name, "inl_mid");
		assert_true(fr[1].inlined);
		assert_string_equal(fr[2].name, "outer");
		assert_false(fr[2].inlined);
		assert_int_equal(fr[2].function_start, outer->addr);
		assert_int_equal(fr[2].function_size, outer->size);
		assert_true(a >= fr[0].function_start &&
			    a < fr[0].function_start + fr[0].function_size);
		assert_true(fr[0].function_start >= fr[1].function_start);
		for (int k = 0; k < 3; k++)
			assert_string_equal(base_name(fr[k].file), "prog.c");
		/* The location of each outer frame is the call site of the inner one. */
		assert_int_equal(fr[1].line, line_of(prog_src, "CALL_LEAF"));
		assert_int_equal(fr[2].line, line_of(prog_src, "CALL_MID"));
		assert_true(fr[0].line >= line_of(prog_src, "inl_leaf(int x)") &&
			    fr[0].line <= line_of(prog_src, "return r + 1"));
		/* max frames: the innermost ones. */
		assert_int_equal(symfile_lookup(f, a, fr, 1), 1);
		assert_string_equal(fr[0].name, "inl_leaf");
		assert_int_equal(symfile_lookup(f, a, fr, 2), 2);
		assert_string_equal(fr[1].name, "inl_mid");
	}
	assert_true(found);
}

/* The executable PT_LOAD of an ELF from readelf: file offset, vaddr, file size. */
static void exec_segment(const char *elf, uint64_t *off, uint64_t *vaddr, uint64_t *filesz)
{
	char *text = sh_out("readelf -lW %s", elf);
	bool found = false;

	for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
		unsigned long long o, v, p, fs, ms;
		char flags[16] = "";
		int pos = 0;
		int got = sscanf(line, " LOAD %llx %llx %llx %llx %llx %n", &o, &v, &p, &fs, &ms,
				 &pos);
		if (got != 5 || !pos)
			continue;
		snprintf(flags, sizeof(flags), "%.3s", line + pos); /* "R E", "RWE", "R  " */
		if (!strchr(flags, 'E'))
			continue;
		*off = o;
		*vaddr = v;
		*filesz = fs;
		found = true;
	}
	free(text);
	assert_true(found);
}

static void test_compiled_program(void **state)
{
	struct symfile_write_stats st;
	struct nmsym syms[256];
	char exe[512], out[512];
	size_t line_diff;
	uint64_t off, vaddr, filesz, va;
	(void)state;

	if (!compile_prog("prog_pie", "-g -O2 -fPIE -pie") || !have_tools("nm readelf addr2line")) {
		print_message("# gcc, nm, readelf and addr2line are needed\n");
		skip();
	}
	tpath(exe, sizeof(exe), "prog_pie");
	tpath(out, sizeof(out), "prog_pie.sym");
	write_elf(exe, NULL, out, true, true, 0, &st);
	assert_true(st.from_symtab > 0);
	assert_true(st.inline_ranges > 0);
	assert_true(st.line_rows > 0);
	assert_false(st.lines_dropped || st.inlines_dropped);
	assert_true(st.peak_heap_bytes > 0 && st.output_bytes > 0);
	struct symfile *f = open_verified(out);

	size_t n = nm_functions(exe, syms, 256);
	const struct nmsym *outer = find_nm(syms, n, "outer");
	const struct nmsym *helper = find_nm(syms, n, "static_helper");
	const struct nmsym *mainf = find_nm(syms, n, "main");
	struct symfile_frame fr[MAX_FRAMES];
	for (size_t i = 0; i < n; i++) {
		if (!syms[i].size)
			continue;
		int got = symfile_lookup(f, syms[i].addr + syms[i].size / 2, fr, MAX_FRAMES);
		assert_true(got >= 1);
		assert_string_equal(fr[got - 1].name, syms[i].name);
		assert_int_equal(fr[got - 1].function_start, syms[i].addr);
		assert_int_equal(fr[got - 1].function_size, syms[i].size);
	}
	check_inline_chain(f, outer);

	struct nmsym mine[3] = { *outer, *helper, *mainf };
	size_t total = compare_with_addr2line(exe, f, mine, 3, &line_diff);
	print_message("# prog (PIE, -O2, DWARF 5): %zu addresses vs addr2line -i: names 100%%, "
		      "file:line differs on %zu\n",
		      total, line_diff);
	assert_int_equal(line_diff, 0);

	/* File offsets (what agents send) → vaddrs. */
	exec_segment(exe, &off, &vaddr, &filesz);
	assert_int_equal(symfile_offset_to_vaddr(f, outer->addr - vaddr + off, &va), 0);
	assert_int_equal(va, outer->addr);
	expect_name(f, va, "outer");
	assert_int_equal(symfile_offset_to_vaddr(f, off + filesz, &va), -ENOENT);
	if (off > 0)
		assert_int_equal(symfile_offset_to_vaddr(f, off - 1, &va), -ENOENT);
	symfile_close(f);

	/* Without inline frames or lines: the function only, no file. */
	tpath(out, sizeof(out), "prog_pie_plain.sym");
	write_elf(exe, NULL, out, false, false, 0, &st);
	assert_int_equal(st.inline_ranges, 0);
	assert_int_equal(st.line_rows, 0);
	f = open_verified(out);
	for (uint64_t a = outer->addr; a < outer->addr + outer->size; a++) {
		int got = symfile_lookup(f, a, fr, MAX_FRAMES);
		assert_int_equal(got, 1);
		assert_string_equal(fr[0].name, "outer");
		assert_null(fr[0].file);
	}
	symfile_close(f);

	/* The flipped-byte sweep on a file with INLINE, LINES and FILES. */
	tpath(out, sizeof(out), "prog_pie.sym");
	flip_every_byte(out, "compiled program");
}

/* Lookups of every address of `funcs` in two files agree frame by frame. */
static void expect_same_lookups(const struct symfile *a, const struct symfile *b,
				const struct nmsym *funcs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (uint64_t x = funcs[i].addr; x < funcs[i].addr + funcs[i].size; x++) {
			struct symfile_frame fa[MAX_FRAMES], fb[MAX_FRAMES];
			int na = symfile_lookup(a, x, fa, MAX_FRAMES);
			int nb = symfile_lookup(b, x, fb, MAX_FRAMES);
			assert_int_equal(na, nb);
			for (int k = 0; k < na; k++) {
				assert_string_equal(fa[k].name, fb[k].name);
				assert_int_equal(fa[k].line, fb[k].line);
				assert_int_equal(fa[k].function_start, fb[k].function_start);
				assert_int_equal(fa[k].inlined, fb[k].inlined);
			}
		}
	}
}

static void test_separate_debug_file(void **state)
{
	char exe[512], stripped[512], dbg[512], out[512], other[512], nobid[512];
	struct symfile_write_stats st;
	struct symfile_info info;
	struct nmsym syms[256];
	char err[512];
	(void)state;

	if (!compile_prog("prog_np", "-g -O2 -fno-pie -no-pie") ||
	    !compile_prog("prog_other", "-g -O1 -fno-pie -no-pie -DOTHER=1") ||
	    !compile_prog("prog_nobid", "-O2 -Wl,--build-id=none") ||
	    !have_tools("objcopy strip nm")) {
		print_message("# gcc, objcopy, strip and nm are needed\n");
		skip();
	}
	tpath(exe, sizeof(exe), "prog_np");
	tpath(stripped, sizeof(stripped), "prog_np.stripped");
	tpath(dbg, sizeof(dbg), "prog_np.debug");
	tpath(other, sizeof(other), "prog_other");
	tpath(nobid, sizeof(nobid), "prog_nobid");
	assert_int_equal(sh("objcopy --only-keep-debug %s %s && strip -o %s %s", exe, dbg, stripped,
			    exe),
			 0);
	size_t n = nm_functions(exe, syms, 256);
	const struct nmsym *outer = find_nm(syms, n, "outer");
	const struct nmsym *helper = find_nm(syms, n, "static_helper");

	/* The stripped executable alone: its functions are unknown, never misnamed. */
	tpath(out, sizeof(out), "np_stripped.sym");
	write_elf(stripped, NULL, out, true, true, 0, &st);
	assert_int_equal(st.from_symtab, 0);
	struct symfile *f = open_verified(out);
	for (uint64_t a = outer->addr; a < outer->addr + outer->size; a++)
		expect_name(f, a, NULL);
	for (uint64_t a = helper->addr; a < helper->addr + helper->size; a++)
		expect_name(f, a, NULL);
	symfile_close(f);

	/* With its debug file: names (static ones too), inline chains, lines. */
	tpath(out, sizeof(out), "np_debug.sym");
	write_elf(stripped, dbg, out, true, true, 0, &st);
	assert_true(st.from_symtab > 0);
	f = open_verified(out);
	expect_name(f, helper->addr, "static_helper");
	expect_name(f, helper->addr + helper->size - 1, "static_helper");
	check_inline_chain(f, outer);
	symfile_info_get(f, &info);
	assert_int_equal(info.build_id.kind, SYSOM_OBJECT_ELF);
	assert_int_equal(info.build_id.len, 20);

	/* The same as the unstripped executable with its DWARF inside. */
	tpath(out, sizeof(out), "np_full.sym");
	write_elf(exe, NULL, out, true, true, 0, &st);
	struct symfile *full = open_verified(out);
	struct nmsym both[2] = { *outer, *helper };
	expect_same_lookups(f, full, both, 2);
	symfile_close(full);
	symfile_close(f);

	/* A debug file of another build: refused with a clear message. */
	struct symfile_write_options o = { .executable_path = stripped, .debug_path = other,
					   .inline_frames = true, .line_table = true };
	tpath(out, sizeof(out), "np_mismatch.sym");
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -SYSOM_ECORRUPT);
	assert_non_null(strstr(err, "build ID mismatch"));
	assert_false(file_exists(out));
	/* A debug file without a build ID cannot be matched. */
	o.debug_path = nobid;
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -SYSOM_ENOBUILDID);
	/* An executable without a build ID is identified by its content hash. */
	o.executable_path = nobid;
	o.debug_path = NULL;
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), 0);
	f = open_verified(out);
	symfile_info_get(f, &info);
	assert_int_equal(info.build_id.kind, SYSOM_OBJECT_FILE_HASH);
	assert_int_equal(info.build_id.len, 16);
	symfile_close(f);
	assert_int_equal(leftover_temporaries(), 0);
}

static void test_compressed_and_dwarf4(void **state)
{
	char plain[512], gz[512], d4[512], sep[512], sepdbg[512], zgnu[512], out[512];
	struct symfile_write_stats st;
	struct nmsym syms[256];
	(void)state;

	if (!compile_prog("prog_plain", "-g -O2") || !compile_prog("prog_gz", "-g -O2 -gz=zlib") ||
	    !compile_prog("prog_d4", "-g -gdwarf-4 -O2") || !have_tools("objcopy readelf nm")) {
		print_message("# gcc, objcopy, readelf and nm are needed\n");
		skip();
	}
	tpath(plain, sizeof(plain), "prog_plain");
	tpath(gz, sizeof(gz), "prog_gz");
	tpath(d4, sizeof(d4), "prog_d4");
	tpath(sep, sizeof(sep), "prog_gz.stripped");
	tpath(sepdbg, sizeof(sepdbg), "prog_gz.debug");
	/* The compressed build really has SHF_COMPRESSED debug sections. */
	assert_int_equal(sh("readelf -SW %s | grep -q 'debug_info.* C '", gz), 0);
	/* A separate debug file compressed the way Debian's -dbg packages are, and the older
	 * GNU .zdebug_* form. */
	assert_int_equal(
		sh("objcopy --only-keep-debug --compress-debug-sections=zlib-gabi %s %s && "
		   "strip -o %s %s",
		   plain, sepdbg, sep, plain),
		0);
	tpath(zgnu, sizeof(zgnu), "prog_zgnu");
	assert_int_equal(sh("objcopy --compress-debug-sections=zlib-gnu %s %s && "
			    "readelf -SW %s | grep -q zdebug_info",
			    plain, zgnu, zgnu),
			 0);

	size_t n = nm_functions(plain, syms, 256);
	struct nmsym funcs[3] = { *find_nm(syms, n, "outer"), *find_nm(syms, n, "static_helper"),
				  *find_nm(syms, n, "main") };
	tpath(out, sizeof(out), "plain.sym");
	write_elf(plain, NULL, out, true, true, 0, &st);
	struct symfile *ref = open_verified(out);
	check_inline_chain(ref, &funcs[0]);

	const char *variants[][2] = { { gz, NULL }, { d4, NULL }, { sep, sepdbg }, { zgnu, NULL } };
	for (size_t i = 0; i < 4; i++) {
		tpath(out, sizeof(out), "variant.sym");
		write_elf(variants[i][0], variants[i][1], out, true, true, 0, &st);
		assert_true(st.inline_ranges > 0 && st.line_rows > 0);
		struct symfile *f = open_verified(out);
		struct nmsym vs[256];
		size_t vn = nm_functions(variants[i][0], vs, 256);
		if (vn == 0) /* stripped: the code is the same as prog_plain's */
			expect_same_lookups(ref, f, funcs, 3);
		else
			check_inline_chain(f, find_nm(vs, vn, "outer"));
		if (i == 0 || i == 3) /* no code changed: same addresses as the plain build */
			expect_same_lookups(ref, f, funcs, 3);
		symfile_close(f);
	}
	symfile_close(ref);
}

static void test_32bit_elf(void **state)
{
	static const char src[] =
		"volatile int sink;\n"
		"__attribute__((noinline)) int f32a(int x) { sink = x; return x + 1; }\n"
		"static __attribute__((noinline)) int f32b(int x)\n"
		"{\n"
		"	sink = x * 2;\n"
		"	return x - 1;\n"
		"}\n"
		"void _start(void) { for (;;) sink = f32a(sink) + f32b(sink); }\n";
	char c[512], exe[512], out[512];
	struct symfile_write_stats st;
	struct symfile_frame fr[MAX_FRAMES];
	struct nmsym syms[16];
	uint64_t off, vaddr, filesz, va;
	(void)state;

	tpath(c, sizeof(c), "p32.c");
	tpath(exe, sizeof(exe), "p32");
	write_all(c, src, strlen(src));
	if (!have_tools("gcc nm readelf") ||
	    sh("gcc -m32 -O2 -g -ffreestanding -nostdlib -fno-pie -no-pie -Wl,--build-id -o %s %s "
	       "2>/dev/null",
	       exe, c) != 0) {
		print_message("# gcc -m32 cannot link here: 32-bit ELF test skipped\n");
		skip();
	}
	assert_int_equal(sh("readelf -h %s | grep -q 'ELF32'", exe), 0);
	tpath(out, sizeof(out), "p32.sym");
	write_elf(exe, NULL, out, true, true, 0, &st);
	struct symfile *f = open_verified(out);
	size_t n = nm_functions(exe, syms, 16);
	const struct nmsym *b = find_nm(syms, n, "f32b");
	assert_int_equal(symfile_lookup(f, b->addr + 2, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "f32b");
	assert_int_equal(fr[0].function_start, b->addr);
	assert_string_equal(base_name(fr[0].file), "p32.c");
	assert_true(fr[0].line >= 3 && fr[0].line <= 7);
	expect_name(f, find_nm(syms, n, "f32a")->addr, "f32a");
	expect_name(f, find_nm(syms, n, "_start")->addr, "_start");
	exec_segment(exe, &off, &vaddr, &filesz);
	assert_int_equal(symfile_offset_to_vaddr(f, b->addr - vaddr + off, &va), 0);
	assert_int_equal(va, b->addr);
	symfile_close(f);
}

/* Aliases at one address and sizeless assembly functions, in a real ELF .symtab. */
static void test_alias_rules(void **state)
{
	static const char src[] =
		"volatile int sink;\n"
		"static __attribute__((noinline, used)) int base_fn(int x)\n"
		"{ sink = x; return x * 7 + sink; }\n"
		"int weak_alias(int) __attribute__((weak, alias(\"base_fn\")));\n"
		"int global_alias(int) __attribute__((alias(\"base_fn\")));\n"
		"int __under_global(int) __attribute__((alias(\"base_fn\")));\n"
		"static __attribute__((noinline, used)) int base2(int x)\n"
		"{ sink = x + 1; return x * 5 + sink; }\n"
		"int plain_name(int) __attribute__((alias(\"base2\")));\n"
		"int mangled_name(int) __asm__(\"_Z10mangledfooi\")\n"
		"	__attribute__((alias(\"base2\")));\n"
		"static __attribute__((noinline, used)) int base3(int x)\n"
		"{ sink = x + 2; return x * 3 + sink; }\n"
		"int ab(int) __attribute__((alias(\"base3\")));\n"
		"int abc(int) __attribute__((alias(\"base3\")));\n"
		"int main(void) { return 0; }\n";
	/* Hand-written assembly: functions without .size, a data object in .text, a label
	 * inside a sized function, and a longer weak alias of a shorter global. */
	static const char asm_src[] =
		"	.text\n"
		"	.globl asm_nosize\n"
		"	.type asm_nosize, @function\n"
		"asm_nosize:\n"
		"	nop\n"
		"	nop\n"
		"	ret\n"
		"	.globl asm_nosize2\n"
		"	.type asm_nosize2, @function\n"
		"asm_nosize2:\n"
		"	nop\n"
		"	ret\n"
		"	.type text_table, @object\n"
		"text_table:\n"
		"	.long 1, 2, 3, 4\n"
		"	.size text_table, 16\n"
		"	.p2align 4\n"
		"	.globl asm_sized\n"
		"	.type asm_sized, @function\n"
		"asm_sized:\n"
		"	nop\n"
		"asm_label_inside:\n"
		"	nop\n"
		"	ret\n"
		"	.size asm_sized, .-asm_sized\n"
		"	.p2align 4\n"
		"	.globl small_fn\n"
		"	.type small_fn, @function\n"
		"	.weak big_weak\n"
		"	.type big_weak, @function\n"
		"small_fn:\n"
		"big_weak:\n"
		"	.fill 3, 1, 0x90\n"
		"	ret\n"
		"	.fill 11, 1, 0x90\n"
		"	ret\n"
		"	.size small_fn, 4\n"
		"	.size big_weak, 16\n"
		"	.section .note.GNU-stack, \"\", @progbits\n";
	char c[512], as[512], exe[512], out[512];
	struct symfile_write_stats st;
	struct symfile_frame fr[MAX_FRAMES];
	struct nmsym syms[64];
	(void)state;

	if (!have_tools("gcc nm")) {
		print_message("# gcc and nm are needed\n");
		skip();
	}
	tpath(c, sizeof(c), "aliases.c");
	tpath(as, sizeof(as), "aliases_asm.S");
	tpath(exe, sizeof(exe), "aliases");
	tpath(out, sizeof(out), "aliases.sym");
	write_all(c, src, strlen(src));
	write_all(as, asm_src, strlen(asm_src));
	assert_int_equal(sh("gcc -O2 -o %s %s %s", exe, c, as), 0);
	write_elf(exe, NULL, out, true, true, 0, &st);
	struct symfile *f = open_verified(out);
	size_t n = nm_functions(exe, syms, 64);

	/* GLOBAL over WEAK and LOCAL; then fewer leading underscores. */
	const struct nmsym *a = find_nm(syms, n, "global_alias");
	expect_name(f, a->addr, "global_alias");
	expect_name(f, a->addr + a->size - 1, "global_alias");
	/* A mangled name over a plain one; both raw and demangled are kept. */
	a = find_nm(syms, n, "plain_name");
	assert_int_equal(symfile_lookup(f, a->addr + 1, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "_Z10mangledfooi");
	assert_string_equal(fr[0].demangled, "mangledfoo(int)");
	/* Then the longer name. */
	expect_name(f, find_nm(syms, n, "ab")->addr, "abc");

	/* Sizeless assembly: bounded by the next function symbol, by a data object placed in
	 * .text, never across a sized symbol; a label inside a sized function is ignored. */
	const struct nmsym *z1 = find_nm(syms, n, "asm_nosize");
	const struct nmsym *z2 = find_nm(syms, n, "asm_nosize2");
	const struct nmsym *sized = find_nm(syms, n, "asm_sized");
	assert_int_equal(symfile_lookup(f, z1->addr, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "asm_nosize");
	assert_true(fr[0].size_inferred);
	assert_int_equal(fr[0].function_size, z2->addr - z1->addr);
	assert_int_equal(symfile_lookup(f, z2->addr + 1, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "asm_nosize2");
	assert_true(fr[0].size_inferred);
	uint64_t table = fr[0].function_start + fr[0].function_size; /* where text_table starts */
	char *objs = sh_out("nm %s | awk '$3 == \"text_table\" {print $1}'", exe);
	assert_int_equal(table, strtoull(objs, NULL, 16));
	free(objs);
	for (uint64_t x = table; x < sized->addr; x++)
		expect_name(f, x, NULL); /* the table and the padding after it */
	expect_name(f, sized->addr + 1, "asm_sized"); /* at asm_label_inside */
	/* A worse alias that is longer keeps only its extra bytes. */
	const struct nmsym *small = find_nm(syms, n, "small_fn");
	assert_int_equal(small->size, 4);
	expect_name(f, small->addr, "small_fn");
	expect_name(f, small->addr + 3, "small_fn");
	assert_int_equal(symfile_lookup(f, small->addr + 4, fr, MAX_FRAMES), 1);
	assert_string_equal(fr[0].name, "big_weak");
	assert_int_equal(fr[0].function_start, small->addr);
	assert_int_equal(fr[0].function_size, 16);
	expect_name(f, small->addr + 15, "big_weak");
	int got = symfile_lookup(f, small->addr + 16, fr, MAX_FRAMES);
	assert_true(got == 0 || strcmp(fr[got - 1].name, "big_weak") != 0);
	assert_int_equal(symfile_lookup(f, sized->addr + 2, fr, MAX_FRAMES), 1);
	assert_false(fr[0].size_inferred);
	symfile_close(f);
}

/*
 * PLT stubs are named "name@plt" as objdump names them: for every stub objdump labels (.plt
 * without IBT, .plt.sec and .plt.got with it), every byte of the stub; the lazy-binding half of
 * an IBT .plt (which objdump leaves unlabelled) by the relocation index it pushes; the .plt
 * header unnamed. A binary without lazy stubs (-fno-plt) gets none. Relocations and stubs
 * overwritten with garbage: no crash, no name out of the dynamic string table.
 */
static void test_plt_stubs(void **state)
{
	static const char src[] =
		"#include <stdio.h>\n"
		"#include <stdlib.h>\n"
		"#include <unistd.h>\n"
		"#include <math.h>\n"
		"int main(int argc, char **argv)\n"
		"{ volatile double d = argc; printf(\"%d %f\\n\", getpid(), cos(d));\n"
		"  char *p = malloc((size_t)argc * 32); snprintf(p, 32, \"%s\", argv[0]);\n"
		"  puts(p); free(p); return 0; }\n";
	static const struct {
		const char *name, *flags;
		int min_named; /* stubs objdump labels, at least */
	} variants[] = {
		{ "plt_lazy", "-O1 -fcf-protection=none", 6 },
		{ "plt_ibt", "-O1 -fcf-protection=full -Wl,-z,ibtplt", 6 },
		{ "plt_now", "-O1 -fcf-protection=none -Wl,-z,now", 6 },
		{ "plt_none", "-O1 -fno-plt -Wl,-z,now", 0 },
	};
	char c[512], exe[512], out[600];
	struct symfile_write_stats st;
	(void)state;

	if (!have_tools("gcc objdump readelf nm")) {
		print_message("# gcc, objdump, readelf and nm are needed\n");
		skip();
	}
	tpath(c, sizeof(c), "plt.c");
	write_all(c, src, strlen(src));
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		tpath(exe, sizeof(exe), variants[v].name);
		snprintf(out, sizeof(out), "%s.sym", exe);
		assert_int_equal(sh("gcc %s -o %s %s -lm", variants[v].flags, exe, c), 0);
		write_elf(exe, NULL, out, true, true, 0, &st);
		struct symfile *f = open_verified(out);
		/* "ADDR NAME" for each stub objdump labels NAME@plt. */
		char *labels = sh_out("objdump -d -j .plt -j .plt.sec -j .plt.got %s 2>/dev/null |"
				      " sed -n 's/^\\([0-9a-f]*\\) <\\(.*@plt\\)>:$/\\1 \\2/p'",
				      exe);
		int named = 0;
		for (char *line = strtok(labels, "\n"); line; line = strtok(NULL, "\n")) {
			char name[256];
			unsigned long long addr;
			assert_int_equal(sscanf(line, "%llx %255s", &addr, name), 2);
			for (uint64_t x = addr; x < addr + 8; x++)
				expect_name(f, x, name);
			named++;
		}
		free(labels);
		print_message("# %s: %d stubs named as objdump names them\n", variants[v].name,
			      named);
		assert_true(named >= variants[v].min_named);
		/* The .plt header (push GOT+8; jmp *GOT+16) names nothing. */
		char *plt = sh_out("readelf -SW %s | awk '$2 == \".plt\" {print $4}'", exe);
		if (*plt) {
			uint64_t header = strtoull(plt, NULL, 16);
			expect_name(f, header, NULL);
			expect_name(f, header + 15, NULL);
			if (strcmp(variants[v].name, "plt_ibt") == 0) {
				/* The first lazy stub pushes 0: .rela.plt's first symbol. */
				char *first = sh_out("readelf -rW %s | awk '/.rela.plt/ {f = 1; next}"
						     " f && /JUMP_SLO/ {sub(/@.*/, \"\", $5);"
						     " print $5 \"@plt\"; exit}'",
						     exe);
				first[strcspn(first, "\n")] = 0;
				assert_true(*first);
				expect_name(f, header + 16, first);
				expect_name(f, header + 31, first);
				free(first);
			}
		}
		free(plt);
		symfile_close(f);
	}

	/* Garbage relocations and stubs: .rela.plt's symbol indexes and the .plt bytes. */
	tpath(exe, sizeof(exe), "plt_lazy");
	char bad[512];
	tpath(bad, sizeof(bad), "plt_garbage");
	for (int round = 0; round < 8; round++) {
		assert_int_equal(sh("cp %s %s && for s in .rela.plt .plt .plt.got; do"
				    "  set -- $(readelf -SW %s | awk -v s=$s '$2 == s {print $5, $6}');"
				    "  [ $# = 2 ] && head -c $((0x$2)) /dev/urandom |"
				    "  dd of=%s bs=1 seek=$((0x$1)) conv=notrunc status=none; done",
				    exe, bad, exe, bad),
				 0);
		snprintf(out, sizeof(out), "%s.sym", bad);
		struct symfile_write_options o = { .executable_path = bad };
		char err[256] = "";
		int rc = symfile_write(&o, out, &st, err, sizeof(err));
		if (rc)
			print_message("# garbage round %d: %s\n", round, err);
		assert_int_equal(rc, 0); /* bad stubs are gaps, not a failed file */
		struct symfile *f = open_verified(out);
		struct symfile_frame fr[MAX_FRAMES];
		/* A stub named through a garbage relocation names a real .dynsym symbol. */
		char *dyn = sh_out("nm -D %s | awk '{n = $NF; sub(/@.*/, \"\", n);"
				   " printf \" %%s@plt \", n}'", exe);
		for (uint64_t x = 0x1000; x < 0x1100; x++) {
			int n = symfile_lookup(f, x, fr, MAX_FRAMES);
			const char *name = n > 0 ? fr[n - 1].name : NULL;
			if (name && strstr(name, "@plt")) {
				char word[300];
				snprintf(word, sizeof(word), " %s ", name);
				if (!strstr(dyn, word))
					print_message("# %#llx: %s is not a .dynsym name\n",
						      (unsigned long long)x, name);
				assert_non_null(strstr(dyn, word));
			}
		}
		free(dyn);
		symfile_close(f);
	}
}

/*
 * The misattribution case: ~50 functions, the symbols of 40 consecutive ones removed and
 * no DWARF. Their addresses must give no frame (nearest-lower lookup would charge them all
 * to the last remaining symbol below); with the debug file, DWARF names them.
 */
static void test_sparse_symbols(void **state)
{
	enum { FIRST = 10, COUNT = 50, STRIP_FROM = 15, STRIP_TO = 54 };
	char src[512], full[512], sparse_dbg[512], exe[512], dbg[512], out[512];
	char strip_args[4096] = "";
	struct symfile_write_stats st;
	struct nmsym syms[256];
	(void)state;

	if (!have_tools("gcc objcopy strip nm")) {
		print_message("# gcc, objcopy, strip and nm are needed\n");
		skip();
	}
	tpath(src, sizeof(src), "sparse.c");
	tpath(full, sizeof(full), "sparse_full");
	tpath(sparse_dbg, sizeof(sparse_dbg), "sparse_syms_dwarf");
	tpath(exe, sizeof(exe), "sparse_exe");
	tpath(dbg, sizeof(dbg), "sparse.debug");
	FILE *fp = fopen(src, "w");
	assert_non_null(fp);
	fprintf(fp, "volatile int sink;\n");
	for (int i = FIRST; i < FIRST + COUNT; i++)
		fprintf(fp,
			"static __attribute__((noinline, noclone, used)) int f%d(int x)\n"
			"{\n\tsink = x * %d;\n\tif (x > %d)\n\t\tsink = x - %d;\n"
			"\treturn sink + %d;\n}\n",
			i, i, i, i, i);
	fprintf(fp, "int (*table[])(int) = {");
	for (int i = FIRST; i < FIRST + COUNT; i++)
		fprintf(fp, "f%d,", i);
	fprintf(fp,
		"};\nint main(int argc, char **argv)\n{\n\t(void)argv;\n\tint s = 0;\n"
		"\tfor (int i = 0; i < %d; i++)\n\t\ts += table[i](argc);\n\treturn s & 1;\n}\n",
		COUNT);
	fclose(fp);
	for (int i = STRIP_FROM; i <= STRIP_TO; i++) {
		size_t l = strlen(strip_args);
		snprintf(strip_args + l, sizeof(strip_args) - l, " --strip-symbol=f%d", i);
	}
	assert_int_equal(sh("gcc -g -O2 -o %s %s", full, src), 0);
	assert_int_equal(sh("objcopy %s %s %s && objcopy --only-keep-debug %s %s && "
			    "strip --strip-debug -o %s %s",
			    strip_args, full, sparse_dbg, sparse_dbg, dbg, exe, sparse_dbg),
			 0);
	size_t n = nm_functions(full, syms, 256);
	char name[16];

	/* Symbol tables only: the stripped functions are gaps. */
	tpath(out, sizeof(out), "sparse.sym");
	write_elf(exe, NULL, out, true, true, 0, &st);
	assert_int_equal(st.from_dwarf, 0);
	struct symfile *f = open_verified(out);
	size_t gaps = 0, named = 0;
	for (int i = FIRST; i < FIRST + COUNT; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		const struct nmsym *s = find_nm(syms, n, name);
		bool stripped = i >= STRIP_FROM && i <= STRIP_TO;
		for (uint64_t a = s->addr; a < s->addr + s->size; a++) {
			expect_name(f, a, stripped ? NULL : name);
			gaps += stripped;
			named += !stripped;
		}
	}
	print_message("# sparse symbols: %zu addresses in 40 stripped functions -> 0 frames; "
		      "%zu in the 10 others named correctly\n",
		      gaps, named);
	symfile_close(f);

	/* With the debug file (whose .symtab is just as sparse): DWARF has the real names. */
	tpath(out, sizeof(out), "sparse_dwarf.sym");
	write_elf(exe, dbg, out, true, true, 0, &st);
	assert_true(st.from_dwarf >= STRIP_TO - STRIP_FROM + 1);
	f = open_verified(out);
	for (int i = FIRST; i < FIRST + COUNT; i++) {
		struct symfile_frame fr[MAX_FRAMES];
		snprintf(name, sizeof(name), "f%d", i);
		const struct nmsym *s = find_nm(syms, n, name);
		for (uint64_t a = s->addr; a < s->addr + s->size; a++)
			expect_name(f, a, name);
		int got = symfile_lookup(f, s->addr, fr, MAX_FRAMES);
		assert_int_equal(got, 1);
		assert_int_equal(fr[0].function_start, s->addr);
		assert_int_equal(fr[0].function_size, s->size);
		assert_non_null(fr[0].file);
	}
	symfile_close(f);
}

/* ------------------------------------------------------------------------------------------ */
/* System libraries against eu-addr2line */

struct rsym {
	uint64_t addr, size;
	char *name;
	bool func, sized_code;
};
struct rsyms {
	struct rsym *v;
	size_t n, cap;
};

/* Defined symbols of `elf` from readelf -sW (both tables). */
static void readelf_symbols(const char *elf, struct rsyms *out)
{
	char *text = sh_out("readelf -sW %s 2>/dev/null", elf);

	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char value[32], size[32], type[16], bind[16], vis[16], ndx[16];
		int pos = 0;
		if (sscanf(line, " %*[0-9]: %31s %31s %15s %15s %15s %15s %n", value, size, type,
			   bind, vis, ndx, &pos) != 6 ||
		    pos == 0 || !line[pos])
			continue;
		if (ndx[0] < '0' || ndx[0] > '9')
			continue; /* UND, ABS, COM */
		bool func = !strcmp(type, "FUNC") || !strcmp(type, "IFUNC");
		bool code = func || !strcmp(type, "NOTYPE") || !strcmp(type, "OBJECT");
		if (!code)
			continue;
		if (out->n == out->cap) {
			out->cap = out->cap ? out->cap * 2 : 4096;
			out->v = realloc(out->v, out->cap * sizeof(*out->v));
			assert_non_null(out->v);
		}
		char *name = line + pos;
		name[strcspn(name, " ")] = 0;
		uint64_t sz = strtoull(size, NULL, 0);
		out->v[out->n++] = (struct rsym){ strtoull(value, NULL, 16), sz, strdup(name), func,
						  sz > 0 };
	}
	free(text);
}

static void rsyms_free(struct rsyms *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].name);
	free(s->v);
}

static int cmp_rsym(const void *a, const void *b)
{
	const struct rsym *x = a, *y = b;
	return (x->addr > y->addr) - (x->addr < y->addr);
}

/* `name` without a version suffix ("memcpy@@GLIBC_2.14" → "memcpy"), into buf. */
static const char *unversioned(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s", (int)strcspn(name, "@"), name);
	return buf;
}

/* Whether `a` and `b` are both names of function symbols at `addr`. */
static bool aliases_at(const struct rsyms *s, uint64_t addr, const char *a, const char *b)
{
	char ua[512], ub[512], un[512];
	bool has_a = false, has_b = false;

	unversioned(a, ua, sizeof(ua));
	unversioned(b, ub, sizeof(ub));
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].addr != addr || !s->v[i].func)
			continue;
		unversioned(s->v[i].name, un, sizeof(un));
		has_a |= !strcmp(un, ua);
		has_b |= !strcmp(un, ub);
	}
	return has_a && has_b;
}

/* Runs eu-addr2line with `opts` over addrs; 2 output lines per address into lines[2 * i]. */
static char **eu_addr2line(const char *elf, const char *opts, const uint64_t *addrs, size_t n,
			   char **textp)
{
	char list[512];
	FILE *fp;
	char **lines = calloc(2 * n + 1, sizeof(*lines));
	size_t k = 0;

	assert_non_null(lines);
	tpath(list, sizeof(list), "eu_addrs.txt");
	fp = fopen(list, "w");
	assert_non_null(fp);
	for (size_t i = 0; i < n; i++)
		fprintf(fp, "%#llx\n", (unsigned long long)addrs[i]);
	fclose(fp);
	*textp = sh_out("eu-addr2line %s -e %s < %s", opts, elf, list);
	for (char *p = *textp; *p && k < 2 * n;) {
		char *nl = strchr(p, '\n');
		lines[k++] = p;
		if (!nl)
			break;
		*nl = 0;
		p = nl + 1;
	}
	assert_int_equal(k, 2 * n);
	return lines;
}

/* Parses "name+0xoff" / "name" / "()+0x..." from eu-addr2line -S: name into buf (or
 * NULL without a symbol) and the symbol's start. */
static const char *eu_symbol(const char *line, uint64_t addr, char *buf, size_t len,
			     uint64_t *start)
{
	const char *plus = strrchr(line, '+');
	size_t n = strlen(line);

	*start = addr;
	if (line[0] == '(' || !strcmp(line, "??"))
		return NULL;
	if (plus && plus[1] == '0' && plus[2] == 'x') {
		n = (size_t)(plus - line);
		*start = addr - strtoull(plus + 1, NULL, 16);
	}
	snprintf(buf, len, "%.*s", (int)n, line);
	return buf;
}

/* The frames llvm-symbolizer (LLVM's DWARF reader) gives for each address. */
static void symbolizer_frames(const char *elf, const uint64_t *addrs, size_t n,
			      struct ref_addr *out)
{
	char list[512];
	FILE *fp;
	size_t k = 0;

	tpath(list, sizeof(list), "llvm_addrs.txt");
	fp = fopen(list, "w");
	assert_non_null(fp);
	for (size_t i = 0; i < n; i++)
		fprintf(fp, "%#llx\n", (unsigned long long)addrs[i]);
	fclose(fp);
	char *text = sh_out("llvm-symbolizer --no-demangle --inlining --obj=%s < %s", elf, list);
	char *p = text;
	for (k = 0; k < n && *p; k++) {
		struct ref_addr *r = &out[k];
		r->addr = addrs[k];
		r->n = 0;
		/* Pairs of lines (name, file:line:column) up to an empty line. */
		while (*p && *p != '\n') {
			char *name = p, *loc = strchr(p, '\n');
			assert_non_null(loc);
			*loc++ = 0;
			char *end = strchr(loc, '\n');
			assert_non_null(end);
			*end = 0;
			p = end + 1;
			if (r->n >= MAX_FRAMES)
				continue;
			struct ref_frame *fr = &r->f[r->n++];
			snprintf(fr->name, sizeof(fr->name), "%s", name);
			char *c2 = strrchr(loc, ':');
			assert_non_null(c2);
			*c2 = 0;
			char *c1 = strrchr(loc, ':');
			assert_non_null(c1);
			*c1 = 0;
			fr->line = (uint32_t)strtoul(c1 + 1, NULL, 10);
			snprintf(fr->file, sizeof(fr->file), "%s", base_name(loc));
		}
		if (*p == '\n')
			p++;
	}
	assert_int_equal(k, n);
	free(text);
}

/*
 * Inline chains and file:line of the sampled addresses against llvm-symbolizer (a DWARF
 * reader independent of libdw): the same number of frames, the same inlined callees, the
 * same file (base name) and line in every frame (line 0 means "no line" on either side).
 * The outermost name is not compared here: llvm-symbolizer takes it from DWARF, we from
 * the symbol table (compared with eu-addr2line -S).
 */
static void compare_chains(const char *label, const char *lib, const struct symfile *f,
			   const uint64_t *addrs, size_t n)
{
	struct ref_addr *ref = calloc(n, sizeof(*ref));
	size_t same = 0, frames_differ = 0, names_differ = 0, lines_differ = 0, inlined = 0;

	if (!have_tools("llvm-symbolizer")) {
		print_message("# llvm-symbolizer not here: %s inline chains not compared\n", label);
		free(ref);
		return;
	}
	assert_non_null(ref);
	symbolizer_frames(lib, addrs, n, ref);
	for (size_t i = 0; i < n; i++) {
		struct symfile_frame fr[MAX_FRAMES];
		int got = symfile_lookup(f, addrs[i], fr, MAX_FRAMES);
		bool ok = true;
		inlined += got > 1;
		if (got != ref[i].n) {
			frames_differ++;
			print_message("# %s %#llx: %d frames, llvm-symbolizer %d (innermost %s)\n",
				      label, (unsigned long long)addrs[i], got, ref[i].n,
				      ref[i].f[0].name);
			continue;
		}
		for (int k = 0; k < got; k++) {
			if (k < got - 1 && strncmp(fr[k].name, ref[i].f[k].name,
						   sizeof(ref[i].f[k].name) - 1) != 0) {
				ok = false;
				if (names_differ++ < 5)
					print_message(
						"# %s %#llx frame %d: %s, llvm-symbolizer %s\n",
						label, (unsigned long long)addrs[i], k, fr[k].name,
						ref[i].f[k].name);
			}
			const char *file = fr[k].file ? base_name(fr[k].file) : "??";
			uint32_t line = fr[k].file ? fr[k].line : 0;
			if ((line || ref[i].f[k].line) &&
			    (strcmp(file, ref[i].f[k].file) || line != ref[i].f[k].line)) {
				ok = false;
				if (lines_differ++ < 5)
					print_message("# %s %#llx frame %d: %s:%u, llvm-symbolizer "
						      "%s:%u\n",
						      label, (unsigned long long)addrs[i], k, file,
						      line, ref[i].f[k].file, ref[i].f[k].line);
			}
		}
		same += ok;
	}
	print_message("# %s: frame chains vs llvm-symbolizer on %zu addresses (%zu with inline "
		      "frames): %zu identical (%.1f%%); %zu differ in depth, %zu in an inlined "
		      "name, %zu in a file:line\n",
		      label, n, inlined, same, 100.0 * same / (n ? n : 1), frames_differ,
		      names_differ, lines_differ);
	assert_int_equal(same, n);
	free(ref);
}

struct lib_result {
	size_t sampled, exact, alias, mismatch, missing;
	size_t gaps, gaps_named_dwarf, gaps_wrongly_named;
};

/*
 * Writes the symbol file of `lib` (with `debug`), then compares start + size/2 of up to
 * ~250 function symbols with `eu-addr2line -S` (symbol names, dwfl's choice among aliases)
 * and probes gaps between symbols: where we give a name there, DWARF must have a function.
 */
static void compare_library(const char *label, const char *lib, const char *debug,
			    const char *eu_opts, bool check_chains, struct lib_result *res)
{
	char out[512], buf[1024], *text1, *text2;
	struct symfile_write_stats st;
	struct rsyms syms = { 0 };
	size_t nsample = 0, ngap = 0;

	memset(res, 0, sizeof(*res));
	tpath(out, sizeof(out), "lib.sym");
	write_elf(lib, debug, out, true, true, 0, &st);
	print_message("# %s: %u symtab + %u dynsym + %u DWARF-only functions, %u inline ranges, "
		      "%u line rows, %.1f MiB file; writer %.2f s, peak heap %.1f MiB (sanitizer "
		      "build)\n",
		      label, st.from_symtab, st.from_dynsym, st.from_dwarf, st.inline_ranges,
		      st.line_rows, st.output_bytes / 1048576.0, st.seconds,
		      st.peak_heap_bytes / 1048576.0);
	struct symfile *f = open_verified(out);

	readelf_symbols(lib, &syms);
	if (debug)
		readelf_symbols(debug, &syms);
	qsort(syms.v, syms.n, sizeof(*syms.v), cmp_rsym);

	/* Samples: functions with a size, one per address, evenly spread. */
	uint64_t *sample = calloc(syms.n + 1, sizeof(*sample));
	uint64_t *chain = calloc(4 * syms.n + 1, sizeof(*chain)); /* more points per function */
	size_t nchain = 0;
	uint64_t rnd = 0x9e3779b97f4a7c15ULL;
	uint64_t *gap = calloc(syms.n + 1, sizeof(*gap));
	size_t nfunc = 0;
	for (size_t i = 0; i < syms.n; i++)
		nfunc += syms.v[i].func && syms.v[i].size &&
			 (i == 0 || syms.v[i].addr != syms.v[i - 1].addr);
	size_t step = nfunc > 250 ? nfunc / 250 : 1, seen = 0;
	uint64_t cover_end = 0;
	for (size_t i = 0; i < syms.n; i++) {
		const struct rsym *s = &syms.v[i];
		/* A gap: no symbol of any kind covers [cover_end, s->addr). */
		if (cover_end && s->addr > cover_end + 16 && s->addr - cover_end < (64u << 20) &&
		    ngap < nfunc)
			gap[ngap++] = cover_end + (s->addr - cover_end) / 2;
		if (s->addr + s->size > cover_end || !s->size)
			cover_end = s->addr + s->size > cover_end ? s->addr + s->size : cover_end;
		if (!s->size && s->addr >= cover_end)
			cover_end =
				0; /* a sizeless symbol: whatever follows it is not a clean gap */
		if (!s->func || !s->size || (i && s->addr == syms.v[i - 1].addr))
			continue;
		if (seen++ % step == 0) {
			sample[nsample++] = s->addr + s->size / 2;
			rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
			chain[nchain++] = s->addr;
			chain[nchain++] = s->addr + s->size / 2;
			chain[nchain++] = s->addr + (rnd >> 33) % s->size;
			chain[nchain++] = s->addr + s->size - 1;
		}
	}
	/* At most ~100 gaps, evenly spread. */
	size_t gstep = ngap > 100 ? ngap / 100 : 1, g = 0;
	for (size_t i = 0; i < ngap; i += gstep)
		gap[g++] = gap[i];
	ngap = g;

	char **sym = eu_addr2line(lib, eu_opts, sample, nsample, &text1);
	for (size_t i = 0; i < nsample; i++) {
		struct symfile_frame fr[MAX_FRAMES];
		uint64_t ref_start;
		const char *ref = eu_symbol(sym[2 * i], sample[i], buf, sizeof(buf), &ref_start);
		int n = symfile_lookup(f, sample[i], fr, MAX_FRAMES);
		assert_true(n >= 0);
		res->sampled++;
		if (!ref || n == 0) {
			res->missing += (ref != NULL) != (n > 0);
			if ((ref != NULL) != (n > 0))
				print_message("# %s %#llx: eu-addr2line %s, we %s\n", label,
					      (unsigned long long)sample[i], ref ? ref : "none",
					      n ? fr[n - 1].name : "none");
			continue;
		}
		const struct symfile_frame *outer = &fr[n - 1];
		if (!strcmp(outer->name, ref) && outer->function_start == ref_start) {
			res->exact++;
		} else if (outer->function_start == ref_start &&
			   aliases_at(&syms, ref_start, outer->name, ref)) {
			res->alias++;
		} else {
			res->mismatch++;
			print_message("# %s %#llx: eu-addr2line %s @%#llx, we %s @%#llx\n", label,
				      (unsigned long long)sample[i], ref,
				      (unsigned long long)ref_start, outer->name,
				      (unsigned long long)outer->function_start);
		}
	}
	free(sym);
	free(text1);
	if (check_chains)
		compare_chains(label, lib, f, chain, nchain);

	if (ngap) {
		char **symg = eu_addr2line(lib, eu_opts, gap, ngap, &text1);
		char **fun = eu_addr2line(lib, "-f", gap, ngap, &text2);
		for (size_t i = 0; i < ngap; i++) {
			struct symfile_frame fr[MAX_FRAMES];
			uint64_t ref_start;
			const char *ref =
				eu_symbol(symg[2 * i], gap[i], buf, sizeof(buf), &ref_start);
			int n = symfile_lookup(f, gap[i], fr, MAX_FRAMES);
			res->gaps++;
			if (n == 0)
				continue;
			if (strcmp(fun[2 * i], "??") != 0) {
				res->gaps_named_dwarf++; /* a function only DWARF knows */
			} else if (!ref) {
				res->gaps_wrongly_named++;
				print_message("# %s gap %#llx: we say %s, symbols and DWARF say "
					      "nothing\n",
					      label, (unsigned long long)gap[i], fr[n - 1].name);
			}
		}
		free(symg);
		free(fun);
		free(text1);
		free(text2);
	}
	print_message(
		"# %s: %zu sampled addresses vs eu-addr2line: %zu same name, %zu alias at "
		"the same address, %zu different, %zu named by one side only "
		"(agreement %.1f%%); %zu gap addresses: %zu named from DWARF, %zu wrongly named\n",
		label, res->sampled, res->exact, res->alias, res->mismatch, res->missing,
		100.0 * (res->exact + res->alias) / (res->sampled ? res->sampled : 1), res->gaps,
		res->gaps_named_dwarf, res->gaps_wrongly_named);
	assert_true(res->sampled >= (nfunc < 200 ? nfunc : 200));
	assert_int_equal(res->mismatch, 0);
	assert_int_equal(res->missing, 0);
	assert_int_equal(res->gaps_wrongly_named, 0);
	free(sample);
	free(chain);
	free(gap);
	rsyms_free(&syms);
	symfile_close(f);
}

#define LIBC "/usr/lib/x86_64-linux-gnu/libc.so.6"
#define LIBPYTHON "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
#define LIBNCCL "/usr/local/cuda/lib/libnccl.so.2"
#define LIBCUBLASLT "/usr/local/cuda/lib/libcublasLt.so.13"

static bool have_library(const char *path)
{
	if (file_exists(path) && have_tools("eu-addr2line readelf"))
		return true;
	print_message("# %s or eu-addr2line/readelf not here: skipped\n", path);
	return false;
}

/* libc's separate debug file (libc6-dbg), from its build ID. */
static bool libc_debug_file(char *out, size_t len)
{
	char *id = sh_out("readelf -n " LIBC " | awk '/Build ID/ {print $3}'");
	id[strcspn(id, "\n")] = 0;
	snprintf(out, len, "/usr/lib/debug/.build-id/%.2s/%s.debug", id, id + 2);
	free(id);
	return file_exists(out);
}

static void test_libc(void **state)
{
	struct lib_result r;
	char dbg[512];
	(void)state;

	if (!have_library(LIBC))
		skip();
	/* Without its debug file: .dynsym only (eu-addr2line told not to look for it). */
	compare_library("libc.so.6 (.dynsym only)", LIBC, NULL, "-S --debuginfo-path=/nonexistent",
			false, &r);
	if (!libc_debug_file(dbg, sizeof(dbg))) {
		print_message("# libc6-dbg not installed: libc with its debug file skipped\n");
		return;
	}
	/* With it (compressed DWARF, .symtab with locals). */
	compare_library("libc.so.6 + debug file", LIBC, dbg, "-S", true, &r);
}

static void test_libpython(void **state)
{
	struct lib_result r;
	(void)state;

	if (!have_library(LIBPYTHON))
		skip();
	compare_library("libpython3.11", LIBPYTHON, NULL, "-S --debuginfo-path=/nonexistent", true,
			&r);
}

static void test_libnccl(void **state)
{
	struct lib_result r;
	(void)state;

	if (!have_library(LIBNCCL))
		skip();
	compare_library("libnccl.so.2", LIBNCCL, NULL, "-S --debuginfo-path=/nonexistent", true,
			&r);
}

/* 540 MB, no .symtab, 184 dynamic functions over ~110 MB of code: bounded memory, and the
 * huge unnamed stretches stay unnamed. */
static void test_libcublaslt(void **state)
{
	const uint64_t bound = 64ULL << 20;
	struct symfile_write_stats st;
	struct rsyms syms = { 0 };
	char out[512];
	(void)state;

	if (!have_library(LIBCUBLASLT))
		skip();
	tpath(out, sizeof(out), "cublaslt.sym");
	write_elf(LIBCUBLASLT, NULL, out, true, true, bound, &st);
	print_message("# libcublasLt.so.13: %u dynsym functions, writer %.2f s, peak heap %.2f MiB "
		      "(budget %.0f MiB), file %.1f KiB\n",
		      st.from_dynsym, st.seconds, st.peak_heap_bytes / 1048576.0,
		      bound / 1048576.0, st.output_bytes / 1024.0);
	assert_true(st.peak_heap_bytes < bound);
	assert_true(st.from_dynsym > 100);
	assert_int_equal(st.from_symtab, 0);
	struct symfile *f = open_verified(out);

	readelf_symbols(LIBCUBLASLT, &syms);
	qsort(syms.v, syms.n, sizeof(*syms.v), cmp_rsym);
	size_t checked = 0, gaps = 0;
	for (size_t i = 0; i < syms.n; i++) {
		const struct rsym *s = &syms.v[i];
		char want[512];
		if (!s->func || !s->size)
			continue;
		struct symfile_frame fr[MAX_FRAMES];
		int n = symfile_lookup(f, s->addr + s->size / 2, fr, MAX_FRAMES);
		assert_int_equal(n, 1);
		/* readelf shows dynamic names with their version; the raw name has none. */
		assert_string_equal(fr[0].name, unversioned(s->name, want, sizeof(want)));
		checked++;
		/* The stretch after it, up to the next symbol, is nobody's. */
		if (i + 1 < syms.n && syms.v[i + 1].addr > s->addr + s->size + 64) {
			expect_name(f, s->addr + s->size + 32, NULL);
			expect_name(f, syms.v[i + 1].addr - 1, NULL);
			gaps++;
		}
	}
	/* Deep in .text, megabytes from any symbol. */
	expect_name(f, 0x1000000, NULL);
	expect_name(f, 0x5000000, NULL);
	print_message("# libcublasLt: %zu dynamic functions found by name, %zu gaps between them "
		      "give 0 frames\n",
		      checked, gaps);
	assert_true(checked > 100);
	rsyms_free(&syms);
	symfile_close(f);
}

static void test_memory_budget(void **state)
{
	struct symfile_write_stats full, nolines, bare, st;
	struct symfile_write_options o = { .executable_path = LIBPYTHON, .inline_frames = true,
					   .line_table = true };
	struct symfile_info info, ri;
	char out[512], err[512];
	(void)state;

	if (!have_library(LIBPYTHON))
		skip();
	/* What each part costs: everything, no lines, neither lines nor inline ranges. */
	tpath(out, sizeof(out), "budget_nolines.sym");
	write_elf(LIBPYTHON, NULL, out, true, false, 0, &nolines);
	tpath(out, sizeof(out), "budget_bare.sym");
	write_elf(LIBPYTHON, NULL, out, false, false, 0, &bare);
	tpath(out, sizeof(out), "budget_full.sym");
	write_elf(LIBPYTHON, NULL, out, true, true, 0, &full);
	assert_false(full.lines_dropped || full.inlines_dropped);
	print_message("# libpython writer peak heap: %.2f MiB with everything, %.2f MiB without "
		      "lines, %.2f MiB without lines and inline ranges\n",
		      full.peak_heap_bytes / 1048576.0, nolines.peak_heap_bytes / 1048576.0,
		      bare.peak_heap_bytes / 1048576.0);
	assert_true(bare.peak_heap_bytes < nolines.peak_heap_bytes);
	assert_true(nolines.peak_heap_bytes + (1 << 20) < full.peak_heap_bytes);
	struct symfile *ref = open_verified(out);

	/* Room for everything but the line rows: they go, inline ranges stay complete. */
	uint64_t budget = nolines.peak_heap_bytes + (1 << 20);
	tpath(out, sizeof(out), "budget_lines.sym");
	write_elf(LIBPYTHON, NULL, out, true, true, budget, &st);
	print_message("# budget %.2f MiB: peak %.2f MiB, lines dropped %d, inline dropped %d\n",
		      budget / 1048576.0, st.peak_heap_bytes / 1048576.0, st.lines_dropped,
		      st.inlines_dropped);
	assert_true(st.peak_heap_bytes <= budget);
	assert_true(st.lines_dropped);
	assert_false(st.inlines_dropped);
	assert_int_equal(st.line_rows, 0);
	assert_int_equal(st.inline_ranges, full.inline_ranges);
	struct symfile *f = open_verified(out);
	symfile_info_get(f, &info);
	assert_int_equal(info.line_rows, 0);

	/* Room for the functions only: inline ranges go too, after the lines. */
	budget = bare.peak_heap_bytes + (1 << 20);
	if (budget >= nolines.peak_heap_bytes)
		budget = nolines.peak_heap_bytes - 1;
	tpath(out, sizeof(out), "budget_min.sym");
	write_elf(LIBPYTHON, NULL, out, true, true, budget, &st);
	print_message("# budget %.2f MiB: peak %.2f MiB, lines dropped %d, inline dropped %d\n",
		      budget / 1048576.0, st.peak_heap_bytes / 1048576.0, st.lines_dropped,
		      st.inlines_dropped);
	assert_true(st.peak_heap_bytes <= budget);
	assert_true(st.lines_dropped && st.inlines_dropped);
	struct symfile *g = open_verified(out);
	symfile_info_get(g, &info);
	assert_int_equal(info.inline_ranges, 0);

	/* The functions are the same in all three. */
	symfile_info_get(ref, &ri);
	assert_int_equal(info.functions, ri.functions);
	for (uint64_t a = 0xf5000; a < 0x331000; a += 0x101) {
		struct symfile_frame fa[MAX_FRAMES], fb[MAX_FRAMES], fc[MAX_FRAMES];
		int na = symfile_lookup(ref, a, fa, MAX_FRAMES);
		int nb = symfile_lookup(f, a, fb, MAX_FRAMES);
		int nc = symfile_lookup(g, a, fc, MAX_FRAMES);
		assert_int_equal(na, nb); /* the inline frames are all still in f */
		assert_int_equal(na > 0, nc > 0);
		if (na > 0) {
			assert_string_equal(fa[na - 1].name, fc[nc - 1].name);
			assert_int_equal(nc, 1);
			/* No LINES: the innermost frame has no position (outer frames
			 * keep theirs: the call sites recorded with the inline ranges). */
			assert_null(fb[0].file);
			assert_null(fc[0].file);
		}
	}
	symfile_close(g);
	symfile_close(f);
	symfile_close(ref);

	/* Too small even for the functions: -SYSOM_ELIMIT, nothing written. */
	o.memory_budget = 64 << 10;
	tpath(out, sizeof(out), "budget_tiny.sym");
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -SYSOM_ELIMIT);
	assert_non_null(strstr(err, "budget"));
	assert_false(file_exists(out));
	assert_int_equal(leftover_temporaries(), 0);
}

/* The budget policy of the writer's counted heap, through the builder directly: line rows
 * go first, then inline ranges, then the writer fails with -SYSOM_ELIMIT. */
static void test_budget_policy(void **state)
{
	struct symb b;
	char err[256];
	(void)state;

	symb__init(&b, 1 << 20, err, sizeof(err));
	b.inline_on = b.lines_on = true;
	for (uint32_t i = 0; i < 4096; i++) {
		assert_int_equal(symb__add_line(&b, i * 4, 0, i), 0);
		assert_int_equal(symb__add_inline(&b, i * 4, i * 4 + 2, 0, SYMF_NONE, 1, 0), 0);
	}
	assert_true(b.lines_on && b.inline_on);
	assert_true(b.mem_current > 4096 * (sizeof(struct symb_line) + sizeof(struct symb_inline)));
	/* Another allocation that does not fit: the line rows yield, the inline ranges stay. */
	uint64_t room = b.budget - b.mem_current;
	void *p = symb__alloc(&b, room + 1);
	assert_non_null(p);
	assert_true(b.lines_dropped && !b.lines_on);
	assert_false(b.inline_dropped);
	assert_true(b.inline_on);
	assert_int_equal(b.nlines, 0);
	assert_int_equal(b.ninl, 4096);
	/* More: the inline ranges yield too. */
	void *q = symb__alloc(&b, b.budget - b.mem_current + 1);
	assert_non_null(q);
	assert_true(b.inline_dropped && !b.inline_on);
	/* Adding to dropped parts is a no-op, not an error. */
	assert_int_equal(symb__add_line(&b, 1, 0, 1), 0);
	assert_int_equal(symb__add_inline(&b, 1, 2, 0, SYMF_NONE, 1, 0), 0);
	assert_int_equal(b.nlines + b.ninl, 0);
	/* Nothing left to give up: the limit. */
	assert_null(symb__alloc(&b, b.budget));
	assert_int_equal(b.error, -SYSOM_ELIMIT);
	assert_non_null(strstr(err, "budget"));
	assert_true(b.mem_peak <= b.budget);
	symb__free(&b, q);
	symb__free(&b, p);
	symb__destroy(&b);
	assert_int_equal(b.mem_current, 0); /* every counted byte was given back */
}

static void test_write_errors(void **state)
{
	struct symfile_write_options o = { 0 };
	struct symfile_write_stats st;
	char out[512], notelf[512], err[512];
	(void)state;

	tpath(out, sizeof(out), "err.sym");
	tpath(notelf, sizeof(notelf), "notelf");
	write_all(notelf, "hello, not an ELF file\n", 23);
	assert_int_equal(symfile_write(NULL, out, &st, err, sizeof(err)), -EINVAL);
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -EINVAL);
	o.executable_path = "/nonexistent/lib.so";
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/lib.so"));
	o.executable_path = notelf;
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -SYSOM_ENOTELF);
	o.executable_path = tmpdir;
	assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -EISDIR);
	if (file_exists(LIBCUBLASLT) || file_exists(LIBC)) {
		o.executable_path = file_exists(LIBC) ? LIBC : LIBCUBLASLT;
		o.debug_path = notelf;
		assert_int_equal(symfile_write(&o, out, &st, err, sizeof(err)), -SYSOM_ENOTELF);
		o.debug_path = NULL;
		assert_int_equal(symfile_write(&o, "/nonexistent-dir/x.sym", &st, err, sizeof(err)),
				 -ENOENT);
	}
	assert_false(file_exists(out));
	assert_int_equal(leftover_temporaries(), 0);
}

/* ------------------------------------------------------------------------------------------ */

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (getenv("SYSOM_KEEP_TMP"))
		return 0;
	return sh("rm -rf %s", tmpdir) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_round_trip),
		cmocka_unit_test(test_size_inferred),
		cmocka_unit_test(test_overlapping_symbols),
		cmocka_unit_test(test_write_table_errors),
		cmocka_unit_test(test_truncated_files),
		cmocka_unit_test(test_header_and_versions),
		cmocka_unit_test(test_verify_catches_inconsistencies),
		cmocka_unit_test(test_compiled_program),
		cmocka_unit_test(test_separate_debug_file),
		cmocka_unit_test(test_compressed_and_dwarf4),
		cmocka_unit_test(test_32bit_elf),
		cmocka_unit_test(test_alias_rules),
		cmocka_unit_test(test_plt_stubs),
		cmocka_unit_test(test_sparse_symbols),
		cmocka_unit_test(test_libc),
		cmocka_unit_test(test_libpython),
		cmocka_unit_test(test_libnccl),
		cmocka_unit_test(test_libcublaslt),
		cmocka_unit_test(test_memory_budget),
		cmocka_unit_test(test_budget_policy),
		cmocka_unit_test(test_write_errors),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
