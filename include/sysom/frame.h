/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The record framing of the agent's Unix socket (docs/registration-protocol.md): the one
 * definition, used by the agent (agent/ranks/registry.c), the client library (client/) and the
 * in-process plugins (through client/sysom_channel.c). Libc only: static inline helpers.
 *
 * Every message is one SOCK_SEQPACKET record: a 16-byte header, then `length` bytes of payload.
 * All integers are little-endian.
 *
 * | Offset | Size | Field    | Notes                                                        |
 * |-------:|-----:|----------|--------------------------------------------------------------|
 * |      0 |    4 | magic    | ASCII "SYRG" (0x47525953 read as a little-endian u32)        |
 * |      4 |    2 | version  | 1; other versions are rejected and the connection closed     |
 * |      6 |    2 | type     | enum sysom_frame_type, enum sysom_record_type (records.h)    |
 * |      8 |    4 | length   | payload bytes; header + payload == the record's size exactly |
 * |     12 |    4 | reserved | 0; other values are rejected                                 |
 * |     16 |    n | payload  | per type                                                     |
 *
 * A record is at most SYSOM_FRAME_MAX_RECORD bytes, header included.
 */
#ifndef SYSOM_FRAME_H
#define SYSOM_FRAME_H

#include <stdint.h>

#define SYSOM_FRAME_MAGIC 0x47525953u /* "SYRG" */
#define SYSOM_FRAME_VERSION 1
#define SYSOM_FRAME_HEADER_SIZE 16
#define SYSOM_FRAME_MAX_RECORD (64u * 1024) /* bytes of one record, header included */

/* Header field offsets (the table above). */
#define SYSOM_FRAME_OFF_MAGIC 0
#define SYSOM_FRAME_OFF_VERSION 4
#define SYSOM_FRAME_OFF_TYPE 6
#define SYSOM_FRAME_OFF_LENGTH 8
#define SYSOM_FRAME_OFF_RESERVED 12

/* Record types of the registration itself; telemetry types (3 and up) are enum
 * sysom_record_type in include/sysom/records.h. */
enum sysom_frame_type {
	SYSOM_FRAME_REGISTER = 1, /* rank → agent: NUL-separated "key=value" identity entries */
	SYSOM_FRAME_ACK = 2,      /* agent → rank: i32 status (0 or a negative errno) */
};

/* REGISTER payload: NUL-separated "key=value" entries (the last NUL optional), each key at most
 * once; numbers plain decimal (docs/registration-protocol.md has the rules). */
#define SYSOM_REGISTER_KEY_JOB "job"
#define SYSOM_REGISTER_KEY_RANK "rank"
#define SYSOM_REGISTER_KEY_LOCAL_RANK "local_rank"
#define SYSOM_REGISTER_KEY_WORLD_SIZE "world_size"
#define SYSOM_REGISTER_KEY_LOCAL_WORLD_SIZE "local_world_size"
#define SYSOM_REGISTER_KEY_GROUP_RANK "group_rank"
#define SYSOM_REGISTER_KEY_GROUPS "groups"
#define SYSOM_REGISTER_KEY_PID "pid"
#define SYSOM_REGISTER_JOB_MAX 127    /* bytes of the job id */
#define SYSOM_REGISTER_GROUPS_MAX 255 /* bytes of the groups text */

/* A header as read from the wire (fields as in the table above; not validated). */
struct sysom_frame_header {
	uint32_t magic;    /* SYSOM_FRAME_MAGIC */
	uint16_t version;  /* SYSOM_FRAME_VERSION */
	uint16_t type;     /* enum sysom_frame_type / sysom_record_type, or a type not known */
	uint32_t length;   /* payload bytes following the header */
	uint32_t reserved; /* 0 */
};

static inline void sysom_frame_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void sysom_frame_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t sysom_frame_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t sysom_frame_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Writes the SYSOM_FRAME_HEADER_SIZE-byte header of a `type` record with `payload_len` payload
 * bytes at `p` (the caller checks the record fits SYSOM_FRAME_MAX_RECORD). */
static inline void sysom_frame_put_header(uint8_t *p, uint16_t type, uint32_t payload_len)
{
	sysom_frame_put_le32(p + SYSOM_FRAME_OFF_MAGIC, SYSOM_FRAME_MAGIC);
	sysom_frame_put_le16(p + SYSOM_FRAME_OFF_VERSION, SYSOM_FRAME_VERSION);
	sysom_frame_put_le16(p + SYSOM_FRAME_OFF_TYPE, type);
	sysom_frame_put_le32(p + SYSOM_FRAME_OFF_LENGTH, payload_len);
	sysom_frame_put_le32(p + SYSOM_FRAME_OFF_RESERVED, 0);
}

/* Reads the header at `p` (at least SYSOM_FRAME_HEADER_SIZE bytes) into `out`, without
 * checking it: callers compare the fields with what they accept. */
static inline void sysom_frame_get_header(const uint8_t *p, struct sysom_frame_header *out)
{
	out->magic = sysom_frame_get_le32(p + SYSOM_FRAME_OFF_MAGIC);
	out->version = sysom_frame_get_le16(p + SYSOM_FRAME_OFF_VERSION);
	out->type = sysom_frame_get_le16(p + SYSOM_FRAME_OFF_TYPE);
	out->length = sysom_frame_get_le32(p + SYSOM_FRAME_OFF_LENGTH);
	out->reserved = sysom_frame_get_le32(p + SYSOM_FRAME_OFF_RESERVED);
}

#endif
