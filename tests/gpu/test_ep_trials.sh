#!/bin/sh
# test_ep_trials.sh: runs tests/gpu/test_ep_trials.py under torchrun, one
# process per GPU (all of them, 2..8), against a headroomd of its own. From
# the repository root on the GPU machine:
#   . tests/gpu/device_env.sh && make && tests/gpu/test_ep_trials.sh
# (`make gpu-test` runs it too). Prints "SKIP: ..." and exits 77 without
# 2 GPUs, torch with NCCL, or libheadroom_moe; else exits with torchrun's
# status. HR_TRIALS trials a phase (default 1000), HR_TEST_SEED the seed,
# HR_EP_TRIALS_ARGS more options (test_ep_trials.py --help),
# HR_EP_TRIALS_OUT a file for the phases' table. The whole run is bounded
# (HEADROOM_EP_TRIALS_LIMIT seconds, default 290); the daemon and its
# temporary folder are removed on exit.
NAME=test_ep_trials
cd "$(dirname "$0")/../.." || exit 1
BUILD=${HEADROOM_BUILD:-build}
LIMIT=${HEADROOM_EP_TRIALS_LIMIT:-290}

skip() { echo "SKIP: $NAME: $*"; exit 77; }
fail() { echo "FAIL: $NAME: $*"; exit 1; }

command -v python3 >/dev/null 2>&1 || skip "no python3"
# the plan's half runs everywhere (no torch, no GPU)
python3 tests/gpu/test_ep_trials.py --plan-only --trials 2000 --nranks 8 \
  >/dev/null || fail "the trials' plan"
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
[ "$ngpu" -le 8 ] || ngpu=8

dir=$(mktemp -d /tmp/hr-ep-trials-XXXXXX) || fail "mktemp"
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
# Every peer connected when a communicator is made, not inside the first
# collective that needs it (a host call that blocks until the peer makes
# the same one: docs/gpu-tests.md, the first run's hang)
NCCL_RUNTIME_CONNECT=0
# One node: the host-side group and NCCL's bootstrap stay on loopback.
GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export HEADROOM_SOCKET PYTHONPATH NCCL_NVLS_ENABLE NCCL_RUNTIME_CONNECT \
       GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME
# shellcheck disable=SC2086
timeout -k 10 "$LIMIT" python3 -m torch.distributed.run --standalone \
  --nproc-per-node "$ngpu" tests/gpu/test_ep_trials.py \
  ${HR_EP_TRIALS_OUT:+--out "$HR_EP_TRIALS_OUT"} $HR_EP_TRIALS_ARGS
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] && echo "FAIL: $NAME: still running after $LIMIT s"
  echo "---- headroomd log"
  cat "$dir/daemon.log"
  echo "FAIL: $NAME (exit $rc)"
  exit 1
fi
echo "PASS: $NAME ($ngpu GPUs)"
exit 0
