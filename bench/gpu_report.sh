#!/bin/sh
# gpu_report.sh DIR: the whole GPU check of this tree in one command, for
# an H200 machine (two of them for the NCCL tests; PyTorch for the table):
#
#   1. make gpu-test                      -> DIR/gpu-test.log
#      (with one GPU: make gpu-test-one, the 2-GPU tests named as not run;
#      with 2 or more, the EP trials' table -> DIR/ep-trials.md)
#   2. make bench-gpu (against PyTorch)   -> DIR/bench-moe.md, bench-gpu.log
#      and its training table              -> DIR/bench-train.md
#   3. make bench-phases, normal launches -> DIR/bench-phases.md, .log
#      at the goal cells (T = 1, 1024, 8192 of both shapes)
#   4. make bench-timeline, the barrier   -> DIR/timeline/ (summary.txt),
#      kernel's timeline at T = 1024         DIR/timeline.log
#   5. make bench-bwd-phases, the         -> DIR/bench-bwd-phases.md, .log
#      backward stage by stage
#   6. make python-test, the Python       -> DIR/python.log
#      package's tests (headroom.nn's on the GPU)
#
# DIR/summary.txt gets the date, commit, the kernels' digest
# (bench/kernels_digest.sh), GPUs, each step's exit status and seconds,
# and the GPU tests' count line. Every step runs even when one
# before it failed; the exit status is 0 only when all passed. Steps can
# be left out: GPU_REPORT_STEPS="gpu-test bench-gpu" (the default is all
# six). Needs a GPU: without one it says so and exits 2, running nothing.
set -u
dir=${1:-}
if [ -z "$dir" ]; then
  echo "usage: gpu_report.sh DIR" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! gpus=$(nvidia-smi -L 2>/dev/null); then
  echo "gpu_report.sh: no NVIDIA GPU here (nvidia-smi -L failed); nothing run" >&2
  exit 2
fi
ngpu=$(printf '%s\n' "$gpus" | grep -c '^GPU ')
mkdir -p "$dir" || exit 2
make=${MAKE:-make}
jobs=$(nproc 2>/dev/null || echo 4)
steps=${GPU_REPORT_STEPS:-gpu-test bench-gpu bench-phases timeline bwd-phases python}
sum="$dir/summary.txt"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
  echo "commit: $commit"
  # the commit line is only as good as this copy's history: the kernels'
  # own digest matches a commit here with `sh bench/kernels_digest.sh REV`
  echo "kernels: $(sh bench/kernels_digest.sh 2>/dev/null || echo unknown)"
  printf '%s\n' "$gpus"
} > "$sum"

rc=0
run_step() {   # name, command...
  name=$1
  shift
  start=$(date +%s)
  "$@" > "$dir/$name.log" 2>&1
  r=$?
  echo "$name: exit $r after $(( $(date +%s) - start )) s" | tee -a "$sum"
  [ "$r" -eq 0 ] || rc=1
}

for step in $steps; do
  case $step in
    gpu-test)
      if [ "$ngpu" -ge 2 ]; then
        # the expert-parallel trials' table (tests/gpu/test_ep_trials.sh)
        HR_EP_TRIALS_OUT="$dir/ep-trials.md"
        export HR_EP_TRIALS_OUT
        run_step gpu-test "$make" -j"$jobs" gpu-test
        unset HR_EP_TRIALS_OUT
      else
        echo "gpu-test: one GPU here: make gpu-test-one (the 2-GPU tests not run)" | tee -a "$sum"
        run_step gpu-test "$make" -j"$jobs" gpu-test-one
      fi
      grep -E '^[0-9]+ passed' "$dir/gpu-test.log" | tail -1 >> "$sum" ;;
    bench-gpu)
      run_step bench-gpu "$make" -j"$jobs" bench-gpu BENCH_OUT="$dir/bench-moe.md" \
        BENCH_ARGS="--reps 20 --shapes qwen3-30b-a3b,deepseek-v3" \
        BENCH_TRAIN_OUT="$dir/bench-train.md" ;;
    bench-phases)
      run_step bench-phases "$make" -j"$jobs" bench-phases \
        BENCH_PHASES_OUT="$dir/bench-phases.md" \
        BENCH_PHASES_ARGS="--reps 20 --no-phases --shapes qwen3-30b-a3b,deepseek-v3 --tokens 1,1024,8192" ;;
    timeline)
      run_step timeline "$make" -j"$jobs" bench-timeline BENCH_TIMELINE_DIR="$dir/timeline" ;;
    bwd-phases)
      run_step bwd-phases "$make" -j"$jobs" bench-bwd-phases \
        BENCH_BWD_PHASES_OUT="$dir/bench-bwd-phases.md" ;;
    python)
      run_step python "$make" -j"$jobs" python-test ;;
    *)
      echo "gpu_report.sh: unknown step '$step' (gpu-test, bench-gpu, bench-phases, timeline, bwd-phases, python)" | tee -a "$sum" >&2
      rc=1 ;;
  esac
done
exit $rc
