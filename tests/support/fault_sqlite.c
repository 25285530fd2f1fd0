/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: a failing allocator and a failing VFS shim for SQLite (fault_sqlite.h). */
#include "tests/support/fault_sqlite.h"

#include <errno.h>
#include <string.h>

#include <sqlite3.h>

#include "tests/support/fault_inject.h"

/* ---- allocator ----------------------------------------------------------------------------- */

static sqlite3_mem_methods real_mem;

static void *mem_malloc(int size)
{
	if (fault_should_fail(FAULT_ALLOC, "sqlite3 xMalloc"))
		return NULL;
	return real_mem.xMalloc(size);
}

static void *mem_realloc(void *p, int size)
{
	if (fault_should_fail(FAULT_ALLOC, "sqlite3 xRealloc"))
		return NULL;
	return real_mem.xRealloc(p, size);
}

/* ---- VFS shim ------------------------------------------------------------------------------ */

static sqlite3_vfs *real_vfs;

/* Our file: the real VFS's file follows it in the same allocation (szOsFile covers both). */
struct fault_file {
	sqlite3_file base;
	sqlite3_file *real;
};

static sqlite3_file *real_of(sqlite3_file *f)
{
	return ((struct fault_file *)f)->real;
}

#define REAL(f) (real_of(f)->pMethods)

static int file_close(sqlite3_file *f)
{
	return REAL(f)->xClose(real_of(f));
}

static int file_read(sqlite3_file *f, void *buf, int amount, sqlite3_int64 offset)
{
	if (fault_should_fail(FAULT_READ, "sqlite3 xRead"))
		return SQLITE_IOERR_READ;
	return REAL(f)->xRead(real_of(f), buf, amount, offset);
}

static int file_write(sqlite3_file *f, const void *buf, int amount, sqlite3_int64 offset)
{
	if (fault_should_fail(FAULT_WRITE, "sqlite3 xWrite"))
		return fault_error() == ENOSPC ? SQLITE_FULL : SQLITE_IOERR_WRITE;
	return REAL(f)->xWrite(real_of(f), buf, amount, offset);
}

static int file_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	if (fault_should_fail(FAULT_TRUNCATE, "sqlite3 xTruncate"))
		return SQLITE_IOERR_TRUNCATE;
	return REAL(f)->xTruncate(real_of(f), size);
}

static int file_sync(sqlite3_file *f, int flags)
{
	if (fault_should_fail(FAULT_SYNC, "sqlite3 xSync"))
		return SQLITE_IOERR_FSYNC;
	return REAL(f)->xSync(real_of(f), flags);
}

static int file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->xFileSize(real_of(f), size);
}

static int file_lock(sqlite3_file *f, int level)
{
	return REAL(f)->xLock(real_of(f), level);
}

static int file_unlock(sqlite3_file *f, int level)
{
	return REAL(f)->xUnlock(real_of(f), level);
}

static int file_check_reserved_lock(sqlite3_file *f, int *out)
{
	return REAL(f)->xCheckReservedLock(real_of(f), out);
}

static int file_control(sqlite3_file *f, int op, void *arg)
{
	return REAL(f)->xFileControl(real_of(f), op, arg);
}

static int file_sector_size(sqlite3_file *f)
{
	return REAL(f)->xSectorSize(real_of(f));
}

static int file_device_characteristics(sqlite3_file *f)
{
	return REAL(f)->xDeviceCharacteristics(real_of(f));
}

static int file_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **out)
{
	return REAL(f)->xShmMap(real_of(f), region, size, extend, out);
}

static int file_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
	return REAL(f)->xShmLock(real_of(f), offset, n, flags);
}

static void file_shm_barrier(sqlite3_file *f)
{
	REAL(f)->xShmBarrier(real_of(f));
}

static int file_shm_unmap(sqlite3_file *f, int delete_flag)
{
	return REAL(f)->xShmUnmap(real_of(f), delete_flag);
}

static int file_fetch(sqlite3_file *f, sqlite3_int64 offset, int amount, void **out)
{
	return REAL(f)->xFetch(real_of(f), offset, amount, out);
}

static int file_unfetch(sqlite3_file *f, sqlite3_int64 offset, void *p)
{
	return REAL(f)->xUnfetch(real_of(f), offset, p);
}

