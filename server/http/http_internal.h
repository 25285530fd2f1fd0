/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP transport internals: a connection driven by bytes in-process (no socket), for fuzzing. */
#ifndef SYSOM_SERVER_HTTP_HTTP_INTERNAL_H
#define SYSOM_SERVER_HTTP_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/bytes.h"
#include "server/http/http.h"

struct http_conn;

/*
 * A detached connection: the same parser, limits, routing and response writer as a socket
 * connection, but handlers run inline on the calling thread and every byte the server would
 * send is appended to `out`. `opts` gets the same defaults as http_server_start (its host
 * and port are ignored); `routes` and `out` are borrowed and must outlive the connection.
 * Returns NULL when out of memory.
 */
struct http_conn *http__conn_new(const struct http_server_options *opts,
				 const struct http_route *routes, size_t nroutes,
				 struct byte_buf *out);

/*
 * Feeds bytes as if read from the peer. Returns 0 while the connection stays open and 1 once
 * the server has closed it (later bytes are ignored).
 */
int http__conn_feed(struct http_conn *c, const void *data, size_t len);

/*
 * Acts as if the connection's current timer expired: a partial request gets 408, an idle
 * connection is closed. Returns what http__conn_feed returns.
 */
int http__conn_expire(struct http_conn *c);

/* Whether a request on the connection passed authentication (http_request_mark_authenticated). */
bool http__conn_trusted(const struct http_conn *c);

#define HTTP_PEER_KEY_LEN 16

/*
 * The key peers are counted under for max_connections_per_peer: an IPv4 address as its
 * IPv4-mapped IPv6 address (so ::ffff:a.b.c.d from a dual-stack listener is the same peer),
 * an IPv6 address with its low 64 bits cleared (its /64). Returns 0, or -EAFNOSUPPORT for
 * another family.
 */
int http__peer_key(const struct sockaddr *sa, uint8_t key[HTTP_PEER_KEY_LEN]);

/* Frees a detached connection; accepts NULL. */
void http__conn_free(struct http_conn *c);

#endif
