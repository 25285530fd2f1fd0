#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sysom-server as a daemon, without an agent: the ready line and port file, token auth and
# SIGHUP reload, kernel symbol uploads, sysomctl errors, exit statuses (address in use, data
# dir in use, newer schema, bad flags) and a clean SIGTERM.
. "$(dirname "$0")/lib.sh"
for b in "$SERVER_BIN" "$CTL_BIN"; do
	[ -x "$b" ] || { echo "missing $b: build first" >&2; exit 1; }
done

echo "lifecycle-token-1" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
start_server srv --token-file "$E2E_TMP/token" || exit 1
check "exactly one ready line naming the bound port and the data dir" \
	test "$(grep -c "info: listening on http://127.0.0.1:$SERVER_PORT (data dir $E2E_TMP/srv.data)\$" "$E2E_TMP/srv.log")" = 1
check "no warning for a private token file" bash -c "! grep -q 'readable by every user' '$E2E_TMP/srv.log'"
check "/healthz answers ok without a token" \
	test "$(curl -s "$SERVER_URL/healthz")" = '{"status":"ok"}'

ctl nodes >"$E2E_TMP/out.txt" 2>"$E2E_TMP/err.txt"
check "sysomctl without the token fails" test $? -ne 0
check "... saying the server answered 401" grep -q "server answered 401" "$E2E_TMP/err.txt"
CTL_OPTS=(--token-file "$E2E_TMP/token")
ctl nodes >"$E2E_TMP/out.txt"
check "sysomctl nodes with the token" test $? -eq 0
check "... says no node has sent data yet" grep -q "no nodes have sent data" "$E2E_TMP/out.txt"
ctl flamegraph >"$E2E_TMP/out.txt"
check "sysomctl flamegraph on an empty store says so" grep -q "Total: 0 samples" "$E2E_TMP/out.txt"
ctl flamegraph --from yesterday >/dev/null 2>"$E2E_TMP/err.txt"
check "a bad time is refused with the server's message" grep -q "server answered 400: invalid time 'yesterday'" "$E2E_TMP/err.txt"
"$CTL_BIN" --server http://127.0.0.1:9 nodes 2>"$E2E_TMP/err.txt"
check "an unreachable server is a clear error" grep -q "cannot reach" "$E2E_TMP/err.txt"

# Kernel symbols: GET 404 → PUT → GET 200; a second PUT changes nothing.
KS="$SERVER_URL/api/v1/kernel-symbols/abf9ec0ec5946600c90641cf5db998472fac410b"
AUTH=(-H "Authorization: Bearer lifecycle-token-1")
ks() { # ks ARGS...: curl with the token; the body goes to $E2E_TMP/resp, the status to stdout
	curl -s -o "$E2E_TMP/resp" -w '%{http_code}' "${AUTH[@]}" "$@"
}
check "GET kernel symbols of an unknown build ID → 404" test "$(ks "$KS")" = 404
printf '1000 T _stext\n1100 t do_one\n2200 T do_syscall_64\n' | zstd -q >"$E2E_TMP/ksyms.zst"
check "PUT kernel symbols (zstd) → 200" \
	test "$(ks -X PUT -H 'Content-Encoding: zstd' --data-binary @"$E2E_TMP/ksyms.zst" "$KS")" = 200
check "... stored" grep -q '"status":"stored"' "$E2E_TMP/resp"
check "GET → 200" test "$(ks "$KS")" = 200
check "... with 3 symbols" grep -q '"symbols":3' "$E2E_TMP/resp"
ks -X PUT -H 'Content-Encoding: zstd' --data-binary @"$E2E_TMP/ksyms.zst" "$KS" >/dev/null
check "PUT again → unchanged" grep -q '"status":"unchanged"' "$E2E_TMP/resp"
printf '1 T a\nzz T b\n' >"$E2E_TMP/bad.txt"
check "a malformed symbol table → 400" \
	test "$(ks -X PUT --data-binary @"$E2E_TMP/bad.txt" "$SERVER_URL/api/v1/kernel-symbols/0102030405")" = 400
check "... naming the line" grep -q '"line":2' "$E2E_TMP/resp"

