/* SPDX-License-Identifier: Apache-2.0 */
/* ELF identity: real files against readelf, content hashes, raw notes, the vDSO, hostile ELF. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "common/elf_buildid.h"
#include "common/error.h"

#define IMG_MAX 4096
#define BID_LEN 20

static char tmpdir[] = "/tmp/sysom-test-elf-XXXXXX";
static unsigned file_counter;

/* ------------------------------------------------------------------------------------------ */
/* Temporary files */

static void path_in_tmp(char *out, size_t outlen, const char *name)
{
	snprintf(out, outlen, "%s/%s", tmpdir, name);
}

/* Writes `len` bytes to a new temporary file and returns it open read-only. */
static int write_temp(const void *data, size_t len)
{
	char path[256], name[32];
	int fd;

	snprintf(name, sizeof(name), "f%u", file_counter++);
	path_in_tmp(path, sizeof(path), name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	if (len)
		assert_int_equal(pwrite(fd, data, len, 0), (ssize_t)len);
	assert_int_equal(unlink(path), 0);
	return fd;
}

static int setup_tmpdir(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	char path[512];
	DIR *d = opendir(tmpdir);
	struct dirent *de;

	(void)state;
	while (d && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", tmpdir, de->d_name);
			unlink(path);
		}
	}
	if (d)
		closedir(d);
	return rmdir(tmpdir);
}

/* ------------------------------------------------------------------------------------------ */
/* Hand-made ELF images */

struct img {
	uint8_t b[IMG_MAX];
	size_t len;
	bool is64, big;
	size_t phoff, shoff, notes_off, notes_len;
	unsigned nph, nsh;
};

static void put(uint8_t *p, size_t size, uint64_t v, bool big)
{
	for (size_t i = 0; i < size; i++) {
		unsigned shift = (unsigned)(big ? (size - 1 - i) * 8 : i * 8);
		p[i] = (uint8_t)(v >> shift);
	}
}

#define FIELD_SIZE(type, f) sizeof(((type *)0)->f)
#define SET_EH(im, f, v)                                                                       \
	((im)->is64 ? put((im)->b + offsetof(Elf64_Ehdr, f), FIELD_SIZE(Elf64_Ehdr, f), (v),  \
			  (im)->big)                                                           \
		    : put((im)->b + offsetof(Elf32_Ehdr, f), FIELD_SIZE(Elf32_Ehdr, f), (v),   \
			  (im)->big))
#define SET_PH(im, i, f, v)                                                                    \
	((im)->is64 ? put((im)->b + (im)->phoff + (i) * sizeof(Elf64_Phdr) +                   \
				  offsetof(Elf64_Phdr, f),                                     \
			  FIELD_SIZE(Elf64_Phdr, f), (v), (im)->big)                           \
		    : put((im)->b + (im)->phoff + (i) * sizeof(Elf32_Phdr) +                   \
				  offsetof(Elf32_Phdr, f),                                     \
			  FIELD_SIZE(Elf32_Phdr, f), (v), (im)->big))
#define SET_SH(im, i, f, v)                                                                    \
	((im)->is64 ? put((im)->b + (im)->shoff + (i) * sizeof(Elf64_Shdr) +                   \
				  offsetof(Elf64_Shdr, f),                                     \
			  FIELD_SIZE(Elf64_Shdr, f), (v), (im)->big)                           \
		    : put((im)->b + (im)->shoff + (i) * sizeof(Elf32_Shdr) +                   \
				  offsetof(Elf32_Shdr, f),                                     \
			  FIELD_SIZE(Elf32_Shdr, f), (v), (im)->big))

/* Note bytes in a given byte order. */
struct notes {
	uint8_t b[2048];
	size_t len;
	bool big;
};

static void notes_word(struct notes *n, uint32_t v)
{
	assert_true(n->len + 4 <= sizeof(n->b));
	put(n->b + n->len, 4, v, n->big);
	n->len += 4;
}

static void notes_bytes(struct notes *n, const void *p, size_t len, size_t align)
{
	assert_true(n->len + len + align <= sizeof(n->b));
	if (len)
		memcpy(n->b + n->len, p, len);
	n->len += len;
	while (n->len % align)
		n->b[n->len++] = 0;
}

/* A well-formed note with `align`-byte padding (4, or 8 for GNU property style). */
static void add_note(struct notes *n, const char *name, uint32_t namesz, const void *desc,
		     uint32_t descsz, uint32_t type, size_t align)
{
	notes_word(n, namesz);
	notes_word(n, descsz);
	notes_word(n, type);
	notes_bytes(n, name, namesz, align);
	notes_bytes(n, desc, descsz, align);
}

static uint8_t desc_bytes[256];

static void add_build_id(struct notes *n, uint32_t len)
{
	add_note(n, "GNU", 4, desc_bytes, len, NT_GNU_BUILD_ID, 4);
}

/*
 * Lays out ELF header, `nph` PT_NOTE program headers and the notes, then (when nsh > 0)
 * a section header table: a null section and `nsh - 1` SHT_NOTE sections, all over the notes.
 */
