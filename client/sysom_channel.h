/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The telemetry channel of in-process components (NCCL profiler plugin, CUPTI library): one
 * SOCK_SEQPACKET connection to the agent's socket ($SYSOM_SOCKET_PATH), records framed as in
 * docs/registration-protocol.md, payloads from include/sysom/records.h.
 *
 * Never blocks and never breaks the host process: connects and sends are non-blocking
 * (MSG_DONTWAIT | MSG_NOSIGNAL); a record the socket cannot take now is dropped and counted;
 * with no agent the channel retries the connection at most once a second, so an absent agent
 * costs one failed connect() per second at most. Reconnects after fork() and after the agent
 * restarts (sending HELLO again). Thread-safe (one mutex; not for hot paths). Libc only.
 */
#ifndef SYSOM_CLIENT_CHANNEL_H
#define SYSOM_CLIENT_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "include/sysom/frame.h"
#include "include/sysom/records.h"

#define SYSOM_CHANNEL_MAX_RECORD SYSOM_FRAME_MAX_RECORD   /* bytes of a record, header included */

struct sysom_channel_options {
	uint16_t component;       /* enum sysom_component */
	uint16_t interface;       /* for HELLO */
	const char *name;         /* for HELLO: "libnccl-profiler-sysom 0.6"; copied */
	uint32_t activation_mask; /* for HELLO (profiler) */
	/* Called (from sysom_channel_poll, under no lock of the channel) when the agent sends a
	 * MASK record. May be NULL. */
	void (*on_mask)(void *ctx, uint32_t mask);
	void *ctx;
	const char *path; /* socket path; NULL: $SYSOM_SOCKET_PATH */
};

struct sysom_channel;

/*
 * Creates a channel (the connection is made lazily, on the first send or poll). Returns 0;
 * -ENOENT when no path is given and $SYSOM_SOCKET_PATH is unset or empty (the component then
 * stays silent); -ENAMETOOLONG; -ENOMEM. `*out` is owned by the caller.
 */
int sysom_channel_open(const struct sysom_channel_options *o, struct sysom_channel **out);

/* Closes the connection and frees the channel. Accepts NULL. */
void sysom_channel_close(struct sysom_channel *c);

/*
 * Sends one record of `type` with `len` payload bytes. Returns 0 when the kernel took it;
 * -EMSGSIZE when header + payload exceed SYSOM_CHANNEL_MAX_RECORD; otherwise the record is
 * dropped and counted: -ENOTCONN (no agent, or the retry is not due yet), -EAGAIN (its socket
 * is full), another -errno.
 */
int sysom_channel_send(struct sysom_channel *c, uint16_t type, const void *payload, size_t len);

/* Reads whatever the agent sent (non-blocking) and applies MASK records through on_mask. */
void sysom_channel_poll(struct sysom_channel *c);

/* Updates the mask HELLO announces (after the component changed it). */
void sysom_channel_set_mask(struct sysom_channel *c, uint32_t mask);

struct sysom_channel_stats {
	uint64_t records_sent;
	uint64_t records_dropped;
	uint64_t bytes_sent;
	uint64_t connects; /* successful connections (HELLO sent) */
};
void sysom_channel_stats(struct sysom_channel *c, struct sysom_channel_stats *out);

/*
 * Builds table records (NCCL_COLL, NCCL_LINK, GPU_KERNEL): entries and their strings are
 * packed until the next would not fit in one record, then the record is sent and a new one
 * begun. Each table object is used by one thread at a time. About 128 KiB: allocate it.
 */
struct sysom_table {
	struct sysom_rec_table head; /* entry_size, comm_id and window, as given to begin */
	uint16_t type;
	uint32_t entries_len;
	uint32_t strings_len;
	uint32_t records_sent, records_dropped; /* since sysom_table_begin */
	uint8_t entries[SYSOM_CHANNEL_MAX_RECORD];
	char strings[SYSOM_CHANNEL_MAX_RECORD];
};

void sysom_table_begin(struct sysom_table *t, uint16_t type, uint16_t entry_size,
		       uint64_t comm_id, uint64_t window_start_ns, uint64_t window_end_ns);

/*
 * Adds `entry` (entry_size bytes, copied) after interning `nstrings` strings: the offset of
 * strings[i] is written to the u32 at byte offset string_fields[i] of the copy (NULL strings
 * are ""; strings are cut at 1023 bytes). Sends the table first when the entry would not fit
 * (a send failure is counted in records_dropped and the table starts again). Returns 0 or
 * -EMSGSIZE for an entry that cannot fit in any record.
 */
int sysom_table_add(struct sysom_table *t, struct sysom_channel *c, const void *entry,
		    const uint32_t *string_fields, const char *const *strings, unsigned nstrings);

/* Sends what the table holds (nothing when empty) and empties it. Returns as channel_send. */
int sysom_table_flush(struct sysom_table *t, struct sysom_channel *c);

#endif
