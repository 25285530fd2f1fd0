/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's registration socket: training processes (ranks) connect to a SOCK_SEQPACKET
 * Unix socket and tell the agent their job identity (docs/registration-protocol.md).
 *
 * Every message is one SEQPACKET record framed as in include/sysom/frame.h (the one definition
 * of the 16-byte header: magic "SYRG", version, type, length, reserved); the payloads follow.
 *
 * REGISTER (1), client → agent: NUL-separated "key=value" entries (the last NUL optional):
 * job (≤ 127 bytes), rank, local_rank, world_size, local_world_size, group_rank (plain
 * decimal), groups (free text, ≤ 255 bytes), pid (decimal; must be the sender's own). Each key
 * at most once; unknown keys are ignored.
 *
 * ACK (2), agent → client: i32 status at offset 0 (0, or a negative errno: -EINVAL for a bad
 * value, -EMSGSIZE for text too long, -EPERM for a pid that is not the sender's).
 */
#ifndef SYSOM_AGENT_RANKS_REGISTRY_H
#define SYSOM_AGENT_RANKS_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "agent/ranks/jobenv.h"
#include "common/report.h"
#include "include/sysom/frame.h"

/* The framing's constants under the registry's names (defined once in include/sysom/frame.h). */
#define REGISTRY_MAGIC SYSOM_FRAME_MAGIC
#define REGISTRY_VERSION SYSOM_FRAME_VERSION
#define REGISTRY_HEADER_SIZE SYSOM_FRAME_HEADER_SIZE
#define REGISTRY_MAX_MESSAGE SYSOM_FRAME_MAX_RECORD /* header included */
#define REGISTRY_JOB_MAX SYSOM_REGISTER_JOB_MAX /* bytes of a job id */
#define REGISTRY_GROUPS_MAX (SYSOM_REGISTER_GROUPS_MAX + 1) /* groups text, NUL included */
#define REGISTRY_DEFAULT_MAX_CLIENTS 4096
#define REGISTRY_MAX_CLIENTS_LIMIT (1u << 20)

enum registry_msg_type {
	REGISTRY_MSG_REGISTER = SYSOM_FRAME_REGISTER, /* client → agent: identity entries */
	REGISTRY_MSG_ACK = SYSOM_FRAME_ACK,           /* agent → client: i32 status */
};

/*
 * Decodes the header of one record of `len` bytes (the whole record, header included).
 * Returns 0; -SYSOM_ECORRUPT for a record shorter than the header, a bad magic, a length
 * that does not match `len`, or a non-zero reserved field; -SYSOM_EVERSION for another
 * version; -SYSOM_ELIMIT for a record over REGISTRY_MAX_MESSAGE. `out` is written only on
 * success.
 */
int registry_decode_header(const void *msg, size_t len, struct sysom_frame_header *out);

/*
 * Decodes a whole REGISTER record (header included) of `len` bytes. On success fills `out`
 * (job_id_source "registration"; ranks -1 when absent; has_rank when rank < world_size are
 * both present), `groups` (sanitized text, truncated to `groups_len`; may be NULL when
 * `groups_len` is 0) and `*claimed_pid` (-1 when the message has no pid key), and returns 0.
 * Returns the header errors of registry_decode_header, -EINVAL for another type, an entry
 * without '=', a repeated key, a number that is not plain decimal within range, or ranks not
 * below their sizes, and -EMSGSIZE for a job or groups text too long. Outputs are written
 * only on success.
 */
int registry_decode_register(const void *msg, size_t len, struct job_identity *out, char *groups,
			     size_t groups_len, int32_t *claimed_pid);

/*
 * Encodes a REGISTRY_HEADER_SIZE-byte header for a payload of `payload_len` bytes into `out`.
 * Returns 0 or -SYSOM_ELIMIT when the record would exceed REGISTRY_MAX_MESSAGE.
 */
int registry_encode_header(uint8_t out[REGISTRY_HEADER_SIZE], uint16_t type, size_t payload_len);

struct registry_options {
	const char *path;     /* socket path (borrowed; copied by registry_open) */
	uint32_t max_clients; /* open connections at most; 0: REGISTRY_DEFAULT_MAX_CLIENTS */
	/* A process registered (or registered again): `id` and `groups` are borrowed for the
	 * call. Called before the ACK is sent. May be NULL. */
	void (*on_register)(void *ctx, uint32_t tgid, const struct job_identity *id,
			    const char *groups);
	/* The connection holding `tgid`'s identity closed; the identity is forgotten. May be
	 * NULL. Not called from registry_close. */
	void (*on_disconnect)(void *ctx, uint32_t tgid);
	/* A telemetry record (type >= SYSOM_REC_HELLO, include/sysom/records.h) arrived from
	 * process `tgid`; `payload` (len bytes) is borrowed for the call. `*state` is the
	 * consumer's per-connection pointer (NULL at first). Returns 0 (counted in `records`),
	 * -ENOSYS for a type it does not handle (`unknown_types`) or another -errno for a record it
	 * rejects (`rejected_records`; the connection stays open). May be NULL. */
	int (*on_record)(void *ctx, uint32_t tgid, void **state, uint16_t type,
			 const uint8_t *payload, size_t len);
	/* A connection whose `state` the consumer set closed (also from registry_close). */
	void (*on_conn_close)(void *ctx, uint32_t tgid, void *state);
	uint32_t profiler_mask; /* MASK sent to each NCCL profiler after its HELLO; 0 none */
	void *ctx;            /* passed to the callbacks */
	/* Rate-limited warnings about peers (malformed records, ...): the daemon logs them. */
	struct sysom_reporter report;
};

struct registry_stats {
	uint64_t connections;               /* connections accepted since open */
	uint64_t clients;                   /* connections open now */
	uint64_t registrations;             /* REGISTER messages accepted */
	uint64_t rejected_bad_message;      /* bad header (connection closed) or bad REGISTER */
	uint64_t rejected_pid_mismatch;     /* REGISTER for a pid other than the peer's */
	uint64_t rejected_too_many_clients; /* connections refused at max_clients */
	uint64_t unknown_types;             /* well-formed messages of a type not handled */
	uint64_t records;                   /* telemetry records accepted */
	uint64_t rejected_records;          /* telemetry records with a bad payload */
};

struct registry;

/*
 * Listens on o->path: creates the parent directory (0755, one level) when missing, replaces a
 * stale socket file (one nobody listens on), makes the socket 0666, and polls it on `loop`.
 * Refuses a path that exists and is not a socket (-ENOTSOCK) or a socket another process
 * listens on (-EADDRINUSE); -ENAMETOOLONG, -EINVAL for bad options, or another -errno, with
 * `err` explaining. On success `*out` is owned by the caller (registry_close).
 */
int registry_open(uv_loop_t *loop, const struct registry_options *o, struct registry **out,
		  char *err, size_t errlen);

/*
 * Closes every connection (without on_disconnect calls) and the listening socket, and removes
 * the socket file. The memory is freed by the close callbacks: the caller runs the loop
 * afterwards (as at daemon shutdown). Accepts NULL.
 */
void registry_close(struct registry *r);

/*
 * The current identity of process `tgid` into `out` and its groups text into `groups`
 * (truncated to `groups_len`; may be NULL when `groups_len` is 0). 0 or -ENOENT.
 */
int registry_lookup(const struct registry *r, uint32_t tgid, struct job_identity *out,
		    char *groups, size_t groups_len);

/* Sends MASK to every connected NCCL profiler and to those that connect later (0: later ones
 * get none). */
void registry_set_profiler_mask(struct registry *r, uint32_t mask);

/* Counters since registry_open. */
void registry_stats_read(const struct registry *r, struct registry_stats *out);

#endif