static void build_elf(struct img *im, bool is64, bool big, const struct notes *n, unsigned nph,
		      unsigned nsh, uint64_t note_align)
{
	size_t ehsize = is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr);
	size_t phsize = is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
	size_t shsize = is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);

	memset(im, 0, sizeof(*im));
	im->is64 = is64;
	im->big = big;
	im->nph = nph;
	im->nsh = nsh;
	im->phoff = nph ? ehsize : 0;
	im->notes_off = (ehsize + nph * phsize + 7) & ~(size_t)7;
	im->notes_len = n ? n->len : 0;
	im->shoff = nsh ? (im->notes_off + im->notes_len + 7) & ~(size_t)7 : 0;
	im->len = nsh ? im->shoff + nsh * shsize : im->notes_off + im->notes_len;
	assert_true(im->len <= IMG_MAX);

	memcpy(im->b, ELFMAG, SELFMAG);
	im->b[EI_CLASS] = is64 ? ELFCLASS64 : ELFCLASS32;
	im->b[EI_DATA] = big ? ELFDATA2MSB : ELFDATA2LSB;
	im->b[EI_VERSION] = EV_CURRENT;
	SET_EH(im, e_type, ET_DYN);
	SET_EH(im, e_machine, is64 ? (big ? EM_PPC64 : EM_X86_64) : (big ? EM_PPC : EM_386));
	SET_EH(im, e_version, EV_CURRENT);
	SET_EH(im, e_phoff, im->phoff);
	SET_EH(im, e_shoff, im->shoff);
	SET_EH(im, e_ehsize, ehsize);
	SET_EH(im, e_phentsize, phsize);
	SET_EH(im, e_phnum, nph);
	SET_EH(im, e_shentsize, shsize);
	SET_EH(im, e_shnum, nsh);
	if (n)
		memcpy(im->b + im->notes_off, n->b, n->len);
	for (unsigned i = 0; i < nph; i++) {
		SET_PH(im, i, p_type, PT_NOTE);
		SET_PH(im, i, p_flags, PF_R);
		SET_PH(im, i, p_offset, im->notes_off);
		SET_PH(im, i, p_vaddr, im->notes_off);
		SET_PH(im, i, p_paddr, im->notes_off);
		SET_PH(im, i, p_filesz, im->notes_len);
		SET_PH(im, i, p_memsz, im->notes_len);
		SET_PH(im, i, p_align, note_align);
	}
	for (unsigned i = 1; i < nsh; i++) {
		SET_SH(im, i, sh_type, SHT_NOTE);
		SET_SH(im, i, sh_flags, SHF_ALLOC);
		SET_SH(im, i, sh_offset, im->notes_off);
		SET_SH(im, i, sh_size, im->notes_len);
		SET_SH(im, i, sh_addralign, note_align);
	}
}

/* A plain 64-bit little-endian image with one build ID of `len` bytes in both places. */
static void build_simple(struct img *im, bool is64, bool big, uint32_t bid_len)
{
	struct notes n = { .big = big };

	add_build_id(&n, bid_len);
	build_elf(im, is64, big, &n, 1, 2, 4);
}

/* Copies `len` bytes into read-only memory that ends right before an inaccessible page, so
 * any write, or any read past the end, faults. */
struct guarded {
	uint8_t *map;
	size_t map_len;
	const uint8_t *image;
};

static void guarded_map(struct guarded *g, const void *data, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t data_pages = (len + page - 1) / page + 1;

	g->map_len = (data_pages + 1) * page;
	g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(g->map != MAP_FAILED);
	uint8_t *guard = g->map + data_pages * page;
	memcpy(guard - len, data, len);
	assert_int_equal(mprotect(g->map, data_pages * page, PROT_READ), 0);
	assert_int_equal(mprotect(guard, page, PROT_NONE), 0);
	g->image = guard - len;
}

static void guarded_unmap(struct guarded *g)
{
	munmap(g->map, g->map_len);
}

/*
 * Runs sysom_elf_build_id on the bytes as a file and sysom_elf_build_id_memory on them in
 * guarded read-only memory; both must agree. Returns the error, the identity in *id.
 */
static int identify_bytes(const void *data, size_t len, struct sysom_build_id *id)
{
	struct sysom_build_id a, b;
	struct guarded g;
	int fd = write_temp(data, len);

	memset(&a, 0xaa, sizeof(a));
	memset(&b, 0xbb, sizeof(b));
	assert_int_equal(lseek(fd, 3, SEEK_SET), 3);
	int err_fd = sysom_elf_build_id(fd, &a);
	assert_int_equal(lseek(fd, 0, SEEK_CUR), 3); /* offset neither used nor moved */
	close(fd);
	guarded_map(&g, data, len);
	int err_mem = sysom_elf_build_id_memory(g.image, len, &b);
	guarded_unmap(&g);

	assert_int_equal(err_fd, err_mem);
	if (err_fd == 0) {
		assert_memory_equal(&a, &b, sizeof(a));
		*id = a;
	} else {
		/* Outputs are written only on success. */
		for (size_t i = 0; i < sizeof(a); i++)
			assert_int_equal(((uint8_t *)&a)[i], 0xaa);
	}
	return err_fd;
}

static int identify(const struct img *im, struct sysom_build_id *id)
{
	return identify_bytes(im->b, im->len, id);
}

