#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Kubernetes manifests (deploy/kubernetes): rendered with `kubectl kustomize` where kubectl
# is installed (else each resource file is loaded with PyYAML, said in a diag line), checked
# for the DaemonSet's host PID, dropped capabilities, mounts matching the agent's
# configuration, the server's probes and scrape annotations; then the real agent's --check is
# run with exactly the DaemonSet's capabilities (setpriv) and must pass, and must fail with
# CAP_BPF taken away; the DaemonSet's capability list must equal the systemd unit's.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

K=$ROOT/deploy/kubernetes
# PyYAML: Debian's python3-yaml for /usr/bin/python3 (make deps), else any python3 that has it.
PY=""
for p in /usr/bin/python3 python3; do
	"$p" -c 'import yaml' 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || skip_all "no python3 with PyYAML (python3-yaml)"

R=$E2E_TMP/rendered.yaml
if command -v kubectl >/dev/null && kubectl kustomize "$K" >"$R" 2>"$E2E_TMP/kustomize.log"; then
	diag "rendered with kubectl kustomize ($(kubectl version --client 2>/dev/null | head -1))"
	ok "kubectl kustomize renders deploy/kubernetes"
	rendered=1
else
	if command -v kubectl >/dev/null; then
		not_ok "kubectl kustomize deploy/kubernetes: $(tr '\n' ' ' <"$E2E_TMP/kustomize.log")"
	fi
	diag "no kubectl: the resource files are loaded with PyYAML instead (no kustomize rendering)"
	"$PY" - "$K" >"$R" <<'EOF'
import sys, yaml
k = sys.argv[1]
kust = yaml.safe_load(open(f"{k}/kustomization.yaml"))
docs = []
for r in kust["resources"]:
    docs += [d for d in yaml.safe_load_all(open(f"{k}/{r}")) if d]
for g in kust.get("configMapGenerator", []):
    docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": g["name"]},
                 "data": {f: open(f"{k}/{f}").read() for f in g["files"]}})
yaml.safe_dump_all(docs, sys.stdout)
EOF
	check "the resource files load as YAML" test $? -eq 0
	rendered=0
fi

# Checks of the rendered objects; the last line printed is the DaemonSet's capability list.
"$PY" - "$R" "$rendered" "$ROOT/deploy/sysom-agent.service.in" >"$E2E_TMP/checks.out" 2>&1 <<'EOF'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
rendered = sys.argv[2] == "1"
by = {}
for d in docs:
    by.setdefault(d["kind"], []).append(d)
n = 0
def check(cond, what):
    global n
    n += 1
    print(("ok" if cond else "not ok") + f" {what}")
for kind in ("Namespace", "ConfigMap", "Service", "StatefulSet", "DaemonSet"):
    check(kind in by, f"a {kind} is rendered")
ds = by["DaemonSet"][0]
pod = ds["spec"]["template"]["spec"]
c = pod["containers"][0]
sc = c.get("securityContext", {})
caps = sc.get("capabilities", {})
check(pod.get("hostPID") is True, "agent: hostPID")
check(not sc.get("privileged", False), "agent: not privileged")
check(caps.get("drop") == ["ALL"], "agent: every capability dropped first")
check("SYS_ADMIN" not in caps.get("add", []), "agent: no SYS_ADMIN")
check(sc.get("allowPrivilegeEscalation") is False, "agent: no privilege escalation")
if rendered:
    check(ds["metadata"].get("namespace") == "sysom", "agent: in namespace sysom")
    check("/" in c["image"] and ":" in c["image"], f"agent: image set by kustomize ({c['image']})")
unit_caps = set()
for line in open(sys.argv[3]):
    if line.startswith("CapabilityBoundingSet="):
        unit_caps = {x.removeprefix("CAP_") for x in line.split("=", 1)[1].split()}
check(set(caps.get("add", [])) == unit_caps,
      f"agent: capabilities equal the unit's CapabilityBoundingSet ({sorted(unit_caps)})")
mounts = {m["name"]: m for m in c["volumeMounts"]}
vols = {v["name"]: v for v in pod["volumes"]}
def host_path(name):
    return vols.get(name, {}).get("hostPath", {}).get("path")
mounted_host = {host_path(n): m["mountPath"] for n, m in mounts.items() if host_path(n)}
check(mounted_host.get("/sys/kernel/tracing") == "/sys/kernel/tracing", "agent: tracefs mounted")
check(mounts.get("tracefs", {}).get("readOnly") is True, "agent: tracefs read-only")
check("/etc/machine-id" in mounted_host, "agent: the host's machine id mounted")
check("/var/lib/sysom" in mounted_host, "agent: spool on the host")
# The agent's configuration (the ConfigMap) must point into the mounts.
cm = [d for d in by.get("ConfigMap", []) if d["metadata"]["name"].startswith("sysom-agent-config")]
check(len(cm) == 1, "agent: configuration ConfigMap")
conf = {}
if cm:
    for line in cm[0]["data"]["agent.conf"].splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (x.strip() for x in line.split("=", 1))
            conf[k] = v
