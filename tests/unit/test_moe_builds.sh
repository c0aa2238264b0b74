#!/bin/sh
# test_moe_builds.sh: the kernels are built once (kernels/kernels.mk), so
# what the benchmarks and the GPU tests run is what the shared library
# ships: libheadroom_moe.a, which they link for the benchmark hook
# (kernels/moe_bench.h), holds the very objects libheadroom_moe.so is
# linked from, byte for byte, and nothing else. Checked on what `make`
# left in HR_OBJDIR and HR_LIBDIR (build/obj and build/lib unless the
# Makefile says otherwise). Skips (77) where there is no nvcc, so nothing
# CUDA was built.
set -u
obj=${HR_OBJDIR:-build/obj}
lib=${HR_LIBDIR:-build/lib}
nvcc=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
  echo "SKIP: test_moe_builds: no nvcc ($nvcc), so no kernels were built"
  exit 77
fi
fail=0
dir=$(mktemp -d /tmp/hr-builds-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
a=$(cd "$lib" 2>/dev/null && pwd)/libheadroom_moe.a
if ! (cd "$dir" && ar x "$a"); then
  echo "FAIL: cannot read the members of $lib/libheadroom_moe.a"
  exit 1
fi
members=$(ar t "$a" | sort | tr '\n' ' ')
if [ "$members" = "moe_agnostic.cu.o moe_api.cu.o moe_backward.cu.o moe_ep.cu.o moe_ep_agnostic.cu.o moe_ep_api.cu.o moe_ep_backward.cu.o moe_ep_plan.o moe_kernel.cu.o " ]; then
  echo "ok: libheadroom_moe.a holds the nine kernel objects"
else
  echo "FAIL: libheadroom_moe.a holds: $members"
  fail=1
fi
for k in moe_kernel.cu moe_agnostic.cu moe_backward.cu moe_api.cu moe_ep.cu moe_ep_agnostic.cu \
         moe_ep_backward.cu moe_ep_api.cu moe_ep_plan; do
  prod="$obj/kernels/$k.o"
  if [ ! -f "$prod" ]; then
    echo "FAIL: $prod is missing (was make run?)"
    exit 1
  fi
  if cmp -s "$dir/$k.o" "$prod"; then
    echo "ok: libheadroom_moe.a's $k.o is the shared library's $prod"
  else
    echo "FAIL: libheadroom_moe.a's $k.o is not $prod, which the shared library is linked from"
    fail=1
  fi
done
exit $fail