# SIGHUP re-reads the token file.
echo "lifecycle-token-2" >"$E2E_TMP/token"
kill -HUP "$SERVER_PID"
check "SIGHUP reloads the token" wait_until 10 grep -q "reloaded the token" "$E2E_TMP/srv.log"
check "the old token is refused" test "$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" "$SERVER_URL/api/v1/nodes")" = 401
check "the new token works" test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer lifecycle-token-2' "$SERVER_URL/api/v1/nodes")" = 200
curl -s "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics includes the transport's counters" grep -q '^sysom_http_requests_total ' "$E2E_TMP/metrics.txt"
check "/metrics counts the symbol upload" grep -q '^sysom_kernel_symbol_uploads_total{result="stored"} 1$' "$E2E_TMP/metrics.txt"
check "... and the symbols stored" grep -q '^sysom_kernel_symbols 3$' "$E2E_TMP/metrics.txt"

"$SERVER_BIN" --listen "127.0.0.1:$SERVER_PORT" --data-dir "$E2E_TMP/other.data" 2>"$E2E_TMP/err.txt"
check "a second server on the same port exits 1" test $? -eq 1
check "... saying the address is in use" grep -q "cannot listen on 127.0.0.1:$SERVER_PORT: address already in use" "$E2E_TMP/err.txt"
"$SERVER_BIN" --listen 127.0.0.1:0 --data-dir "$E2E_TMP/srv.data" 2>"$E2E_TMP/err.txt"
check "a second server on the same data dir exits 1" test $? -eq 1
check "... saying the data dir is in use" grep -q "in use by another sysom-server" "$E2E_TMP/err.txt"
"$SERVER_BIN" --data-dir "$E2E_TMP/x.data" --max-ingest-body 12 2>"$E2E_TMP/err.txt"
check "a bad option value exits 2 with the reason" test $? -eq 2
check "... naming the option" grep -q "max-ingest-body" "$E2E_TMP/err.txt"
"$SERVER_BIN" --data-dir "$E2E_TMP/x.data" --no-such-flag 2>/dev/null
check "an unknown flag exits 2" test $? -eq 2

stop_pid "$SERVER_PID"
check "SIGTERM: exit 0" test $? -eq 0
check "... after logging that it stopped" grep -q "info: stopped" "$E2E_TMP/srv.log"

# A database written by a newer server is refused, and left alone.
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version = 99'); c.commit()" "$E2E_TMP/srv.data/sysom.db"
"$SERVER_BIN" --listen 127.0.0.1:0 --data-dir "$E2E_TMP/srv.data" 2>"$E2E_TMP/err.txt"
check "a newer schema exits 1" test $? -eq 1
check "... with a clear message" grep -q "schema version 99, newer than" "$E2E_TMP/err.txt"

chmod 644 "$E2E_TMP/token"
start_server open --token-file "$E2E_TMP/token" --max-kernel-symbols 4 || exit 1
check "a world-readable token file is used with a warning" grep -q "readable by every user" "$E2E_TMP/open.log"
# --max-kernel-symbols: the second table would need the first evicted, which is in use.
AUTH=(-H "Authorization: Bearer lifecycle-token-2")
printf '1000 T a\n2000 T b\n3000 T c\n' >"$E2E_TMP/three.txt"
check "a table within --max-kernel-symbols → 200" \
	test "$(ks -X PUT --data-binary @"$E2E_TMP/three.txt" "$SERVER_URL/api/v1/kernel-symbols/0a0a0a0a0a0a")" = 200
check "one more that would evict a table in use → 507" \
	test "$(ks -D "$E2E_TMP/headers" -X PUT --data-binary @"$E2E_TMP/three.txt" "$SERVER_URL/api/v1/kernel-symbols/0b0b0b0b0b0b")" = 507
check "... saying why" grep -q 'kernel symbol tables are full: 1 tables hold 3 of 4 symbols' "$E2E_TMP/resp"
check "... with Retry-After" grep -qi '^Retry-After: [0-9]' "$E2E_TMP/headers"
stop_pid "$SERVER_PID"
check "... and that server stops cleanly too" test $? -eq 0
finish
