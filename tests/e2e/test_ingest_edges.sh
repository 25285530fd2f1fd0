#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The same batch sent twice is counted once; bad tokens, malformed and oversized bodies get
# clear 4xx answers and store nothing.
. "$(dirname "$0")/lib.sh"
require_root

echo "e2e-secret-token" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
# An agent with no server: its batches stay in the spool, where we can take one.
start_agent agent http://127.0.0.1:9 --token-file "$E2E_TMP/token" --sample-rate 1 --duration 5s || exit 1
run_workload 3 >/dev/null
wait "$AGENT_PID"
BATCH=$(ls "$E2E_TMP/agent.spool"/*.batch | head -1)
check "the agent spooled batches while no server was reachable" test -n "$BATCH"
NAME=$(basename "$BATCH" .batch)
EPOCH=${NAME%%-*}
SEQ=$((10#${NAME##*-}))
NODE=$(tr -d '-' </etc/machine-id)
KEY="$NODE:$EPOCH:$SEQ"
HDR=$(python3 -c "import struct,sys; print(struct.unpack_from('<H', open(sys.argv[1],'rb').read(8), 6)[0])" "$BATCH")
tail -c +$((HDR + 1)) "$BATCH" >"$E2E_TMP/body.zst"
DECODED=$(zstd -dc "$E2E_TMP/body.zst" | wc -c)
diag "batch $KEY: $(stat -c %s "$E2E_TMP/body.zst") bytes compressed, $DECODED decoded"

start_server srv --token-file "$E2E_TMP/token" || exit 1
post() { # post TOKEN KEY FILE [extra curl args]: prints the HTTP status
	local token=$1 key=$2 file=$3
	shift 3
	curl -s -o "$E2E_TMP/resp.json" -w '%{http_code}' -X POST "$SERVER_URL/api/v1/ingest" \
		-H "Authorization: Bearer $token" -H "Idempotency-Key: $key" \
		-H "Content-Type: application/vnd.sysom.batch" -H "Content-Encoding: zstd" \
		--data-binary "@$file" "$@"
}
CTL_OPTS=(--token-file "$E2E_TMP/token")
check "wrong token → 401" test "$(post wrong "$KEY" "$E2E_TMP/body.zst")" = 401
check "no batch stored after a refused token" test "$(stored_total)" = 0
check "first delivery → 200 stored" test "$(post e2e-secret-token "$KEY" "$E2E_TMP/body.zst")" = 200
check "response says stored" grep -q '"stored"' "$E2E_TMP/resp.json"
FIRST=$(stored_total)
check "second delivery of the same batch → 200" test "$(post e2e-secret-token "$KEY" "$E2E_TMP/body.zst")" = 200
check "response says duplicate" grep -q '"duplicate"' "$E2E_TMP/resp.json"
check "the duplicate is not counted again ($FIRST samples)" test "$(stored_total)" = "$FIRST"
check "stored samples > 0" test "$FIRST" -gt 0

head -c 3000 /dev/urandom >"$E2E_TMP/garbage"
check "garbage body → 400" test "$(post e2e-secret-token "$NODE:$EPOCH:999999" "$E2E_TMP/garbage")" = 400
check "400 carries a JSON error message" python3 -c "import json; assert json.load(open('$E2E_TMP/resp.json'))['error']"
zstd -dc "$E2E_TMP/body.zst" | head -c 200 | zstd -q >"$E2E_TMP/truncated.zst"
check "truncated batch → 400" test "$(post e2e-secret-token "$NODE:$EPOCH:999998" "$E2E_TMP/truncated.zst")" = 400
diag "$(cat "$E2E_TMP/resp.json")"
check "mismatched idempotency key → 400" test "$(post e2e-secret-token "$NODE:$EPOCH:$((SEQ + 1000))" "$E2E_TMP/body.zst")" = 400
head -c $((200 * 1024 * 1024)) /dev/zero | zstd -q -19 >"$E2E_TMP/bomb.zst"
check "decompression bomb (200 MiB of zeros) → 413" test "$(post e2e-secret-token "$NODE:$EPOCH:999997" "$E2E_TMP/bomb.zst")" = 413
check "oversized Content-Length → 413 before the body is read" \
	test "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$SERVER_URL/api/v1/ingest" -H "Authorization: Bearer e2e-secret-token" -H "Content-Length: 999999999" -H "Expect: 100-continue" --data-binary 'x' --max-time 10)" = 413
check "nothing stored by any refused request" test "$(stored_total)" = "$FIRST"
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0
finish
