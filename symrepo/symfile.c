/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol file reader: validates the header and section table at open, then searches in place. */
#include "symrepo/symfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/error.h"
#include "symrepo/symfile_format.h"

/* One section as validated at open: `count` records of `stride` bytes at `p`. */
struct section {
	const uint8_t *p;
	uint64_t offset; /* in the file, for error reports */
	uint64_t count;
	uint32_t stride;
	bool present;
};

struct symfile {
	const uint8_t *data;
	size_t len;
	bool mapped; /* data is our mmap (symfile_open), unmapped at close */
	struct sysom_build_id build_id;
	uint32_t flags;
	uint32_t from_symtab, from_dynsym, from_dwarf;
	struct section segments, addresses, ranges, functions, inlines, lines, files, strings;
};

/* Minimum record size per known section type (index: type). */
static const uint32_t min_record_size[SYMF_SEC_TYPE_MAX + 1] = {
	[SYMF_SEC_SEGMENTS] = SYMF_SEGMENT_SIZE, [SYMF_SEC_ADDRESSES] = SYMF_ADDRESS_SIZE,
	[SYMF_SEC_RANGES] = SYMF_RANGE_SIZE,     [SYMF_SEC_FUNCTIONS] = SYMF_FUNCTION_SIZE,
	[SYMF_SEC_INLINE] = SYMF_INLINE_SIZE,    [SYMF_SEC_LINES] = SYMF_LINE_SIZE,
	[SYMF_SEC_FILES] = SYMF_FILE_SIZE,       [SYMF_SEC_STRINGS] = 1,
};

static const char *const section_names[SYMF_SEC_TYPE_MAX + 1] = {
	[SYMF_SEC_SEGMENTS] = "SEGMENTS", [SYMF_SEC_ADDRESSES] = "ADDRESSES",
	[SYMF_SEC_RANGES] = "RANGES",     [SYMF_SEC_FUNCTIONS] = "FUNCTIONS",
	[SYMF_SEC_INLINE] = "INLINE",     [SYMF_SEC_LINES] = "LINES",
	[SYMF_SEC_FILES] = "FILES",       [SYMF_SEC_STRINGS] = "STRINGS",
};

__attribute__((format(printf, 4, 5))) static int fail(struct symfile_error *err, int code,
						      uint64_t offset, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->offset = offset;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return code;
}

static inline const uint8_t *record(const struct section *s, uint64_t i)
{
	return s->p + i * s->stride;
}

static inline uint64_t record_offset(const struct section *s, uint64_t i)
{
	return s->offset + i * s->stride;
}

/* A string of the STRINGS section, or NULL when `off` is outside it. Every such string is
 * NUL-terminated because open checked that the section's last byte is NUL. */
static inline const char *string_at(const struct symfile *f, uint32_t off)
{
	return off < f->strings.count ? (const char *)f->strings.p + off : NULL;
}

static struct section *section_slot(struct symfile *f, uint32_t type)
{
	switch (type) {
	case SYMF_SEC_SEGMENTS:
		return &f->segments;
	case SYMF_SEC_ADDRESSES:
		return &f->addresses;
	case SYMF_SEC_RANGES:
		return &f->ranges;
	case SYMF_SEC_FUNCTIONS:
		return &f->functions;
	case SYMF_SEC_INLINE:
		return &f->inlines;
	case SYMF_SEC_LINES:
		return &f->lines;
	case SYMF_SEC_FILES:
		return &f->files;
	case SYMF_SEC_STRINGS:
		return &f->strings;
	default:
		return NULL;
	}
}

