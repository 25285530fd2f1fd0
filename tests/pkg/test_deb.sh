#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian packages end to end: dpkg-buildpackage -b from a copy of the tree
# (scripts/build-debs.sh), their contents and maintainer scripts, then installed on this
# machine: users, directories and token created, no service enabled or started, the units
# verified, the installed server and agent (--check, then shipping a batch) run from the
# installed paths with the installed configuration, the NCCL plugin found by name; purged at
# the end. Minutes of build time, so not part of `make test`: `make deb-test` (needs root).
# SYSOM_DEB_DIR=DIR tests packages already built there instead of building them.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../e2e/lib.sh"

[ "$(id -u)" = 0 ] || skip_all "installs packages: run as root"
for t in dpkg-buildpackage dh systemd-analyze curl; do
	command -v "$t" >/dev/null || skip_all "$t is not installed (make deps)"
done
PKGS=(sysom-agent sysom-server sysom-tools sysom-gpu-plugins)
for p in "${PKGS[@]}"; do
	if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		skip_all "$p is already installed on this machine: not touching it"
	fi
done
installed=0
deb_cleanup() {
	[ "$installed" = 1 ] && dpkg --purge "${PKGS[@]}" >>"$E2E_TMP/dpkg.log" 2>&1
	e2e_cleanup
}
trap deb_cleanup EXIT

# SYSOM_DEB_DIR: packages built before (scripts/build-debs.sh DIR), to test them again
# without the build.
if [ -n "${SYSOM_DEB_DIR:-}" ]; then
	OUT=$SYSOM_DEB_DIR
	diag "packages from $OUT (not rebuilt)"
else
	OUT=$E2E_TMP/debs
	start=$SECONDS
	"$ROOT/scripts/build-debs.sh" "$OUT" >"$E2E_TMP/build-debs.log" 2>&1
	check "dpkg-buildpackage -b builds the packages" test $? -eq 0
	secs=$((SECONDS - start))
	diag "package build: $secs s"
	mkdir -p "$BUILD/test-logs"
	echo "deb_build_seconds $secs (scripts/build-debs.sh, $(nproc) CPUs)" >>"$BUILD/test-logs/measurements.txt"
fi
declare -A DEB
for p in "${PKGS[@]}"; do
	DEB[$p]=$(ls "$OUT/${p}_"*.deb 2>/dev/null | head -1)
	check "$p .deb built" test -n "${DEB[$p]}"
done
[ -n "${DEB[sysom-agent]}" ] && [ -n "${DEB[sysom-server]}" ] || { finish; exit 1; }

# has FILE-IN-PACKAGE PACKAGE
has() { dpkg-deb -c "${DEB[$2]}" | awk '{print $6}' | grep -qx "./$1"; }
check "sysom-agent ships /usr/bin/sysom-agent" has usr/bin/sysom-agent sysom-agent
check "sysom-agent ships its unit" has lib/systemd/system/sysom-agent.service sysom-agent
check "sysom-server ships /usr/bin/sysom-server" has usr/bin/sysom-server sysom-server
check "sysom-tools ships sysomctl and sysom-symrepo" bash -c "$(declare -f has); $(declare -p DEB); has usr/bin/sysomctl sysom-tools && has usr/bin/sysom-symrepo sysom-tools"
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
check "sysom-gpu-plugins ships the NCCL plugin in /usr/lib/$MA" has "usr/lib/$MA/libnccl-profiler-sysom.so" sysom-gpu-plugins
check "agent.conf is a conffile" bash -c "dpkg-deb --ctrl-tarfile '${DEB[sysom-agent]}' | tar -xOf - ./conffiles | grep -qx /etc/sysom/agent.conf"
for p in sysom-agent sysom-server; do
	dpkg-deb -e "${DEB[$p]}" "$E2E_TMP/ctrl-$p"
	# (debhelper's --no-enable snippet re-enables only a unit the admin had enabled; that
	# nothing gets enabled is checked after dpkg -i below)
	check "$p postinst starts nothing" \
		bash -c "! grep -nE 'deb-systemd-invoke (\\\$_dh_action|start|restart) ' '$E2E_TMP/ctrl-$p/postinst'"
	check "$p postinst restarts only a running service (try-restart)" \
		grep -q 'deb-systemd-invoke try-restart' "$E2E_TMP/ctrl-$p/postinst"
