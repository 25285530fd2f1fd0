/* SPDX-License-Identifier: Apache-2.0 */
/* common/fileio: whole writes and reads through short transfers, EINTR and zero-byte writes. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fileio.h"

/*
 * write(2), read(2) and pread(2) are interposed for one chosen descriptor so that the kernel behaviours
 * the helpers must survive (EINTR, one byte at a time, a zero-byte write) happen on demand;
 * every other call goes to the next definition (the sanitizer's or libc's).
 */
enum fault { FAULT_NONE, FAULT_EINTR_ONCE, FAULT_ONE_BYTE, FAULT_ZERO };

static int fault_fd = -1;
static enum fault fault_kind;
static int fault_calls;

ssize_t write(int fd, const void *buf, size_t len)
{
	static ssize_t (*next)(int, const void *, size_t);

	if (!next)
		next = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (fd == fault_fd && fault_kind != FAULT_NONE) {
		fault_calls++;
		if (fault_kind == FAULT_ZERO && len > 0)
			return 0;
		if (fault_kind == FAULT_EINTR_ONCE && fault_calls == 1) {
			errno = EINTR;
			return -1;
		}
		if (fault_kind == FAULT_ONE_BYTE && len > 1)
			len = 1;
	}
	return next(fd, buf, len);
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	static ssize_t (*next)(int, void *, size_t, off_t);

	if (!next)
		next = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
	if (fd == fault_fd && fault_kind != FAULT_NONE) {
		fault_calls++;
		if (fault_kind == FAULT_EINTR_ONCE && fault_calls == 1) {
			errno = EINTR;
			return -1;
		}
		if (fault_kind == FAULT_ONE_BYTE && len > 1)
			len = 1;
	}
	return next(fd, buf, len, off);
}

ssize_t read(int fd, void *buf, size_t len)
{
	static ssize_t (*next)(int, void *, size_t);

	if (!next)
		next = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
	if (fd == fault_fd && fault_kind != FAULT_NONE) {
		fault_calls++;
		if (fault_kind == FAULT_EINTR_ONCE && fault_calls == 1) {
			errno = EINTR;
			return -1;
		}
		if (fault_kind == FAULT_ONE_BYTE && len > 1)
			len = 1;
	}
	return next(fd, buf, len);
}

static void fault(int fd, enum fault kind)
{
	fault_fd = fd;
	fault_kind = kind;
	fault_calls = 0;
}

