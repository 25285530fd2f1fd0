/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: the fault injector's state and the `ld --wrap` wrappers of libc. */
#include "tests/support/fault_inject.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

/* Every field under `lock`, except `armed`, which the wrappers read first without it. */
static struct {
	pthread_mutex_t lock;
	bool armed;
	struct fault_plan plan;
	struct fault_stats stats;
	bool trap; /* SYSOM_FAULT_TRAP set: raise SIGTRAP at each failed call */
} injector = { .lock = PTHREAD_MUTEX_INITIALIZER, .stats = { .first_failed = "" } };

void fault_arm(const struct fault_plan *plan)
{
	pthread_mutex_lock(&injector.lock);
	injector.plan = *plan;
	if (!injector.plan.error)
		injector.plan.error = EIO;
	injector.stats = (struct fault_stats){ .first_failed = "" };
	injector.trap = getenv("SYSOM_FAULT_TRAP") != NULL;
	__atomic_store_n(&injector.armed, plan->classes != 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&injector.lock);
}

uint64_t fault_disarm(void)
{
	uint64_t failed;

	pthread_mutex_lock(&injector.lock);
	__atomic_store_n(&injector.armed, false, __ATOMIC_RELEASE);
	failed = injector.stats.failed;
	pthread_mutex_unlock(&injector.lock);
	return failed;
}

void fault_stats_get(struct fault_stats *out)
{
	pthread_mutex_lock(&injector.lock);
	*out = injector.stats;
	pthread_mutex_unlock(&injector.lock);
}

int fault_error(void)
{
	int error;

	pthread_mutex_lock(&injector.lock);
	error = injector.plan.error ? injector.plan.error : EIO;
	pthread_mutex_unlock(&injector.lock);
	return error;
}

bool fault_should_fail(unsigned cls, const char *what)
{
	bool fail = false;

	if (!__atomic_load_n(&injector.armed, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&injector.lock);
	if (injector.armed && (injector.plan.classes & cls)) {
		uint64_t n = ++injector.stats.calls;

		fail = n == injector.plan.nth || (injector.plan.persistent && n > injector.plan.nth);
		if (fail) {
			if (!injector.stats.failed++) {
				injector.stats.first_failed = what;
				injector.stats.first_failed_class = cls;
			}
			injector.stats.failed_classes |= cls;
		}
	}
	pthread_mutex_unlock(&injector.lock);
	if (fail && injector.trap)
		raise(SIGTRAP); /* SYSOM_FAULT_TRAP: stop a debugger at each failed call */
	return fail;
}

uint64_t fault_first_step(void)
{
	const char *v = getenv("SYSOM_FAULT_FIRST");
	char *end;
	unsigned long long n;

	if (!v || !*v)
		return 1;
	n = strtoull(v, &end, 10);
	return *end || n == 0 ? 1 : n;
}

bool fault_leaks_found(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return __lsan_do_recoverable_leak_check() != 0;
#else
	return false;
#endif
}

/* ---- allocation ---------------------------------------------------------------------------- */

/* The real functions (ld resolves __real_X to X) and the wrappers (X in the wrapped objects). */
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void *__wrap_malloc(size_t size)
{
	if (fault_should_fail(FAULT_ALLOC, "malloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
	if (fault_should_fail(FAULT_ALLOC, "calloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_calloc(n, size);
}

/* A failed realloc leaves the block as it was. */
void *__wrap_realloc(void *p, size_t size)
{
	if (fault_should_fail(FAULT_ALLOC, "realloc")) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_realloc(p, size);
}

char *__wrap_strdup(const char *s)
{
	if (fault_should_fail(FAULT_ALLOC, "strdup")) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	if (fault_should_fail(FAULT_ALLOC, "strndup")) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_strndup(s, n);
}

/* glibc's vasprintf allocates inside libc (not wrapped): the decision is taken here. */
int __wrap_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (fault_should_fail(FAULT_ALLOC, "asprintf")) {
		errno = ENOMEM;
		return -1;
	}
	va_start(ap, fmt);
	n = vasprintf(out, fmt, ap);
	va_end(ap);
	return n;
}

/* ---- file I/O ------------------------------------------------------------------------------ */

int __real_open(const char *path, int flags, ...);
int __real_openat(int dirfd, const char *path, int flags, ...);
int __real_mkdir(const char *path, mode_t mode);
int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __real_dup(int fd);
ssize_t __real_read(int fd, void *buf, size_t len);
ssize_t __real_pread(int fd, void *buf, size_t len, off_t off);
ssize_t __real_write(int fd, const void *buf, size_t len);
ssize_t __real_pwrite(int fd, const void *buf, size_t len, off_t off);
int __real_fsync(int fd);
int __real_fdatasync(int fd);
int __real_rename(const char *from, const char *to);
int __real_renameat(int from_dirfd, const char *from, int to_dirfd, const char *to);
int __real_unlink(const char *path);
int __real_unlinkat(int dirfd, const char *path, int flags);
int __real_ftruncate(int fd, off_t len);
int __real_close(int fd);
int __wrap_open(const char *path, int flags, ...);
int __wrap_openat(int dirfd, const char *path, int flags, ...);
int __wrap_mkdir(const char *path, mode_t mode);
int __wrap_mkdirat(int dirfd, const char *path, mode_t mode);
int __wrap_dup(int fd);
ssize_t __wrap_read(int fd, void *buf, size_t len);
ssize_t __wrap_pread(int fd, void *buf, size_t len, off_t off);
ssize_t __wrap_write(int fd, const void *buf, size_t len);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t len, off_t off);
int __wrap_fsync(int fd);
int __wrap_fdatasync(int fd);
int __wrap_rename(const char *from, const char *to);
int __wrap_renameat(int from_dirfd, const char *from, int to_dirfd, const char *to);
int __wrap_unlink(const char *path);
int __wrap_unlinkat(int dirfd, const char *path, int flags);
int __wrap_ftruncate(int fd, off_t len);
int __wrap_close(int fd);

/* Fails the call (errno from the plan) when the injector says so. */
#define FAIL_IO(cls, name)                                  \
	do {                                                \
		if (fault_should_fail((cls), (name))) {     \
			errno = fault_error();              \
			return -1;                          \
		}                                           \
	} while (0)

/* The mode argument exists only with O_CREAT or O_TMPFILE. */
static mode_t open_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int __wrap_open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	FAIL_IO(FAULT_OPEN, "open");
	return __real_open(path, flags, mode);
}

int __wrap_openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	FAIL_IO(FAULT_OPEN, "openat");
	return __real_openat(dirfd, path, flags, mode);
}

int __wrap_mkdir(const char *path, mode_t mode)
{
	FAIL_IO(FAULT_OPEN, "mkdir");
	return __real_mkdir(path, mode);
}

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
	FAIL_IO(FAULT_OPEN, "mkdirat");
	return __real_mkdirat(dirfd, path, mode);
}

