#!/bin/sh
# run.sh asan|valgrind BUILD TEST...: run the test suite under a checker
# and fail on any report, including those of the processes the tests
# start (headroomd, headroomctl, headroom-run), whose stderr goes to logs.
#
# asan:     BUILD was built with -fsanitize=address,undefined. Reports go
#           to files (ASAN_OPTIONS/UBSAN_OPTIONS log_path) so that none is
#           lost in a daemon's log; any file there fails the run. The
#           Python tests load the sanitized libheadroom.so into python3,
#           so they run with the sanitizer runtimes preloaded and leak
#           checks off (the interpreter's own allocations are not ours),
#           and with a `cc` first on PATH that adds the sanitizer flags,
#           so that the example they compile links the runtime itself.
# valgrind: memcheck over each test program (--error-exitcode), and over
#           every binary a test starts, through wrappers in
#           BUILD/valgrind/bin that the tests find as $HEADROOM_BUILD/bin.
#           Scripts (*.sh) are not run: they are Python or systemd's.
set -u
mode=$1
build=$2
shift 2
top=$(pwd)
reports=$(mktemp -d /tmp/hr-$mode-XXXXXX)
chmod 1777 "$reports"   # tests fork children that drop to nobody
pass=0; fail=0; skip=0; failed=""

VG="valgrind -q --error-exitcode=99 --leak-check=full \
--errors-for-leak-kinds=definite --show-leak-kinds=definite \
--suppressions=$top/tests/sanitize/valgrind.supp"

case $mode in
asan)
  export HEADROOM_BUILD=$build
  export HEADROOM_TIME_SCALE=3     # time bounds in tests, for slow code
  export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1"
  export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
  cc=${CC:-cc}
  preload="$($cc -print-file-name=libasan.so) $($cc -print-file-name=libubsan.so)"
  mkdir -p "$reports/bin"
  printf '#!/bin/sh\nexec %s -fsanitize=address,undefined "$@"\n' \
    "$(command -v $cc)" > "$reports/bin/cc"
  chmod 755 "$reports/bin/cc"
  ;;
valgrind)
  wrap=$build/valgrind
  mkdir -p "$wrap/bin"
  ln -sfn "$top/$build/lib" "$wrap/lib"
  for b in headroomd headroomctl headroom-run; do
    cat > "$wrap/bin/$b" <<EOW
#!/bin/sh
exec $VG --log-file=$reports/vg-$b.%p.log $top/$build/bin/$b "\$@"
EOW
    chmod 755 "$wrap/bin/$b"
  done
  export HEADROOM_BUILD=$wrap
  export HEADROOM_TIME_SCALE=10
  ;;
*)
  echo "run.sh: mode asan or valgrind"; exit 2 ;;
esac

for t in "$@"; do
  echo "=== $t ($mode)"
  case $mode:$t in
  asan:*.sh)
    PATH="$reports/bin:$PATH" LD_PRELOAD="$preload" \
      ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "$t" ;;
  valgrind:*.sh)
    echo "SKIP: $t: a script, not run under valgrind"; (exit 77) ;;
  valgrind:*)
    $VG "$t" ;;
  *)
    "$t" ;;
  esac
  rc=$?
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
  elif [ $rc -eq 77 ]; then
    skip=$((skip + 1)); echo "SKIP: $t"
  else
    fail=$((fail + 1)); failed="$failed $t"; echo "FAIL: $t (exit $rc)"
  fi
done

# Reports of the processes the tests started: a sanitizer report file, or
# a valgrind log that is not empty (-q prints only errors and leaks).
found=0
started=$(ls "$reports" | grep -c -E '^(vg-|asan|ubsan)' || true)
for f in "$reports"/*; do
  [ -f "$f" ] || continue
  [ -s "$f" ] || continue
  found=$((found + 1))
  echo "---- report: $f"
  head -n 80 "$f"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$mode: $pass passed, $fail failed, $skip skipped, $found reports from started processes"
[ "$mode" = valgrind ] && echo "valgrind: $started processes started by the tests ran under memcheck"
[ $fail -eq 0 ] && [ $found -eq 0 ] && rm -rf "$reports"
[ $found -eq 0 ] || echo "reports kept in $reports"
[ $fail -eq 0 ] && [ $found -eq 0 ]
