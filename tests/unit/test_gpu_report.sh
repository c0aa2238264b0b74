#!/bin/sh
# test_gpu_report.sh: bench/gpu_report.sh refuses, running nothing, where
# there is no GPU (no nvidia-smi, or one that finds no device) and without
# its directory argument, each with a line that says why and exit 2.
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

# a PATH with the shell tools but no nvidia-smi, and one whose nvidia-smi fails
mkdir -p "$dir/bin-none" "$dir/bin-fail"
for t in sh date git nproc mkdir grep tee; do
  p=$(command -v "$t") && ln -s "$p" "$dir/bin-none/$t" && ln -s "$p" "$dir/bin-fail/$t"
done
printf '#!/bin/sh\necho "No devices were found" >&2\nexit 6\n' > "$dir/bin-fail/nvidia-smi"
chmod +x "$dir/bin-fail/nvidia-smi"

check "no directory given" 2 "usage: gpu_report.sh DIR" sh "$top/bench/gpu_report.sh"
check "no nvidia-smi" 2 "no NVIDIA GPU here" \
  env PATH="$dir/bin-none" sh "$top/bench/gpu_report.sh" "$dir/report"
check "nvidia-smi finds no GPU" 2 "no NVIDIA GPU here" \
  env PATH="$dir/bin-fail" sh "$top/bench/gpu_report.sh" "$dir/report"

if [ $fail -eq 0 ]; then
  echo "test_gpu_report: all checks passed"
fi
exit $fail
