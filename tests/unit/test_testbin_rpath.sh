#!/bin/sh
# test_testbin_rpath.sh: the programs of the build's tests directory that
# link the shared libraries (the GPU tests, the trials) look for them in
# ../lib from where they are (RUNPATH $ORIGIN/../lib, Makefile
# TESTBIN_RPATH), not at the build's absolute path: a build directory
# copied elsewhere (bench/build_rev.sh's, carried to a GPU machine) must
# run its own libraries, never those of the build it was copied from.
# Checked on the test programs (test_*: the ones `make test` has just
# linked; moe_phases and moe_once share their link flags but are built
# only on demand, so a tree's copies may predate this) beside HR_LIBDIR
# (build/lib unless the Makefile says otherwise): each one's RUNPATH,
# then one program and the libraries copied into a fresh directory, where
# ldd must resolve them to the copies. Skips (77) where no program there
# links them.
set -u
lib=${HR_LIBDIR:-build/lib}
bin=$(dirname "$lib")/tests
fail=0
first=
for f in "$bin"/test_*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  readelf -d "$f" 2>/dev/null | grep -q 'NEEDED.*\[libheadroom' || continue
  [ -n "$first" ] || first=$f
  rp=$(readelf -d "$f" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]$/\1/p')
  case ":$rp:" in
    *':$ORIGIN/../lib:'*) echo "ok: $(basename "$f"): runpath $rp" ;;
    *) echo "FAIL: $(basename "$f"): runpath '$rp', not \$ORIGIN/../lib"; fail=1 ;;
  esac
done
if [ -z "$first" ]; then
  echo "SKIP: test_testbin_rpath: no program in $bin links libheadroom (no nvcc?)"
  exit 77
fi
dir=$(mktemp -d /tmp/hr-rpath-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/tests" "$dir/lib"
cp "$first" "$dir/tests/" && cp -P "$lib"/libheadroom*.so* "$dir/lib/" || exit 1
out=$(env -u LD_LIBRARY_PATH ldd "$dir/tests/$(basename "$first")" 2>&1)
n=0
copies=$(readlink -f "$dir/lib")
for l in $(echo "$out" | awk '/libheadroom/ { print $1 "=" $3 }'); do
  n=$((n + 1))
  got=$(readlink -f "${l#*=}" 2>/dev/null || echo "${l#*=}")   # ldd keeps tests/../lib
  case $got in
    "$copies/"*) echo "ok: copied $(basename "$first"): ${l%%=*} from the copy" ;;
    *) echo "FAIL: copied $(basename "$first"): ${l%%=*} resolves to $got, not $copies"; fail=1 ;;
  esac
done
if [ "$n" -eq 0 ]; then
  echo "FAIL: ldd names no libheadroom for the copy of $(basename "$first"):"
  echo "$out"
  fail=1
fi
exit $fail
