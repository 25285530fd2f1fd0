/* SPDX-License-Identifier: Apache-2.0 */
/* Object identity: GNU build ID from ELF notes (libelf, hostile-input safe) or XXH3-128 of content. */
#include "common/elf_buildid.h"

#include <elf.h>
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/hex.h"

/* Limits on what a file's headers may ask of us (libelf allocates per header). */
#define ELF_MAX_SECTIONS 65536u       /* section headers; linked objects have far fewer */
#define ELF_MAX_SEGMENTS 65536u       /* program headers */
#define NOTES_MAX_BYTES (4u << 20)    /* one PT_NOTE segment or SHT_NOTE section */
#define HASH_CHUNK_BYTES (1u << 20)   /* pread size of the content hash */
#define MEMORY_IMAGE_MAX_BYTES (1ULL << 30)

#define NOTE_ALIGN4(x) (((uint64_t)(x) + 3) & ~(uint64_t)3)

static pthread_once_t elf_version_once = PTHREAD_ONCE_INIT;
static bool elf_version_ok;

static void elf_version_init(void)
{
	elf_version_ok = elf_version(EV_CURRENT) != EV_NONE;
}

/* Where the bytes come from: a file (pread, never moving its offset) or a memory image. */
struct source {
	int fd;             /* -1 for a memory image */
	const uint8_t *mem; /* the image when fd < 0 */
	uint64_t size;      /* real size: fstat's st_size or the image length */
};

/* Reads exactly `len` bytes at `off`; anything beyond `size` is -SYSOM_ECORRUPT. */
static int source_read(const struct source *src, uint64_t off, void *buf, size_t len)
{
	if (off > src->size || len > src->size - off)
		return -SYSOM_ECORRUPT;
	if (src->fd < 0) {
		memcpy(buf, src->mem + off, len);
		return 0;
	}
	ssize_t n = sysom_pread_full(src->fd, buf, len, off);
	if (n < 0)
		return (int)n;
	return (size_t)n < len ? -SYSOM_ECORRUPT : 0; /* short: the file shrank under us */
}

static uint16_t rd16(const uint8_t *p, bool big)
{
	return big ? (uint16_t)(p[0] << 8 | p[1]) : (uint16_t)(p[1] << 8 | p[0]);
}

static uint32_t rd32(const uint8_t *p, bool big)
{
	return big ? (uint32_t)rd16(p, true) << 16 | rd16(p + 2, true)
		   : (uint32_t)rd16(p + 2, false) << 16 | rd16(p, false);
}

static uint64_t rd64(const uint8_t *p, bool big)
{
	return big ? (uint64_t)rd32(p, true) << 32 | rd32(p + 4, true)
		   : (uint64_t)rd32(p + 4, false) << 32 | rd32(p, false);
}

/* True when `count` entries of `entsize` bytes at `off` lie inside the source. */
static bool table_fits(const struct source *src, uint64_t off, uint64_t count, uint64_t entsize)
{
	if (off > src->size)
		return false;
	return count <= (src->size - off) / entsize;
}

/*
 * Validates the ELF header and the extent of the program and section header tables against
 * the real size, before libelf sees the file: libelf allocates per section header and reads
 * whatever the header points at, so nothing it is given may point outside the file.
 */
