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
. tests/gpu/torchrun_env.sh

command -v python3 >/dev/null 2>&1 || skip "no python3"
# the plan's half runs everywhere (no torch, no GPU)
python3 tests/gpu/test_ep_trials.py --plan-only --trials 2000 --nranks 8 \
  >/dev/null || fail "the trials' plan"
hr_torch_gpus
[ "$ngpu" -le 8 ] || ngpu=8
hr_daemon_start hr-ep-trials
# Every peer connected when a communicator is made, not inside the first
# collective that needs it (a host call that blocks until the peer makes
# the same one: docs/gpu-tests.md, the first run's hang)
NCCL_RUNTIME_CONNECT=0
export NCCL_RUNTIME_CONNECT
# shellcheck disable=SC2086
timeout -k 10 "$LIMIT" python3 -m torch.distributed.run --standalone \
  --nproc-per-node "$ngpu" tests/gpu/test_ep_trials.py \
  ${HR_EP_TRIALS_OUT:+--out "$HR_EP_TRIALS_OUT"} $HR_EP_TRIALS_ARGS
hr_torchrun_done $? "$LIMIT"
echo "PASS: $NAME ($ngpu GPUs)"
exit 0
