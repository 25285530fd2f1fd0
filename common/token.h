/* SPDX-License-Identifier: Apache-2.0 */
/* Bearer token files, read the same way by the agent, the server and sysomctl. */
#ifndef SYSOM_COMMON_TOKEN_H
#define SYSOM_COMMON_TOKEN_H

#include <stdbool.h>
#include <stddef.h>

#define SYSOM_TOKEN_MAX 4096

/*
 * Reads a token file: a regular file whose first line, with surrounding whitespace removed,
 * is the token (1..SYSOM_TOKEN_MAX printable ASCII bytes, no spaces: it travels in an HTTP
 * header). Writes a heap copy to *token (caller frees) and, when `world_readable` is not
 * NULL, whether others may read the file. Returns 0, -errno, or -SYSOM_ECONFIG with `err`
 * saying why (empty, too long, unprintable, not a regular file).
 */
int sysom_token_file_read(const char *path, char **token, bool *world_readable, char *err,
			  size_t errlen);

#endif
