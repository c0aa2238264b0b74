#!/bin/sh
# test_gpu_report.sh: bench/gpu_report.sh refuses, running nothing, where
# there is no GPU (no nvidia-smi, or one that finds no device) and without
# its directory argument, each with a line that says why and exit 2; and
# its test step is `make gpu-test` with 2 GPUs, `make gpu-test-one` with
# one, its timeline step `make bench-timeline` into DIR/timeline, and an
# unknown step fails the report without stopping the others (a fake
# nvidia-smi and a fake make).
set -u
top=$(pwd)
unset LD_PRELOAD
dir=$(mktemp -d /tmp/hr-gpureport-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0

check() {     # what, expected status, pattern, command...
  what=$1 want=$2 pat=$3
  shift 3
  "$@" > "$dir/out" 2>&1
  got=$?
  if [ "$got" -eq "$want" ] && grep -q -- "$pat" "$dir/out" && [ ! -e "$dir/report" ]; then
    echo "ok: $what"
  else
    echo "FAIL: $what: exit $got (want $want), output:"; sed 's/^/  | /' "$dir/out"
    [ -e "$dir/report" ] && echo "  and it made $dir/report"
    fail=1
  fi
}

tools() {      # a PATH directory with the shell tools gpu_report.sh uses
  mkdir -p "$1"
  for t in sh date git nproc mkdir grep tee ls sort cat sha256sum cut; do
    p=$(command -v "$t") && ln -s "$p" "$1/$t"
  done
}

# a PATH with the shell tools but no nvidia-smi, and one whose nvidia-smi fails
tools "$dir/bin-none"
tools "$dir/bin-fail"
printf '#!/bin/sh\necho "No devices were found" >&2\nexit 6\n' > "$dir/bin-fail/nvidia-smi"
chmod +x "$dir/bin-fail/nvidia-smi"

check "no directory given" 2 "usage: gpu_report.sh DIR" sh "$top/bench/gpu_report.sh"
check "no nvidia-smi" 2 "no NVIDIA GPU here" \
  env PATH="$dir/bin-none" sh "$top/bench/gpu_report.sh" "$dir/report"
check "nvidia-smi finds no GPU" 2 "no NVIDIA GPU here" \
  env PATH="$dir/bin-fail" sh "$top/bench/gpu_report.sh" "$dir/report"

# The GPU count picks the test target: a fake nvidia-smi listing N GPUs
# and a fake make that records what it was asked to build.
tools "$dir/bin-gpus"
printf '#!/bin/sh\necho "$*" >> "%s/make-args"\necho "1 passed, 0 failed, 0 skipped"\n' \
  "$dir" > "$dir/bin-gpus/fake-make"
chmod +x "$dir/bin-gpus/fake-make"
targets() {   # GPUs, expected target, expected summary pattern
  n=$1 want=$2 pat=$3
  rm -rf "$dir/report" "$dir/make-args"
  { echo '#!/bin/sh'; i=0; while [ $i -lt "$n" ]; do
      echo "echo 'GPU $i: NVIDIA H200 (UUID: GPU-$i)'"; i=$((i + 1)); done; } \
    > "$dir/bin-gpus/nvidia-smi"
  chmod +x "$dir/bin-gpus/nvidia-smi"
  env PATH="$dir/bin-gpus" MAKE=fake-make GPU_REPORT_STEPS=gpu-test \
    sh "$top/bench/gpu_report.sh" "$dir/report" > "$dir/out" 2>&1
  got=$?
  asked=$(cat "$dir/make-args" 2>/dev/null)
  case "$asked" in
    *" $want") ok=1 ;;
    *) ok=0 ;;
  esac
  if [ "$got" -eq 0 ] && [ $ok -eq 1 ] && grep -q -- "$pat" "$dir/report/summary.txt"; then
    echo "ok: $n GPU(s): make $want"
  else
    echo "FAIL: $n GPU(s): exit $got, make asked for '$asked' (want $want), summary:"
    sed 's/^/  | /' "$dir/report/summary.txt" 2>/dev/null
    fail=1
  fi
}
targets 1 gpu-test-one "one GPU here: make gpu-test-one"
# the summary names the kernels by their digest, the same as the script's
want=$(sh "$top/bench/kernels_digest.sh")
if grep -qx "kernels: $want" "$dir/report/summary.txt"; then
  echo "ok: summary: kernels: $want"
else
  echo "FAIL: summary lacks 'kernels: $want':"; sed 's/^/  | /' "$dir/report/summary.txt"
  fail=1
fi
targets 2 gpu-test "gpu-test: exit 0"

# The timeline step asks for `make bench-timeline` into DIR/timeline; an
# unknown step is named in the summary and fails the report, and the
# steps after it still run.
steps() {     # steps, expected exit, expected end of make's args, summary pattern
  rm -rf "$dir/report" "$dir/make-args"
  env PATH="$dir/bin-gpus" MAKE=fake-make GPU_REPORT_STEPS="$1" \
    sh "$top/bench/gpu_report.sh" "$dir/report" > "$dir/out" 2>&1
  got=$?
  asked=$(cat "$dir/make-args" 2>/dev/null)
  case "$asked" in
    *"$3") ok=1 ;;
    *) ok=0 ;;
  esac
  if [ "$got" -eq "$2" ] && [ $ok -eq 1 ] && grep -q -- "$4" "$dir/report/summary.txt"; then
    echo "ok: steps '$1'"
  else
    echo "FAIL: steps '$1': exit $got (want $2), make asked for '$asked', summary:"
    sed 's/^/  | /' "$dir/report/summary.txt" 2>/dev/null
    fail=1
  fi
}
steps timeline 0 "bench-timeline BENCH_TIMELINE_DIR=$dir/report/timeline" "timeline: exit 0"
steps bwd-phases 0 "bench-bwd-phases BENCH_BWD_PHASES_OUT=$dir/report/bench-bwd-phases.md" \
  "bwd-phases: exit 0"
steps python 0 " python-test" "python: exit 0"
steps "bogus gpu-test" 1 " gpu-test" "unknown step 'bogus'"

if [ $fail -eq 0 ]; then
  echo "test_gpu_report: all checks passed"
fi
exit $fail
