/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: SQLite's own fault hooks driven by the fault injector (fault_inject.h). */
#ifndef SYSOM_TESTS_SUPPORT_FAULT_SQLITE_H
#define SYSOM_TESTS_SUPPORT_FAULT_SQLITE_H

/*
 * Installs, as SQLite tests itself:
 *   - an allocator (SQLITE_CONFIG_MALLOC) that delegates to SQLite's default one and fails
 *     xMalloc/xRealloc as the injector says (class FAULT_ALLOC);
 *   - a VFS "fault", made the default, that delegates every call to the default VFS ("unix")
 *     and fails xOpen (FAULT_OPEN, SQLITE_CANTOPEN), xDelete (FAULT_UNLINK,
 *     SQLITE_IOERR_DELETE), xRead (FAULT_READ, SQLITE_IOERR_READ), xWrite (FAULT_WRITE,
 *     SQLITE_IOERR_WRITE, or SQLITE_FULL when the plan's error is ENOSPC), xTruncate
 *     (FAULT_TRUNCATE, SQLITE_IOERR_TRUNCATE) and xSync (FAULT_SYNC, SQLITE_IOERR_FSYNC).
 * Must run before SQLite initializes (first thing in main), once. Returns 0 or -EPROTO.
 */
int fault_sqlite_install(void);

#endif
