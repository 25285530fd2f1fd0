/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload: finding an object's executable and debug file (map_files, container roots,
 * .build-id, .gnu_debuglink, the vDSO) and proving each is the object's. */
#include "agent/symbols/symupload_internal.h"

#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "agent/node/procmaps.h"
#include "common/error.h"

/* ---------------------------------------------------------------------------------------- */
/* File helpers */

/*
 * Opens a regular file for reading without side effects on anything else: O_PATH first, a
 * regular-file check, then a reopen through /proc/self/fd (no FIFO or device is ever opened
 * for reading). 0 with *fd and *st set, or -errno (-EINVAL for non-regular files).
 */
static int open_regular(const char *path, int *fd, struct stat *st)
{
	char self[64];
	struct stat s;
	int pfd, rfd, rc = 0;

	pfd = open(path, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	if (fstat(pfd, &s)) {
		rc = -errno;
		goto cleanup;
	}
	if (!S_ISREG(s.st_mode)) {
		rc = -EINVAL;
		goto cleanup;
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	rfd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (rfd < 0) {
		rc = -errno;
		goto cleanup;
	}
	*fd = rfd;
	*st = s;
cleanup:
	close(pfd);
	return rc;
}

/* Streams bytes [0, size) of `fd` through u->buf into `fn`; -ECANCELED when stopped. */
typedef void (*scan_fn)(void *ctx, const uint8_t *data, size_t len);

static int scan_file(struct symupload *u, int fd, uint64_t size, scan_fn fn, void *ctx)
{
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < u->chunk ? (size_t)(size - off) : u->chunk;
		if (stopping(u))
			return -ECANCELED;
		int rc = pread_exact(fd, u->buf, n, off);
		if (rc)
			return rc;
		fn(ctx, u->buf, n);
		off += n;
	}
	return 0;
}

static void xxh_update(void *ctx, const uint8_t *data, size_t len)
{
	XXH3_128bits_update(ctx, data, len);
}

/* XXH3-128 (canonical, big-endian) of bytes [0, size). */
int symupload__hash_file(struct symupload *u, int fd, uint64_t size, uint8_t out[16])
{
	XXH3_state_t *state = XXH3_createState();
	XXH128_canonical_t canon;
	int rc;

	if (!state)
		return -ENOMEM;
	XXH3_128bits_reset(state);
	rc = scan_file(u, fd, size, xxh_update, state);
	if (rc)
		goto cleanup;
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(state));
	memcpy(out, canon.digest, 16);
cleanup:
	XXH3_freeState(state);
	return rc;
}

static void crc_update(void *ctx, const uint8_t *data, size_t len)
{
	uLong *crc = ctx;

	while (len) {
		uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
		*crc = crc32(*crc, data, n);
		data += n;
		len -= n;
	}
}

/* ---------------------------------------------------------------------------------------- */
/* Finding and proving files */

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static bool elf_ok;

static void elf_init(void)
{
	elf_ok = elf_version(EV_CURRENT) != EV_NONE;
}

