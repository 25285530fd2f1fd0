/* SPDX-License-Identifier: Apache-2.0 */
/* Identity of executable files: GNU build ID notes (libelf), else a content hash. */
#ifndef SYSOM_COMMON_ELF_BUILDID_H
#define SYSOM_COMMON_ELF_BUILDID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"

/* An object identity: kind SYSOM_OBJECT_ELF (GNU build ID, 3..64 bytes) or
 * SYSOM_OBJECT_FILE_HASH (16-byte XXH3-128 of the file's content). */
struct sysom_build_id {
	uint8_t kind;
	uint8_t len;
	uint8_t bytes[SYSOM_BUILD_ID_MAX];
};

/* Largest file the content-hash fallback reads (bigger files get -SYSOM_ELIMIT). */
#define SYSOM_CONTENT_HASH_MAX_BYTES (4ULL << 30)

/*
 * Reads the GNU build ID note (NT_GNU_BUILD_ID, owner "GNU") of the ELF file open on `fd`,
 * looking in PT_NOTE segments and SHT_NOTE sections; the fd's offset is not used or moved.
 * Returns 0, -SYSOM_ENOTELF (not ELF), -SYSOM_ENOBUILDID (ELF without a valid note: length
 * outside 3..64), -SYSOM_ECORRUPT (malformed headers/notes) or -errno. Never reads outside
 * the file, whatever its headers claim.
 * Details: a valid build ID anywhere wins over corruption elsewhere; with none, a corrupt
 * note area gives -SYSOM_ECORRUPT. Header tables that lie (even partly) beyond the file give
 * -SYSOM_ECORRUPT; more than 65536 sections or segments, or no build ID and a note area
 * over 4 MiB (skipped), give -SYSOM_ELIMIT. A directory is -EISDIR, another non-regular
 * file -EINVAL. `out` is written only on success (kind SYSOM_OBJECT_ELF).
 */
int sysom_elf_build_id(int fd, struct sysom_build_id *out);

struct Elf;

/*
 * True when the ELF header of `elf` (libelf, opened with ELF_C_READ) names section headers that
 * libelf could not read: the file is shorter than its header says (truncated while being read,
 * or being rewritten). libelf then reports no sections at all rather than an error, so readers
 * call this and treat the file as a failed read (-EIO).
 */
bool sysom_elf_sections_missing(struct Elf *elf);

/*
 * Opens `fd` (borrowed) for reading its sections with libelf's pread reader (ELF_C_READ, never
 * mapped: a file truncated while it is read gives read errors, not SIGBUS). On success *out
 * is the handle (the caller elf_end()s it). Returns 0, -SYSOM_ECORRUPT (not an ELF file), -EIO
 * (its section headers could not be read: sysom_elf_sections_missing) or -ENOSYS (libelf
 * unusable).
 */
int sysom_elf_open_read(int fd, struct Elf **out);

/*
 * XXH3-128 of the whole file on `fd` (streamed with pread, bounded memory); kind
 * SYSOM_OBJECT_FILE_HASH, 16 bytes (canonical big-endian). Returns 0, -SYSOM_ELIMIT (over
 * SYSOM_CONTENT_HASH_MAX_BYTES), -EISDIR / -EINVAL (not a regular file) or -errno.
 */
int sysom_file_content_hash(int fd, struct sysom_build_id *out);

/*
 * The build ID when the file has one, else its content hash: a file that is not ELF, is
 * corrupt, over a limit or has no valid note is identified by its bytes. Returns 0 or the
 * errors of sysom_file_content_hash (I/O errors reading the ELF are returned as they are).
 */
int sysom_object_identity(int fd, struct sysom_build_id *out);

/*
 * Parses raw ELF notes (as in /sys/kernel/notes or /sys/module/NAME/notes/.note.gnu.build-id)
 * and returns the GNU build ID. Returns 0, -SYSOM_ENOBUILDID or -SYSOM_ECORRUPT.
 * Notes are in host byte order, 4-byte aligned; the last note may lack its padding and up
 * to 11 zero bytes may trail. `out` gets kind SYSOM_OBJECT_ELF (callers relabel kernel and
 * module identities). NULL `notes` with `len` > 0 is -EINVAL.
 */
int sysom_build_id_from_notes(const void *notes, size_t len, struct sysom_build_id *out);

/*
 * Reads the build ID of an ELF image in memory (e.g. the vDSO). Same errors as above. The
 * image is borrowed and only read (it may be read-only memory), never beyond `len`; images
 * over 1 GiB give -SYSOM_ELIMIT.
 */
int sysom_elf_build_id_memory(const void *image, size_t len, struct sysom_build_id *out);

/* Lower-case hex of the identity's bytes into `out` (needs 2 * len + 1 bytes; a smaller
 * `outlen` gets the whole bytes that fit, always NUL-terminated when outlen > 0). */
void sysom_build_id_hex(const struct sysom_build_id *id, char *out, size_t outlen);

/* Parses 6..128 hex digits (even count, either case) into an identity of `kind` (1 ..
 * SYSOM_OBJECT_KIND_MAX); 0 or -EINVAL. `out` is written only on success. */
int sysom_build_id_parse_hex(const char *hex, uint8_t kind, struct sysom_build_id *out);

#endif