done

# ---- Installed on this machine.
dpkg -i "${DEB[@]}" >"$E2E_TMP/dpkg.log" 2>&1
rc=$?
installed=1
check "dpkg -i of the four packages" test $rc -eq 0
check "system user sysom-server created" bash -c "getent passwd sysom-server >/dev/null"
check "group sysom-credentials created" bash -c "getent group sysom-credentials >/dev/null"
check "/etc/sysom/server.token created, 0600 root" test "$(stat -c '%a %U' /etc/sysom/server.token 2>/dev/null)" = "600 root"
check "/var/lib/sysom created 0700" test "$(stat -c %a /var/lib/sysom 2>/dev/null)" = 700
check "no sysom service enabled" bash -c '! ls /etc/systemd/system/*.wants/sysom-* 2>/dev/null | grep -q .'
running_installed() {
	local p
	for p in /proc/[0-9]*; do readlink "$p/exe"; done 2>/dev/null | grep -qE '^/usr/bin/sysom-(agent|server)$'
}
check "no installed daemon running after install" bash -c "$(declare -f running_installed); ! running_installed"
for u in sysom-agent sysom-server; do
	check "systemd-analyze verify /lib/systemd/system/$u.service" systemd-analyze verify "/lib/systemd/system/$u.service"
done
check "the NCCL plugin loads by name (NCCL_PROFILER_PLUGIN=sysom)" \
	python3 -c 'import ctypes; ctypes.CDLL("libnccl-profiler-sysom.so").ncclProfiler_v5'

# The installed server with the installed configuration and token (its listen address and
# data directory moved to this test's).
mkdir -p "$E2E_TMP/srv"
/usr/bin/sysom-server --config /etc/sysom/server.conf --listen 127.0.0.1:0 --data-dir "$E2E_TMP/srv" \
	--port-file "$E2E_TMP/srv.port" --token-file /etc/sysom/server.token >"$E2E_TMP/server.log" 2>&1 &
SERVER_PID=$!
E2E_PIDS+=("$SERVER_PID")
wait_until 30 test -s "$E2E_TMP/srv.port"
URL=http://127.0.0.1:$(cat "$E2E_TMP/srv.port" 2>/dev/null)
check "installed sysom-server answers /healthz" curl -sf -o /dev/null "$URL/healthz"
/usr/bin/sysom-agent --check --config /etc/sysom/agent.conf --server "$URL" \
	--token-file /etc/sysom/server.token --spool-dir "$E2E_TMP/spool" >"$E2E_TMP/check.log" 2>&1
check "installed sysom-agent --check passes" test $? -eq 0
/usr/bin/sysom-agent --config /etc/sysom/agent.conf --server "$URL" --token-file /etc/sysom/server.token \
	--spool-dir "$E2E_TMP/spool" --socket "$E2E_TMP/agent.sock" --batch-interval 2s \
	--drain-interval 0.5s >"$E2E_TMP/agent.log" 2>&1 &
AGENT_PID=$!
E2E_PIDS+=("$AGENT_PID")
wait_until 60 log_count_above "$E2E_TMP/agent.log" "attached to" 0
[ -x "$WORKLOAD_BIN" ] && run_workload 2 >/dev/null
wait_until 30 log_count_above "$E2E_TMP/agent.log" "batch [0-9]*: [1-9]" 0
check "installed agent shipped a batch" log_count_above "$E2E_TMP/agent.log" "batch [0-9]*: [1-9]" 0
check "installed sysomctl lists this node ($(hostname))" bash -c \
	"/usr/bin/sysomctl --server '$URL' --token-file /etc/sysom/server.token nodes | grep -qF '$(hostname)'"
check "installed agent stops cleanly" stop_pid "$AGENT_PID"
check "installed server stops cleanly" stop_pid "$SERVER_PID"

dpkg --purge "${PKGS[@]}" >>"$E2E_TMP/dpkg.log" 2>&1
check "dpkg --purge succeeds" test $? -eq 0
installed=0
check "binaries removed" test ! -e /usr/bin/sysom-agent -a ! -e /usr/bin/sysom-server -a ! -e /usr/bin/sysomctl
check "token and agent state purged" test ! -e /etc/sysom/server.token -a ! -e /var/lib/sysom
finish
