#!/bin/sh
# run.sh BUILD SECONDS keep|fresh [libFuzzer flags...]: run each fuzz
# target for SECONDS. `keep` grows a corpus in BUILD/fuzz/corpus across
# runs; `fresh` starts from the seeds alone (CI). Prints each target's
# executions; exits non-zero on the first crash, leak or broken invariant,
# with the input saved under BUILD/fuzz/artifacts/.
set -u
build=$1
secs=$2
mode=$3
shift 3
dir=$build/fuzz
n=$(sh tests/fuzz/seeds.sh proto/PROTOCOL.md "$dir/seeds") || exit 1
echo "fuzz: $n examples from proto/PROTOCOL.md as seeds; ${secs}s per target"
mkdir -p "$dir/artifacts"
status=0
for t in fuzz_daemon fuzz_reply; do
  corpus=$dir/corpus/$t
  [ "$mode" = fresh ] && rm -rf "$corpus"
  mkdir -p "$corpus" tests/fuzz/regress/$t
  log=$dir/$t.log
  echo "=== $t"
  "$dir/$t" -max_total_time="$secs" -print_final_stats=1 -close_fd_mask=2 \
    -dict=tests/fuzz/proto.dict -artifact_prefix="$dir/artifacts/$t-" \
    "$@" "$corpus" "$dir/seeds/$t" "tests/fuzz/regress/$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "$t: ${execs:-?} executions, $cov, corpus $(ls "$corpus" | wc -l) inputs"
  if [ $rc -ne 0 ]; then
    echo "FAIL: $t (exit $rc); its log:"
    tail -n 60 "$log"
    status=1
  fi
done
exit $status
