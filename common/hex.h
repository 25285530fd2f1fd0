/* SPDX-License-Identifier: Apache-2.0 */
/* Hexadecimal text: encoding bytes as lowercase digits, decoding and checking digit strings. */
#ifndef SYSOM_COMMON_HEX_H
#define SYSOM_COMMON_HEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Writes the `n` bytes of `in` as 2 * n lowercase hex digits and a NUL into `out`, which
 * holds `outlen` bytes. Returns 2 * n, or -ENOSPC when `outlen` < 2 * n + 1 (then `out` is
 * the empty string if `outlen` > 0).
 */
int sysom_hex_encode(const void *in, size_t n, char *out, size_t outlen);

/*
 * Decodes the `len` hex digits (either case) of `hex` into bytes. Returns the byte count
 * (len / 2): -EINVAL when `len` is odd or a character is not a hex digit, -ENOSPC when
 * `outlen` < len / 2. `out` is written only on success.
 */
int sysom_hex_decode(const char *hex, size_t len, uint8_t *out, size_t outlen);

/* Whether the first `len` characters of `s` are all hex digits (either case). */
bool sysom_hex_valid(const char *s, size_t len);

/* Whether the first `len` characters of `s` are all lowercase hex digits (0-9, a-f). */
bool sysom_hex_valid_lower(const char *s, size_t len);

#endif
