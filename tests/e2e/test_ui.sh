#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The web UI in real browsers: sysom-server serves ui/ at /ui/ (with its npm libraries from
# ui/vendor/), and headless Chromium (Debian's chromium, over the DevTools protocol) and headless
# Firefox (Debian's firefox-esr, over WebDriver BiDi), both driven by puppeteer-core from npm (no
# browser download), load every view (tests/e2e/ui_browser.mjs). Each browser's checks are TAP
# lines of their own ("chromium: ...", "firefox: ..."), against the same server and data; a
# browser that is not installed is reported as skipped, with the reason:
#   * the static files: redirects, content types, no traversal, no token needed for them;
#   * an empty server: every view says there is nothing, without console errors;
#   * a wrong token: a clear message, then the form takes the right one;
#   * the server fed by the real agent and the simulated 8-rank job with extra CPU work on
#     rank 2: fleet, CPU / GPU-launch / GPU-time flame graphs with the job's functions (search,
#     zoom), differential flame graphs (ranks, time ranges), the job's lateness heatmap with a
#     row per rank, the GPU table, the waterline, the monitor's diagnosis and its flame graph;
#     the token in no request URL;
#   * a profile of 100,000 distinct stacks: rendered, the page stays responsive (times logged;
#     Chromium only).
. "$(dirname "$0")/lib.sh"
require_root

SIMJOB_DIR=$BUILD/tests/fixtures/simjob
SIMJOB=$SIMJOB_DIR/simjob
SYMTOOL=$BUILD/tests/tools/symtool
PLUGIN=$BUILD/lib/libnccl-profiler-sysom.so
CUPTI_LIB=$BUILD/lib/libsysom-cupti.so
FAKE_CUPTI=$SIMJOB_DIR/libcupti.so
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
FIREFOX=${FIREFOX:-/usr/bin/firefox-esr}
export CHROMIUM FIREFOX
for f in "$SIMJOB" "$PLUGIN" "$CUPTI_LIB" "$FAKE_CUPTI"; do
	[ -e "$f" ] || skip_all "$f not built (needs the CUDA/NCCL/CUPTI headers)"
done
[ -x "$CHROMIUM" ] || [ -x "$FIREFOX" ] ||
	skip_all "neither $CHROMIUM nor $FIREFOX (make deps installs Debian's chromium and firefox-esr)"
command -v node >/dev/null || skip_all "no node (make deps installs nodejs)"
[ -d "$ROOT/node_modules/puppeteer-core" ] || skip_all "no node_modules/puppeteer-core: run make deps (npm ci)"
[ -f "$ROOT/ui/vendor/d3-flamegraph.min.js" ] || skip_all "no ui/vendor: run make deps, then make"

TOKEN=ui-test-$RANDOM$RANDOM
echo "$TOKEN" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
api() { curl -sf -H "Authorization: Bearer $TOKEN" "$SERVER_URL$1"; }
CTL_OPTS=(--token-file "$E2E_TMP/token")

# browser_in BROWSER SCENARIO ARGS...: runs the driver in one browser (chromium or firefox),
# one TAP line per PASS/FAIL prefixed with the browser, DIAG lines as comments; a browser that
# is not installed gives one skipped line with the reason.
browser_in() {
	local b=$1 scenario=$2 out=$E2E_TMP/browser-$1-$2.out verdict rest n=0 exe start=$SECONDS
	shift 2
	case $b in chromium) exe=$CHROMIUM ;; firefox) exe=$FIREFOX ;; esac
	if [ ! -x "$exe" ]; then
		ok "$b: scenario $scenario # SKIP no $exe (make deps installs Debian's ${exe##*/})"
		return
	fi
	BROWSER=$b timeout 600 node "$ROOT/tests/e2e/ui_browser.mjs" "$scenario" "$SERVER_URL" "$TOKEN" "$@" >"$out" 2>&1
	local rc=$?
	while read -r verdict rest; do
		case $verdict in
		PASS) ok "$b: $rest"; n=$((n + 1)) ;;
		FAIL) not_ok "$b: $rest"; n=$((n + 1)) ;;
		DIAG) diag "$b: $rest" ;;
		esac
	done <"$out"
	if [ "$rc" -ne 0 ] || [ "$n" -eq 0 ]; then
		not_ok "$b: browser scenario $scenario ran (status $rc)"
		sed 's/^/#   /' "$out" | tail -20
	fi
	diag "$b: scenario $scenario took $((SECONDS - start)) s"
}

# browser SCENARIO ARGS...: the scenario in Chromium, then in Firefox (same server, same data).
browser() {
	browser_in chromium "$@"
	browser_in firefox "$@"
}

# simjob's symbols are in the repository from the start, so frames have names at once.
mkdir -p "$E2E_TMP/srv.data"
"$BUILD/sysom-symrepo" --repo "$E2E_TMP/srv.data/symbols" add "$SIMJOB" >"$E2E_TMP/symrepo.log" 2>&1
check "sysom-symrepo add simjob exits 0" test $? -eq 0
start_server srv --token-file "$E2E_TMP/token" --ui-dir "$ROOT/ui" --analysis-interval 1s \
	--public-url http://sysom.test:8080 || exit 1

