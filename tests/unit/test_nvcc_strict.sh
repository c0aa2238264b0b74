#!/bin/sh
# test_nvcc_strict.sh: kernels/nvcc_strict.sh, which builds the library's
# kernels, refuses what ptxas reports as a performance loss and keeps the
# rest. With stand-in compilers (a clean compile, one that prints a
# C7510 note, one that fails), then, where nvcc is installed, a real
# kernel that spills under the build's strict ptxas flags.
set -u
top=$(pwd)
strict="$top/kernels/nvcc_strict.sh"
dir=$(mktemp -d /tmp/hr-strict-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0

check() {      # what, expected exit (0 or not), whether OUT must remain
  what=$1 want=$2 keep=$3 rc=$4
  if [ "$want" = 0 ] && [ "$rc" -ne 0 ]; then
    echo "FAIL: $what: exit $rc, expected 0"; fail=1
  elif [ "$want" != 0 ] && [ "$rc" -eq 0 ]; then
    echo "FAIL: $what: exit 0, expected a failure"; fail=1
  elif [ "$keep" = yes ] && [ ! -f "$dir/out.o" ]; then
    echo "FAIL: $what: the object was removed"; fail=1
  elif [ "$keep" = no ] && [ -f "$dir/out.o" ]; then
    echo "FAIL: $what: the object was left behind"; fail=1
  else
    echo "ok: $what"
  fi
}

cat > "$dir/clean" <<'SH'
#!/bin/sh
echo "ptxas info    : Used 128 registers" >&2
: > "$OUT"
SH
cat > "$dir/loss" <<'SH'
#!/bin/sh
echo "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized" >&2
: > "$OUT"
SH
cat > "$dir/broken" <<'SH'
#!/bin/sh
echo "error: something" >&2
: > "$OUT"
exit 3
SH
chmod +x "$dir/clean" "$dir/loss" "$dir/broken"
export OUT="$dir/out.o"

rm -f "$OUT"; sh "$strict" "$OUT" "$dir/clean" 2>"$dir/log"; rc=$?
check "a clean compile is kept" 0 yes $rc
rm -f "$OUT"; sh "$strict" "$OUT" "$dir/loss" 2>"$dir/log"; rc=$?
check "a performance-loss note is refused" 1 no $rc
if ! grep -q "C7510" "$dir/log" || ! grep -q "not building it" "$dir/log"; then
  echo "FAIL: the note and the refusal are not both shown"; fail=1
fi
rm -f "$OUT"; sh "$strict" "$OUT" "$dir/broken" 2>"$dir/log"; rc=$?
check "a failed compile fails" 1 no $rc
[ "$rc" -eq 3 ] || { echo "FAIL: exit $rc, not the compiler's 3"; fail=1; }

nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ -x "$nvcc" ]; then
  # 32 registers a thread at most (1024 threads, 2 CTAs an SM) for a
  # kernel that keeps 64 values live: ptxas must spill, and -Werror,
  # the flag kernels.mk builds the library with, must refuse it.
  cat > "$dir/spill.cu" <<'CU'
__global__ void __launch_bounds__(1024, 2) spill(float *o, const float *in)
{
  float a[64], s = 0.0f;
#pragma unroll
  for(int i = 0; i < 64; i++)
    a[i] = in[threadIdx.x * 64 + i];
#pragma unroll
  for(int j = 0; j < 64; j++)
#pragma unroll
    for(int i = 0; i < 64; i++)
      s += a[i] * a[(i + j) & 63];
  o[threadIdx.x] = s;
}
CU
  rm -f "$OUT"
  # nvcc is not built with the sanitizers: `make test-asan` preloads its
  # runtime into the scripts it runs, which nvcc must not inherit.
  env -u LD_PRELOAD sh "$strict" "$OUT" "$nvcc" -O3 -gencode=arch=compute_90a,code=sm_90a \
     -Xptxas -warn-spills -Xptxas -Werror -c -o "$OUT" "$dir/spill.cu" 2>"$dir/log"
  rc=$?
  check "nvcc: a kernel that spills is refused" 1 no $rc
  grep -q "spilled" "$dir/log" || { echo "FAIL: no spill reported"; cat "$dir/log"; fail=1; }
else
  echo "note: $nvcc not found: the real-compiler case is not run"
fi
[ $fail -eq 0 ] && echo "test_nvcc_strict: all checks passed"
exit $fail