static int check_elf_header(const struct source *src)
{
	uint8_t h[sizeof(Elf64_Ehdr)];
	int err;

	if (src->size < SELFMAG)
		return -SYSOM_ENOTELF;
	err = source_read(src, 0, h, SELFMAG);
	if (err)
		return err;
	if (memcmp(h, ELFMAG, SELFMAG) != 0)
		return -SYSOM_ENOTELF;
	if (src->size < EI_NIDENT)
		return -SYSOM_ECORRUPT;
	err = source_read(src, 0, h, EI_NIDENT);
	if (err)
		return err;
	if ((h[EI_CLASS] != ELFCLASS32 && h[EI_CLASS] != ELFCLASS64) ||
	    (h[EI_DATA] != ELFDATA2LSB && h[EI_DATA] != ELFDATA2MSB) || h[EI_VERSION] != EV_CURRENT)
		return -SYSOM_ECORRUPT;

	bool is64 = h[EI_CLASS] == ELFCLASS64;
	bool big = h[EI_DATA] == ELFDATA2MSB;
	size_t ehsize = is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr);
	if (src->size < ehsize)
		return -SYSOM_ECORRUPT;
	err = source_read(src, 0, h, ehsize);
	if (err)
		return err;

	uint64_t phoff, shoff;
	uint32_t phentsize, phnum, shentsize, shnum;
	uint64_t shdr_size = is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
	uint64_t phdr_size = is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
	if (is64) {
		phoff = rd64(h + offsetof(Elf64_Ehdr, e_phoff), big);
		shoff = rd64(h + offsetof(Elf64_Ehdr, e_shoff), big);
		phentsize = rd16(h + offsetof(Elf64_Ehdr, e_phentsize), big);
		phnum = rd16(h + offsetof(Elf64_Ehdr, e_phnum), big);
		shentsize = rd16(h + offsetof(Elf64_Ehdr, e_shentsize), big);
		shnum = rd16(h + offsetof(Elf64_Ehdr, e_shnum), big);
	} else {
		phoff = rd32(h + offsetof(Elf32_Ehdr, e_phoff), big);
		shoff = rd32(h + offsetof(Elf32_Ehdr, e_shoff), big);
		phentsize = rd16(h + offsetof(Elf32_Ehdr, e_phentsize), big);
		phnum = rd16(h + offsetof(Elf32_Ehdr, e_phnum), big);
		shentsize = rd16(h + offsetof(Elf32_Ehdr, e_shentsize), big);
		shnum = rd16(h + offsetof(Elf32_Ehdr, e_shnum), big);
	}

	/* Section header table; with e_shnum == 0 the count is in section 0's sh_size and with
	 * e_phnum == PN_XNUM the segment count in its sh_info (extended numbering). */
	uint64_t sections = shnum;
	uint64_t segments = phnum;
	if (shoff == 0) {
		if (shnum != 0 || phnum == PN_XNUM)
			return -SYSOM_ECORRUPT;
	} else {
		if (shentsize != shdr_size || !table_fits(src, shoff, 1, shdr_size))
			return -SYSOM_ECORRUPT;
		if (shnum == 0 || phnum == PN_XNUM) {
			uint8_t s[sizeof(Elf64_Shdr)];
			err = source_read(src, shoff, s, (size_t)shdr_size);
			if (err)
				return err;
			if (shnum == 0)
				sections = is64 ? rd64(s + offsetof(Elf64_Shdr, sh_size), big)
						: rd32(s + offsetof(Elf32_Shdr, sh_size), big);
			if (phnum == PN_XNUM)
				segments = is64 ? rd32(s + offsetof(Elf64_Shdr, sh_info), big)
						: rd32(s + offsetof(Elf32_Shdr, sh_info), big);
		}
		if (!table_fits(src, shoff, sections, shdr_size))
			return -SYSOM_ECORRUPT;
		if (sections > ELF_MAX_SECTIONS)
			return -SYSOM_ELIMIT;
	}
	if (segments != 0) {
		if (phentsize != phdr_size || phoff == 0 || !table_fits(src, phoff, segments, phdr_size))
			return -SYSOM_ECORRUPT;
		if (segments > ELF_MAX_SEGMENTS)
			return -SYSOM_ELIMIT;
	}
	return 0;
}

static void set_build_id(struct sysom_build_id *out, const void *desc, size_t len)
{
	memset(out, 0, sizeof(*out));
	out->kind = SYSOM_OBJECT_ELF;
	out->len = (uint8_t)len;
	memcpy(out->bytes, desc, len);
}

