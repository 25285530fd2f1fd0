/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the wire encoder and decoder. */
#ifndef SYSOM_COMMON_WIRE_INTERNAL_H
#define SYSOM_COMMON_WIRE_INTERNAL_H

#include "common/wire.h"

/* Appends a string to the batch's table without de-duplication. */
int wire__append_string(struct sysom_batch *b, const char *s, size_t len, uint32_t *idx);

#endif
