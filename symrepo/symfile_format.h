/* SPDX-License-Identifier: Apache-2.0 */
/* On-disk layout of symbol files (version 1): offsets, record sizes, flags and limits. */
#ifndef SYSOM_SYMREPO_SYMFILE_FORMAT_H
#define SYSOM_SYMREPO_SYMFILE_FORMAT_H

/*
 * Everything is little-endian; docs/symbol-format.md is the reference. Summary:
 *
 * Header (SYMF_HEADER_SIZE = 128 bytes in version 1.0)
 *   OFFSET SIZE FIELD
 *   0      8    magic "SYSOMSYM"
 *   8      2    major version (1): readers reject any other
 *   10     2    minor version (0): compatible additions only
 *   12     4    header size (>= 128, multiple of 8): the section table starts here
 *   16     4    section count (<= SYMF_MAX_SECTIONS)
 *   20     4    section table entry size (>= 32)
 *   24     8    file size: must equal the size of the file
 *   32     4    flags (SYMF_HDR_*); unknown bits are ignored
 *   36     4    functions from .symtab
 *   40     4    functions from .dynsym
 *   44     4    functions from DWARF only
 *   48     1    build ID kind (SYSOM_OBJECT_*)
 *   49     1    build ID length (1..64)
 *   50     64   build ID bytes, zero beyond the length
 *   114    14   reserved, zero
 *
 * Section table entry (32 bytes)
 *   0      4    type (SYMF_SEC_*); readers skip types they do not know
 *   4      4    record size (minimum per type; ADDRESSES exactly 8; STRINGS 1)
 *   8      8    offset from the start of the file (multiple of 8)
 *   16     8    size in bytes (= count * record size)
 *   24     4    count of records
 *   28     4    flags, zero
 */

#define SYMF_MAGIC "SYSOMSYM"
#define SYMF_MAGIC_LEN 8
#define SYMF_MAJOR 1
#define SYMF_MINOR 0
#define SYMF_HEADER_SIZE 128
#define SYMF_SECTION_ENTRY_SIZE 32
#define SYMF_MAX_SECTIONS 64
#define SYMF_ALIGN 8

/* Header field offsets. */
#define SYMF_HDR_MAGIC 0
#define SYMF_HDR_MAJOR 8
#define SYMF_HDR_MINOR 10
#define SYMF_HDR_HEADER_SIZE 12
#define SYMF_HDR_SECTION_COUNT 16
#define SYMF_HDR_SECTION_ENTRY 20
#define SYMF_HDR_FILE_SIZE 24
#define SYMF_HDR_FLAGS 32
#define SYMF_HDR_FROM_SYMTAB 36
#define SYMF_HDR_FROM_DYNSYM 40
#define SYMF_HDR_FROM_DWARF 44
#define SYMF_HDR_BUILD_ID_KIND 48
#define SYMF_HDR_BUILD_ID_LEN 49
#define SYMF_HDR_BUILD_ID 50

/* Header flags (informational; lookups rely on the sections present). */
#define SYMF_HDR_HAS_INLINE 0x1u     /* INLINE section written */
#define SYMF_HDR_HAS_LINES 0x2u      /* LINES section written */
#define SYMF_HDR_INLINE_DROPPED 0x4u /* inline ranges dropped by the writer's memory budget */
#define SYMF_HDR_LINES_DROPPED 0x8u  /* line rows dropped by the writer's memory budget */

/* Section table entry field offsets. */
#define SYMF_SEC_TYPE 0
#define SYMF_SEC_RECORD_SIZE 4
#define SYMF_SEC_OFFSET 8
#define SYMF_SEC_SIZE 16
#define SYMF_SEC_COUNT 24
#define SYMF_SEC_FLAGS 28

/* Section types. */
enum symf_section_type {
	SYMF_SEC_SEGMENTS = 1,  /* executable PT_LOAD segments: file offset → vaddr */
	SYMF_SEC_ADDRESSES = 2, /* sorted u64 range starts (binary searched) */
	SYMF_SEC_RANGES = 3,    /* parallel to ADDRESSES: size, function, flags */
	SYMF_SEC_FUNCTIONS = 4, /* names (raw, demangled), extent, flags */
	SYMF_SEC_INLINE = 5,    /* inlined call ranges, sorted (start, depth), parent links */
	SYMF_SEC_LINES = 6,     /* sorted address → file, line */
	SYMF_SEC_FILES = 7,     /* source file paths */
	SYMF_SEC_STRINGS = 8,   /* NUL-terminated strings; offset 0 is "" */
	SYMF_SEC_TYPE_MAX = SYMF_SEC_STRINGS,
};