static bool is_gnu_build_id(uint32_t type, uint32_t namesz, const void *name)
{
	return type == NT_GNU_BUILD_ID && namesz == sizeof(ELF_NOTE_GNU) &&
	       memcmp(name, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0;
}

static bool build_id_len_ok(uint64_t len)
{
	return len >= 3 && len <= SYSOM_BUILD_ID_MAX;
}

/* What a walk over a file's note areas found so far. */
struct note_walk {
	bool found;
	bool corrupt; /* a note area was out of bounds or its notes malformed */
	bool limited; /* a note area was larger than NOTES_MAX_BYTES and skipped */
};

/* Walks the notes of one chunk already read by libelf; sets w->found on a valid build ID. */
static void walk_note_data(Elf_Data *data, struct note_walk *w, struct sysom_build_id *out)
{
	size_t offset = 0, next, name_off, desc_off;
	GElf_Nhdr nh;

	/* gelf_getnote bounds namesz/descsz (with padding) by d_size and advances by at least
	 * the 12-byte header, so this loop ends within d_size / 12 steps. */
	while ((next = gelf_getnote(data, offset, &nh, &name_off, &desc_off)) > 0) {
		const uint8_t *buf = data->d_buf;
		if (is_gnu_build_id(nh.n_type, nh.n_namesz, buf + name_off) &&
		    build_id_len_ok(nh.n_descsz)) {
			set_build_id(out, buf + desc_off, nh.n_descsz);
			w->found = true;
			return;
		}
		offset = next;
	}
	if (offset != data->d_size)
		w->corrupt = true;
}

/* Reads and walks the note area [off, off + size) of the file, aligned to `align`. */
static void walk_note_area(Elf *elf, const struct source *src, uint64_t off, uint64_t size,
			   uint64_t align, struct note_walk *w, struct sysom_build_id *out)
{
	if (size == 0)
		return; /* an empty note area holds nothing */
	if (off > src->size || size > src->size - off) {
		w->corrupt = true;
		return;
	}
	if (size > NOTES_MAX_BYTES) {
		w->limited = true;
		return;
	}
	/* 8-aligned areas hold GNU property notes (ELF_T_NHDR8); some toolchains mark 4-aligned
	 * notes 8, so an 8-aligned walk that finds nothing is retried 4-aligned, and the area
	 * is corrupt only when neither reading makes sense of it. */
	struct note_walk w8 = { 0 }, w4 = { 0 };
	Elf_Data *data;
	if (align == 8) {
		data = elf_getdata_rawchunk(elf, (int64_t)off, (size_t)size, ELF_T_NHDR8);
		if (!data)
			w8.corrupt = true;
		else
			walk_note_data(data, &w8, out);
		if (w8.found) {
			w->found = true;
			return;
		}
	}
	data = elf_getdata_rawchunk(elf, (int64_t)off, (size_t)size, ELF_T_NHDR);
	if (!data)
		w4.corrupt = true;
	else
		walk_note_data(data, &w4, out);
	if (w4.found)
		w->found = true;
	if (!w4.found && w4.corrupt && (align != 8 || w8.corrupt))
		w->corrupt = true;
}

/* Looks for the build ID in PT_NOTE segments, then in SHT_NOTE sections. */
static int build_id_from_elf(Elf *elf, const struct source *src, struct sysom_build_id *out)
{
	struct note_walk w = { 0 };
	struct sysom_build_id id;
	size_t phnum = 0;

	if (elf_kind(elf) != ELF_K_ELF)
		return -SYSOM_ECORRUPT;

	if (elf_getphdrnum(elf, &phnum) != 0) {
		w.corrupt = true;
		phnum = 0;
	}
	for (size_t i = 0; i < phnum && !w.found; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph)) {
			w.corrupt = true;
			break;
		}
		if (ph.p_type == PT_NOTE)
			walk_note_area(elf, src, ph.p_offset, ph.p_filesz, ph.p_align, &w, &id);
	}

	Elf_Scn *scn = NULL;
	while (!w.found && (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh)) {
			w.corrupt = true;
			break;
		}
		if (sh.sh_type != SHT_NOTE || (sh.sh_flags & SHF_COMPRESSED))
			continue;
		walk_note_area(elf, src, sh.sh_offset, sh.sh_size, sh.sh_addralign, &w, &id);
	}

	if (w.found) {
		*out = id;
		return 0;
	}
	if (w.corrupt)
		return -SYSOM_ECORRUPT;
	if (w.limited)
		return -SYSOM_ELIMIT;
	return -SYSOM_ENOBUILDID;
}