cfg_mount = [m["mountPath"] for n, m in mounts.items() if "configMap" in vols.get(n, {})]
check(cfg_mount == ["/etc/sysom"] and c["args"][-1] == "/etc/sysom/agent.conf",
      "agent: --config names the mounted ConfigMap")
def under(path, name):
    m = mounts.get(name)
    return bool(path) and m is not None and path.startswith(m["mountPath"].rstrip("/") + "/")
check(conf.get("machine-id-file") == mounted_host.get("/etc/machine-id"),
      f"agent: machine-id-file {conf.get('machine-id-file')} is the mounted host file")
check(under(conf.get("spool-dir"), "spool"), f"agent: spool-dir {conf.get('spool-dir')} on the host mount")
check(under(conf.get("socket"), "run"), f"agent: socket {conf.get('socket')} on the host's /run/sysom")
check(under(conf.get("token-file"), "token"), f"agent: token-file {conf.get('token-file')} in the secret")
pod_logs = conf.get("pod-log-root", "/var/log/pods")
check(mounted_host.get("/var/log/pods") == pod_logs and mounts.get("pod-logs", {}).get("readOnly") is True,
      f"agent: the kubelet's pod log directories mounted read-only at pod-log-root {pod_logs} (pod names)")
container_logs = conf.get("container-log-root", "/var/log/containers")
check(mounted_host.get("/var/log/containers") == container_logs and mounts.get("container-logs", {}).get("readOnly") is True,
      f"agent: the kubelet's container log links mounted read-only at container-log-root {container_logs} (container names)")
check(conf.get("server", "").startswith("http://sysom-server."), "agent: server is the Service")
# The server.
ss = by["StatefulSet"][0]
spod = ss["spec"]["template"]["spec"]
sc0 = spod["containers"][0]
for probe in ("readinessProbe", "livenessProbe"):
    check(sc0.get(probe, {}).get("httpGet", {}).get("path") == "/healthz", f"server: {probe} on /healthz")
check(bool(ss["spec"].get("volumeClaimTemplates")), "server: store on a persistent volume")
svc = by["Service"][0]
ann = svc["metadata"].get("annotations", {})
port = sc0["ports"][0]["containerPort"]
check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
      and ann.get("prometheus.io/port") == str(port), "server: Prometheus scrape annotations")
check(f"0.0.0.0:{port}" in sc0["args"], "server: listens on the container port")
check(svc["spec"]["selector"].items() <= ss["spec"]["template"]["metadata"]["labels"].items(),
      "server: the Service selects the server's pods")
check(spod.get("securityContext", {}).get("runAsNonRoot") is True, "server: not root")
print("CAPS " + ",".join(sorted(caps.get("add", []))))
EOF
while IFS= read -r line; do
	case $line in
	"ok "*) ok "${line#ok }" ;;
	"not ok "*) not_ok "${line#not ok }" ;;
	"CAPS "*) CAPS=${line#CAPS } ;;
	*) diag "$line" ;;
	esac
done <"$E2E_TMP/checks.out"
[ -n "${CAPS:-}" ] || not_ok "the DaemonSet's capabilities could be read"

# ---- The real agent's --check with exactly the DaemonSet's capabilities (bounding set of a
# root process, as the container runtime gives it).
if [ "$(id -u)" = 0 ] && [ -n "${CAPS:-}" ] && command -v setpriv >/dev/null; then
	require_root
	start_server ks
	setcaps=$(echo "$CAPS" | tr 'A-Z' 'a-z' | sed 's/\([^,]*\)/+\1/g')
	setpriv --bounding-set=-all,"$setcaps" -- "$AGENT_BIN" --check --server "$SERVER_URL" \
		--spool-dir "$E2E_TMP/spool" >"$E2E_TMP/check.log" 2>&1
	check "agent --check passes with the DaemonSet's capabilities ($CAPS)" test $? -eq 0
	check "--check found BPF privileges without CAP_SYS_ADMIN" \
		grep -qE '^ok +privileges +CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE' "$E2E_TMP/check.log"
	nobpf=$(echo "$setcaps" | sed 's/+bpf,\?//; s/,$//')
	setpriv --bounding-set=-all,"$nobpf" -- "$AGENT_BIN" --check --server "$SERVER_URL" \
		--spool-dir "$E2E_TMP/spool" >"$E2E_TMP/check-nobpf.log" 2>&1
	check "agent --check fails without CAP_BPF (the capabilities matter)" test $? -ne 0
	check "... naming the privileges" grep -qE '^(FAIL|fail) +privileges' "$E2E_TMP/check-nobpf.log"
else
	diag "not root or no setpriv: the agent's --check under the DaemonSet's capabilities skipped"
fi
finish
