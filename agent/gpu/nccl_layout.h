/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where NCCL keeps a communicator's rank, nRanks and commHash inside `struct ncclComm`: from
 * the library's own DWARF when it has it, else from a table of known releases. The offsets
 * change between releases, and the BPF probes read these fields from communicators whose
 * initialisation the agent did not see.
 */
#ifndef SYSOM_AGENT_GPU_NCCL_LAYOUT_H
#define SYSOM_AGENT_GPU_NCCL_LAYOUT_H

#include <stdint.h>

struct nccl_version {
	uint16_t major, minor, patch;
};

enum nccl_layout_source { NCCL_LAYOUT_NONE, NCCL_LAYOUT_DWARF, NCCL_LAYOUT_TABLE };

struct nccl_comm_layout {
	struct nccl_version version;  /* library version it applies to */
	uint32_t struct_size;         /* sizeof(struct ncclComm), 0 when unknown */
	uint32_t rank_offset, nranks_offset, comm_hash_offset; /* byte offsets */
	uint8_t comm_hash_size;       /* 8 (uint64_t); 0: no commHash (before 2.18) */
	enum nccl_layout_source source;
};

/*
 * The library's version from its "NCCL version X.Y.Z" banner in the read-only data (bounded
 * read of one section, with pread: never mmap). 0, -ENOENT (no banner), -SYSOM_ECORRUPT (not
 * ELF), -EIO (the file changed while read), -errno.
 */
int nccl_version_read(const char *path, struct nccl_version *out);

/*
 * Offsets from the library's DWARF (libdw): the complete definition of `struct ncclComm`, its
 * members rank and nRanks (4-byte signed) and commHash (8-byte). 0, -ENOENT (no DWARF or no
 * such struct), -SYSOM_ECORRUPT (members missing or of the wrong size), -SYSOM_ELIMIT (debug
 * sections over 1 GiB: libdw reads them whole), -EIO (the file changed while read), -errno.
 * Read with pread (libelf ELF_C_READ), never mmap: a file truncated meanwhile is not SIGBUS.
 */
int nccl_layout_from_dwarf(const char *path, struct nccl_comm_layout *out);

/* The built-in entry for a release (exact major.minor.patch), NULL when unknown. */
const struct nccl_comm_layout *nccl_layout_known(const struct nccl_version *v);

/* DWARF first, else the table for the library's version; -ENOENT when neither, -EIO when the
 * file changed while read. */
int nccl_layout_resolve(const char *path, struct nccl_comm_layout *out);

#endif