/* Regular files only: a directory (or pipe, socket, device) has no ELF content to read. */
static int regular_file_size(int fd, uint64_t *size)
{
	struct stat st;

	if (fd < 0)
		return -EBADF;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*size = (uint64_t)st.st_size;
	return 0;
}

int sysom_elf_build_id(int fd, struct sysom_build_id *out)
{
	struct source src = { .fd = fd };
	struct sysom_build_id id;
	Elf *elf = NULL;
	int err;

	err = regular_file_size(fd, &src.size);
	if (err)
		goto cleanup;
	err = check_elf_header(&src);
	if (err)
		goto cleanup;
	pthread_once(&elf_version_once, elf_version_init);
	if (!elf_version_ok) {
		err = -ENOSYS;
		goto cleanup;
	}
	/* ELF_C_READ: libelf reads with pread (no mmap, so a file truncated meanwhile gives a
	 * read error instead of SIGBUS) and never moves the fd's offset. */
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf) {
		err = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	err = build_id_from_elf(elf, &src, &id);
	if (err)
		goto cleanup;
	*out = id;
cleanup:
	elf_end(elf);
	return err;
}

int sysom_elf_build_id_memory(const void *image, size_t len, struct sysom_build_id *out)
{
	struct source src = { .fd = -1, .mem = image, .size = len };
	struct sysom_build_id id;
	Elf *elf = NULL;
	int err;

	if (!image && len) {
		err = -EINVAL;
		goto cleanup;
	}
	err = check_elf_header(&src);
	if (err)
		goto cleanup;
	if (len > MEMORY_IMAGE_MAX_BYTES) {
		err = -SYSOM_ELIMIT;
		goto cleanup;
	}
	pthread_once(&elf_version_once, elf_version_init);
	if (!elf_version_ok) {
		err = -ENOSYS;
		goto cleanup;
	}
	/*
	 * elf_memory takes a char * but opens the image ELF_C_READ_MMAP_PRIVATE: reading
	 * headers and raw chunks only reads the image (byte-swapped or misaligned data is
	 * copied to libelf's own memory first), so no copy is made. The tests run it on
	 * read-only pages (the vDSO, mprotect'ed images) and libFuzzer checks that the const
	 * input is left unchanged.
	 */
	elf = elf_memory((char *)(uintptr_t)image, len);
	if (!elf) {
		err = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	err = build_id_from_elf(elf, &src, &id);
	if (err)
		goto cleanup;
	*out = id;
cleanup:
	elf_end(elf);
	return err;
}

int sysom_build_id_from_notes(const void *notes, size_t len, struct sysom_build_id *out)
{
	const uint8_t *p = notes;
	uint64_t off = 0;
	bool corrupt = false;

	if (!notes && len)
		return -EINVAL;
	while (len - off >= 12) {
		uint32_t namesz, descsz, type;
		memcpy(&namesz, p + off, 4);
		memcpy(&descsz, p + off + 4, 4);
		memcpy(&type, p + off + 8, 4);

		uint64_t name_off = off + 12;
		if (namesz > len - name_off) {
			corrupt = true;
			break;
		}
		uint64_t desc_off = name_off + NOTE_ALIGN4(namesz);
		if (desc_off > len || descsz > len - desc_off) {
			corrupt = true;
			break;
		}
		if (is_gnu_build_id(type, namesz, p + name_off) && build_id_len_ok(descsz)) {
			set_build_id(out, p + desc_off, descsz);
			return 0;
		}
		/* The last note's descriptor padding may be missing at the very end. */
		uint64_t next = desc_off + NOTE_ALIGN4(descsz);
		off = next < len ? next : len;
	}
	/* Fewer than 12 bytes left: zero padding is fine, anything else is a cut-off note. */
	for (uint64_t i = off; i < len && !corrupt; i++)
		corrupt = p[i] != 0;
	return corrupt ? -SYSOM_ECORRUPT : -SYSOM_ENOBUILDID;
}

int sysom_file_content_hash(int fd, struct sysom_build_id *out)
{
	XXH3_state_t *state = NULL;
	uint8_t *buf = NULL;
	uint64_t size, off = 0;
	int err;

	err = regular_file_size(fd, &size);
	if (err)
		goto cleanup;
	if (size > SYSOM_CONTENT_HASH_MAX_BYTES) {
		err = -SYSOM_ELIMIT;
		goto cleanup;
	}
	/* Small files need no full-size chunk (the fd may still grow: reads go on to EOF). */
	size_t chunk = size < HASH_CHUNK_BYTES ? (size_t)size + 4096 : HASH_CHUNK_BYTES;
	state = XXH3_createState();
	buf = malloc(chunk);
	if (!state || !buf) {
		err = -ENOMEM;
		goto cleanup;
	}
	XXH3_128bits_reset(state);
	/* Read to EOF rather than to st_size, but never past the limit if the file grows. */
	for (;;) {
		ssize_t n = pread(fd, buf, chunk, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			goto cleanup;
		}
		if (n == 0)
			break;
		off += (uint64_t)n;
		if (off > SYSOM_CONTENT_HASH_MAX_BYTES) {
			err = -SYSOM_ELIMIT;
			goto cleanup;
		}
		XXH3_128bits_update(state, buf, (size_t)n);
	}

	XXH128_canonical_t canon;
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(state));
	memset(out, 0, sizeof(*out));
	out->kind = SYSOM_OBJECT_FILE_HASH;
	out->len = sizeof(canon.digest);
	memcpy(out->bytes, canon.digest, sizeof(canon.digest));
cleanup:
	free(buf);
	XXH3_freeState(state);
	return err;
}