/* Validates the header and section table of [data, data + len) into `f`. O(sections). */
static int parse(struct symfile *f, const uint8_t *data, size_t len, struct symfile_error *err)
{
	uint64_t sec_start[SYMF_MAX_SECTIONS], sec_end[SYMF_MAX_SECTIONS];

	if (len < SYMF_MAGIC_LEN || memcmp(data, SYMF_MAGIC, SYMF_MAGIC_LEN) != 0)
		return fail(err, -SYSOM_ECORRUPT, 0, "not a symbol file (bad magic)");
	if (len < SYMF_HDR_MINOR + 2)
		return fail(err, -SYSOM_ECORRUPT, len, "file truncated in the header");
	uint16_t major = load_le16(data + SYMF_HDR_MAJOR);
	if (major != SYMF_MAJOR)
		return fail(err, -SYSOM_EVERSION, SYMF_HDR_MAJOR,
			    "symbol file major version %u, this reader knows %u", major,
			    SYMF_MAJOR);
	if (len < SYMF_HEADER_SIZE)
		return fail(err, -SYSOM_ECORRUPT, len, "file truncated in the header (%zu bytes)",
			    len);
	uint32_t header_size = load_le32(data + SYMF_HDR_HEADER_SIZE);
	uint32_t nsec = load_le32(data + SYMF_HDR_SECTION_COUNT);
	uint32_t entry_size = load_le32(data + SYMF_HDR_SECTION_ENTRY);
	uint64_t file_size = load_le64(data + SYMF_HDR_FILE_SIZE);

	if (file_size != len)
		return fail(err, -SYSOM_ECORRUPT, SYMF_HDR_FILE_SIZE,
			    "header says %llu bytes, file has %zu (truncated or padded)",
			    (unsigned long long)file_size, len);
	if (header_size < SYMF_HEADER_SIZE || header_size % SYMF_ALIGN || header_size > len)
		return fail(err, -SYSOM_ECORRUPT, SYMF_HDR_HEADER_SIZE, "bad header size %u",
			    header_size);
	if (nsec > SYMF_MAX_SECTIONS)
		return fail(err, -SYSOM_ECORRUPT, SYMF_HDR_SECTION_COUNT,
			    "%u sections (limit %u)", nsec, SYMF_MAX_SECTIONS);
	if (entry_size < SYMF_SECTION_ENTRY_SIZE || entry_size % SYMF_ALIGN || entry_size > 1024)
		return fail(err, -SYSOM_ECORRUPT, SYMF_HDR_SECTION_ENTRY,
			    "bad section entry size %u", entry_size);
	uint64_t table_end = (uint64_t)header_size + (uint64_t)nsec * entry_size;
	if (table_end > len)
		return fail(err, -SYSOM_ECORRUPT, header_size, "section table beyond the file");

	f->flags = load_le32(data + SYMF_HDR_FLAGS);
	f->from_symtab = load_le32(data + SYMF_HDR_FROM_SYMTAB);
	f->from_dynsym = load_le32(data + SYMF_HDR_FROM_DYNSYM);
	f->from_dwarf = load_le32(data + SYMF_HDR_FROM_DWARF);
	uint8_t kind = data[SYMF_HDR_BUILD_ID_KIND], idlen = data[SYMF_HDR_BUILD_ID_LEN];
	if (kind < 1 || kind > SYSOM_OBJECT_KIND_MAX)
		return fail(err, -SYSOM_ECORRUPT, SYMF_HDR_BUILD_ID_KIND, "bad build ID kind %u",
			    kind);
	if (idlen < 1 || idlen > SYSOM_BUILD_ID_MAX)
		return fail(err, -SYSOM_ECORRUPT, SYMF_HDR_BUILD_ID_LEN, "bad build ID length %u",
			    idlen);
	memset(&f->build_id, 0, sizeof(f->build_id));
	f->build_id.kind = kind;
	f->build_id.len = idlen;
	memcpy(f->build_id.bytes, data + SYMF_HDR_BUILD_ID, idlen);

	for (uint32_t i = 0; i < nsec; i++) {
		uint64_t at = header_size + (uint64_t)i * entry_size;
		const uint8_t *e = data + at;
		uint32_t type = load_le32(e + SYMF_SEC_TYPE);
		uint32_t rsize = load_le32(e + SYMF_SEC_RECORD_SIZE);
		uint64_t off = load_le64(e + SYMF_SEC_OFFSET);
		uint64_t size = load_le64(e + SYMF_SEC_SIZE);
		uint32_t count = load_le32(e + SYMF_SEC_COUNT);

		if (off % SYMF_ALIGN || off < table_end || off > len || size > len - off)
			return fail(err, -SYSOM_ECORRUPT, at,
				    "section %u (type %u) at %llu+%llu outside the file", i, type,
				    (unsigned long long)off, (unsigned long long)size);
		for (uint32_t j = 0; j < i; j++) {
			if (size && sec_end[j] > sec_start[j] && off < sec_end[j] &&
			    sec_start[j] < off + size)
				return fail(err, -SYSOM_ECORRUPT, at,
					    "section %u overlaps section %u", i, j);
		}
		sec_start[i] = off;
		sec_end[i] = off + size;

		struct section *s = section_slot(f, type);
		if (!s)
			continue; /* a later minor version's section: skipped */
		if (s->present)
			return fail(err, -SYSOM_ECORRUPT, at, "second %s section",
				    section_names[type]);
		if (rsize < min_record_size[type] ||
		    ((type == SYMF_SEC_ADDRESSES || type == SYMF_SEC_STRINGS) &&
		     rsize != min_record_size[type]) ||
		    rsize > 4096)
			return fail(err, -SYSOM_ECORRUPT, at + SYMF_SEC_RECORD_SIZE,
				    "%s: bad record size %u", section_names[type], rsize);
		if ((uint64_t)count * rsize != size)
			return fail(err, -SYSOM_ECORRUPT, at + SYMF_SEC_SIZE,
				    "%s: %u records of %u bytes do not fill %llu bytes",
				    section_names[type], count, rsize, (unsigned long long)size);
		if (count > SYMF_MAX_COUNT && type != SYMF_SEC_STRINGS)
			return fail(err, -SYSOM_ECORRUPT, at + SYMF_SEC_COUNT,
				    "%s: %u records (limit %u)", section_names[type], count,
				    SYMF_MAX_COUNT);
		s->p = data + off;
		s->offset = off;
		s->count = count;
		s->stride = rsize;
		s->present = true;
	}

	static const uint32_t required[] = { SYMF_SEC_SEGMENTS, SYMF_SEC_ADDRESSES, SYMF_SEC_RANGES,
					     SYMF_SEC_FUNCTIONS, SYMF_SEC_STRINGS };
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		if (!section_slot(f, required[i])->present)
			return fail(err, -SYSOM_ECORRUPT, header_size, "no %s section",
				    section_names[required[i]]);
	}
	if (f->addresses.count != f->ranges.count)
		return fail(err, -SYSOM_ECORRUPT, f->ranges.offset,
			    "%llu addresses but %llu ranges",
			    (unsigned long long)f->addresses.count,
			    (unsigned long long)f->ranges.count);
	if (f->segments.count > SYMF_MAX_SEGMENTS)
		return fail(err, -SYSOM_ECORRUPT, f->segments.offset, "%llu segments (limit %u)",
			    (unsigned long long)f->segments.count, SYMF_MAX_SEGMENTS);
	if (f->strings.count < 1 || f->strings.count > SYMF_MAX_STRINGS_BYTES ||
	    f->strings.p[0] != 0 || f->strings.p[f->strings.count - 1] != 0)
		return fail(err, -SYSOM_ECORRUPT, f->strings.offset,
			    "STRINGS must start and end with a NUL byte");
	return 0;
}

