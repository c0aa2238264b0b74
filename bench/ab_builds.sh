#!/bin/sh
# ab_builds.sh DIR BUILD...: builds of the kernels side by side, on an
# H200. Each BUILD is a build directory holding tests/moe_phases (e.g.
# `make BUILD=build-x NVCC_EXTRA=-DSOMETHING=1 build-x/tests/moe_phases`);
# the first is the baseline. The builds run in turn, AB_RUNS times (2 by
# default), so that run r of each meets the machine in the same state:
#
#   BUILD/tests/moe_phases --reps 20 --no-phases --no-floor $AB_ARGS
#       --out DIR/NAME-rR.md          (NAME: BUILD with / made -)
#
# with BUILD/lib first in LD_LIBRARY_PATH, so that each build runs its own
# libraries whatever the caller's LD_LIBRARY_PATH names.
#
# AB_FLOOR=1: the floor measured too in each run (moe_phases without
# --no-floor; builds whose moe_phases predates that option always do). A
# build whose moe_phases still times the benchmark's GEMM variants (a
# revision before the one kernel build) gets --match NOTHING, so that it
# times its normal launches alone, as a later one does.
#
# AB_ARGS: moe_phases' shapes and token counts (default
# `--shapes qwen3-30b-a3b --tokens 512,1024`). Then bench/ab_table.py
# makes DIR/table.md: each build's times run by run and its median over
# the baseline's, per shape, T and kernel. Needs a GPU: without one it
# says so and exits 2, running nothing; a build without moe_phases is
# named and nothing runs either.
set -u
dir=${1:-}
if [ -z "$dir" ] || [ $# -lt 3 ]; then
  echo "usage: ab_builds.sh DIR BUILD BUILD... (two builds or more)" >&2
  exit 2
fi
shift
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "ab_builds.sh: no NVIDIA GPU here (nvidia-smi -L failed); nothing run" >&2
  exit 2
fi
for b in "$@"; do
  if [ ! -x "$b/tests/moe_phases" ]; then
    echo "ab_builds.sh: $b/tests/moe_phases: not there (build it first); nothing run" >&2
    exit 2
  fi
done
runs=${AB_RUNS:-2}
args=${AB_ARGS:---shapes qwen3-30b-a3b --tokens 512,1024}
mkdir -p "$dir" || exit 2
rc=0
r=1
while [ "$r" -le "$runs" ]; do
  for b in "$@"; do
    name=$(printf '%s' "$b" | tr '/' '-')
    # Each build's own libraries first: LD_LIBRARY_PATH outranks the
    # programs' RUNPATH, and one naming another build's lib (a GPU
    # machine's set-up) would otherwise run that build's libheadroom.
    blib=$(cd "$b" && pwd)/lib
    # The floor's timings (moe_phases --no-floor) are not compared: left
    # out, a run takes ~3/4 of the time. A build of a revision from
    # before the option has no such string and measures it as it did.
    nofloor=
    if [ -z "${AB_FLOOR:-}" ] && grep -q -e '--no-floor' "$b/tests/moe_phases"; then
      nofloor=--no-floor
    fi
    nomatch=
    if grep -q -e '--match' "$b/tests/moe_phases"; then
      nomatch="--match NOTHING"
    fi
    # shellcheck disable=SC2086 # AB_ARGS is a list of arguments
    LD_LIBRARY_PATH="$blib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$b/tests/moe_phases" --reps 20 --no-phases $nomatch $nofloor $args \
      --out "$dir/$name-r$r.md" > "$dir/$name-r$r.log" 2>&1
    s=$?
    echo "$b run $r: exit $s"
    [ "$s" -eq 0 ] || rc=1
  done
  r=$((r + 1))
done
specs=
for b in "$@"; do
  name=$(printf '%s' "$b" | tr '/' '-')
  files=
  r=1
  while [ "$r" -le "$runs" ]; do
    files="$files${files:+,}$dir/$name-r$r.md"
    r=$((r + 1))
  done
  specs="$specs $name=$files"
done
# shellcheck disable=SC2086 # one LABEL=FILES word per build
python3 "$(dirname "$0")/ab_table.py" $specs > "$dir/table.md" || rc=1
cat "$dir/table.md"
exit $rc