int sysom_object_identity(int fd, struct sysom_build_id *out)
{
	int err = sysom_elf_build_id(fd, out);

	switch (err) {
	case -SYSOM_ENOBUILDID:
	case -SYSOM_ENOTELF:
	case -SYSOM_ECORRUPT:
	case -SYSOM_ELIMIT:
		/* No usable build ID: the bytes themselves are still an identity. */
		return sysom_file_content_hash(fd, out);
	default:
		return err;
	}
}

void sysom_build_id_hex(const struct sysom_build_id *id, char *out, size_t outlen)
{
	size_t len = id->len <= SYSOM_BUILD_ID_MAX ? id->len : SYSOM_BUILD_ID_MAX;

	if (outlen == 0)
		return;
	if (len > (outlen - 1) / 2)
		len = (outlen - 1) / 2; /* as many whole bytes as fit */
	sysom_hex_encode(id->bytes, len, out, outlen);
}

int sysom_build_id_parse_hex(const char *hex, uint8_t kind, struct sysom_build_id *out)
{
	struct sysom_build_id id = { .kind = kind };
	size_t n;

	if (!hex || kind == 0 || kind > SYSOM_OBJECT_KIND_MAX)
		return -EINVAL;
	n = strnlen(hex, 2 * SYSOM_BUILD_ID_MAX + 1);
	if (n < 6 || n > 2 * SYSOM_BUILD_ID_MAX || n % 2)
		return -EINVAL;
	if (sysom_hex_decode(hex, n, id.bytes, sizeof(id.bytes)) < 0)
		return -EINVAL;
	id.len = (uint8_t)(n / 2);
	*out = id;
	return 0;
}

bool sysom_elf_sections_missing(Elf *elf)
{
	GElf_Ehdr eh;
	size_t n;

	return gelf_getehdr(elf, &eh) && eh.e_shoff && (elf_getshdrnum(elf, &n) || n == 0);
}

int sysom_elf_open_read(int fd, Elf **out)
{
	Elf *elf;

	*out = NULL;
	pthread_once(&elf_version_once, elf_version_init);
	if (!elf_version_ok)
		return -ENOSYS;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		elf_end(elf);
		return -SYSOM_ECORRUPT;
	}
	if (sysom_elf_sections_missing(elf)) {
		elf_end(elf);
		return -EIO;
	}
	*out = elf;
	return 0;
}