static void assert_found(const struct img *im, uint32_t len)
{
	struct sysom_build_id id;

	assert_int_equal(identify(im, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_ELF);
	assert_int_equal(id.len, len);
	assert_memory_equal(id.bytes, desc_bytes, len);
	for (size_t i = len; i < SYSOM_BUILD_ID_MAX; i++)
		assert_int_equal(id.bytes[i], 0);
}

static void assert_fails(const struct img *im, int expected)
{
	struct sysom_build_id id;

	assert_int_equal(identify(im, &id), expected);
}

/* ------------------------------------------------------------------------------------------ */
/* Real files */

/* The "Build ID: ..." printed by `readelf -n`, or "" when it prints none. */
static void readelf_build_id(const char *path, char *hex, size_t hexlen)
{
	char cmd[512], line[512];
	FILE *p;

	hex[0] = '\0';
	snprintf(cmd, sizeof(cmd), "LC_ALL=C readelf -n '%s' 2>/dev/null", path);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		char *s = strstr(line, "Build ID: ");
		if (s && !hex[0]) {
			s += strlen("Build ID: ");
			s[strcspn(s, " \r\n")] = '\0';
			snprintf(hex, hexlen, "%s", s);
		}
	}
	assert_int_equal(pclose(p), 0);
}

static void check_real_file(const char *path)
{
	char expected[2 * SYSOM_BUILD_ID_MAX + 1], got[2 * SYSOM_BUILD_ID_MAX + 1];
	struct sysom_build_id id, id2;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	readelf_build_id(path, expected, sizeof(expected));
	assert_true(strlen(expected) >= 6);
	assert_int_equal(sysom_elf_build_id(fd, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_ELF);
	sysom_build_id_hex(&id, got, sizeof(got));
	assert_string_equal(got, expected);
	assert_int_equal(sysom_object_identity(fd, &id2), 0);
	assert_memory_equal(&id, &id2, sizeof(id));
	close(fd);
}

static void test_real_files(void **state)
{
	(void)state;
	check_real_file("/bin/true");
	check_real_file("/usr/lib/x86_64-linux-gnu/libc.so.6");
}

/* A program linked with --build-id=none: no build ID, so the identity is its content hash. */
static void test_binary_without_build_id(void **state)
{
	char src[256], bin[256], cmd[1024];
	struct sysom_build_id id, hash;
	FILE *f;
	int fd;

	(void)state;
	path_in_tmp(src, sizeof(src), "nobid.c");
	path_in_tmp(bin, sizeof(bin), "nobid");
	f = fopen(src, "w");
	assert_non_null(f);
	fputs("int main(void) { return 0; }\n", f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "gcc -Wl,--build-id=none -o '%s' '%s' 2>&1", bin, src);
	if (system(cmd) != 0) {
		unlink(src);
		skip(); /* no working compiler in this environment */
	}
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	readelf_build_id(bin, hex, sizeof(hex));
	assert_string_equal(hex, ""); /* the linker really left it out */

	fd = open(bin, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	memset(&id, 0x5a, sizeof(id));
	assert_int_equal(sysom_elf_build_id(fd, &id), -SYSOM_ENOBUILDID);
	assert_int_equal(id.kind, 0x5a); /* untouched on failure */
	assert_int_equal(sysom_object_identity(fd, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_FILE_HASH);
	assert_int_equal(id.len, 16);
	assert_int_equal(sysom_file_content_hash(fd, &hash), 0);
	assert_memory_equal(&id, &hash, sizeof(id));
	close(fd);
	unlink(bin);
	unlink(src);
}

/* ------------------------------------------------------------------------------------------ */
/* Content hash */

static void expected_hash(const void *data, size_t len, uint8_t out[16])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
	memcpy(out, c.digest, 16);
}

static void test_content_hash(void **state)
{
	/* More than three 1 MiB chunks and not a multiple of the chunk size. */
	size_t len = (3u << 20) + 12345;
	uint8_t *data = malloc(len), want[16];
	struct sysom_build_id a, b, c;
	uint32_t x = 12345;

	(void)state;
	assert_non_null(data);
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		data[i] = (uint8_t)(x >> 16);
	}
	int fa = write_temp(data, len), fb = write_temp(data, len);
	assert_int_equal(sysom_file_content_hash(fa, &a), 0);
	assert_int_equal(sysom_file_content_hash(fb, &b), 0);
	assert_int_equal(a.kind, SYSOM_OBJECT_FILE_HASH);
	assert_int_equal(a.len, 16);
	assert_memory_equal(&a, &b, sizeof(a));
	expected_hash(data, len, want);
	assert_memory_equal(a.bytes, want, 16);

	/* One byte different, deep in the third chunk. */
	data[(2u << 20) + 7] ^= 1;
	int fc = write_temp(data, len);
	assert_int_equal(sysom_file_content_hash(fc, &c), 0);
	assert_memory_not_equal(a.bytes, c.bytes, 16);
	expected_hash(data, len, want);
	assert_memory_equal(c.bytes, want, 16);

	/* Not an ELF file: the identity is the content hash. */
	assert_int_equal(sysom_object_identity(fc, &b), 0);
	assert_memory_equal(&b, &c, sizeof(b));

	/* Empty file. */
	int fe = write_temp(NULL, 0);
	assert_int_equal(sysom_file_content_hash(fe, &a), 0);
	expected_hash("", 0, want);
	assert_memory_equal(a.bytes, want, 16);

	/* A directory has no content to hash. */
	int fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(sysom_file_content_hash(fd, &a), -EISDIR);
	assert_int_equal(sysom_object_identity(fd, &a), -EISDIR);
	assert_int_equal(sysom_file_content_hash(-1, &a), -EBADF);
	close(fd);
	close(fa);
	close(fb);
	close(fc);
	close(fe);
	free(data);
}

/* ------------------------------------------------------------------------------------------ */
/* Well-formed images in every layout */

static void test_layouts(void **state)
{
	struct notes n;
	struct img im;

	(void)state;
	for (int is64 = 0; is64 <= 1; is64++) {
		for (int big = 0; big <= 1; big++) {
			/* Segment and section. */
			build_simple(&im, is64, big, BID_LEN);
			assert_found(&im, BID_LEN);
			/* Only a PT_NOTE segment (sections stripped). */
			n = (struct notes){ .big = big };
			add_build_id(&n, BID_LEN);
			build_elf(&im, is64, big, &n, 1, 0, 4);
			assert_found(&im, BID_LEN);
			/* Only a SHT_NOTE section (no program headers: a relocatable object). */
			build_elf(&im, is64, big, &n, 0, 2, 4);
			assert_found(&im, BID_LEN);
			/* Build ID after other notes, including a zero-length one and another owner. */
			n = (struct notes){ .big = big };
			add_note(&n, "", 0, NULL, 0, 0, 4);
			add_note(&n, "Linux", 6, desc_bytes + 100, 7, 1, 4);
			add_note(&n, "GNU", 4, desc_bytes + 50, 16, 1 /* NT_GNU_ABI_TAG */, 4);
			add_build_id(&n, BID_LEN);
			build_elf(&im, is64, big, &n, 1, 2, 4);
			assert_found(&im, BID_LEN);
		}
	}
}

/* Build IDs of 3 and 64 bytes are valid; 2, 65 or 0 bytes are no build ID. */
static void test_build_id_lengths(void **state)
{
	struct notes n = { 0 };
	struct img im;

	(void)state;
	build_simple(&im, true, false, 3);
	assert_found(&im, 3);
	build_simple(&im, true, false, 64);
	assert_found(&im, 64);
	build_simple(&im, true, false, 2);
	assert_fails(&im, -SYSOM_ENOBUILDID);
	build_simple(&im, true, false, 65);
	assert_fails(&im, -SYSOM_ENOBUILDID);
	build_simple(&im, false, true, 0);
	assert_fails(&im, -SYSOM_ENOBUILDID);
	build_simple(&im, false, false, 200);
	assert_fails(&im, -SYSOM_ENOBUILDID);

	/* A bad-length one first does not hide a good one later. */
	add_build_id(&n, 2);
	add_build_id(&n, 8);
	build_elf(&im, true, false, &n, 1, 0, 4);
	assert_found(&im, 8);

	/* Wrong owner, owner without its NUL, wrong type: no build ID. */
	n = (struct notes){ 0 };
	add_note(&n, "GNX", 4, desc_bytes, 20, NT_GNU_BUILD_ID, 4);
	add_note(&n, "GNU", 3, desc_bytes, 20, NT_GNU_BUILD_ID, 4);
	add_note(&n, "GNU", 4, desc_bytes, 20, NT_GNU_BUILD_ID + 1, 4);
	build_elf(&im, true, false, &n, 1, 2, 4);
	assert_fails(&im, -SYSOM_ENOBUILDID);

	/* An ELF file without any notes. */
	build_elf(&im, true, false, NULL, 0, 0, 4);
	assert_fails(&im, -SYSOM_ENOBUILDID);
}

/* 8-byte aligned note areas (GNU property notes) and 4-byte notes mislabelled as 8. */
static void test_note_alignment(void **state)
{
	static const uint8_t prop[12] = { 2, 0, 0, 0xc0, 4, 0, 0, 0, 3, 0, 0, 0 };
	struct notes n = { 0 };
	struct img im;

	(void)state;
	add_note(&n, "GNU", 4, prop, sizeof(prop), 5 /* NT_GNU_PROPERTY_TYPE_0 */, 8);
	add_note(&n, "GNU", 4, desc_bytes, BID_LEN, NT_GNU_BUILD_ID, 8);
	build_elf(&im, true, false, &n, 1, 2, 8);
	assert_found(&im, BID_LEN);

	/* 4-aligned notes (a 5-byte descriptor) in an area that claims 8. */
	n = (struct notes){ 0 };
	add_note(&n, "GNU", 4, desc_bytes + 90, 5, 99, 4);
	add_build_id(&n, BID_LEN);
	build_elf(&im, true, false, &n, 1, 0, 8);
	assert_found(&im, BID_LEN);
}

/* ------------------------------------------------------------------------------------------ */
/* Hostile files */

static void test_not_elf(void **state)
{
	static const char text[] = "#!/bin/sh\necho hello\n";
	struct sysom_build_id id;
	uint8_t junk[1000];

	(void)state;
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(identify_bytes(text, sizeof(text) - 1, &id), -SYSOM_ENOTELF);
	assert_int_equal(identify_bytes(junk, sizeof(junk), &id), -SYSOM_ENOTELF);
	assert_int_equal(identify_bytes("\x7f" "EL", 3, &id), -SYSOM_ENOTELF);
	assert_int_equal(identify_bytes("", 0, &id), -SYSOM_ENOTELF);
	assert_int_equal(sysom_elf_build_id_memory(NULL, 0, &id), -SYSOM_ENOTELF);
	assert_int_equal(sysom_elf_build_id_memory(NULL, 10, &id), -EINVAL);
}

static void test_directory_and_bad_fd(void **state)
{
	struct sysom_build_id id;
	int fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(sysom_elf_build_id(fd, &id), -EISDIR);
	close(fd);
	assert_int_equal(sysom_elf_build_id(-1, &id), -EBADF);

	/* A pipe is not a regular file either. */
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(sysom_elf_build_id(p[0], &id), -EINVAL);
	close(p[0]);
	close(p[1]);
}

/* Every prefix of a valid file: no crash, and a header cut short is reported as such. */
static void test_truncated(void **state)
{
	struct sysom_build_id id;
	struct img im;

	(void)state;
	for (int is64 = 0; is64 <= 1; is64++) {
		build_simple(&im, is64, !is64, BID_LEN);
		size_t ehsize = is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr);
		for (size_t len = 0; len < im.len; len++) {
			int err = identify_bytes(im.b, len, &id);
			if (len < SELFMAG)
				assert_int_equal(err, -SYSOM_ENOTELF);
			else if (len < ehsize)
				assert_int_equal(err, -SYSOM_ECORRUPT);
			else if (len < im.len)
				/* The section table is last: cut, the file is corrupt. */
				assert_int_equal(err, -SYSOM_ECORRUPT);
		}
		assert_found(&im, BID_LEN);
	}
}

