/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel identity (build ID, _text, modules) and kallsyms rendering for symbol upload. */
#include "agent/node/kernel.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "agent/node/host.h"
#include "common/error.h"
#include "common/wire/wire.h"

#define KALLSYMS_MAX (256u << 20)
#define KERNEL_IMAGE_MAX (1ULL << 30)

static const char *path_or(const char *path, const char *fallback)
{
	return path ? path : fallback;
}

/* Parses one kallsyms line: address, type, name, optional "[module]". */
static bool parse_kallsyms_line(const char *line, const char *end, uint64_t *addr, char *type,
				const char **name, size_t *name_len, const char **module,
				size_t *module_len)
{
	char *after;

	if (line >= end || !isxdigit((unsigned char)*line))
		return false;
	*addr = strtoull(line, &after, 16);
	if (after >= end || *after != ' ' || after + 3 > end)
		return false;
	*type = after[1];
	if (after[2] != ' ')
		return false;
	const char *p = after + 3;
	const char *stop = p;
	while (stop < end && *stop != '\t' && *stop != '\n' && *stop != ' ')
		stop++;
	*name = p;
	*name_len = (size_t)(stop - p);
	*module = NULL;
	*module_len = 0;
	if (stop < end && *stop == '\t' && stop + 1 < end && stop[1] == '[') {
		const char *m = stop + 2;
		const char *mend = memchr(m, ']', (size_t)(end - m));
		if (mend) {
			*module = m;
			*module_len = (size_t)(mend - m);
		}
	}
	return *name_len > 0;
}

static const char *next_line(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	return nl ? nl + 1 : end;
}

static int compare_modules(const void *a, const void *b)
{
	const struct kernel_module *x = a, *y = b;

	return x->base < y->base ? -1 : x->base > y->base;
}

/* A stable identity for something without a build ID: XXH3-128 of the given text. */
static void derive_id(uint8_t kind, const void *data, size_t len, struct sysom_build_id *out)
{
	XXH128_hash_t h = XXH3_128bits(data, len);

	memset(out, 0, sizeof(*out));
	out->kind = kind;
	out->len = 16;
	memcpy(out->bytes, &h.high64, 8);
	memcpy(out->bytes + 8, &h.low64, 8);
}

static int read_modules(const struct kernel_paths *paths, struct kernel_info *ki)
{
	char *text = NULL;
	long len = host_read_file(path_or(paths->modules, "/proc/modules"), 16u << 20, &text);
	int rc = 0;

	if (len == -ENOENT)
		return 0; /* a kernel without loadable modules */
	if (len < 0)
		return (int)len;
	const char *end = text + len;
	for (const char *line = text; line < end; line = next_line(line, end)) {
		/* name size refcount deps state address [taint] */
		char name[KERNEL_MODULE_NAME_MAX];
		unsigned long long size, base;
		if (sscanf(line, "%63s %llu %*s %*s %*s %llx", name, &size, &base) != 3 || !base)
			continue;
		if (ki->module_count >= KERNEL_MAX_MODULES)
			break;
		struct kernel_module *grown =
			realloc(ki->modules, (ki->module_count + 1) * sizeof(*grown));
		if (!grown) {
			rc = -ENOMEM;
			goto cleanup;
		}
		ki->modules = grown;
		struct kernel_module *m = &ki->modules[ki->module_count++];
		memset(m, 0, sizeof(*m));
		snprintf(m->name, sizeof(m->name), "%s", name);
		m->base = base;
		m->size = size;
		/* The module's own build ID when it has one; otherwise derived from the
		 * kernel's identity and the module name (stable across nodes of one build). */
		char notes_path[PATH_MAX];
		char *notes = NULL;
		snprintf(notes_path, sizeof(notes_path), "%s/%s/notes/.note.gnu.build-id",
			 path_or(paths->sys_module, "/sys/module"), name);
		long nlen = host_read_file(notes_path, 4096, &notes);
		if (nlen <= 0 || sysom_build_id_from_notes(notes, (size_t)nlen, &m->id)) {
			uint8_t seed[SYSOM_BUILD_ID_MAX + KERNEL_MODULE_NAME_MAX];
			size_t nl = strlen(m->name);
			memcpy(seed, ki->id.bytes, ki->id.len);
			memcpy(seed + ki->id.len, m->name, nl);
			derive_id(SYSOM_OBJECT_KMODULE, seed, ki->id.len + nl, &m->id);
		}
		m->id.kind = SYSOM_OBJECT_KMODULE;
		free(notes);
	}
	qsort(ki->modules, ki->module_count, sizeof(*ki->modules), compare_modules);
cleanup:
	free(text);
	return rc;
}

