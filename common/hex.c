/* SPDX-License-Identifier: Apache-2.0 */
/* Hexadecimal text: encoding bytes as lowercase digits, decoding and checking digit strings. */
#include "common/hex.h"

#include <errno.h>

#include "common/bytes.h"

int sysom_hex_encode(const void *in, size_t n, char *out, size_t outlen)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *b = in;

	if (n > (SIZE_MAX - 1) / 2 || outlen < 2 * n + 1) {
		if (outlen)
			out[0] = '\0';
		return -ENOSPC;
	}
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 0xf];
	}
	out[2 * n] = '\0';
	return (int)(2 * n);
}

int sysom_hex_decode(const char *hex, size_t len, uint8_t *out, size_t outlen)
{
	if (len % 2 || !sysom_hex_valid(hex, len))
		return -EINVAL;
	if (outlen < len / 2)
		return -ENOSPC;
	for (size_t i = 0; i < len / 2; i++)
		out[i] = (uint8_t)(sysom_hex_digit(hex[2 * i]) << 4 |
				   sysom_hex_digit(hex[2 * i + 1]));
	return (int)(len / 2);
}

bool sysom_hex_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (sysom_hex_digit(s[i]) < 0)
			return false;
	return true;
}

bool sysom_hex_valid_lower(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}
