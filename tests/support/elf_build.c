/* SPDX-License-Identifier: Apache-2.0 */
/* In-memory x86-64 ELF images for tests and fuzzers. */
#include "tests/support/elf_build.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

uint8_t *elf_build_image(uint16_t e_type, const struct elf_build_section *sections, size_t n,
			 size_t *size)
{
	size_t names = 1 + sizeof(".shstrtab");
	for (size_t i = 0; i < n; i++)
		names += strlen(sections[i].name) + 1;

	/* Header, section contents (8-aligned), names, then the section header table. */
	size_t off = sizeof(Elf64_Ehdr);
	size_t *data_off = calloc(n + 1, sizeof(*data_off));
	if (!data_off)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		off = (off + 7) & ~(size_t)7;
		data_off[i] = off;
		if (sections[i].type != SHT_NOBITS)
			off += sections[i].size;
	}
	size_t names_off = off;
	off += names;
	size_t shoff = (off + 7) & ~(size_t)7;
	size_t shnum = n + 2;
	size_t total = shoff + shnum * sizeof(Elf64_Shdr);

	uint8_t *img = calloc(1, total);
	if (!img) {
		free(data_off);
		return NULL;
	}
	Elf64_Ehdr *eh = (Elf64_Ehdr *)img;
	memcpy(eh->e_ident, ELFMAG, SELFMAG);
	eh->e_ident[EI_CLASS] = ELFCLASS64;
	eh->e_ident[EI_DATA] = ELFDATA2LSB;
	eh->e_ident[EI_VERSION] = EV_CURRENT;
	eh->e_type = e_type;
	eh->e_machine = EM_X86_64;
	eh->e_version = EV_CURRENT;
	eh->e_ehsize = sizeof(Elf64_Ehdr);
	eh->e_shentsize = sizeof(Elf64_Shdr);
	eh->e_shoff = shoff;
	eh->e_shnum = (uint16_t)shnum;
	eh->e_shstrndx = (uint16_t)(n + 1);

	Elf64_Shdr *sh = (Elf64_Shdr *)(img + shoff);
	char *strtab = (char *)img + names_off;
	size_t name_pos = 1;
	for (size_t i = 0; i < n; i++) {
		const struct elf_build_section *s = &sections[i];
		Elf64_Shdr *h = &sh[i + 1];
		h->sh_name = (uint32_t)name_pos;
		strcpy(strtab + name_pos, s->name);
		name_pos += strlen(s->name) + 1;
		h->sh_type = s->type;
		h->sh_flags = s->flags;
		h->sh_addr = s->addr;
		h->sh_offset = data_off[i];
		h->sh_size = s->size;
		h->sh_addralign = 8;
		if (s->type != SHT_NOBITS && s->size)
			memcpy(img + data_off[i], s->data, s->size);
	}
	Elf64_Shdr *h = &sh[n + 1];
	h->sh_name = (uint32_t)name_pos;
	strcpy(strtab + name_pos, ".shstrtab");
	h->sh_type = SHT_STRTAB;
	h->sh_offset = names_off;
	h->sh_size = names;
	h->sh_addralign = 1;
	free(data_off);
	*size = total;
	return img;
}
