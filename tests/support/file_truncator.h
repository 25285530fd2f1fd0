/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: a thread that truncates a file and restores it, in a loop (the file changes
 * under a reader, as when another process rewrites a library the agent reads). */
#ifndef SYSOM_TESTS_SUPPORT_FILE_TRUNCATOR_H
#define SYSOM_TESTS_SUPPORT_FILE_TRUNCATOR_H

#include <stdint.h>

struct file_truncator;

/*
 * Copies `src` to `dst` (created 0755, replaced if present) and starts a thread that, until
 * file_truncator_stop, truncates `dst` in place (to 0, to a varying length) and writes its
 * bytes back, so readers holding it open or mapped see it shrink and grow. Returns once the
 * first truncation is done: 0, or -errno;
 * `*out` is owned by the caller (file_truncator_stop frees it).
 */
int file_truncator_start(const char *src, const char *dst, struct file_truncator **out);

/* Stops the thread, leaves `dst` whole again, frees `t`. Returns the truncations done. */
uint64_t file_truncator_stop(struct file_truncator *t);

#endif
