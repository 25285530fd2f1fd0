/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: raw ELF notes, ELF images in memory and ELF files (memfd) → build ID. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/elf_buildid.h"
#include "common/error.h"

/* Images up to this size are also read from read-only pages that end at an inaccessible
 * page, so libelf (not instrumented by ASan) faults on any write or read past the end. */
#define GUARDED_MAX (1u << 20)

static uint8_t *guarded_area; /* GUARDED_MAX bytes, then a PROT_NONE page */
static int memfd = -1;

static void init_once(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (memfd < 0) {
		memfd = memfd_create("fuzz_elf_notes", MFD_CLOEXEC);
		if (memfd < 0)
			abort();
	}
	if (!guarded_area) {
		uint8_t *map = mmap(NULL, GUARDED_MAX + page, PROT_NONE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (map == MAP_FAILED)
			abort();
		guarded_area = map;
	}
}

static int check_id(int err, const struct sysom_build_id *id)
{
	if (err == 0 && (id->kind != SYSOM_OBJECT_ELF || id->len < 3 || id->len > SYSOM_BUILD_ID_MAX))
		abort();
	return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sysom_build_id a, b, c;
	int err_mem, err_fd;

	init_once();
	check_id(sysom_build_id_from_notes(data, size, &a), &a);

	/* In memory: the input itself (ASan sees our own reads; libFuzzer checks that the
	 * const input is left unchanged), then a guarded read-only copy. */
	err_mem = check_id(sysom_elf_build_id_memory(data, size, &a), &a);
	if (size <= GUARDED_MAX) {
		const uint8_t *image = guarded_area + GUARDED_MAX - size;
		if (mprotect(guarded_area, GUARDED_MAX, PROT_READ | PROT_WRITE) != 0)
			abort();
		if (size)
			memcpy((uint8_t *)image, data, size);
		if (mprotect(guarded_area, GUARDED_MAX, PROT_READ) != 0)
			abort();
		int err_guarded = check_id(sysom_elf_build_id_memory(image, size, &b), &b);
		if (err_guarded != err_mem || (err_mem == 0 && memcmp(&a, &b, sizeof(a)) != 0))
			abort();
	}

	/* As a file: the same answer as from memory. */
	if (ftruncate(memfd, 0) != 0)
		abort();
	if (size && pwrite(memfd, data, size, 0) != (ssize_t)size)
		abort();
	err_fd = check_id(sysom_elf_build_id(memfd, &c), &c);
	if (err_fd != err_mem || (err_fd == 0 && memcmp(&a, &c, sizeof(a)) != 0))
		abort();
	if (sysom_object_identity(memfd, &c) != 0)
		abort(); /* a regular file always has an identity */
	return 0;
}
