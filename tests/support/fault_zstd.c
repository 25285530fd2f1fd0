/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: zstd failures at its API, class FAULT_ZSTD of the fault injector. The project
 * calls zstd's default allocator (no ZSTD_customMem), whose malloc inside libzstd no wrapper
 * reaches; these wrappers return what zstd returns when that malloc fails: NULL from
 * ZSTD_createDCtx, ZSTD_error_memory_allocation from ZSTD_decompressStream (which allocates
 * the window buffer on a frame's first call). A test using them links with
 *   // test-ldflags: -Wl,--wrap=ZSTD_createDCtx,--wrap=ZSTD_decompressStream,--undefined=__wrap_ZSTD_createDCtx
 * (in addition to the flags of fault_inject.h; --undefined pulls this file out of the support
 * archive, which the linker reads before the library calling zstd).
 */
#include <zstd.h>
#include <zstd_errors.h>

#include "tests/support/fault_inject.h"

ZSTD_DCtx *__real_ZSTD_createDCtx(void);
size_t __real_ZSTD_decompressStream(ZSTD_DCtx *dctx, ZSTD_outBuffer *out, ZSTD_inBuffer *in);
ZSTD_DCtx *__wrap_ZSTD_createDCtx(void);
size_t __wrap_ZSTD_decompressStream(ZSTD_DCtx *dctx, ZSTD_outBuffer *out, ZSTD_inBuffer *in);

ZSTD_DCtx *__wrap_ZSTD_createDCtx(void)
{
	if (fault_should_fail(FAULT_ZSTD, "ZSTD_createDCtx"))
		return NULL;
	return __real_ZSTD_createDCtx();
}

size_t __wrap_ZSTD_decompressStream(ZSTD_DCtx *dctx, ZSTD_outBuffer *out, ZSTD_inBuffer *in)
{
	if (fault_should_fail(FAULT_ZSTD, "ZSTD_decompressStream"))
		return (size_t)-ZSTD_error_memory_allocation; /* zstd's ERROR(memory_allocation) */
	return __real_ZSTD_decompressStream(dctx, out, in);
}
