/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: a thread that truncates a file and restores it, in a loop. */
#include "tests/support/file_truncator.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct file_truncator {
	pthread_t thread;
	int fd;
	uint8_t *bytes;
	size_t len;
	atomic_bool stop;
	_Atomic uint64_t truncations;
};

static int write_all(int fd, const uint8_t *p, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, p + done, len - done, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

static void *run(void *arg)
{
	struct file_truncator *t = arg;
	uint64_t i = 0;

	while (!atomic_load(&t->stop)) {
		/* 0, then lengths across the file (headers kept, sections cut, ...). */
		off_t keep = (off_t)(i % 5 == 0 ? 0 : t->len * (i % 5) / 6);
		if (ftruncate(t->fd, keep) == 0)
			t->truncations++;
		usleep(200);
		write_all(t->fd, t->bytes, t->len);
		usleep(200);
		i++;
	}
	return NULL;
}

int file_truncator_start(const char *src, const char *dst, struct file_truncator **out)
{
	struct file_truncator *t = calloc(1, sizeof(*t));
	struct stat st;
	int in = -1, rc = 0;

	if (!t)
		return -ENOMEM;
	t->fd = -1;
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0 || fstat(in, &st)) {
		rc = -errno;
		goto cleanup;
	}
	t->len = (size_t)st.st_size;
	t->bytes = malloc(t->len ? t->len : 1);
	if (!t->bytes) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t done = 0; done < t->len;) {
		ssize_t n = pread(in, t->bytes + done, t->len - done, (off_t)done);
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto cleanup;
		}
		done += (size_t)n;
	}
	unlink(dst);
	t->fd = open(dst, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (t->fd < 0) {
		rc = -errno;
		goto cleanup;
	}
	if ((rc = write_all(t->fd, t->bytes, t->len)))
		goto cleanup;
	if ((rc = -pthread_create(&t->thread, NULL, run, t)))
		goto cleanup;
	while (atomic_load(&t->truncations) == 0)
		usleep(100); /* the file changes from the reader's first read on */
	*out = t;
	t = NULL;
cleanup:
	if (in >= 0)
		close(in);
	if (t) {
		if (t->fd >= 0)
			close(t->fd);
		free(t->bytes);
		free(t);
	}
	return rc;
}

uint64_t file_truncator_stop(struct file_truncator *t)
{
	uint64_t n;

	atomic_store(&t->stop, true);
	pthread_join(t->thread, NULL);
	write_all(t->fd, t->bytes, t->len);
	close(t->fd);
	n = t->truncations;
	free(t->bytes);
	free(t);
	return n;
}