# The static files themselves.
hdrs() { curl -s -o /dev/null -D - "$@" | tr -d '\r'; }
check "/ redirects to /ui/" bash -c "curl -s -o /dev/null -w '%{http_code} %{redirect_url}' '$SERVER_URL/' | grep -qx '302 $SERVER_URL/ui/'"
check "/ui redirects to /ui/" bash -c "curl -s -o /dev/null -w '%{http_code}' '$SERVER_URL/ui' | grep -qx 302"
check "/ui/ is the page (text/html), without a token" \
	bash -c "curl -sf '$SERVER_URL/ui/' | grep -q '<script type=\"module\" src=\"app.js\">'"
check "the vendored d3-flame-graph is served as JavaScript, cached an hour" \
	bash -c "h=\$(curl -s -o /dev/null -D - '$SERVER_URL/ui/vendor/d3-flamegraph.min.js' | tr -d '\r'); grep -qi '^content-type: text/javascript' <<<\"\$h\" && grep -qi '^cache-control: public, max-age=3600' <<<\"\$h\""
check "the page's CSP allows scripts from the server only" \
	bash -c "curl -s -o /dev/null -D - '$SERVER_URL/ui/' | grep -qi \"^content-security-policy: default-src 'self'\""
ETAG=$(hdrs "$SERVER_URL/ui/app.js" | sed -n 's/^[Ee][Tt][Aa][Gg]: //p')
check "a known ETag is answered 304" \
	bash -c "curl -s -o /dev/null -w '%{http_code}' -H 'If-None-Match: $ETAG' '$SERVER_URL/ui/app.js' | grep -qx 304"
# Dot segments are refused by the transport (400), other bad names by the UI (404).
for p in '/ui/%2e%2e/Makefile' '/ui/../Makefile' '/ui/vendor/%2e%2e/%2e%2e/Makefile' '/ui/vendor/..%2f..%2fMakefile' '/ui/.gitignore' '/ui/nosuch.js'; do
	check "GET $p is refused (400 or 404)" bash -c "curl -s --path-as-is -o /dev/null -w '%{http_code}' '$SERVER_URL$p' | grep -qxE '400|404'"
done

# An empty server, then a wrong token.
browser empty
browser wrongtoken

# The agent and the 8-rank job with extra CPU work on rank 2 (the monitor opens an incident).
start_agent agent "$SERVER_URL" --token-file "$E2E_TMP/token" \
	--gpu-libraries "$SIMJOB_DIR/libnccl.so.2:$SIMJOB_DIR/libcuda.so.1" \
	--sample-rate 1 --gpu-launch-duty 1 || exit 1
JOB=e2e-ui
curl -sf -X PUT -H "Authorization: Bearer $TOKEN" --data '{"lookback_s": 30, "resolve_after_s": 600}' \
	"$SERVER_URL/api/v1/jobs/$JOB/settings" >/dev/null
check "the job's settings are stored" test $? -eq 0
SYSOM_SOCKET_PATH=$E2E_TMP/agent.sock NCCL_PROFILER_PLUGIN=$PLUGIN \
	CUDA_INJECTION64_PATH=$CUPTI_LIB SYSOM_CUPTI_LIBRARY=$FAKE_CUPTI \
	SYSOM_NCCL_WINDOW_MS=250 SYSOM_CUPTI_WINDOW_MS=250 \
	timeout 180 "$SIMJOB" --ranks 8 --job-id "$JOB" --seconds 10 --cpu-us 2000 --kernel-us 1000 \
	--fault rank=2,kind=cpu,amount=3000 >"$E2E_TMP/job.log" 2>&1
check "simjob (8 ranks, extra CPU work on rank 2) exits 0" test $? -eq 0
sleep 3 # a batch interval
diag_id() {
	api "/api/v1/diagnoses?job=$JOB&from=-1h&to=now" |
		python3 -c "import json,sys; d=json.load(sys.stdin)['diagnoses']; print(next((x['id'] for x in d if x['kind']=='straggler' and x['rank']==2), ''))" 2>/dev/null
}
export TOKEN SERVER_URL JOB
check "the monitor opened a straggler incident for rank 2" wait_until 60 bash -c "$(declare -f api diag_id); [ -n \"\$(diag_id)\" ]"
DIAG=$(diag_id)
HOST=$(api /api/v1/nodes | python3 -c "import json,sys; print(json.load(sys.stdin)['nodes'][0]['hostname'])")
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
browser views job="$JOB" host="$HOST" diag="$DIAG" ranks=8

# A profile of 100,000 distinct stacks (depth 24).
KEY_TOTAL=$("$SYMTOOL" profile "$E2E_TMP/big.batch" 1 100000)
check "symtool builds a batch of 100000 distinct stacks" test $? -eq 0
check "the batch is stored" \
	bash -c "curl -sf -o /dev/null -H 'Authorization: Bearer $TOKEN' -H 'Idempotency-Key: ${KEY_TOTAL%% *}' \
		-H 'Content-Encoding: zstd' --data-binary '@$E2E_TMP/big.batch' '$SERVER_URL/api/v1/ingest'"
# Chromium only: each browser would fetch the 100k answer again (the server aggregates and
# symbolizes it: over a minute on the loaded ASan build), for the page code both run alike.
browser_in chromium huge comm=bigprof stacks=100000
ok "firefox: scenario huge # SKIP the 100k-stack render is checked in Chromium only (test runtime)"

stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
