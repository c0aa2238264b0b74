#!/bin/sh
# run_tests.sh TEST...: run each test program, show its output and how long
# it took, and end with one summary line "N passed, N failed, N skipped". A
# program that exits 77 skipped (it must have printed why); with
# HEADROOM_REQUIRE_GPU=1 a skip counts as a failure, so `make gpu-test`
# cannot pass by skipping. A program still running after HR_TEST_TIMEOUT
# seconds (default 900; 0: no limit) is stopped (TERM, then KILL 10 s
# later, its children with it) and fails: one hung test names itself
# instead of holding up the whole run.
limit=${HR_TEST_TIMEOUT:-900}
case $limit in
  ''|*[!0-9]*) echo "run_tests.sh: HR_TEST_TIMEOUT must be a number of seconds, not '$limit'" >&2
               exit 2 ;;
esac
if [ "$limit" -gt 0 ] && ! command -v timeout >/dev/null 2>&1; then
  echo "run_tests.sh: no 'timeout' command (coreutils): tests run without a time limit" >&2
  limit=0
fi
pass=0; fail=0; skip=0; failed=""
for t in "$@"; do
  echo "=== $t"
  start=$(date +%s)
  if [ "$limit" -gt 0 ]; then
    timeout -k 10 "$limit" "$t"
  else
    "$t"
  fi
  rc=$?
  secs=$(($(date +%s) - start))
  echo "--- $t: exit $rc after $secs s"
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
  elif [ $rc -eq 77 ] && [ "${HEADROOM_REQUIRE_GPU:-0}" != 1 ]; then
    skip=$((skip + 1)); echo "SKIP: $t"
  elif [ "$limit" -gt 0 ] && { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$secs" -ge "$limit" ]; then
    fail=$((fail + 1)); failed="$failed $t"
    echo "FAIL: $t (no result after $limit s: stopped; HR_TEST_TIMEOUT sets the limit)"
  else
    fail=$((fail + 1)); failed="$failed $t"; echo "FAIL: $t (exit $rc)"
  fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