int symfile_open_memory(const void *data, size_t len, struct symfile **out,
			struct symfile_error *err)
{
	struct symfile *f = NULL;
	int rc;

	if (!out || (!data && len))
		return fail(err, -EINVAL, 0, "invalid arguments");
	f = calloc(1, sizeof(*f));
	if (!f) {
		rc = fail(err, -ENOMEM, 0, "out of memory");
		goto cleanup;
	}
	f->data = data;
	f->len = len;
	rc = parse(f, data, len, err);
	if (rc < 0)
		goto cleanup;
	*out = f;
	f = NULL;
cleanup:
	free(f);
	return rc;
}

int symfile_open(const char *path, struct symfile **out, struct symfile_error *err)
{
	struct symfile *f = NULL;
	void *map = MAP_FAILED;
	struct stat st;
	size_t len = 0;
	int fd = -1, rc;

	if (!path || !out)
		return fail(err, -EINVAL, 0, "invalid arguments");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = fail(err, -errno, 0, "open %s: %s", path, strerror(errno));
		goto cleanup;
	}
	if (fstat(fd, &st) < 0) {
		rc = fail(err, -errno, 0, "fstat %s: %s", path, strerror(errno));
		goto cleanup;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = fail(err, -EISDIR, 0, "%s is a directory", path);
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = fail(err, -EINVAL, 0, "%s is not a regular file", path);
		goto cleanup;
	}
	if ((uint64_t)st.st_size > SYMF_MAX_FILE_BYTES) {
		rc = fail(err, -SYSOM_ELIMIT, 0, "%s: %lld bytes (limit %llu)", path,
			  (long long)st.st_size, (unsigned long long)SYMF_MAX_FILE_BYTES);
		goto cleanup;
	}
	len = (size_t)st.st_size;
	if (len < SYMF_HEADER_SIZE) {
		/* Too short to map usefully; parse() reports what is wrong with the bytes. */
		uint8_t small[SYMF_HEADER_SIZE];
		ssize_t n = pread(fd, small, len, 0);
		if (n < 0) {
			rc = fail(err, -errno, 0, "read %s: %s", path, strerror(errno));
			goto cleanup;
		}
		struct symfile probe = { 0 };
		rc = parse(&probe, small, (size_t)n, err);
		if (rc == 0) /* impossible below the header size; keep the contract anyway */
			rc = fail(err, -SYSOM_ECORRUPT, 0, "file too short");
		goto cleanup;
	}
	map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		rc = fail(err, -errno, 0, "mmap %s: %s", path, strerror(errno));
		goto cleanup;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		rc = fail(err, -ENOMEM, 0, "out of memory");
		goto cleanup;
	}
	f->data = map;
	f->len = len;
	f->mapped = true;
	rc = parse(f, map, len, err);
	if (rc < 0)
		goto cleanup;
	*out = f;
	f = NULL;
	map = MAP_FAILED;
