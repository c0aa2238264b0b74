#!/bin/sh
# test_run_tests.sh: tests/run_tests.sh, which `make test` and `make
# gpu-test` run the tests through: its summary and exit status for tests
# that pass, skip and fail, and a test that never ends stopped after
# HR_TEST_TIMEOUT seconds (with the child it started), failing by name
# while the run goes on to the next test.
set -u
top=$(pwd)
# make test-asan preloads the sanitizer runtimes into scripts; the
# runner, timeout and sleep here are not ours
unset LD_PRELOAD
dir=$(mktemp -d /tmp/hr-runtests-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0

expect() {     # what, pattern that the output must hold
  if grep -q -- "$2" "$dir/out"; then
    echo "ok: $1"
  else
    echo "FAIL: $1: no line matching '$2' in:"; sed 's/^/  | /' "$dir/out"; fail=1
  fi
}

printf '#!/bin/sh\nexit 0\n' > "$dir/passes"
printf '#!/bin/sh\necho "SKIP: no device"\nexit 77\n' > "$dir/skips"
printf '#!/bin/sh\nexit 3\n' > "$dir/fails"
# never ends, and leaves a grandchild that would outlive a plain kill
printf '#!/bin/sh\nsleep 300 &\necho $! > "%s/child.pid"\nwait\n' "$dir" > "$dir/hangs"
chmod +x "$dir/passes" "$dir/skips" "$dir/fails" "$dir/hangs"

start=$(date +%s)
HR_TEST_TIMEOUT=2 sh "$top/tests/run_tests.sh" "$dir/passes" "$dir/hangs" "$dir/skips" \
  "$dir/fails" > "$dir/out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
if [ $rc -ne 0 ]; then echo "ok: exit $rc with failures"; else echo "FAIL: exit 0 with failures"; fail=1; fi
if [ $secs -lt 15 ]; then echo "ok: done in $secs s"; else echo "FAIL: took $secs s"; fail=1; fi
expect "the hung test stopped and named" "FAIL: $dir/hangs (no result after 2 s"
expect "the run went on past it" "=== $dir/skips"
expect "an ordinary failure keeps its exit code" "FAIL: $dir/fails (exit 3)"
expect "each test's time" "--- $dir/passes: exit 0 after"
expect "the summary" "1 passed, 2 failed, 1 skipped"
# alive: its /proc entry is there and not a zombie (killed, not yet reaped)
alive() {
  [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
sleep 1
if [ -f "$dir/child.pid" ] && alive "$(cat "$dir/child.pid")"; then
  echo "FAIL: the hung test's child is still running"; fail=1
  kill "$(cat "$dir/child.pid")" 2>/dev/null
else
  echo "ok: the hung test's child was stopped with it"
fi

HR_TEST_TIMEOUT=0 sh "$top/tests/run_tests.sh" "$dir/passes" > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then echo "ok: no limit, a passing test passes"; else echo "FAIL: no limit: exit $rc"; fail=1; fi
expect "no limit: the summary" "1 passed, 0 failed, 0 skipped"

HR_TEST_TIMEOUT=soon sh "$top/tests/run_tests.sh" "$dir/passes" > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ]; then echo "ok: a bad limit is refused"; else echo "FAIL: bad limit: exit $rc"; fail=1; fi
expect "a bad limit says why" "HR_TEST_TIMEOUT must be a number of seconds"

[ $fail -eq 0 ] && echo "test_run_tests: all checks passed"
exit $fail