static bool same_id(const struct sysom_build_id *a, const struct sysom_build_id *b)
{
	return a->kind == b->kind && a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

static int vdso_visit(void *ctx, const struct procmaps_entry *m)
{
	uint64_t *len = ctx;

	if (strcmp(m->path, "[vdso]") == 0 && m->start == getauxval(AT_SYSINFO_EHDR))
		*len = m->end - m->start;
	return 0;
}

/* Our own vDSO image (same kernel, same image in every 64-bit process) in a memfd. */
static int vdso_open(int *fd_out, struct stat *st)
{
	unsigned long image = getauxval(AT_SYSINFO_EHDR);
	uint64_t len = 0;
	int fd = -1, rc;

	if (!image)
		return -ENOENT;
	rc = procmaps_read(getpid(), NULL, false, 1u << 16, vdso_visit, &len, NULL);
	if (rc < 0)
		return rc;
	if (len == 0)
		return -ENOENT;
	if (len > VDSO_MAX)
		return -SYSOM_ELIMIT;
	fd = memfd_create("sysom-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = sysom_write_full(fd, (const void *)image, (size_t)len);
	if (!rc && fstat(fd, st))
		rc = -errno;
	if (rc) {
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

/* Whether the file on `fd` has identity `id`; for content hashes the hash is kept in `ps`. */
static int check_identity(struct symupload *u, int fd, const struct stat *st,
			  const struct sysom_build_id *id, struct part_state *ps, bool *match)
{
	struct sysom_build_id got;
	int rc;

	*match = false;
	/* A file-hash object proven earlier in this run (an upload resumed after yielding to other
	 * objects): the same file, unchanged, needs no second pass over its content. */
	if (id->kind != SYSOM_OBJECT_ELF && ps->hashed && ps->dev == (uint64_t)st->st_dev &&
	    ps->ino == (uint64_t)st->st_ino && ps->size == (uint64_t)st->st_size &&
	    ps->mtime_ns == mtime_ns(st) && id->len == 16 && !memcmp(ps->hash, id->bytes, 16)) {
		*match = true;
		return 0;
	}
	if (id->kind == SYSOM_OBJECT_ELF) {
		rc = sysom_elf_build_id(fd, &got);
		if (rc == 0)
			*match = same_id(&got, id);
		return rc == -ECANCELED || rc == -ENOMEM ? rc : 0;
	}
	rc = symupload__hash_file(u, fd, (uint64_t)st->st_size, got.bytes);
	if (rc)
		return rc == -ESTALE ? 0 : rc;
	*match = id->len == 16 && memcmp(got.bytes, id->bytes, 16) == 0;
	if (*match) {
		/* The content hash is the upload's hash header too: no second pass. */
		ps->hashed = true;
		ps->dev = st->st_dev;
		ps->ino = st->st_ino;
		ps->size = (uint64_t)st->st_size;
		ps->mtime_ns = mtime_ns(st);
		memcpy(ps->hash, got.bytes, 16);
	}
	return 0;
}

/*
 * Opens the object's executable and proves it: through /proc/PID/map_files (the very mapping:
 * deleted files, other mount namespaces), else /proc/PID/root/PATH, else PATH; the first whose
 * identity equals the object's wins. The vDSO comes from our own image.
 */
int symupload__open_executable(struct symupload *u, struct item *it, int *fd_out,
			       struct stat *st_out, enum find_result *result)
{
	char path[SYMUPLOAD_PATH_MAX + 128];
	const struct waiting *w = &it->w;
	bool opened = false, too_large = false;
	struct stat st;
	int fd = -1, rc;

	*result = NOT_FOUND;
	if (strcmp(w->path, "[vdso]") == 0) {
		rc = vdso_open(&fd, &st);
		if (rc)
			return rc == -ENOENT ? 0 : rc;
		bool match = false;
		rc = check_identity(u, fd, &st, &w->id, &it->part[PART_EXECUTABLE], &match);
		if (rc || !match) {
			close(fd);
			*result = MISMATCH;
			return rc;
		}
		*fd_out = fd;
		*st_out = st;
		*result = FOUND;
		return 0;
	}
	for (int c = 0; c < 3; c++) {
		if (c == 0 && w->pid && w->end > w->start)
			snprintf(path, sizeof(path), "%s/%u/map_files/%" PRIx64 "-%" PRIx64,
				 u->proc_root, w->pid, w->start, w->end);
		else if (c == 1 && w->pid)
			snprintf(path, sizeof(path), "%s/%u/root%s", u->proc_root, w->pid, w->path);
		else if (c == 2)
			snprintf(path, sizeof(path), "%s", w->path);
		else
			continue;
		if (open_regular(path, &fd, &st))
			continue;
		opened = true;
		bool match = false;
		if (w->id.kind == SYSOM_OBJECT_FILE_HASH && (uint64_t)st.st_size > u->max_file) {
			too_large = true;
		} else {
			rc = check_identity(u, fd, &st, &w->id, &it->part[PART_EXECUTABLE], &match);
			if (rc) {
				close(fd);
				return rc;
			}
		}
		if (match && (uint64_t)st.st_size > u->max_file) {
			too_large = true;
			match = false;
		}
		if (match && st.st_size > 0) {
			*fd_out = fd;
			*st_out = st;
			*result = FOUND;
			return 0;
		}
		close(fd);
	}
	*result = too_large ? TOO_LARGE : opened ? MISMATCH : NOT_FOUND;
	return 0;
}

/* Reads .gnu_debuglink: the debug file's base name and its CRC-32. 0 or -ENOENT/-errno. */
static int read_debuglink(int fd, char *name, size_t namelen, uint32_t *crc)
{
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int rc = -ENOENT;

	pthread_once(&elf_once, elf_init);
	if (!elf_ok)
		return -ENOSYS;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getshdrstrndx(elf, &shstrndx))
		goto cleanup;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *sname;
		if (!gelf_getshdr(scn, &sh) || !(sname = elf_strptr(elf, shstrndx, sh.sh_name)) ||
		    strcmp(sname, ".gnu_debuglink") != 0)
			continue;
		if (sh.sh_type != SHT_PROGBITS || sh.sh_size < 8 || sh.sh_size > DEBUGLINK_MAX) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		Elf_Data *d = elf_rawdata(scn, NULL);
		if (!d || !d->d_buf || d->d_size != sh.sh_size) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		const uint8_t *p = d->d_buf;
		size_t n = strnlen((const char *)p, d->d_size);
		size_t crc_off = (n + 1 + 3) & ~(size_t)3;
		if (n == 0 || n >= namelen || crc_off + 4 > d->d_size || memchr(p, '/', n) ||
		    (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		const uint8_t *c = p + crc_off;
		bool big = elf_getident(elf, NULL)[EI_DATA] == ELFDATA2MSB;
		uint32_t v = 0;
		for (int i = 0; i < 4; i++)
			v = v << 8 | c[big ? i : 3 - i];
		*crc = v;
		rc = 0;
		goto cleanup;
	}
cleanup:
	elf_end(elf);
	return rc;
}

/*
 * Checks one debug file candidate: a regular ELF file, not the executable itself, within the
 * size limit, carrying the object's build ID (for content-hashed objects: an ELF without one),
 * and matching the debug link's CRC-32 when `check_crc`. The build ID requirement also keeps
 * a symlink planted in a container from passing a host file off as a debug file.
 */
static int try_debug(struct symupload *u, const char *path, const struct stat *exe_st,
		     const struct sysom_build_id *id, bool check_crc, uint32_t crc, int *fd_out,
		     struct stat *st_out, bool *too_large)
{
	struct sysom_build_id got;
	struct stat st;
	int fd, rc;

	if (open_regular(path, &fd, &st))
		return 0;
	if ((st.st_dev == exe_st->st_dev && st.st_ino == exe_st->st_ino) || st.st_size <= 0)
		goto reject;
	if ((uint64_t)st.st_size > u->max_file) {
		*too_large = true;
		goto reject;
	}
	rc = sysom_elf_build_id(fd, &got);
	if (id->kind == SYSOM_OBJECT_ELF ? rc != 0 || !same_id(&got, id) : rc != -SYSOM_ENOBUILDID)
		goto reject;
	if (check_crc) {
		uLong c = crc32(0L, Z_NULL, 0);
		rc = scan_file(u, fd, (uint64_t)st.st_size, crc_update, &c);
		if (rc == -ECANCELED) {
			close(fd);
			return rc;
		}
		if (rc || (uint32_t)c != crc)
			goto reject;
	}
	*fd_out = fd;
	*st_out = st;
	return 1;
reject:
	close(fd);
	return 0;
}

/*
 * Finds the object's debug file: DEBUG_ROOT/.build-id/xx/rest.debug (its build ID checked),
 * else the .gnu_debuglink name in the executable's directory, its .debug/ and
 * DEBUG_ROOT/<directory> (the build ID and the link's CRC-32 checked);
 * each first inside the process's root (containers), then in ours. Returns 1 with *fd_out,
 * 0 when there is none, or -ECANCELED.
 */
int symupload__find_debug(struct symupload *u, struct item *it, int exe_fd,
			  const struct stat *exe_st, char *dpath, size_t dlen, int *fd_out,
			  struct stat *st_out, bool *too_large)
{
	const struct waiting *w = &it->w;
	const struct part_state *ps = &it->part[PART_DEBUGINFO];
	char roots[2][64];
	char hex[HEX_MAX], link[256], dir[SYMUPLOAD_PATH_MAX];
	uint32_t crc = 0;
	int nroots = 0, rc;

	/* The debug file chosen (and hashed) when this upload began, unchanged since: an upload
	 * resumed after yielding to other objects does not search (or CRC) it again. */
	if (it->debug_path && ps->hashed) {
		struct stat st;
		int fd;
		if (!open_regular(it->debug_path, &fd, &st)) {
			if (ps->dev == (uint64_t)st.st_dev && ps->ino == (uint64_t)st.st_ino &&
			    ps->size == (uint64_t)st.st_size && ps->mtime_ns == mtime_ns(&st) &&
			    snprintf(dpath, dlen, "%s", it->debug_path) < (int)dlen) {
				*fd_out = fd;
				*st_out = st;
				return 1;
			}
			close(fd);
		}
	}

	if (w->pid && w->path[0] == '/')
		snprintf(roots[nroots++], sizeof(roots[0]), "%s/%u/root", u->proc_root, w->pid);
	roots[nroots++][0] = '\0';
	if (w->id.kind == SYSOM_OBJECT_ELF && w->id.len >= 2) {
		hex_of(&w->id, hex);
		for (int r = 0; r < nroots; r++) {
			snprintf(dpath, dlen, "%s%s/.build-id/%.2s/%s.debug", roots[r],
				 u->debug_root, hex, hex + 2);
			rc = try_debug(u, dpath, exe_st, &w->id, false, 0, fd_out, st_out,
				       too_large);
			if (rc)
				return rc;
		}
	}
	if (w->path[0] != '/')
		return 0;
	/* Only for files whose ELF headers the build ID reader accepted (libelf is then safe). */
	struct sysom_build_id unused;
	rc = sysom_elf_build_id(exe_fd, &unused);
	if ((rc != 0 && rc != -SYSOM_ENOBUILDID) ||
	    read_debuglink(exe_fd, link, sizeof(link), &crc))
		return 0;
	snprintf(dir, sizeof(dir), "%s", w->path);
	char *slash = strrchr(dir, '/');
	slash[slash == dir ? 1 : 0] = '\0';
	const char *sep = strcmp(dir, "/") == 0 ? "" : "/";
	for (int r = 0; r < nroots; r++) {
		for (int c = 0; c < 3; c++) {
			int n;
			if (c == 0)
				n = snprintf(dpath, dlen, "%s%s%s%s", roots[r], dir, sep, link);
			else if (c == 1)
				n = snprintf(dpath, dlen, "%s%s%s.debug/%s", roots[r], dir, sep,
					     link);
			else
				n = snprintf(dpath, dlen, "%s%s%s%s%s", roots[r], u->debug_root,
					     dir, sep, link);
			if (n < 0 || (size_t)n >= dlen)
				continue;
			rc = try_debug(u, dpath, exe_st, &w->id, true, crc, fd_out, st_out,
				       too_large);
			if (rc)
				return rc;
		}
	}
	return 0;
}
