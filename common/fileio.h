/* SPDX-License-Identifier: Apache-2.0 */
/* File I/O helpers: whole writes and positioned reads that retry EINTR, directory fsync. */
#ifndef SYSOM_COMMON_FILEIO_H
#define SYSOM_COMMON_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Writes all `len` bytes of `buf` to `fd`, continuing after short writes and EINTR.
 * Returns 0, or -errno from write(2); a write(2) that returns 0 for a non-zero count gives
 * -EIO (rather than looping forever). On failure an unknown prefix may have been written.
 */
int sysom_write_full(int fd, const void *buf, size_t len);

/*
 * Reads up to `len` bytes at offset `off` of `fd` into `buf`, continuing after short reads
 * and EINTR. Returns the count read (less than `len` only at end of file) or -errno.
 */
ssize_t sysom_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* As sysom_pread_full from the file position (read(2)): the count read, short only at end of
 * file, or -errno. */
ssize_t sysom_read_full(int fd, void *buf, size_t len);

/*
 * Makes the entries of directory `path` durable (after a create or rename in it): opens it
 * and fsyncs it. Returns 0 or -errno.
 */
int sysom_fsync_dir(const char *path);

/* As sysom_fsync_dir for a directory already open on `dirfd` (borrowed). 0 or -errno. */
int sysom_fsync_dirfd(int dirfd);

#endif