cleanup:
	free(f);
	if (map != MAP_FAILED)
		munmap(map, len);
	if (fd >= 0)
		close(fd);
	return rc;
}

void symfile_close(struct symfile *f)
{
	if (!f)
		return;
	if (f->mapped)
		munmap((void *)f->data, f->len);
	free(f);
}

void symfile_info_get(const struct symfile *f, struct symfile_info *out)
{
	memset(out, 0, sizeof(*out));
	out->build_id = f->build_id;
	out->segments = (uint32_t)f->segments.count;
	out->functions = (uint32_t)f->addresses.count;
	out->inline_ranges = (uint32_t)f->inlines.count;
	out->line_rows = (uint32_t)f->lines.count;
	out->files = (uint32_t)f->files.count;
	out->string_bytes = f->strings.count;
	out->file_bytes = f->len;
	out->from_symtab = f->from_symtab;
	out->from_dynsym = f->from_dynsym;
	out->from_dwarf = f->from_dwarf;
}

int symfile_offset_to_vaddr(const struct symfile *f, uint64_t file_offset, uint64_t *vaddr)
{
	for (uint64_t i = 0; i < f->segments.count; i++) {
		const uint8_t *s = record(&f->segments, i);
		uint64_t off = load_le64(s + SYMF_SEGMENT_FILE_OFFSET);
		uint64_t size = load_le64(s + SYMF_SEGMENT_BYTES);

		if (file_offset >= off && file_offset - off < size) {
			*vaddr = load_le64(s + SYMF_SEGMENT_VADDR) + (file_offset - off);
			return 0;
		}
	}
	return -ENOENT;
}

