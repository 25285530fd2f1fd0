/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The record framing of docs/registration-protocol.md (agent/ranks/registry.h decodes it), for the
 * libc-only client side: little-endian magic u32 "SYRG", version u16, type u16, payload length
 * u32, reserved u32, then the payload.
 */
#ifndef SYSOM_FRAME_H
#define SYSOM_FRAME_H

#include <stdint.h>

#define SYSOM_FRAME_MAGIC 0x47525953u /* "SYRG" */
#define SYSOM_FRAME_VERSION 1
#define SYSOM_FRAME_HEADER_SIZE 16

static inline void sysom_frame_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t sysom_frame_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void sysom_frame_put_header(uint8_t *p, uint16_t type, uint32_t payload_len)
{
	sysom_frame_put_le32(p, SYSOM_FRAME_MAGIC);
	p[4] = SYSOM_FRAME_VERSION & 0xff;
	p[5] = SYSOM_FRAME_VERSION >> 8;
	p[6] = (uint8_t)type;
	p[7] = (uint8_t)(type >> 8);
	sysom_frame_put_le32(p + 8, payload_len);
	sysom_frame_put_le32(p + 12, 0);
}

#endif
