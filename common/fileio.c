/* SPDX-License-Identifier: Apache-2.0 */
/* File I/O helpers: whole writes and positioned reads that retry EINTR, directory fsync. */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int sysom_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads up to `len` bytes, with pread at `off` or (off == UINT64_MAX) read. */
static ssize_t read_full_at(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = off == UINT64_MAX ? read(fd, p + done, len - done)
					      : pread(fd, p + done, len - done, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t sysom_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	if (off == UINT64_MAX)
		return -EINVAL;
	return read_full_at(fd, buf, len, off);
}

ssize_t sysom_read_full(int fd, void *buf, size_t len)
{
	return read_full_at(fd, buf, len, UINT64_MAX);
}

int sysom_fsync_dirfd(int dirfd)
{
	return fsync(dirfd) < 0 ? -errno : 0;
}

int sysom_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc;

	if (fd < 0)
		return -errno;
	rc = sysom_fsync_dirfd(fd);
	close(fd);
	return rc;
}
