/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a ClickHouse TabSeparated answer → rows of fields (clickhouse_tsv.c). */
// fuzz-sources: server/store/clickhouse_tsv.c
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	/* The first byte picks the field count the caller expects (1..CH_MAX_FIELDS). */
	unsigned nfields = size ? data[0] % CH_MAX_FIELDS + 1 : 1;
	char *buf = malloc(size + 1), *f[CH_MAX_FIELDS];
	struct ch_tsv t;
	int rc;

	if (!buf)
		return 0;
	if (size > 1)
		memcpy(buf, data + 1, size - 1);
	buf[size ? size - 1 : 0] = '\0';
	ch_tsv_init(&t, buf, size ? size - 1 : 0);
	while ((rc = ch_tsv_row(&t, f, nfields)) == 1 || (rc == 0 && ch_tsv_blank(&t))) {
		if (rc == 0)
			continue;
		for (unsigned i = 0; i < nfields; i++) {
			uint64_t u;
			int64_t v;
			uint8_t bytes[64];
			size_t len;

			if (!f[i])
				continue;
			/* Fields stay inside the answer and are terminated. */
			if (f[i] < buf || f[i] + strlen(f[i]) > buf + size)
				abort();
			(void)ch_tsv_u64(f[i], &u);
			(void)ch_tsv_i64(f[i], &v);
			if (ch_tsv_hex(f[i], bytes, sizeof(bytes), &len) == 0 && len > sizeof(bytes))
				abort();
		}
		if (t.rows > size)
			abort();
	}
	if (rc != 0 && rc != -EPROTO)
		abort();
	free(buf);
	return 0;
}