int __wrap_dup(int fd)
{
	FAIL_IO(FAULT_OPEN, "dup");
	return __real_dup(fd);
}

ssize_t __wrap_read(int fd, void *buf, size_t len)
{
	FAIL_IO(FAULT_READ, "read");
	return __real_read(fd, buf, len);
}

ssize_t __wrap_pread(int fd, void *buf, size_t len, off_t off)
{
	FAIL_IO(FAULT_READ, "pread");
	return __real_pread(fd, buf, len, off);
}

ssize_t __wrap_write(int fd, const void *buf, size_t len)
{
	FAIL_IO(FAULT_WRITE, "write");
	return __real_write(fd, buf, len);
}

ssize_t __wrap_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	FAIL_IO(FAULT_WRITE, "pwrite");
	return __real_pwrite(fd, buf, len, off);
}

int __wrap_fsync(int fd)
{
	FAIL_IO(FAULT_SYNC, "fsync");
	return __real_fsync(fd);
}

int __wrap_fdatasync(int fd)
{
	FAIL_IO(FAULT_SYNC, "fdatasync");
	return __real_fdatasync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
	FAIL_IO(FAULT_RENAME, "rename");
	return __real_rename(from, to);
}

int __wrap_renameat(int from_dirfd, const char *from, int to_dirfd, const char *to)
{
	FAIL_IO(FAULT_RENAME, "renameat");
	return __real_renameat(from_dirfd, from, to_dirfd, to);
}

int __wrap_unlink(const char *path)
{
	FAIL_IO(FAULT_UNLINK, "unlink");
	return __real_unlink(path);
}

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
	FAIL_IO(FAULT_UNLINK, "unlinkat");
	return __real_unlinkat(dirfd, path, flags);
}

int __wrap_ftruncate(int fd, off_t len)
{
	FAIL_IO(FAULT_TRUNCATE, "ftruncate");
	return __real_ftruncate(fd, len);
}

/* Linux releases the descriptor even when close reports an error (EIO on NFS, ENOSPC). */
int __wrap_close(int fd)
{
	int rc = __real_close(fd);

	if (rc == 0)
		FAIL_IO(FAULT_CLOSE, "close");
	return rc;
}
