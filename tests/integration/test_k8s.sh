#!/bin/sh
# test_k8s.sh: the Kubernetes manifests in deploy/ are valid against the
# Kubernetes API schemas, offline (kubernetes-validate from PyPI ships
# them; --strict refuses unknown fields), and hang together with the
# rest of the tree: the config in the ConfigMap is one headroomd accepts,
# and the socket the DaemonSet serves is the one clients use by default.
# Skips (77) where kubernetes-validate is not installed (.ci/run installs
# it with pip).
set -u
NAME=test_k8s
BUILD=${HEADROOM_BUILD:-build}
PY=${PYTHON:-python3}
if ! "$PY" -c "import kubernetes_validate" >/dev/null 2>&1; then
  echo "SKIP: $NAME: kubernetes-validate not installed ($PY -m pip install kubernetes-validate)"
  exit 77
fi
fail() { echo "FAIL: $NAME: $*"; exit 1; }
dir=$(mktemp -d /tmp/hr-k8s-XXXXXX)
trap 'rm -rf "$dir"' EXIT

"$PY" -m kubernetes_validate --strict deploy/*.yaml || fail "kubernetes-validate --strict deploy/*.yaml"

# The ConfigMap's headroomd.conf, and the paths the manifests use.
"$PY" - "$dir" <<'PY' || fail "the manifests do not hang together"
import sys, yaml
out = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open("deploy/headroomd.yaml")) if d]
by_kind = {d["kind"]: d for d in docs}
open(out + "/headroomd.conf", "w").write(
    by_kind["ConfigMap"]["data"]["headroomd.conf"])
pod = by_kind["DaemonSet"]["spec"]["template"]["spec"]
daemon = [c for c in pod["containers"] if c["name"] == "headroomd"][0]
cmd = daemon["command"]
sock = cmd[cmd.index("--socket") + 1]
assert sock == "/run/headroom/headroom.sock", sock
paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]
         if "hostPath" in v}
assert paths["run"] == "/run/headroom", paths
trainer = [d for d in yaml.safe_load_all(open("deploy/training-pod.yaml"))
           if d][0]["spec"]
assert trainer["volumes"][0]["hostPath"]["path"] == "/run/headroom"
env = {e["name"]: e["value"] for e in trainer["containers"][0]["env"]}
assert env["HEADROOM_SOCKET"] == sock, env
# The clients' group is not the operators' group.
conf = by_kind["ConfigMap"]["data"]["headroomd.conf"]
ops = [l.split("=")[1].strip() for l in conf.splitlines()
       if l.startswith("operator_group")][0]
assert str(ops) not in [str(g) for g in
                        trainer["securityContext"]["supplementalGroups"]], ops
print("deploy/: socket %s, operators gid %s" % (sock, ops))
PY
grep -q '^#define HR_DEFAULT_SOCKET "/run/headroom/headroom.sock"' proto/*.h client/*.h 2>/dev/null ||
  fail "HR_DEFAULT_SOCKET is not /run/headroom/headroom.sock any more"
"$BUILD/bin/headroomd" --check-config --config "$dir/headroomd.conf" >"$dir/check.log" 2>&1 || { cat "$dir/check.log";
  fail "headroomd --check-config refuses the ConfigMap's headroomd.conf"; }
echo "$NAME: ok"
