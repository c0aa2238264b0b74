#!/bin/sh
# test_moe_builds.sh: the kernels are built twice (kernels/kernels.mk), and
# each library gets its own build. libheadroom_moe.so's objects are the
# production build (HR__MOE_NO_VARIANTS=1: none of the benchmark's variant
# code), libheadroom_moe.a's keep every variant. Checked on the objects
# `make` left in HR_OBJDIR and HR_LIBDIR (build/obj and build/lib unless
# the Makefile says otherwise): each production kernel object is under
# three quarters of its benchmark twin (the variants are half the SASS),
# and the static library's members are the benchmark objects, byte for
# byte. Skips (77) where there is no nvcc, so nothing CUDA was built.
set -u
obj=${HR_OBJDIR:-build/obj}
lib=${HR_LIBDIR:-build/lib}
nvcc=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
  echo "SKIP: test_moe_builds: no nvcc ($nvcc), so no kernels were built"
  exit 77
fi
fail=0
size() { wc -c < "$1" | tr -d ' '; }
dir=$(mktemp -d /tmp/hr-builds-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
a=$(cd "$lib" 2>/dev/null && pwd)/libheadroom_moe.a
if ! (cd "$dir" && ar x "$a"); then
  echo "FAIL: cannot read the members of $lib/libheadroom_moe.a"
  exit 1
fi
for k in moe_kernel moe_agnostic moe_api; do
  prod="$obj/kernels/$k.cu.o" bench="$obj/kernels/bench/$k.cu.o"
  for f in "$prod" "$bench"; do
    if [ ! -f "$f" ]; then
      echo "FAIL: $f is missing (was make run?)"
      exit 1
    fi
  done
  if cmp -s "$dir/$k.cu.o" "$bench"; then
    echo "ok: libheadroom_moe.a's $k.cu.o is the benchmark build's"
  else
    echo "FAIL: libheadroom_moe.a's $k.cu.o is not $bench"
    fail=1
  fi
  [ "$k" = moe_api ] && continue         # host code: no kernels to shrink
  p=$(size "$prod") b=$(size "$bench")
  if [ $((p * 4)) -lt $((b * 3)) ]; then
    echo "ok: $k: production object $p bytes, benchmark object $b"
  else
    echo "FAIL: $k: production object $p bytes is not under 3/4 of the benchmark's $b (variants compiled in?)"
    fail=1
  fi
done
exit $fail
