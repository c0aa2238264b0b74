# torchrun_env.sh: what the torchrun GPU tests' wrappers share (sourced by
# tests/gpu/test_torch_overlap.sh and tests/gpu/test_ep_trials.sh, from
# the repository root, with NAME and BUILD set): the checks that make
# them skip, a headroomd of their own on a temporary socket, and the
# environment torchrun's ranks need. Sets ngpu (what torch sees), dir
# (the temporary folder), and on exit stops the daemon and removes dir.

skip() { echo "SKIP: $NAME: $*"; exit 77; }
fail() { echo "FAIL: $NAME: $*"; exit 1; }

# hr_torch_gpus: skip unless python3, libheadroom_moe and torch with NCCL
# and 2 GPUs are here; ngpu = the GPUs torch sees.
hr_torch_gpus() {
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
}

hr_cleanup() {
  if [ -n "$dpid" ]; then
    kill "$dpid" 2>/dev/null
    wait "$dpid" 2>/dev/null
  fi
  rm -rf "$dir"
}

# hr_daemon_start PREFIX: headroomd (GPUs counted through CUDA) on a
# socket in a new temporary folder /tmp/PREFIX-XXXXXX, answering; then
# the ranks' environment exported.
hr_daemon_start() {
  dir=$(mktemp -d "/tmp/$1-XXXXXX") || fail "mktemp"
  dpid=
  trap hr_cleanup EXIT
  trap 'exit 130' INT TERM
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
}

# hr_torchrun_done RC LIMIT: the wrapper's end from torchrun's status.
hr_torchrun_done() {
  if [ "$1" -ne 0 ]; then
    [ "$1" -eq 124 ] && echo "FAIL: $NAME: still running after $2 s"
    echo "---- headroomd log"
    cat "$dir/daemon.log"
    echo "FAIL: $NAME (exit $1)"
    exit 1
  fi
}