static void test_bad_ident(void **state)
{
	struct img im;

	(void)state;
	build_simple(&im, true, false, BID_LEN);
	im.b[EI_CLASS] = 3;
	assert_fails(&im, -SYSOM_ECORRUPT);
	build_simple(&im, true, false, BID_LEN);
	im.b[EI_DATA] = 0;
	assert_fails(&im, -SYSOM_ECORRUPT);
	build_simple(&im, true, false, BID_LEN);
	im.b[EI_VERSION] = 2;
	assert_fails(&im, -SYSOM_ECORRUPT);
	/* A 32-bit file claiming to be 64-bit: its tables do not fit where they should. */
	build_simple(&im, false, false, BID_LEN);
	im.b[EI_CLASS] = ELFCLASS64;
	assert_fails(&im, -SYSOM_ECORRUPT);
}

static void test_header_tables_out_of_bounds(void **state)
{
	struct img im;

	(void)state;
	for (int is64 = 0; is64 <= 1; is64++) {
		uint64_t huge = is64 ? UINT64_MAX - 8 : UINT32_MAX - 8;

		/* e_phoff beyond the file, at its very end, and wrapping around. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_phoff, im.len + 100);
		assert_fails(&im, -SYSOM_ECORRUPT);
		SET_EH(&im, e_phoff, im.len - 8);
		assert_fails(&im, -SYSOM_ECORRUPT);
		SET_EH(&im, e_phoff, huge);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* Too many program headers for the file. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_phnum, 0xfff0);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* Wrong entry size. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_phentsize, 8);
		assert_fails(&im, -SYSOM_ECORRUPT);

		/* e_shoff beyond the file and wrapping; too many sections; bad entry size. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_shoff, im.len + 1);
		assert_fails(&im, -SYSOM_ECORRUPT);
		SET_EH(&im, e_shoff, huge);
		assert_fails(&im, -SYSOM_ECORRUPT);
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_shnum, 0xfeff);
		assert_fails(&im, -SYSOM_ECORRUPT);
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_shentsize, 1);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* Sections counted but no table. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_shoff, 0);
		assert_fails(&im, -SYSOM_ECORRUPT);

		/* Extended numbering: count in section 0, huge and wrapping. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_shnum, 0);
		SET_SH(&im, 0, sh_size, 2);
		assert_found(&im, BID_LEN);
		SET_SH(&im, 0, sh_size, is64 ? UINT64_MAX : UINT32_MAX);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* PN_XNUM: segment count in section 0's sh_info. */
		build_simple(&im, is64, false, BID_LEN);
		SET_EH(&im, e_phnum, PN_XNUM);
		SET_SH(&im, 0, sh_info, 1);
		assert_found(&im, BID_LEN);
		SET_SH(&im, 0, sh_info, UINT32_MAX);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* PN_XNUM without any section header table. */
		struct notes n = { 0 };
		add_build_id(&n, BID_LEN);
		build_elf(&im, is64, false, &n, 1, 0, 4);
		SET_EH(&im, e_phnum, PN_XNUM);
		assert_fails(&im, -SYSOM_ECORRUPT);
	}
}