/* Version 3 methods: the unix VFS's files all have them (checked at open). */
static const sqlite3_io_methods fault_io_methods = {
	.iVersion = 3,
	.xClose = file_close,
	.xRead = file_read,
	.xWrite = file_write,
	.xTruncate = file_truncate,
	.xSync = file_sync,
	.xFileSize = file_size,
	.xLock = file_lock,
	.xUnlock = file_unlock,
	.xCheckReservedLock = file_check_reserved_lock,
	.xFileControl = file_control,
	.xSectorSize = file_sector_size,
	.xDeviceCharacteristics = file_device_characteristics,
	.xShmMap = file_shm_map,
	.xShmLock = file_shm_lock,
	.xShmBarrier = file_shm_barrier,
	.xShmUnmap = file_shm_unmap,
	.xFetch = file_fetch,
	.xUnfetch = file_unfetch,
};

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
		    int *out_flags)
{
	struct fault_file *ff = (struct fault_file *)file;
	int rc;

	(void)vfs;
	ff->base.pMethods = NULL; /* nothing for SQLite to close unless the real open made it */
	ff->real = (sqlite3_file *)(ff + 1);
	if (fault_should_fail(FAULT_OPEN, "sqlite3 xOpen"))
		return SQLITE_CANTOPEN;
	rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out_flags);
	if (ff->real->pMethods) {
		if (ff->real->pMethods->iVersion < 3) {
			ff->real->pMethods->xClose(ff->real);
			return SQLITE_CANTOPEN;
		}
		ff->base.pMethods = &fault_io_methods;
	}
	return rc;
}

static int vfs_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void)vfs;
	if (fault_should_fail(FAULT_UNLINK, "sqlite3 xDelete"))
		return SQLITE_IOERR_DELETE;
	return real_vfs->xDelete(real_vfs, name, sync_dir);
}

static int vfs_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	(void)vfs;
	return real_vfs->xAccess(real_vfs, name, flags, out);
}

static int vfs_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
	(void)vfs;
	return real_vfs->xFullPathname(real_vfs, name, n, out);
}

static void *vfs_dl_open(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	return real_vfs->xDlOpen(real_vfs, name);
}

static void vfs_dl_error(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	real_vfs->xDlError(real_vfs, n, out);
}

static void (*vfs_dl_sym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void)
{
	(void)vfs;
	return real_vfs->xDlSym(real_vfs, handle, symbol);
}

static void vfs_dl_close(sqlite3_vfs *vfs, void *handle)
{
	(void)vfs;
	real_vfs->xDlClose(real_vfs, handle);
}

static int vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return real_vfs->xRandomness(real_vfs, n, out);
}

static int vfs_sleep(sqlite3_vfs *vfs, int us)
{
	(void)vfs;
	return real_vfs->xSleep(real_vfs, us);
}

static int vfs_current_time(sqlite3_vfs *vfs, double *out)
{
	(void)vfs;
	return real_vfs->xCurrentTime(real_vfs, out);
}

static int vfs_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return real_vfs->xGetLastError(real_vfs, n, out);
}

static int vfs_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
	(void)vfs;
	return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

static int vfs_set_system_call(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr p)
{
	(void)vfs;
	return real_vfs->xSetSystemCall(real_vfs, name, p);
}

static sqlite3_syscall_ptr vfs_get_system_call(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	return real_vfs->xGetSystemCall(real_vfs, name);
}

static const char *vfs_next_system_call(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	return real_vfs->xNextSystemCall(real_vfs, name);
}

static sqlite3_vfs fault_vfs = {
	.iVersion = 3,
	.zName = "fault",
	.xOpen = vfs_open,
	.xDelete = vfs_delete,
	.xAccess = vfs_access,
	.xFullPathname = vfs_full_pathname,
	.xDlOpen = vfs_dl_open,
	.xDlError = vfs_dl_error,
	.xDlSym = vfs_dl_sym,
	.xDlClose = vfs_dl_close,
	.xRandomness = vfs_randomness,
	.xSleep = vfs_sleep,
	.xCurrentTime = vfs_current_time,
	.xGetLastError = vfs_get_last_error,
	.xCurrentTimeInt64 = vfs_current_time_int64,
	.xSetSystemCall = vfs_set_system_call,
	.xGetSystemCall = vfs_get_system_call,
	.xNextSystemCall = vfs_next_system_call,
};

int fault_sqlite_install(void)
{
	sqlite3_mem_methods mem;

	if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem) != SQLITE_OK)
		return -EPROTO;
	mem = real_mem;
	mem.xMalloc = mem_malloc;
	mem.xRealloc = mem_realloc;
	if (sqlite3_config(SQLITE_CONFIG_MALLOC, &mem) != SQLITE_OK)
		return -EPROTO; /* SQLite was initialized already */
	if (sqlite3_initialize() != SQLITE_OK)
		return -EPROTO;
	real_vfs = sqlite3_vfs_find(NULL);
	if (!real_vfs || real_vfs->iVersion < 3)
		return -EPROTO;
	fault_vfs.szOsFile = (int)sizeof(struct fault_file) + real_vfs->szOsFile;
	fault_vfs.mxPathname = real_vfs->mxPathname;
	return sqlite3_vfs_register(&fault_vfs, 1) == SQLITE_OK ? 0 : -EPROTO;
}
