/* SPDX-License-Identifier: Apache-2.0 */
/* struct ncclComm field offsets: from DWARF (libdw), else a per-release table. */
#include "agent/gpu/nccl_layout.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/elf_buildid.h"
#include "common/error.h"

#define MAX_RODATA_BYTES (256u << 20) /* larger read-only sections are not searched */
#define MAX_MEMBERS 4096              /* members examined per candidate struct */
#define MAX_DWARF_BYTES (1024u << 20) /* debug sections libdw reads into memory, in all */

#define KNOWN(ma, mi, pa, rank, nranks, hash, hash_size, size)                                  \
	{ .version = { ma, mi, pa }, .struct_size = size, .rank_offset = rank,                    \
	  .nranks_offset = nranks, .comm_hash_offset = hash, .comm_hash_size = hash_size,          \
	  .source = NCCL_LAYOUT_TABLE }

/*
 * Known releases, exact versions only: patch releases of one minor differ (2.18.5 / 2.18.6,
 * 2.19.1 / 2.19.3, 2.28.3 / 2.28.7). Derived by scripts/nccl_layout_table.sh, which compiles
 * offsetof(struct ncclComm, rank | nRanks | commHash) and sizeof against each release tag's
 * src/include of github.com/NVIDIA/nccl; its 2.28.9 row equals what this file reads from the
 * real library's DWARF (and what gdb prints), which tests/unit/agent/gpu/test_nccl_layout.c checks.
 * Releases before 2.18 have no commHash member (hash size 0: rank and nRanks only).
 */
static const struct nccl_comm_layout known_layouts[] = {
	KNOWN(2, 14, 3, 6064, 6068, 0, 0, 10880),
	KNOWN(2, 15, 1, 6064, 6068, 0, 0, 10880),
	KNOWN(2, 15, 5, 6064, 6068, 0, 0, 10880),
	KNOWN(2, 16, 2, 6072, 6076, 0, 0, 10888),
	KNOWN(2, 16, 5, 6072, 6076, 0, 0, 10888),
	KNOWN(2, 17, 1, 7608, 7612, 0, 0, 12640),
	KNOWN(2, 18, 1, 9176, 9180, 9168, 8, 11128),
	KNOWN(2, 18, 3, 9176, 9180, 9168, 8, 11176),
	KNOWN(2, 18, 5, 9176, 9180, 9168, 8, 11176),
	KNOWN(2, 18, 6, 9432, 9436, 9424, 8, 11432),
	KNOWN(2, 19, 1, 9176, 9180, 9168, 8, 11344),
	KNOWN(2, 19, 3, 9432, 9436, 9424, 8, 11600),
	KNOWN(2, 19, 4, 9432, 9436, 9424, 8, 11552),
	KNOWN(2, 20, 3, 10456, 10460, 10448, 8, 13152),
	KNOWN(2, 20, 5, 10456, 10460, 10448, 8, 13152),
	KNOWN(2, 21, 5, 13536, 13540, 13528, 8, 16288),
	KNOWN(2, 22, 3, 213584, 213588, 213576, 8, 219520),
	KNOWN(2, 23, 4, 246952, 246956, 246944, 8, 253152),
	KNOWN(2, 24, 3, 246952, 246956, 246944, 8, 252624),
	KNOWN(2, 25, 1, 492712, 492716, 492704, 8, 501072),
	KNOWN(2, 26, 2, 492728, 492732, 492720, 8, 506752),
	KNOWN(2, 26, 3, 492728, 492732, 492720, 8, 506752),
	KNOWN(2, 26, 5, 492728, 492732, 492720, 8, 506752),
	KNOWN(2, 26, 6, 492728, 492732, 492720, 8, 506752),
	KNOWN(2, 27, 3, 1066168, 1066172, 1066160, 8, 1080320),
	KNOWN(2, 27, 5, 1066168, 1066172, 1066160, 8, 1080320),
	KNOWN(2, 27, 6, 1066168, 1066172, 1066160, 8, 1080320),
	KNOWN(2, 27, 7, 1066168, 1066172, 1066160, 8, 1080320),
	KNOWN(2, 28, 3, 1066184, 1066188, 1066176, 8, 1081816),
	KNOWN(2, 28, 7, 1066192, 1066196, 1066184, 8, 1082968),
	KNOWN(2, 28, 9, 1066192, 1066196, 1066184, 8, 1082968),
};

