#!/bin/sh
# run_tests.sh TEST...: run each test program, show its output, and end with
# one summary line "N passed, N failed, N skipped". A program that exits 77
# skipped (it must have printed why); with HEADROOM_REQUIRE_GPU=1 a skip
# counts as a failure, so `make gpu-test` cannot pass by skipping.
pass=0; fail=0; skip=0; failed=""
for t in "$@"; do
  echo "=== $t"
  "$t"
  rc=$?
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
  elif [ $rc -eq 77 ] && [ "${HEADROOM_REQUIRE_GPU:-0}" != 1 ]; then
    skip=$((skip + 1)); echo "SKIP: $t"
  else
    fail=$((fail + 1)); failed="$failed $t"; echo "FAIL: $t (exit $rc)"
  fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
