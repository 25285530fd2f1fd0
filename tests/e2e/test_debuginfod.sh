#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The symbol repository end to end: a binary and its debug file uploaded in chunks through the
# API are served to elfutils' debuginfod-find byte for byte; with --debuginfod-urls the server
# fetches a Build ID nobody uploaded from a real debuginfod on loopback and names its frames.
. "$(dirname "$0")/lib.sh"

for b in "$SERVER_BIN" "$CTL_BIN"; do
	[ -x "$b" ] || { echo "missing $b: build first" >&2; exit 1; }
done
for t in gcc objcopy curl debuginfod debuginfod-find; do
	command -v "$t" >/dev/null || skip_all "$t is not installed"
done

# The test's helper (content hash, function offsets, synthetic batches), built by the Makefile.
SYMTOOL=$BUILD/tests/tools/symtool
[ -x "$SYMTOOL" ] || { echo "missing $SYMTOOL: build first" >&2; exit 1; }

# Two programs: `app` (uploaded: stripped executable + separate debug file) and `app2` (only an
# upstream debuginfod has it).
cat >"$E2E_TMP/app.c" <<'EOF'
volatile int sink;
__attribute__((noinline)) void app_leaf(int n) { for (int i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void app_middle(int n) { app_leaf(n); sink ^= n; }
int main(int argc, char **argv) { (void)argv; app_middle(argc); return 0; }
EOF
sed -e 's/app_/up_/g' -e 's/sink/sink2/g' "$E2E_TMP/app.c" >"$E2E_TMP/app2.c"
( cd "$E2E_TMP" && gcc -g -O1 -fno-inline -Wl,--build-id -o app app.c &&
  gcc -g -O1 -fno-inline -Wl,--build-id -o app2 app2.c &&
  objcopy --only-keep-debug app app.debug && objcopy --strip-debug --strip-unneeded app app.stripped ) ||
	{ echo "cannot build the test programs" >&2; exit 1; }
bid() { eu-readelf -n "$1" | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p'; }
BID=$(bid "$E2E_TMP/app")
BID2=$(bid "$E2E_TMP/app2")
diag "app $BID, app2 $BID2"
check "the test programs have distinct build IDs" test -n "$BID" -a -n "$BID2" -a "$BID" != "$BID2"

TOKEN=e2e-symbols-token
echo "$TOKEN" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
CTL_OPTS=(--token-file "$E2E_TMP/token")
start_server srv --token-file "$E2E_TMP/token" || exit 1

# api METHOD PATH [curl args...]: prints the status; the body goes to $E2E_TMP/resp.json.
api() {
	local method=$1 path=$2
	shift 2
	curl -s -o "$E2E_TMP/resp.json" -w '%{http_code}' -X "$method" "$SERVER_URL$path" \
		-H "Authorization: Bearer $TOKEN" "$@"
}

# put_range FILE HEX KIND UPLOAD_ID START END: one chunk; prints the status.
put_range() {
	local file=$1 hex=$2 kind=$3 uid=$4 start=$5 end=$6
	local size hash
	size=$(stat -c %s "$file")
	hash=$("$SYMTOOL" hash "$file")
	dd if="$file" iflag=skip_bytes,count_bytes skip="$start" count=$((end - start + 1)) status=none |
		api PUT "/api/v1/symbols/$hex/$kind" -H "Content-Range: bytes $start-$end/$size" \
			-H "X-Sysom-Upload-Id: $uid" -H "X-Sysom-Content-Hash: xxh3-128:$hash" \
			-H "Content-Type: application/octet-stream" --data-binary @-
}

# upload FILE HEX KIND UPLOAD_ID CHUNK: the whole file in chunks; prints every status.
upload() {
	local file=$1 hex=$2 kind=$3 uid=$4 chunk=$5
	local size start=0 end status
	size=$(stat -c %s "$file")
	while [ "$start" -lt "$size" ]; do
		end=$((start + chunk - 1))
		[ "$end" -ge "$size" ] && end=$((size - 1))
		status=$(put_range "$file" "$hex" "$kind" "$uid" "$start" "$end")
		printf '%s ' "$status"
		[ "$status" = 202 ] || break
		start=$((end + 1))
	done
	echo
}

check "missing: the server lacks both files of app" \
	test "$(api POST /api/v1/symbols/missing -H 'Content-Type: application/json' \
		--data "{\"objects\":[{\"build_id\":\"$BID\",\"kind\":\"elf\"}]}")" = 200
check "missing lists executable and debuginfo" python3 -c "
import json; d = json.load(open('$E2E_TMP/resp.json'))
assert d == {'missing': [{'build_id': '$BID', 'executable': True, 'debuginfo': True}]}, d"

SIZE=$(stat -c %s "$E2E_TMP/app.stripped")
CHUNK=$((SIZE / 3 + 1))
STATUSES=$(upload "$E2E_TMP/app.stripped" "$BID" executable 0123456789abcdef0123456789abcdef "$CHUNK")
diag "executable ($SIZE bytes) in chunks of $CHUNK: $STATUSES"
check "the executable upload ends with 201 after 202s" test "$STATUSES" = "202 202 201 "
check "201 says stored" grep -q '"status":"stored"' "$E2E_TMP/resp.json"

DSIZE=$(stat -c %s "$E2E_TMP/app.debug")
check "a chunk that skips ahead gets 409 with resume_at" \
	test "$(put_range "$E2E_TMP/app.debug" "$BID" debuginfo fedcba9876543210fedcba9876543210 1000 1999)" = 409
check "409 says resume at 0" grep -q '"resume_at":0' "$E2E_TMP/resp.json"
check "first debug chunk → 202" \
	test "$(put_range "$E2E_TMP/app.debug" "$BID" debuginfo fedcba9876543210fedcba9876543210 0 999)" = 202
check "repeated chunk → 409 resume_at 1000" \
	test "$(put_range "$E2E_TMP/app.debug" "$BID" debuginfo fedcba9876543210fedcba9876543210 0 999)" = 409
check "409 says resume at 1000" grep -q '"resume_at":1000' "$E2E_TMP/resp.json"
check "the info lists the partial upload" bash -c "
	test \"\$(curl -s -o '$E2E_TMP/info.json' -w '%{http_code}' -H 'Authorization: Bearer $TOKEN' \
		'$SERVER_URL/api/v1/symbols/$BID')\" = 200 &&
	python3 -c \"import json; d = json.load(open('$E2E_TMP/info.json')); u = d['uploads'][0];
assert u['kind'] == 'debuginfo' and u['received'] == 1000 and d['debuginfo'] is None, d\""
check "the rest of the debug file → 201" \
	test "$(put_range "$E2E_TMP/app.debug" "$BID" debuginfo fedcba9876543210fedcba9876543210 1000 $((DSIZE - 1)))" = 201
check "re-uploading → 200 present" \
	test "$(put_range "$E2E_TMP/app.debug" "$BID" debuginfo 11112222333344445555666677778888 0 999)" = 200
check "a wrong content hash → 422" bash -c "
	test \"\$(head -c 4096 /dev/urandom | curl -s -o /dev/null -w '%{http_code}' -X PUT \
		'$SERVER_URL/api/v1/symbols/$BID2/executable' -H 'Authorization: Bearer $TOKEN' \
		-H 'Content-Range: bytes 0-4095/4096' -H 'X-Sysom-Upload-Id: 99999999999999999999999999999999' \
		-H 'X-Sysom-Content-Hash: xxh3-128:00000000000000000000000000000000' --data-binary @-)\" = 422"
check "missing: nothing missing for app now" \
	test "$(api POST /api/v1/symbols/missing --data "{\"objects\":[{\"build_id\":\"$BID\"}]}")" = 200
check "missing is empty" grep -qx '{"missing":\[\]}' "$E2E_TMP/resp.json"
check "info: both files and a symbol file" bash -c "
	test \"\$(curl -s -o '$E2E_TMP/info.json' -w '%{http_code}' -H 'Authorization: Bearer $TOKEN' \
		'$SERVER_URL/api/v1/symbols/$BID')\" = 200 &&
	python3 -c \"import json; d = json.load(open('$E2E_TMP/info.json'));
assert d['executable']['size'] == $SIZE and d['debuginfo']['size'] == $DSIZE, d
assert d['symbols']['functions'] >= 3 and d['uploads'] == [], d\""

# The debuginfod side: elfutils' own client, no token.
export DEBUGINFOD_CACHE_PATH=$E2E_TMP/client-cache
GOT=$(DEBUGINFOD_URLS=$SERVER_URL debuginfod-find debuginfo "$BID" 2>>"$E2E_TMP/find.log")
check "debuginfod-find debuginfo BUILDID succeeds" test -n "$GOT" -a -f "$GOT"
check "... and returns the uploaded debug file" cmp "$GOT" "$E2E_TMP/app.debug"
GOT=$(DEBUGINFOD_URLS=$SERVER_URL debuginfod-find executable "$BID" 2>>"$E2E_TMP/find.log")
check "debuginfod-find executable BUILDID returns the uploaded executable" cmp "$GOT" "$E2E_TMP/app.stripped"
check "debuginfod-find fails for a Build ID nobody uploaded" \
	bash -c "! DEBUGINFOD_URLS=$SERVER_URL debuginfod-find debuginfo $BID2 >/dev/null 2>&1"
check "debuginfod-find source fails (sources are not served)" \
	bash -c "! DEBUGINFOD_URLS=$SERVER_URL debuginfod-find source $BID /tmp/app.c >/dev/null 2>&1"
curl -sI "$SERVER_URL/buildid/$BID/debuginfo" >"$E2E_TMP/head.txt"
check "HEAD carries X-DEBUGINFOD-SIZE and Content-Length without a body" \
	bash -c "grep -qi '^X-DEBUGINFOD-SIZE: $DSIZE' '$E2E_TMP/head.txt' && grep -qi '^Content-Length: $DSIZE' '$E2E_TMP/head.txt'"
# parallel_gets N: N clients fetch the debug file at once; all copies must be exact.
parallel_gets() {
	local i pids=()
	for i in $(seq "$1"); do
		curl -sf "$SERVER_URL/buildid/$BID/debuginfo" -o "$E2E_TMP/par.$i" &
		pids+=("$!")
	done
	wait "${pids[@]}"
	for i in $(seq "$1"); do
		cmp -s "$E2E_TMP/par.$i" "$E2E_TMP/app.debug" || return 1
	done
}
check "8 parallel GETs of the debug file are byte-identical" parallel_gets 8

curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "metrics: uploads by result" grep -q '^sysom_symbol_uploads_total{result="stored"} 2$' "$E2E_TMP/metrics.txt"
# (the 4096 bytes with the wrong hash were received too)
check "metrics: bytes received" grep -q "^sysom_symbol_upload_bytes_total $((SIZE + DSIZE + 4096))\$" "$E2E_TMP/metrics.txt"
check "metrics: debuginfod requests" grep -q '^sysom_debuginfod_requests_total{type="debuginfo",result="found"} [1-9]' "$E2E_TMP/metrics.txt"
check "metrics: Build IDs held" grep -q '^sysom_symbol_repository_build_ids 1$' "$E2E_TMP/metrics.txt"
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0

# --debuginfod-auth: the token is required on /buildid/ too (elfutils sends it from
# DEBUGINFOD_HEADERS_FILE).
start_server srv --token-file "$E2E_TMP/token" --debuginfod-auth --upload-expiry 2s || exit 1
check "with --debuginfod-auth, no token → debuginfod-find fails" \
	bash -c "! DEBUGINFOD_URLS=$SERVER_URL DEBUGINFOD_CACHE_PATH=$E2E_TMP/cache2 debuginfod-find executable $BID >/dev/null 2>&1"
echo "Authorization: Bearer $TOKEN" >"$E2E_TMP/headers"
GOT=$(DEBUGINFOD_URLS=$SERVER_URL DEBUGINFOD_CACHE_PATH=$E2E_TMP/cache3 DEBUGINFOD_HEADERS_FILE=$E2E_TMP/headers \
	debuginfod-find executable "$BID" 2>>"$E2E_TMP/find.log")
check "with the token in DEBUGINFOD_HEADERS_FILE it works" cmp "$GOT" "$E2E_TMP/app.stripped"
check "a partial upload of app2 → 202" \
	test "$(put_range "$E2E_TMP/app2" "$BID2" executable 1234123412341234 0 99)" = 202
check "the sweep deletes it once idle beyond --upload-expiry (2s)" \
	wait_until 30 bash -c "test \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $TOKEN' \
		'$SERVER_URL/api/v1/symbols/$BID2')\" = 404"
check "the sweep was logged" grep -q "deleted 1 partial symbol upload" "$E2E_TMP/srv.log"
stop_pid "$SERVER_PID"

# Upstream: a real debuginfod on loopback serves app2; the server asks it when app2's frames
# are symbolized.
# app3: its stripped executable is uploaded, its debug file only upstream has.
sed -e 's/app_/up3_/g' -e 's/sink/sink3/g' "$E2E_TMP/app.c" >"$E2E_TMP/app3.c"
( cd "$E2E_TMP" && gcc -g -O1 -fno-inline -Wl,--build-id -o app3 app3.c &&
  objcopy --strip-debug --strip-unneeded app3 app3.stripped ) || { echo "cannot build app3" >&2; exit 1; }
BID3=$(bid "$E2E_TMP/app3")
mkdir -p "$E2E_TMP/upstream"
cp "$E2E_TMP/app2" "$E2E_TMP/app3" "$E2E_TMP/upstream/"
UPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
debuginfod -F -p "$UPORT" -d "$E2E_TMP/upstream.sqlite" -t 0 -g 0 "$E2E_TMP/upstream" >>"$E2E_TMP/debuginfod.log" 2>&1 &
E2E_PIDS+=("$!")
check "the upstream debuginfod serves app2" \
	wait_until 60 curl -sf -o /dev/null "http://127.0.0.1:$UPORT/buildid/$BID2/executable"
# (Full malloc stacks: libdebuginfod's dprintf buffers are reported by LSan without it on the
# stack otherwise, and tests/lsan.supp names the library.)
ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" \
	start_server up --token-file "$E2E_TMP/token" --debuginfod-urls "http://127.0.0.1:$UPORT" || exit 1
read -r LEAF _ < <("$SYMTOOL" funcoff "$E2E_TMP/app2" up_leaf)
read -r MIDDLE MSIZE < <("$SYMTOOL" funcoff "$E2E_TMP/app2" up_middle)
RET=$(printf '0x%x' $((MIDDLE + MSIZE / 2)))
KEY=$("$SYMTOOL" batch "$E2E_TMP/up.batch" 1 app2 /opt/app2/app2 "$BID2" "$((LEAF + 2))" "$RET")
check "a synthetic batch with app2's frames is stored" \
	test "$(api POST /api/v1/ingest -H "Idempotency-Key: $KEY" -H 'Content-Encoding: zstd' \
		--data-binary "@$E2E_TMP/up.batch")" = 200
ctl flamegraph --comm app2 --from -1h --to now --format folded >"$E2E_TMP/before.folded"
diag "before the fetch: $(cat "$E2E_TMP/before.folded")"
check "before: app2's frames are file+offset (never a wrong name)" grep -q '^app2;app2+0x[0-9a-f]*;app2+0x[0-9a-f]* 10$' "$E2E_TMP/before.folded"
check "the query made the server fetch app2 from upstream into the repository" \
	wait_until 60 bash -c "curl -sf -H 'Authorization: Bearer $TOKEN' '$SERVER_URL/api/v1/symbols/$BID2' |
		python3 -c 'import json,sys; d = json.load(sys.stdin); sys.exit(not (d[\"executable\"] and d[\"symbols\"]))'"
check "libdebuginfod's cache lives under the data dir" test -d "$E2E_TMP/up.data/debuginfod-cache"
ctl flamegraph --comm app2 --from -1h --to now --format folded >"$E2E_TMP/after.folded"
diag "after the fetch: $(cat "$E2E_TMP/after.folded")"
check "sysomctl flamegraph now shows app2's function names" grep -qx 'app2;up_middle;up_leaf 10' "$E2E_TMP/after.folded"
ctl flamegraph --comm app2 --from -1h --to now --format top >"$E2E_TMP/after.top"
check "the top summary names them too" grep -q 'up_leaf' "$E2E_TMP/after.top"
STATUSES=$(upload "$E2E_TMP/app3.stripped" "$BID3" executable abababababababababababababababab 1000000)
check "a stripped executable without a debug file is uploaded" test "$STATUSES" = "201 "
check "... and the server fetches its debug file from upstream" \
	wait_until 60 bash -c "curl -sf -H 'Authorization: Bearer $TOKEN' '$SERVER_URL/api/v1/symbols/$BID3' |
		python3 -c 'import json,sys; d = json.load(sys.stdin); sys.exit(not d[\"debuginfo\"])'"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics2.txt"
check "metrics: upstream files installed" grep -q '^sysom_debuginfod_upstream_total{result="installed"} [1-9]' "$E2E_TMP/metrics2.txt"
check "metrics: named and unnamed user frames" \
	bash -c "grep -q '^sysom_symbolization_user_frames_total{result=\"named\"} [1-9]' '$E2E_TMP/metrics2.txt' &&
		grep -q '^sysom_symbolization_user_frames_total{result=\"no_symbols\"} [1-9]' '$E2E_TMP/metrics2.txt'"
check "the server logged the fetch" grep -q "upstream debuginfod: $BID2: executable" "$E2E_TMP/up.log"
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0
finish