const struct nccl_comm_layout *nccl_layout_known(const struct nccl_version *v)
{
	for (size_t i = 0; i < sizeof(known_layouts) / sizeof(known_layouts[0]); i++)
		if (known_layouts[i].version.major == v->major &&
		    known_layouts[i].version.minor == v->minor &&
		    known_layouts[i].version.patch == v->patch)
			return &known_layouts[i];
	return NULL;
}

static int parse_version(const char *s, size_t len, struct nccl_version *out)
{
	unsigned long part[3];
	size_t i = 0;

	for (int k = 0; k < 3; k++) {
		if (i >= len || s[i] < '0' || s[i] > '9')
			return -ENOENT;
		part[k] = 0;
		while (i < len && s[i] >= '0' && s[i] <= '9' && part[k] < 100000)
			part[k] = part[k] * 10 + (unsigned long)(s[i++] - '0');
		if (part[k] > 65535)
			return -ENOENT;
		if (k < 2 && (i >= len || s[i++] != '.'))
			return -ENOENT;
	}
	out->major = (uint16_t)part[0];
	out->minor = (uint16_t)part[1];
	out->patch = (uint16_t)part[2];
	return 0;
}

int nccl_version_read(const char *path, struct nccl_version *out)
{
	static const char banner[] = "NCCL version ";
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int fd, rc = -ENOENT;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* pread, not mmap: a file truncated meanwhile is -EIO, not SIGBUS. */
	if ((rc = sysom_elf_open_read(fd, &elf)))
		goto cleanup;
	if (elf_getshdrstrndx(elf, &shstrndx)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	rc = -ENOENT; /* until the banner is found */
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;
		const char *name;

		if (!gelf_getshdr(scn, &sh)) {
			rc = -EIO; /* the section headers are read on demand: a short read */
			goto cleanup;
		}
		if (sh.sh_type != SHT_PROGBITS ||
		    !(name = elf_strptr(elf, shstrndx, sh.sh_name)) || strcmp(name, ".rodata") ||
		    sh.sh_size > MAX_RODATA_BYTES)
			continue;
		data = elf_rawdata(scn, NULL);
		if (!data && sh.sh_size) {
			rc = -EIO; /* a short read: the file changed while read */
			goto cleanup;
		}
		if (!data || !data->d_buf)
			continue;
		const char *p = data->d_buf, *end = p + data->d_size;
		while ((p = memmem(p, (size_t)(end - p), banner, sizeof(banner) - 1))) {
			p += sizeof(banner) - 1;
			if (parse_version(p, (size_t)(end - p), out) == 0) {
				rc = 0;
				goto cleanup;
			}
		}
	}
cleanup:
	if (elf)
		elf_end(elf);
	close(fd);
	return rc;
}

/* Byte offset of a member and its type's size; false when absent or not a constant. */
static bool member_of(Dwarf_Die *member, Dwarf_Word *offset, Dwarf_Word *size)
{
	Dwarf_Attribute attr;
	Dwarf_Die type;

	if (!dwarf_attr(member, DW_AT_data_member_location, &attr) ||
	    dwarf_formudata(&attr, offset) != 0)
		return false;
	if (!dwarf_attr_integrate(member, DW_AT_type, &attr) || !dwarf_formref_die(&attr, &type))
		return false;
	/* Through typedefs and qualifiers to something with a size (bounded). */
	for (int depth = 0; depth < 16; depth++) {
		Dwarf_Word bytes;
		if (dwarf_attr(&type, DW_AT_byte_size, &attr) && dwarf_formudata(&attr, &bytes) == 0) {
			*size = bytes;
			return true;
		}
		if (!dwarf_attr(&type, DW_AT_type, &attr) || !dwarf_formref_die(&attr, &type))
			return false;
	}
	return false;
}