static int tmp_file(char *path, size_t len)
{
	snprintf(path, len, "/tmp/sysom-test-fileio-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	return fd;
}

static void read_back(int fd, const char *want, size_t len)
{
	char got[256];

	assert_true(len <= sizeof(got));
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(read(fd, got, sizeof(got)), (ssize_t)len);
	assert_memory_equal(got, want, len);
}

static void test_write_full_plain(void **state)
{
	char path[64];
	int fd = tmp_file(path, sizeof(path));

	(void)state;
	assert_int_equal(sysom_write_full(fd, "hello, world", 12), 0);
	assert_int_equal(sysom_write_full(fd, "", 0), 0); /* nothing to write: no call at all */
	read_back(fd, "hello, world", 12);
	close(fd);
	unlink(path);
}

static void test_write_full_short_and_eintr(void **state)
{
	char path[64];
	int fd = tmp_file(path, sizeof(path));

	(void)state;
	fault(fd, FAULT_ONE_BYTE);
	assert_int_equal(sysom_write_full(fd, "abcdef", 6), 0);
	assert_int_equal(fault_calls, 6);
	fault(fd, FAULT_EINTR_ONCE);
	assert_int_equal(sysom_write_full(fd, "ghij", 4), 0);
	assert_int_equal(fault_calls, 2);
	fault(-1, FAULT_NONE);
	read_back(fd, "abcdefghij", 10);
	close(fd);
	unlink(path);
}

static void test_write_full_zero_byte_write(void **state)
{
	char path[64];
	int fd = tmp_file(path, sizeof(path));

	(void)state;
	/* A write(2) that moves nothing for a non-zero count must end the loop, not spin. */
	fault(fd, FAULT_ZERO);
	assert_int_equal(sysom_write_full(fd, "abc", 3), -EIO);
	assert_int_equal(fault_calls, 1);
	fault(-1, FAULT_NONE);
	close(fd);
	unlink(path);
}

static void test_write_full_errors(void **state)
{
	int p[2];
	void (*old)(int);

	(void)state;
	assert_int_equal(sysom_write_full(-1, "x", 1), -EBADF);
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	old = signal(SIGPIPE, SIG_IGN);
	assert_int_equal(sysom_write_full(p[1], "x", 1), -EPIPE);
	signal(SIGPIPE, old);
	close(p[1]);
}

struct drain {
	int fd;
	size_t got;
};

static void *drain_main(void *arg)
{
	struct drain *d = arg;
	char buf[4096];
	ssize_t n;

	while ((n = read(d->fd, buf, sizeof(buf))) > 0)
		d->got += (size_t)n;
	return NULL;
}

static void test_write_full_pipe_larger_than_buffer(void **state)
{
	size_t len = 1u << 20; /* beyond a pipe's buffer: the kernel takes it in pieces */
	char *big = calloc(1, len);
	struct drain d = { 0 };
	pthread_t t;
	int p[2];

	(void)state;
	assert_non_null(big);
	assert_int_equal(pipe(p), 0);
	d.fd = p[0];
	assert_int_equal(pthread_create(&t, NULL, drain_main, &d), 0);
	assert_int_equal(sysom_write_full(p[1], big, len), 0);
	close(p[1]);
	pthread_join(t, NULL);
	assert_int_equal(d.got, len);
	close(p[0]);
	free(big);
}

static void test_pread_full(void **state)
{
	char path[64], buf[32];
	int fd = tmp_file(path, sizeof(path));

	(void)state;
	assert_int_equal(sysom_write_full(fd, "0123456789", 10), 0);
	assert_int_equal(sysom_pread_full(fd, buf, 4, 3), 4);
	assert_memory_equal(buf, "3456", 4);
	/* Short only at the end of the file. */
	assert_int_equal(sysom_pread_full(fd, buf, sizeof(buf), 5), 5);
	assert_memory_equal(buf, "56789", 5);
	assert_int_equal(sysom_pread_full(fd, buf, sizeof(buf), 10), 0);
	assert_int_equal(sysom_pread_full(fd, buf, sizeof(buf), 1000), 0);
	assert_int_equal(sysom_pread_full(fd, buf, 0, 0), 0);
	/* One byte per call and an interrupted call still read everything. */
	fault(fd, FAULT_ONE_BYTE);
	assert_int_equal(sysom_pread_full(fd, buf, 10, 0), 10);
	assert_memory_equal(buf, "0123456789", 10);
	assert_true(fault_calls >= 10);
	fault(fd, FAULT_EINTR_ONCE);
	assert_int_equal(sysom_pread_full(fd, buf, 3, 7), 3);
	assert_memory_equal(buf, "789", 3);
	fault(-1, FAULT_NONE);
	assert_int_equal(sysom_pread_full(-1, buf, 1, 0), -EBADF);
	close(fd);
	unlink(path);
}

static void test_read_full(void **state)
{
	char path[64], buf[32];
	int fd = tmp_file(path, sizeof(path));

	(void)state;
	assert_int_equal(sysom_write_full(fd, "0123456789", 10), 0);
	/* From the file position, short only at the end of the file. */
	assert_int_equal(lseek(fd, 2, SEEK_SET), 2);
	assert_int_equal(sysom_read_full(fd, buf, 3), 3);
	assert_memory_equal(buf, "234", 3);
	assert_int_equal(sysom_read_full(fd, buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "56789", 5);
	assert_int_equal(sysom_read_full(fd, buf, sizeof(buf)), 0);
	/* One byte per call and an interrupted call still read everything. */
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	fault(fd, FAULT_ONE_BYTE);
	assert_int_equal(sysom_read_full(fd, buf, 10), 10);
	assert_memory_equal(buf, "0123456789", 10);
	assert_true(fault_calls >= 10);
	assert_int_equal(lseek(fd, 4, SEEK_SET), 4);
	fault(fd, FAULT_EINTR_ONCE);
	assert_int_equal(sysom_read_full(fd, buf, 20), 6);
	assert_memory_equal(buf, "456789", 6);
	fault(-1, FAULT_NONE);
	assert_int_equal(sysom_read_full(-1, buf, 1), -EBADF);
	assert_int_equal(sysom_pread_full(fd, buf, 1, UINT64_MAX), -EINVAL);
	close(fd);
	unlink(path);
}

static void test_fsync_dir(void **state)
{
	char dir[] = "/tmp/sysom-test-fsyncdir-XXXXXX";
	char file[64];
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(sysom_fsync_dir(dir), 0);
	snprintf(file, sizeof(file), "%s/f", dir);
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(sysom_fsync_dir(file), -ENOTDIR);
	unlink(file);
	fd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	assert_int_equal(sysom_fsync_dirfd(fd), 0);
	close(fd);
	assert_int_equal(sysom_fsync_dirfd(-1), -EBADF);
	rmdir(dir);
	assert_int_equal(sysom_fsync_dir(dir), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_full_plain),
		cmocka_unit_test(test_write_full_short_and_eintr),
		cmocka_unit_test(test_write_full_zero_byte_write),
		cmocka_unit_test(test_write_full_errors),
		cmocka_unit_test(test_write_full_pipe_larger_than_buffer),
		cmocka_unit_test(test_pread_full),
		cmocka_unit_test(test_read_full),
		cmocka_unit_test(test_fsync_dir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