/* Number of records of `s` whose u64 at `field` is <= key (records sorted by it). */
static uint64_t upper_bound(const struct section *s, size_t field, uint64_t key)
{
	uint64_t lo = 0, hi = s->count;

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (load_le64(record(s, mid) + field) <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The source position of `vaddr` from LINES: 0 with the file and line set (NULL and 0
 * without line info), or -SYSOM_ECORRUPT. */
static int line_at(const struct symfile *f, uint64_t vaddr, const char **file, uint32_t *line)
{
	uint64_t n = upper_bound(&f->lines, SYMF_LINE_ADDR, vaddr);

	*file = NULL;
	*line = 0;
	if (n == 0)
		return 0;
	const uint8_t *row = record(&f->lines, n - 1);
	uint32_t fi = load_le32(row + SYMF_LINE_FILE);
	if (fi == SYMF_NONE)
		return 0;
	if (fi >= f->files.count)
		return -SYSOM_ECORRUPT;
	const char *path = string_at(f, load_le32(record(&f->files, fi)));
	if (!path)
		return -SYSOM_ECORRUPT;
	*file = path;
	*line = load_le32(row + SYMF_LINE_LINE);
	return 0;
}

/* Path of file index `fi` (SYMF_NONE: NULL) into *out; -SYSOM_ECORRUPT when out of bounds. */
static int file_at(const struct symfile *f, uint32_t fi, const char **out)
{
	*out = NULL;
	if (fi == SYMF_NONE)
		return 0;
	if (fi >= f->files.count)
		return -SYSOM_ECORRUPT;
	*out = string_at(f, load_le32(record(&f->files, fi)));
	return *out ? 0 : -SYSOM_ECORRUPT;
}

/* Names of function `fi`; -SYSOM_ECORRUPT when a reference is out of bounds. */
static int function_names(const struct symfile *f, uint32_t fi, const char **name,
			  const char **demangled, uint64_t *start, uint64_t *size)
{
	if (fi >= f->functions.count)
		return -SYSOM_ECORRUPT;
	const uint8_t *fn = record(&f->functions, fi);
	uint32_t dm = load_le32(fn + SYMF_FUNCTION_DEMANGLED);
	*name = string_at(f, load_le32(fn + SYMF_FUNCTION_NAME));
	*demangled = dm ? string_at(f, dm) : NULL;
	if (!*name || (dm && !*demangled))
		return -SYSOM_ECORRUPT;
	if (start) {
		*start = load_le64(fn + SYMF_FUNCTION_START);
		*size = load_le64(fn + SYMF_FUNCTION_BYTES);
	}
	return 0;
}

/*
 * The inlined calls covering `vaddr`, innermost first, as INLINE indices into chain[]
 * (up to SYMF_MAX_INLINE_DEPTH). INLINE is sorted by (start, depth) and laminar, so the
 * innermost range covering vaddr is an ancestor-or-self of the last range starting at or
 * before vaddr: one binary search, then a walk of at most the nesting depth.
 */
static int inline_chain(const struct symfile *f, uint64_t vaddr, uint32_t *chain)
{
	uint64_t n = upper_bound(&f->inlines, SYMF_INLINE_START, vaddr);
	uint32_t j, steps = 0, count = 0;
	bool found = false;

	if (n == 0)
		return 0;
	j = (uint32_t)(n - 1);
	for (;;) {
		const uint8_t *r = record(&f->inlines, j);
		uint64_t start = load_le64(r + SYMF_INLINE_START);
		uint32_t size = load_le32(r + SYMF_INLINE_BYTES);
		uint32_t parent = load_le32(r + SYMF_INLINE_PARENT);

		if (found || vaddr - start < size) {
			found = true;
			if (count == SYMF_MAX_INLINE_DEPTH)
				return -SYSOM_ECORRUPT;
			chain[count++] = j;
		}
		if (parent == SYMF_NONE)
			break;
		if (parent >= j || ++steps > 2 * SYMF_MAX_INLINE_DEPTH)
			return -SYSOM_ECORRUPT;
		j = parent;
	}
	return (int)count;
}

int symfile_lookup(const struct symfile *f, uint64_t vaddr, struct symfile_frame *frames, int max)
{
	uint32_t chain[SYMF_MAX_INLINE_DEPTH];
	const char *file;
	uint32_t line;
	int nchain = 0, written = 0, rc;

	if (!f || !frames || max < 1)
		return -EINVAL;
	uint64_t n = upper_bound(&f->addresses, 0, vaddr);
	if (n == 0)
		return 0;
	uint64_t i = n - 1;
	uint64_t start = load_le64(record(&f->addresses, i));
	const uint8_t *r = record(&f->ranges, i);
	if (vaddr - start >= load_le64(r + SYMF_RANGE_BYTES))
		return 0; /* a gap: never the neighbour's name */

	if (f->inlines.count) {
		nchain = inline_chain(f, vaddr, chain);
		if (nchain < 0)
			return nchain;
	}
	rc = line_at(f, vaddr, &file, &line);
	if (rc < 0)
		return rc;

	/* Inlined frames: the callee at each level; the location of frame k + 1 is the call
	 * site recorded on frame k's range. */
	for (int k = 0; k < nchain && written < max; k++) {
		const uint8_t *ir = record(&f->inlines, chain[k]);
		struct symfile_frame *fr = &frames[written];

		rc = function_names(f, load_le32(ir + SYMF_INLINE_FUNCTION), &fr->name,
				    &fr->demangled, NULL, NULL);
		if (rc < 0)
			return rc;
		fr->function_start = load_le64(ir + SYMF_INLINE_START);
		fr->function_size = load_le32(ir + SYMF_INLINE_BYTES);
		fr->file = file;
		fr->line = file ? line : 0;
		fr->inlined = true;
		fr->size_inferred = false;
		written++;
		rc = file_at(f, load_le32(ir + SYMF_INLINE_CALL_FILE), &file);
		if (rc < 0)
			return rc;
		line = load_le32(ir + SYMF_INLINE_CALL_LINE);
	}
	if (written < max) {
		struct symfile_frame *fr = &frames[written];

		rc = function_names(f, load_le32(r + SYMF_RANGE_FUNCTION), &fr->name,
				    &fr->demangled, &fr->function_start, &fr->function_size);
		if (rc < 0)
			return rc;
		fr->file = file;
		fr->line = file ? line : 0;
		fr->inlined = false;
		fr->size_inferred =
			(load_le32(r + SYMF_RANGE_FLAGS) & SYMF_RANGE_SIZE_INFERRED) != 0;
		written++;
	}
	return written;
}

/* ------------------------------------------------------------------------------------------ */
/* Exhaustive verification */

static int verify_segments(const struct symfile *f, struct symfile_error *err)
{
	uint64_t prev_end = 0;

	for (uint64_t i = 0; i < f->segments.count; i++) {
		const uint8_t *s = record(&f->segments, i);
		uint64_t off = load_le64(s + SYMF_SEGMENT_FILE_OFFSET);
		uint64_t va = load_le64(s + SYMF_SEGMENT_VADDR);
		uint64_t size = load_le64(s + SYMF_SEGMENT_BYTES);

		if (size == 0 || off + size < off || va + size < va || (i && off < prev_end))
			return fail(err, -SYSOM_ECORRUPT, record_offset(&f->segments, i),
				    "segment %llu: empty, overflowing or out of order",
				    (unsigned long long)i);
		prev_end = off + size;
	}
	return 0;
}

static int verify_functions(const struct symfile *f, struct symfile_error *err)
{
	for (uint64_t i = 0; i < f->functions.count; i++) {
		const uint8_t *fn = record(&f->functions, i);
		uint64_t start = load_le64(fn + SYMF_FUNCTION_START);
		uint64_t size = load_le64(fn + SYMF_FUNCTION_BYTES);
		uint32_t name = load_le32(fn + SYMF_FUNCTION_NAME);
		uint32_t dm = load_le32(fn + SYMF_FUNCTION_DEMANGLED);
		uint32_t flags = load_le32(fn + SYMF_FUNCTION_FLAGS);
		uint64_t at = record_offset(&f->functions, i);

		if (!string_at(f, name) || (dm && !string_at(f, dm)))
			return fail(err, -SYSOM_ECORRUPT, at,
				    "function %llu: name outside STRINGS", (unsigned long long)i);
		if (flags & ~SYMF_FN_FLAGS_KNOWN)
			return fail(err, -SYSOM_ECORRUPT, at + SYMF_FUNCTION_FLAGS,
				    "function %llu: unknown flags %#x", (unsigned long long)i,
				    flags);
		if (start + size < start ||
		    ((flags & SYMF_FN_INLINE_ONLY) && (start || size)))
			return fail(err, -SYSOM_ECORRUPT, at, "function %llu: bad extent",
				    (unsigned long long)i);
	}
	return 0;
}

static int verify_ranges(const struct symfile *f, struct symfile_error *err)
{
	uint64_t prev_end = 0;

	for (uint64_t i = 0; i < f->addresses.count; i++) {
		uint64_t start = load_le64(record(&f->addresses, i));
		const uint8_t *r = record(&f->ranges, i);
		uint64_t size = load_le64(r + SYMF_RANGE_BYTES);
		uint32_t fi = load_le32(r + SYMF_RANGE_FUNCTION);
		uint32_t flags = load_le32(r + SYMF_RANGE_FLAGS);
		uint64_t at = record_offset(&f->ranges, i);

		if (i && start < prev_end)
			return fail(err, -SYSOM_ECORRUPT, record_offset(&f->addresses, i),
				    "range %llu: start %#llx not after the previous range's end",
				    (unsigned long long)i, (unsigned long long)start);
		if (size == 0 || start + size < start)
			return fail(err, -SYSOM_ECORRUPT, at, "range %llu: bad size",
				    (unsigned long long)i);
		if (flags & ~SYMF_RANGE_FLAGS_KNOWN)
			return fail(err, -SYSOM_ECORRUPT, at + SYMF_RANGE_FLAGS,
				    "range %llu: unknown flags %#x", (unsigned long long)i, flags);
		if (fi >= f->functions.count)
			return fail(err, -SYSOM_ECORRUPT, at + SYMF_RANGE_FUNCTION,
				    "range %llu: function %u out of bounds", (unsigned long long)i,
				    fi);
		const uint8_t *fn = record(&f->functions, fi);
		uint64_t fstart = load_le64(fn + SYMF_FUNCTION_START);
		uint64_t fsize = load_le64(fn + SYMF_FUNCTION_BYTES);
		if ((load_le32(fn + SYMF_FUNCTION_FLAGS) & SYMF_FN_INLINE_ONLY) || start < fstart ||
		    start + size > fstart + fsize)
			return fail(err, -SYSOM_ECORRUPT, at,
				    "range %llu: outside its function %u", (unsigned long long)i,
				    fi);
		prev_end = start + size;
	}
	return 0;
}

static int verify_inlines(const struct symfile *f, struct symfile_error *err)
{
	uint32_t stack[SYMF_MAX_INLINE_DEPTH];
	uint64_t stack_end[SYMF_MAX_INLINE_DEPTH];
	uint64_t prev_start = 0;
	uint32_t sp = 0, prev_depth = 0;

	if (f->inlines.count >= SYMF_NONE)
		return fail(err, -SYSOM_ECORRUPT, f->inlines.offset, "too many inline ranges");
	for (uint32_t i = 0; i < f->inlines.count; i++) {
		const uint8_t *r = record(&f->inlines, i);
		uint64_t start = load_le64(r + SYMF_INLINE_START);
		uint32_t size = load_le32(r + SYMF_INLINE_BYTES);
		uint32_t parent = load_le32(r + SYMF_INLINE_PARENT);
		uint32_t fi = load_le32(r + SYMF_INLINE_FUNCTION);
		uint32_t file = load_le32(r + SYMF_INLINE_CALL_FILE);
		uint32_t depth = load_le16(r + SYMF_INLINE_DEPTH);
		uint64_t at = record_offset(&f->inlines, i);
		uint64_t end = start + size;

		if (size == 0 || end < start || fi >= f->functions.count ||
		    (file != SYMF_NONE && file >= f->files.count) || depth >= SYMF_MAX_INLINE_DEPTH)
			return fail(err, -SYSOM_ECORRUPT, at,
				    "inline range %u: bad size, function, file or depth", i);
		if (i && (start < prev_start || (start == prev_start && depth < prev_depth)))
			return fail(err, -SYSOM_ECORRUPT, at,
				    "inline range %u: not sorted by (start, depth)", i);
		while (sp > 0 && stack_end[sp - 1] <= start)
			sp--;
		/* Laminar: what is still open here must be exactly the chain of ancestors. */
		if (depth != sp || (depth == 0 && parent != SYMF_NONE) ||
		    (depth > 0 && (parent != stack[sp - 1] || end > stack_end[sp - 1])))
			return fail(err, -SYSOM_ECORRUPT, at,
				    "inline range %u: not nested inside its parent (depth %u)", i,
				    depth);
		stack[sp] = i;
		stack_end[sp] = end;
		sp++;
		prev_start = start;
		prev_depth = depth;
	}
	return 0;
}

static int verify_lines(const struct symfile *f, struct symfile_error *err)
{
	for (uint64_t i = 0; i < f->files.count; i++) {
		if (!string_at(f, load_le32(record(&f->files, i))))
			return fail(err, -SYSOM_ECORRUPT, record_offset(&f->files, i),
				    "file %llu: path outside STRINGS", (unsigned long long)i);
	}
	for (uint64_t i = 0; i < f->lines.count; i++) {
		const uint8_t *row = record(&f->lines, i);
		uint32_t file = load_le32(row + SYMF_LINE_FILE);

		if (i && load_le64(row) <= load_le64(record(&f->lines, i - 1)))
			return fail(err, -SYSOM_ECORRUPT, record_offset(&f->lines, i),
				    "line row %llu: addresses not increasing",
				    (unsigned long long)i);
		if (file != SYMF_NONE && file >= f->files.count)
			return fail(err, -SYSOM_ECORRUPT, record_offset(&f->lines, i),
				    "line row %llu: file %u out of bounds", (unsigned long long)i,
				    file);
	}
	return 0;
}

int symfile_verify(const struct symfile *f, struct symfile_error *err)
{
	int rc;

	for (uint32_t i = SYMF_HDR_BUILD_ID + f->build_id.len; i < SYMF_HEADER_SIZE; i++) {
		if (f->data[i] != 0)
			return fail(err, -SYSOM_ECORRUPT, i, "reserved header byte is not zero");
	}
	rc = verify_segments(f, err);
	if (rc == 0)
		rc = verify_functions(f, err);
	if (rc == 0)
		rc = verify_ranges(f, err);
	if (rc == 0)
		rc = verify_inlines(f, err);
	if (rc == 0)
		rc = verify_lines(f, err);
	return rc;
}