static void test_note_areas_out_of_bounds(void **state)
{
	struct notes n = { 0 };
	struct img im;

	(void)state;
	add_build_id(&n, BID_LEN);
	for (int is64 = 0; is64 <= 1; is64++) {
		uint64_t huge = is64 ? UINT64_MAX - 3 : UINT32_MAX - 3;

		/* Segment only: p_offset + p_filesz past the end, p_offset past the end,
		 * p_offset + p_filesz wrapping around. */
		build_elf(&im, is64, false, &n, 1, 0, 4);
		SET_PH(&im, 0, p_filesz, im.len);
		assert_fails(&im, -SYSOM_ECORRUPT);
		build_elf(&im, is64, false, &n, 1, 0, 4);
		SET_PH(&im, 0, p_offset, im.len + 4);
		assert_fails(&im, -SYSOM_ECORRUPT);
		build_elf(&im, is64, false, &n, 1, 0, 4);
		SET_PH(&im, 0, p_offset, huge);
		SET_PH(&im, 0, p_filesz, 16);
		assert_fails(&im, -SYSOM_ECORRUPT);
		build_elf(&im, is64, false, &n, 1, 0, 4);
		SET_PH(&im, 0, p_filesz, huge);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* Section only: the same for sh_offset / sh_size. */
		build_elf(&im, is64, false, &n, 0, 2, 4);
		SET_SH(&im, 1, sh_size, im.len);
		assert_fails(&im, -SYSOM_ECORRUPT);
		build_elf(&im, is64, false, &n, 0, 2, 4);
		SET_SH(&im, 1, sh_offset, huge);
		assert_fails(&im, -SYSOM_ECORRUPT);
		/* A broken segment does not hide the build ID in a good section... */
		build_elf(&im, is64, false, &n, 1, 2, 4);
		SET_PH(&im, 0, p_offset, huge);
		assert_found(&im, BID_LEN);
		/* ...nor a broken section the one in a good segment. */
		build_elf(&im, is64, false, &n, 1, 2, 4);
		SET_SH(&im, 1, sh_offset, huge);
		assert_found(&im, BID_LEN);
		/* Empty areas hold nothing. */
		build_elf(&im, is64, false, &n, 1, 2, 4);
		SET_PH(&im, 0, p_filesz, 0);
		SET_SH(&im, 1, sh_size, 0);
		assert_fails(&im, -SYSOM_ENOBUILDID);
		/* A compressed note section is not read as notes. */
		build_elf(&im, is64, false, &n, 0, 2, 4);
		SET_SH(&im, 1, sh_flags, SHF_ALLOC | SHF_COMPRESSED);
		assert_fails(&im, -SYSOM_ENOBUILDID);
	}
}

