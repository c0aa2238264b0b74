#!/bin/sh
# test_torch_overlap.sh: runs tests/gpu/test_torch_overlap.py under torchrun
# on 2 GPUs against a headroomd of its own. From the repository root on the
# GPU machine:
#   . tests/gpu/device_env.sh && make && tests/gpu/test_torch_overlap.sh
# (`make gpu-test` runs it too). Prints "SKIP: ..." and exits 77 without
# 2 GPUs, torch with NCCL, or libheadroom_moe; else exits with torchrun's
# status. The whole run is bounded (HEADROOM_TORCH_TEST_LIMIT seconds,
# default 230); the daemon and its temporary folder are removed on exit.
NAME=test_torch_overlap
cd "$(dirname "$0")/../.." || exit 1
BUILD=${HEADROOM_BUILD:-build}
LIMIT=${HEADROOM_TORCH_TEST_LIMIT:-230}

skip() { echo "SKIP: $NAME: $*"; exit 77; }
fail() { echo "FAIL: $NAME: $*"; exit 1; }

command -v python3 >/dev/null 2>&1 || skip "no python3"
[ -f "$BUILD/lib/libheadroom_moe.so" ] ||
  skip "$BUILD/lib/libheadroom_moe.so not built (no nvcc)"
[ -x "$BUILD/bin/headroomd" ] || fail "$BUILD/bin/headroomd not built (run make)"
ngpu=$(python3 -c '
import torch, torch.distributed as d
print(torch.cuda.device_count() if torch.cuda.is_available() and d.is_available() and d.is_nccl_available() else -1)
' 2>/dev/null | tail -n 1)
case "$ngpu" in
  ''|*[!0-9-]*) skip "torch is not importable" ;;
  -1) skip "torch sees no CUDA device or has no NCCL" ;;
esac
[ "$ngpu" -ge 2 ] || skip "needs 2 GPUs, torch sees $ngpu"

dir=$(mktemp -d /tmp/hr-torch-XXXXXX) || fail "mktemp"
dpid=
cleanup() {
  if [ -n "$dpid" ]; then
    kill "$dpid" 2>/dev/null
    wait "$dpid" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The daemon counts the GPUs and SMs through CUDA.
printf 'topology = auto\nlog_level = info\n' > "$dir/headroomd.conf"
mkdir -p "$dir/state"
"$BUILD/bin/headroomd" --config "$dir/headroomd.conf" --socket "$dir/h.sock" \
  --state-dir "$dir/state" 2>"$dir/daemon.log" &
dpid=$!
i=0
until "$BUILD/bin/headroomctl" --socket "$dir/h.sock" status >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 100 ] || ! kill -0 "$dpid" 2>/dev/null; then
    cat "$dir/daemon.log"
    fail "headroomd did not answer on $dir/h.sock"
  fi
  sleep 0.1
done

HEADROOM_SOCKET=$dir/h.sock
PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
NCCL_NVLS_ENABLE=0
# One node: the host-side groups and NCCL's bootstrap stay on loopback.
GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export HEADROOM_SOCKET PYTHONPATH NCCL_NVLS_ENABLE GLOO_SOCKET_IFNAME \
       NCCL_SOCKET_IFNAME
timeout -k 10 "$LIMIT" python3 -m torch.distributed.run --standalone \
  --nproc-per-node 2 tests/gpu/test_torch_overlap.py
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] && echo "FAIL: $NAME: still running after $LIMIT s"
  echo "---- headroomd log"
  cat "$dir/daemon.log"
  echo "FAIL: $NAME (exit $rc)"
  exit 1
fi
echo "PASS: $NAME"
exit 0
