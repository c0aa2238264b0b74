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
. tests/gpu/torchrun_env.sh

hr_torch_gpus
hr_daemon_start hr-torch
timeout -k 10 "$LIMIT" python3 -m torch.distributed.run --standalone \
  --nproc-per-node 2 tests/gpu/test_torch_overlap.py
hr_torchrun_done $? "$LIMIT"
echo "PASS: $NAME"
exit 0