/* Note headers whose sizes lie: huge, wrapping when padded, past the area. */
static void test_hostile_notes(void **state)
{
	static const uint32_t bad_sizes[] = { 0xffffffffu, 0xfffffffdu, 0xfffffffcu, 0x80000000u,
					      0x7fffffffu, 21, 24, 1000 };
	struct img im;

	(void)state;
	for (int big = 0; big <= 1; big++) {
		for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
			for (int which = 0; which < 2; which++) {
				struct notes n = { .big = big };
				notes_word(&n, which == 0 ? bad_sizes[i] : 4);
				notes_word(&n, which == 1 ? bad_sizes[i] : 4);
				notes_word(&n, NT_GNU_BUILD_ID);
				notes_bytes(&n, "GNU", 4, 4);
				notes_bytes(&n, desc_bytes, 4, 4);
				/* Segment and section over the same broken notes. */
				build_elf(&im, true, big, &n, 1, 2, 4);
				assert_fails(&im, -SYSOM_ECORRUPT);
				build_elf(&im, false, big, &n, 1, 2, 4);
				assert_fails(&im, -SYSOM_ECORRUPT);
				build_elf(&im, true, big, &n, 1, 2, 8);
				assert_fails(&im, -SYSOM_ECORRUPT);
			}
		}
	}

	/* A valid build ID, then a broken note: the build ID wins. */
	struct notes n = { 0 };
	add_build_id(&n, BID_LEN);
	notes_word(&n, 0xffffffffu);
	notes_word(&n, 0xffffffffu);
	notes_word(&n, NT_GNU_BUILD_ID);
	build_elf(&im, true, false, &n, 1, 2, 4);
	assert_found(&im, BID_LEN);

	/* Only zero-length notes: nothing to find, nothing broken. */
	n = (struct notes){ 0 };
	for (int i = 0; i < 20; i++)
		add_note(&n, "", 0, NULL, 0, (uint32_t)i, 4);
	build_elf(&im, true, false, &n, 1, 2, 4);
	assert_fails(&im, -SYSOM_ENOBUILDID);

	/* A note area shorter than one note header. */
	n = (struct notes){ 0 };
	notes_word(&n, 4);
	notes_word(&n, 20);
	build_elf(&im, true, false, &n, 1, 2, 4);
	assert_fails(&im, -SYSOM_ECORRUPT);
}