/* Fills `out` from a complete struct ncclComm DIE; -SYSOM_ECORRUPT when fields are missing. */
static int read_struct(Dwarf_Die *st, struct nccl_comm_layout *out)
{
	Dwarf_Die child;
	Dwarf_Attribute attr;
	Dwarf_Word size = 0;
	int found = 0, n = 0;

	if (dwarf_attr(st, DW_AT_byte_size, &attr) && dwarf_formudata(&attr, &size) == 0 &&
	    size <= UINT32_MAX)
		out->struct_size = (uint32_t)size;
	if (dwarf_child(st, &child) != 0)
		return -SYSOM_ECORRUPT;
	do {
		Dwarf_Word off, bytes;
		const char *name;

		if (++n > MAX_MEMBERS)
			break;
		if (dwarf_tag(&child) != DW_TAG_member || !(name = dwarf_diename(&child)) ||
		    !member_of(&child, &off, &bytes) || off > UINT32_MAX)
			continue;
		if (!strcmp(name, "rank") && bytes == 4) {
			out->rank_offset = (uint32_t)off;
			found |= 1;
		} else if (!strcmp(name, "nRanks") && bytes == 4) {
			out->nranks_offset = (uint32_t)off;
			found |= 2;
		} else if (!strcmp(name, "commHash") && bytes == 8) {
			out->comm_hash_offset = (uint32_t)off;
			out->comm_hash_size = 8;
			found |= 4;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	/* commHash appeared in 2.18: without it, rank and nRanks alone (hash size 0). */
	return (found & 3) == 3 ? 0 : -SYSOM_ECORRUPT;
}

static bool is_definition(Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	bool decl = false;
	const char *name;

	if (dwarf_tag(die) != DW_TAG_structure_type && dwarf_tag(die) != DW_TAG_class_type)
		return false;
	if (!(name = dwarf_diename(die)) || strcmp(name, "ncclComm"))
		return false;
	if (dwarf_attr(die, DW_AT_declaration, &attr))
		dwarf_formflag(&attr, &decl);
	return !decl && dwarf_hasattr(die, DW_AT_byte_size);
}

/* Bytes libdw would read into memory for the debug sections of `elf` (compressed ones at
 * their decompressed size); UINT64_MAX when a header cannot be read. */
static uint64_t dwarf_bytes(Elf *elf)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	uint64_t total = 0;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		GElf_Chdr ch;
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			return UINT64_MAX;
		if (sh.sh_type == SHT_NOBITS || !(name = elf_strptr(elf, shstrndx, sh.sh_name)) ||
		    (strncmp(name, ".debug_", 7) && strncmp(name, ".zdebug_", 8)))
			continue;
		if (sh.sh_size > MAX_DWARF_BYTES)
			return UINT64_MAX;
		total += sh.sh_size;
		if (sh.sh_flags & SHF_COMPRESSED) {
			if (!gelf_getchdr(scn, &ch))
				return UINT64_MAX;
			total += ch.ch_size;
		}
		if (total > MAX_DWARF_BYTES)
			return total;
	}
	return total;
}

int nccl_layout_from_dwarf(const char *path, struct nccl_comm_layout *out)
{
	Elf *elf = NULL;
	Dwarf *dw = NULL;
	Dwarf_Off off = 0, next;
	size_t header;
	int fd, rc = -ENOENT;

	memset(out, 0, sizeof(*out));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Not dwarf_begin(fd): it maps the file (ELF_C_READ_MMAP), and a file truncated meanwhile
	 * raises SIGBUS. pread instead, with the debug sections it reads whole bounded. */
	if ((rc = sysom_elf_open_read(fd, &elf))) {
		if (rc == -SYSOM_ECORRUPT)
			rc = -ENOENT; /* not ELF */
		goto cleanup;
	}
	rc = -ENOENT; /* what the jumps below return */
	uint64_t bytes = dwarf_bytes(elf);
	if (bytes > MAX_DWARF_BYTES) {
		rc = bytes == UINT64_MAX ? -EIO : -SYSOM_ELIMIT;
		goto cleanup;
	}
	dw = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
	if (!dw)
		goto cleanup; /* no DWARF: -ENOENT */
	/* Top-level DIEs of every unit (structs defined in namespaces are not NCCL's). */
	while (rc == -ENOENT && dwarf_nextcu(dw, off, &next, &header, NULL, NULL, NULL) == 0) {
		Dwarf_Die cu, die;

		if (dwarf_offdie(dw, off + header, &cu) && dwarf_child(&cu, &die) == 0) {
			do {
				if (is_definition(&die))
					rc = read_struct(&die, out);
			} while (rc == -ENOENT && dwarf_siblingof(&die, &die) == 0);
		}
		off = next;
	}
	if (rc == 0) {
		out->source = NCCL_LAYOUT_DWARF;
		nccl_version_read(path, &out->version);
	}
cleanup:
	if (dw)
		dwarf_end(dw);
	if (elf)
		elf_end(elf);
	close(fd);
	return rc;
}

int nccl_layout_resolve(const char *path, struct nccl_comm_layout *out)
{
	const struct nccl_comm_layout *known;
	struct nccl_version v;

	int rc = nccl_layout_from_dwarf(path, out);

	if (rc == 0)
		return 0;
	if (rc == -EIO)
		return rc;
	if ((rc = nccl_version_read(path, &v)))
		return rc == -EIO ? rc : -ENOENT;
	if (!(known = nccl_layout_known(&v)))
		return -ENOENT;
	*out = *known;
	out->version = v;
	return 0;
}
