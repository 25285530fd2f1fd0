/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: fault injection in the style of SQLite's tests ("fail the Nth call of class C,
 * and optionally every call after it"), for allocations and file I/O. */
#ifndef SYSOM_TESTS_SUPPORT_FAULT_INJECT_H
#define SYSOM_TESTS_SUPPORT_FAULT_INJECT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * How calls reach the injector:
 *   - libc calls made by the objects linked into the test binary (the test and the project's
 *     static libraries, not shared libraries) are redirected with `ld --wrap`: a test that
 *     includes this header links with the `// test-ldflags:` line below (the Makefile reads it
 *     from the test's source). Under ASan, __real_malloc is ASan's malloc, so every sanitizer
 *     check still applies.
 *   - calls inside shared libraries are reached through their own hooks: SQLite's allocator
 *     and a VFS shim (fault_sqlite.h), jansson's allocator (fault_jansson_install), zstd at its
 *     API (fault_zstd.c, its own ldflags).
 *
 * The libc functions wrapped (this list and the flags must agree, or the link fails):
 *   allocation  malloc calloc realloc strdup strndup asprintf
 *   file I/O    open openat mkdir mkdirat dup read pread write pwrite fsync fdatasync
 *               rename renameat unlink unlinkat ftruncate close
 *
 * // test-ldflags: -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=asprintf,--wrap=open,--wrap=openat,--wrap=mkdir,--wrap=mkdirat,--wrap=dup,--wrap=read,--wrap=pread,--wrap=write,--wrap=pwrite,--wrap=fsync,--wrap=fdatasync,--wrap=rename,--wrap=renameat,--wrap=unlink,--wrap=unlinkat,--wrap=ftruncate,--wrap=close
 * (the line a test carries has no leading " * ").
 */

/* Classes of calls (a bit mask). A failed call returns what the real one returns on failure:
 * NULL (allocation), -1 with errno set (libc I/O), an SQLite or zstd error code. */
enum fault_class {
	FAULT_ALLOC = 1u << 0,    /* malloc calloc realloc strdup strndup asprintf; SQLite's
				     xMalloc/xRealloc; jansson's allocator */
	FAULT_OPEN = 1u << 1,     /* open openat mkdir mkdirat dup; SQLite xOpen */
	FAULT_READ = 1u << 2,     /* read pread; SQLite xRead */
	FAULT_WRITE = 1u << 3,    /* write pwrite; SQLite xWrite */
	FAULT_SYNC = 1u << 4,     /* fsync fdatasync; SQLite xSync */
	FAULT_RENAME = 1u << 5,   /* rename renameat */
	FAULT_UNLINK = 1u << 6,   /* unlink unlinkat; SQLite xDelete */
	FAULT_TRUNCATE = 1u << 7, /* ftruncate; SQLite xTruncate */
	FAULT_CLOSE = 1u << 8,    /* close: the descriptor is closed (as Linux does), then -1 */
	FAULT_ZSTD = 1u << 9,     /* ZSTD_createDCtx, ZSTD_decompressStream (fault_zstd.c) */
	FAULT_IO = FAULT_OPEN | FAULT_READ | FAULT_WRITE | FAULT_SYNC | FAULT_RENAME |
		   FAULT_UNLINK | FAULT_TRUNCATE | FAULT_CLOSE,
};

/* What to fail. */
struct fault_plan {
	unsigned classes; /* enum fault_class bits; calls of other classes are not counted */
	uint64_t nth;     /* the first call to fail, counting from 1 among `classes` */
	bool persistent;  /* also fail every later call of `classes` (a full disk, a dead disk) */
	int error;        /* errno for failed libc I/O (0: EIO); ENOSPC makes SQLite xWrite and
			     xTruncate answer SQLITE_FULL */
};

/* Starts counting calls of plan->classes from zero and fails as planned. */
void fault_arm(const struct fault_plan *plan);

/* Stops failing calls. Returns how many calls were failed since fault_arm. */
uint64_t fault_disarm(void);

/* Calls of the armed classes seen and failed since fault_arm (also after fault_disarm), and
 * the name of the first failed call ("" when none, static storage) with its class. */
struct fault_stats {
	uint64_t calls;
	uint64_t failed;
	unsigned failed_classes; /* classes of the calls failed */
	const char *first_failed;
	unsigned first_failed_class;
};
void fault_stats_get(struct fault_stats *out);

/*
 * The decision every wrapper and hook takes: counts a call of class `cls` named `what`
 * (static storage) and returns true when it must fail. Exposed for hooks outside this file.
 */
bool fault_should_fail(unsigned cls, const char *what);

/* The errno of the plan armed last (EIO when it gave 0). */
int fault_error(void);

/* Routes jansson's allocations through the injector (class FAULT_ALLOC; fault_jansson.c, for
 * tests that link jansson); memory it returns is still released with free(). */
void fault_jansson_install(void);

/* Where a fault loop starts: $SYSOM_FAULT_FIRST (to go straight to the step a failure names;
 * the steps before it warm caches, so a later step may differ a little), else 1. With
 * $SYSOM_FAULT_TRAP set, every failed call raises SIGTRAP (a debugger stops there). */
uint64_t fault_first_step(void);

/*
 * Runs LeakSanitizer now (under ASan; otherwise does nothing and returns false): true when it
 * found memory leaked since the last check (it prints the report). Lets a loop name the
 * iteration that leaked instead of one report at exit.
 */
bool fault_leaks_found(void);

#endif