/* Limits: too many sections for the allocation they would cost; a huge note area. */
static void test_limits(void **state)
{
	struct notes n = { 0 };
	struct sysom_build_id id;
	struct img im;
	int fd;

	(void)state;
	add_build_id(&n, BID_LEN);
	/* 100000 section headers at the end of a sparse 8 MiB file (extended numbering). */
	build_elf(&im, true, false, &n, 1, 2, 4);
	uint64_t shoff = 1u << 20;
	SET_EH(&im, e_shoff, shoff);
	SET_EH(&im, e_shnum, 0);
	fd = write_temp(im.b, im.len);
	uint8_t sh0[sizeof(Elf64_Shdr)] = { 0 };
	put(sh0 + offsetof(Elf64_Shdr, sh_size), 8, 100000, false);
	assert_int_equal(pwrite(fd, sh0, sizeof(sh0), (off_t)shoff), (ssize_t)sizeof(sh0));
	assert_int_equal(ftruncate(fd, 8 << 20), 0);
	assert_int_equal(sysom_elf_build_id(fd, &id), -SYSOM_ELIMIT);
	/* The identity falls back to the content hash. */
	assert_int_equal(sysom_object_identity(fd, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_FILE_HASH);
	close(fd);

	/* A 5 MiB note area (sparse): skipped, so no build ID within the limit. */
	build_elf(&im, true, false, &n, 1, 0, 4);
	SET_PH(&im, 0, p_filesz, 5u << 20);
	fd = write_temp(im.b, im.len);
	assert_int_equal(ftruncate(fd, 6 << 20), 0);
	assert_int_equal(sysom_elf_build_id(fd, &id), -SYSOM_ELIMIT);
	close(fd);
}

/* Every byte of valid images flipped: whatever the result, fd and memory paths agree and
 * nothing reads out of bounds (ASan for the file path, a guard page for memory). */
static void test_byte_flips(void **state)
{
	struct sysom_build_id id;
	struct img im, bad;

	(void)state;
	for (int v = 0; v < 4; v++) {
		build_simple(&im, v & 1, v & 2, BID_LEN);
		for (size_t i = 0; i < im.len; i++) {
			for (int k = 0; k < 3; k++) {
				static const uint8_t masks[] = { 0xff, 0x80, 0x01 };
				bad = im;
				bad.b[i] ^= masks[k];
				int err = identify(&bad, &id);
				assert_true(err == 0 || err == -SYSOM_ECORRUPT || err == -SYSOM_ENOTELF ||
					    err == -SYSOM_ENOBUILDID || err == -SYSOM_ELIMIT);
			}
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Raw notes, the kernel's and the vDSO */

static void test_raw_notes(void **state)
{
	struct sysom_build_id id;
	struct notes n = { 0 };

	(void)state;
	add_note(&n, "Xen", 4, desc_bytes, 8, 18, 4);
	add_build_id(&n, BID_LEN);
	assert_int_equal(sysom_build_id_from_notes(n.b, n.len, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_ELF);
	assert_int_equal(id.len, BID_LEN);
	assert_memory_equal(id.bytes, desc_bytes, BID_LEN);
	/* Up to 11 trailing zero bytes are padding. */
	memset(n.b + n.len, 0, 11);
	assert_int_equal(sysom_build_id_from_notes(n.b, n.len + 11, &id), 0);

	/* Last note without its descriptor padding. */
	n = (struct notes){ 0 };
	add_note(&n, "GNU", 4, desc_bytes, 7, NT_GNU_BUILD_ID, 4);
	assert_int_equal(sysom_build_id_from_notes(n.b, n.len - 1, &id), 0);
	assert_int_equal(id.len, 7);

	/* Every cut of a note list: no crash, never a wrong answer. */
	n = (struct notes){ 0 };
	add_note(&n, "Linux", 6, desc_bytes, 4, 1, 4);
	size_t first_len = n.len;
	add_build_id(&n, BID_LEN);
	for (size_t len = 0; len <= n.len; len++) {
		uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any overrun */
		assert_non_null(copy);
		memcpy(copy, n.b, len);
		int err = sysom_build_id_from_notes(copy, len, &id);
		if (len == 0 || len == first_len) /* whole notes, none of them a build ID */
			assert_int_equal(err, -SYSOM_ENOBUILDID);
		else if (len == n.len)
			assert_int_equal(err, 0);
		else
			assert_int_equal(err, -SYSOM_ECORRUPT);
		free(copy);
	}

	/* Sizes that overflow, trailing garbage, bad lengths, no build ID. */
	static const uint32_t huge_name[] = { 0xfffffffdu, 20, NT_GNU_BUILD_ID };
	assert_int_equal(sysom_build_id_from_notes(huge_name, sizeof(huge_name), &id),
			 -SYSOM_ECORRUPT);
	static const uint32_t huge_desc[] = { 4, 0xfffffffcu, NT_GNU_BUILD_ID, 0x00554e47 };
	assert_int_equal(sysom_build_id_from_notes(huge_desc, sizeof(huge_desc), &id),
			 -SYSOM_ECORRUPT);
	n = (struct notes){ 0 };
	add_note(&n, "Linux", 6, desc_bytes, 4, 1, 4);
	n.b[n.len++] = 1;
	assert_int_equal(sysom_build_id_from_notes(n.b, n.len, &id), -SYSOM_ECORRUPT);
	n = (struct notes){ 0 };
	add_build_id(&n, 2);
	add_build_id(&n, 65);
	assert_int_equal(sysom_build_id_from_notes(n.b, n.len, &id), -SYSOM_ENOBUILDID);
	assert_int_equal(sysom_build_id_from_notes(NULL, 0, &id), -SYSOM_ENOBUILDID);
	assert_int_equal(sysom_build_id_from_notes(NULL, 1, &id), -EINVAL);
}

static void test_kernel_notes(void **state)
{
	static const uint8_t pattern[] = { 4, 0, 0, 0, 20, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0 };
	uint8_t buf[65536];
	struct sysom_build_id id;
	size_t len = 0;
	ssize_t n;
	int fd;

	(void)state;
	fd = open("/sys/kernel/notes", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		print_message("# /sys/kernel/notes: %s\n", strerror(errno));
		skip();
	}
	while (len < sizeof(buf) && (n = read(fd, buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	close(fd);
	if (len == 0) {
		print_message("# /sys/kernel/notes is empty\n");
		skip();
	}
	assert_int_equal(sysom_build_id_from_notes(buf, len, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_ELF);
	assert_in_range(id.len, 3, 64);
	/* Cross-check with a plain search for the usual 20-byte GNU build ID note. */
	const uint8_t *hit = memmem(buf, len, pattern, sizeof(pattern));
	if (hit && (size_t)(hit - buf) + sizeof(pattern) + 20 <= len) {
		assert_int_equal(id.len, 20);
		assert_memory_equal(id.bytes, hit + sizeof(pattern), 20);
	}
}

static void test_vdso(void **state)
{
	const uint8_t *base = (const uint8_t *)getauxval(AT_SYSINFO_EHDR);
	struct sysom_build_id id, reference;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	(void)state;
	if (!base) {
		print_message("# no vDSO in this process\n");
		skip();
	}
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
	assert_memory_equal(eh->e_ident, ELFMAG, SELFMAG);
	assert_int_equal(eh->e_ident[EI_CLASS], ELFCLASS64);
	/* Size of the image: the end of its loaded file contents, or of its section header
	 * table (the kernel maps the whole vDSO file), within the mapped pages. */
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
	size_t size = 0, mapped = 0, note_off = 0, note_len = 0;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD) {
			if (ph[i].p_offset + ph[i].p_filesz > size)
				size = ph[i].p_offset + ph[i].p_filesz;
			size_t end = (ph[i].p_offset + ph[i].p_memsz + page - 1) & ~(page - 1);
			if (end > mapped)
				mapped = end;
		}
		if (ph[i].p_type == PT_NOTE && !note_len) {
			note_off = ph[i].p_offset;
			note_len = ph[i].p_filesz;
		}
	}
	if (eh->e_shoff && eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize > size)
		size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	assert_true(size > 0 && size <= mapped);
	assert_true(note_len > 0);

	assert_int_equal(sysom_elf_build_id_memory(base, size, &id), 0);
	assert_int_equal(id.kind, SYSOM_OBJECT_ELF);
	/* The same bytes through the raw-notes parser (no libelf involved). */
	assert_int_equal(sysom_build_id_from_notes(base + note_off, note_len, &reference), 0);
	assert_memory_equal(&id, &reference, sizeof(id));

	/* A copy in a file gives the same answer. */
	int fd = write_temp(base, size);
	assert_int_equal(sysom_elf_build_id(fd, &reference), 0);
	assert_memory_equal(&id, &reference, sizeof(id));
	close(fd);
}

/* ------------------------------------------------------------------------------------------ */
/* Hex */

static void test_hex(void **state)
{
	struct sysom_build_id id = { .kind = SYSOM_OBJECT_ELF, .len = 20 }, back;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1], small[8];
	char too_long[2 * SYSOM_BUILD_ID_MAX + 3];

	(void)state;
	for (int i = 0; i < 20; i++)
		id.bytes[i] = (uint8_t)(i * 17 + 0xa0);
	sysom_build_id_hex(&id, hex, sizeof(hex));
	assert_int_equal(strlen(hex), 40);
	assert_memory_equal(hex, "a0b1c2d3", 8);
	assert_int_equal(sysom_build_id_parse_hex(hex, SYSOM_OBJECT_ELF, &back), 0);
	assert_memory_equal(&id, &back, sizeof(id));

	/* Upper case parses to the same bytes; 3 and 64 bytes are the bounds. */
	assert_int_equal(sysom_build_id_parse_hex("A0B1C2", SYSOM_OBJECT_FILE_HASH, &back), 0);
	assert_int_equal(back.kind, SYSOM_OBJECT_FILE_HASH);
	assert_int_equal(back.len, 3);
	assert_memory_equal(back.bytes, "\xa0\xb1\xc2", 3);
	memset(too_long, 'f', sizeof(too_long));
	too_long[128] = '\0';
	assert_int_equal(sysom_build_id_parse_hex(too_long, SYSOM_OBJECT_ELF, &back), 0);
	assert_int_equal(back.len, 64);
	sysom_build_id_hex(&back, hex, sizeof(hex));
	assert_string_equal(hex, too_long);

	/* A short buffer gets whole bytes only, NUL-terminated. */
	sysom_build_id_hex(&id, small, sizeof(small));
	assert_string_equal(small, "a0b1c2");

	/* Rejections leave *out alone. */
	memset(&back, 0x77, sizeof(back));
	too_long[128] = 'f';
	too_long[130] = '\0';
	assert_int_equal(sysom_build_id_parse_hex(too_long, SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("abcde", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("a0b1c2d", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("abcd", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("a0b1g2", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("a0b1 2", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("0xa0b1", SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex(NULL, SYSOM_OBJECT_ELF, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("a0b1c2", 0, &back), -EINVAL);
	assert_int_equal(sysom_build_id_parse_hex("a0b1c2", SYSOM_OBJECT_KIND_MAX + 1, &back),
			 -EINVAL);
	assert_int_equal(back.kind, 0x77);
}

int main(void)
{
	for (size_t i = 0; i < sizeof(desc_bytes); i++)
		desc_bytes[i] = (uint8_t)(0x10 + i);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_files),
		cmocka_unit_test(test_binary_without_build_id),
		cmocka_unit_test(test_content_hash),
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_build_id_lengths),
		cmocka_unit_test(test_note_alignment),
		cmocka_unit_test(test_not_elf),
		cmocka_unit_test(test_directory_and_bad_fd),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_bad_ident),
		cmocka_unit_test(test_header_tables_out_of_bounds),
		cmocka_unit_test(test_note_areas_out_of_bounds),
		cmocka_unit_test(test_hostile_notes),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_byte_flips),
		cmocka_unit_test(test_raw_notes),
		cmocka_unit_test(test_kernel_notes),
		cmocka_unit_test(test_vdso),
		cmocka_unit_test(test_hex),
	};
	return cmocka_run_group_tests(tests, setup_tmpdir, remove_tmpdir);
}