/* SEGMENTS record (24 bytes): u64 file offset, u64 vaddr, u64 size (file-backed bytes). */
#define SYMF_SEGMENT_SIZE 24
#define SYMF_SEGMENT_FILE_OFFSET 0
#define SYMF_SEGMENT_VADDR 8
#define SYMF_SEGMENT_BYTES 16
#define SYMF_MAX_SEGMENTS 1024

/* ADDRESSES record (8 bytes): u64 start of range i. Strictly increasing. */
#define SYMF_ADDRESS_SIZE 8

/* RANGES record (16 bytes): u64 size, u32 function index, u32 flags. */
#define SYMF_RANGE_SIZE 16
#define SYMF_RANGE_BYTES 0
#define SYMF_RANGE_FUNCTION 8
#define SYMF_RANGE_FLAGS 12
#define SYMF_RANGE_SIZE_INFERRED 0x1u /* symbol without size, bounded by its neighbours */
#define SYMF_RANGE_FLAGS_KNOWN 0x1u

/* FUNCTIONS record (32 bytes): u64 start, u64 size, u32 name, u32 demangled (0: none),
 * u32 flags, u32 reserved. */
#define SYMF_FUNCTION_SIZE 32
#define SYMF_FUNCTION_START 0
#define SYMF_FUNCTION_BYTES 8
#define SYMF_FUNCTION_NAME 16
#define SYMF_FUNCTION_DEMANGLED 20
#define SYMF_FUNCTION_FLAGS 24
#define SYMF_FN_SOURCE_MASK 0x3u  /* where the function came from: */
#define SYMF_FN_SOURCE_TABLE 0x0u /*   symfile_write_table input */
#define SYMF_FN_SOURCE_SYMTAB 0x1u
#define SYMF_FN_SOURCE_DYNSYM 0x2u
#define SYMF_FN_SOURCE_DWARF 0x3u
#define SYMF_FN_INLINE_ONLY 0x4u   /* name holder for inlined callees (start = size = 0) */
#define SYMF_FN_SIZE_INFERRED 0x8u /* size inferred from the neighbours */
#define SYMF_FN_FLAGS_KNOWN 0xfu

/* INLINE record (32 bytes): u64 start, u32 size, u32 parent (SYMF_NONE for depth 0),
 * u32 function (the inlined callee), u32 call file (SYMF_NONE: unknown), u32 call line,
 * u16 depth, u16 reserved. Sorted by (start, depth); a parent precedes its children and
 * contains them; ranges of one depth never overlap within a parent (a laminar family). */
#define SYMF_INLINE_SIZE 32
#define SYMF_INLINE_START 0
#define SYMF_INLINE_BYTES 8
#define SYMF_INLINE_PARENT 12
#define SYMF_INLINE_FUNCTION 16
#define SYMF_INLINE_CALL_FILE 20
#define SYMF_INLINE_CALL_LINE 24
#define SYMF_INLINE_DEPTH 28
#define SYMF_MAX_INLINE_DEPTH 64

/* LINES record (16 bytes): u64 address, u32 file (SYMF_NONE: end of a sequence, no line
 * info from here), u32 line. Addresses strictly increasing. */
#define SYMF_LINE_SIZE 16
#define SYMF_LINE_ADDR 0
#define SYMF_LINE_FILE 8
#define SYMF_LINE_LINE 12

/* FILES record (4 bytes): u32 path string offset. */
#define SYMF_FILE_SIZE 4

#define SYMF_NONE UINT32_MAX

/* Limits (the writer never exceeds them; readers refuse files beyond them). */
#define SYMF_MAX_COUNT (1u << 30)            /* records of one section */
#define SYMF_MAX_STRINGS_BYTES (0xfffffff0u) /* string offsets are u32 */
#define SYMF_MAX_FILE_BYTES (16ULL << 30)   /* symbol files read by symfile_open */
#define SYMF_MAX_NAME_BYTES 65535u          /* longer names are truncated by the writer */

#endif
