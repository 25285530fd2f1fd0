/* SPDX-License-Identifier: Apache-2.0 */
/* The running kernel as an object: build ID, text range, modules; kernel addresses →
 * (kernel or module object, offset); kallsyms rendered for upload. */
#ifndef SYSOM_AGENT_NODE_KERNEL_H
#define SYSOM_AGENT_NODE_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "common/elf_buildid.h"

#define KERNEL_MODULE_NAME_MAX 64
#define KERNEL_MAX_MODULES 4096

struct kernel_module {
	char name[KERNEL_MODULE_NAME_MAX];
	uint64_t base, size;       /* core text range from /proc/modules */
	struct sysom_build_id id;  /* kind SYSOM_OBJECT_KMODULE */
};

struct kernel_info {
	struct sysom_build_id id;  /* kind SYSOM_OBJECT_KERNEL */
	bool id_derived;           /* no build ID note: derived from the release and version */
	uint64_t text_start;       /* address of _text (offsets are relative to it) */
	uint64_t image_end;        /* address of _end */
	bool addresses_visible;    /* false when kptr_restrict hides /proc/kallsyms addresses */
	struct kernel_module *modules; /* sorted by base */
	uint32_t module_count;
};

/* Paths, overridable for tests; NULL members mean the real /proc and /sys files. */
struct kernel_paths {
	const char *kallsyms;   /* /proc/kallsyms */
	const char *modules;    /* /proc/modules */
	const char *notes;      /* /sys/kernel/notes */
	const char *sys_module; /* /sys/module (module notes under NAME/notes/.note.gnu.build-id) */
	const char *version;    /* /proc/version */
};

/* Reads the kernel's identity, text range and modules. 0 or -errno / -SYSOM_ECORRUPT. */
int kernel_info_read(const struct kernel_paths *paths, struct kernel_info *out);
void kernel_info_free(struct kernel_info *ki);

/* Where a kernel address lies. */
struct kernel_location {
	uint8_t kind;                   /* SYSOM_OBJECT_KERNEL, _KMODULE or _UNKNOWN */
	const struct sysom_build_id *id; /* NULL for unknown */
	const char *name;               /* "[kernel.kallsyms]", "[module]" or "[unknown]" */
	uint64_t offset;                /* from _text / the module base; the address if unknown */
};

void kernel_resolve(const struct kernel_info *ki, uint64_t addr, struct kernel_location *out);

/*
 * Renders the text symbols of the kernel (module == NULL) or of one module from kallsyms
 * `text` as the upload format: "OFFSET_HEX TYPE NAME\n" lines, offsets relative to _text
 * (or the module base), appended to `out`. Returns the number of symbols or -errno.
 */
long kernel_symbols_render(const struct kernel_info *ki, const struct kernel_module *module,
			   const char *text, size_t len, struct byte_buf *out);

#endif