int kernel_info_read(const struct kernel_paths *paths, struct kernel_info *out)
{
	struct kernel_paths none = { 0 };
	struct kernel_info ki;
	char *notes = NULL, *kallsyms = NULL;
	long len;
	int rc;

	if (!paths)
		paths = &none;
	memset(&ki, 0, sizeof(ki));
	len = host_read_file(path_or(paths->notes, "/sys/kernel/notes"), 1u << 16, &notes);
	if (len > 0 && sysom_build_id_from_notes(notes, (size_t)len, &ki.id) == 0) {
		ki.id.kind = SYSOM_OBJECT_KERNEL;
	} else {
		char version[1024];
		int vlen = host_read_text(path_or(paths->version, "/proc/version"), version,
					  sizeof(version));
		if (vlen < 0) {
			rc = vlen;
			goto cleanup;
		}
		derive_id(SYSOM_OBJECT_KERNEL, version, (size_t)vlen, &ki.id);
		ki.id_derived = true;
	}

	len = host_read_file(path_or(paths->kallsyms, "/proc/kallsyms"), KALLSYMS_MAX, &kallsyms);
	if (len < 0) {
		rc = (int)len;
		goto cleanup;
	}
	/* The image spans [_text, _end). Without CONFIG_KALLSYMS_ALL there is no _end: then
	 * the highest core-kernel symbol bounds it (x86-64's image is at most 1 GiB). */
	const char *end = kallsyms + len;
	for (const char *line = kallsyms; line < end; line = next_line(line, end)) {
		uint64_t addr;
		char type;
		const char *name, *module;
		size_t name_len, module_len;
		if (!parse_kallsyms_line(line, end, &addr, &type, &name, &name_len, &module,
					 &module_len) || module)
			continue;
		if (name_len == 5 && memcmp(name, "_text", 5) == 0)
			ki.text_start = addr;
		else if (name_len == 4 && memcmp(name, "_end", 4) == 0)
			ki.image_end = addr;
	}
	ki.addresses_visible = ki.text_start != 0;
	if (ki.addresses_visible && !ki.image_end) {
		uint64_t limit = ki.text_start + KERNEL_IMAGE_MAX;
		for (const char *line = kallsyms; line < end; line = next_line(line, end)) {
			uint64_t addr;
			char type;
			const char *name, *module;
			size_t name_len, module_len;
			if (parse_kallsyms_line(line, end, &addr, &type, &name, &name_len, &module,
						&module_len) && !module && addr >= ki.text_start &&
			    addr < limit && addr + 1 > ki.image_end)
				ki.image_end = addr + 1;
		}
	}
	if (ki.addresses_visible && ki.image_end <= ki.text_start) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	rc = read_modules(paths, &ki);
	if (rc)
		goto cleanup;
	*out = ki;
	memset(&ki, 0, sizeof(ki));
cleanup:
	kernel_info_free(&ki);
	free(notes);
	free(kallsyms);
	return rc;
}

void kernel_info_free(struct kernel_info *ki)
{
	if (!ki)
		return;
	free(ki->modules);
	ki->modules = NULL;
	ki->module_count = 0;
}

void kernel_resolve(const struct kernel_info *ki, uint64_t addr, struct kernel_location *out)
{
	if (ki->addresses_visible && addr >= ki->text_start && addr < ki->image_end) {
		*out = (struct kernel_location){ SYSOM_OBJECT_KERNEL, &ki->id, "[kernel.kallsyms]",
						 addr - ki->text_start };
		return;
	}
	uint32_t lo = 0, hi = ki->module_count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct kernel_module *m = &ki->modules[mid];
		if (addr < m->base) {
			hi = mid;
		} else if (addr >= m->base + m->size) {
			lo = mid + 1;
		} else {
			*out = (struct kernel_location){ SYSOM_OBJECT_KMODULE, &m->id, m->name,
							 addr - m->base };
			return;
		}
	}
	*out = (struct kernel_location){ SYSOM_OBJECT_UNKNOWN, NULL, "[unknown]", addr };
}

long kernel_symbols_render(const struct kernel_info *ki, const struct kernel_module *module,
			   const char *text, size_t len, struct byte_buf *out)
{
	const char *end = text + len;
	long count = 0;

	if (!ki->addresses_visible)
		return -EPERM;
	for (const char *line = text; line < end; line = next_line(line, end)) {
		uint64_t addr;
		char type;
		const char *name, *mod;
		size_t name_len, mod_len;
		if (!parse_kallsyms_line(line, end, &addr, &type, &name, &name_len, &mod, &mod_len))
			continue;
		/* Text symbols only: t/T, and weak w/W that point at code. */
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		if (name_len > 512)
			continue;
		uint64_t base, limit;
		if (module) {
			if (!mod || mod_len != strlen(module->name) ||
			    memcmp(mod, module->name, mod_len) != 0)
				continue;
			base = module->base;
			limit = module->base + module->size;
		} else {
			if (mod)
				continue;
			base = ki->text_start;
			limit = ki->image_end;
		}
		if (addr < base || addr >= limit)
			continue;
		byte_buf_printf(out, "%" PRIx64 " %c %.*s\n", addr - base, type, (int)name_len, name);
		count++;
	}
	return byte_buf_error(out) ? byte_buf_error(out) : count;
}
