#!/bin/sh
# profile_vs_triton.sh MOE_ONCE SHAPE T OUT [CONFIG]: Nsight Compute on the
# barrier kernel's forward and on the Triton baseline's two GEMMs, the same
# shape and T, balanced routing (so that the experts' tail tiles do not
# blur the comparison: docs/kernels.md, "Random against balanced
# routing"), the same sections, clocks left as they are. Writes
# OUT/ours.ncu-rep and OUT/triton.ncu-rep, their details pages as CSV, and
# OUT/compare.md, every metric of the three launches side by side
# (bench/ncu_compare.py). CONFIG is the Triton config for both GEMMs
# (BLOCK_M,BLOCK_N,BLOCK_K,GROUP_M,warps,stages), default the one its
# sweep picks at T >= 4096 (bench/results/bench-moe.md):
#
#   sh bench/profile_vs_triton.sh build/tests/moe_once deepseek-v3 8192 prof
#
# Needs ncu, PyTorch and Triton on an H200. Each kernel is profiled at its
# first launch (Triton's: the untimed warm-up of the --config run).
set -eu
if [ $# -lt 4 ] || [ $# -gt 5 ]; then
  echo "usage: $0 MOE_ONCE SHAPE T OUT [CONFIG]" >&2
  exit 2
fi
bin=$1
shape=$2
T=$3
out=$4
cfg=${5:-128,256,64,8,8,3}
command -v ncu >/dev/null 2>&1 || { echo "$0: ncu not found" >&2; exit 1; }
mkdir -p "$out"
set -- --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section InstructionStats --section LaunchStats --section Occupancy
ncu "$@" -k regex:hr__moe --launch-count 1 -f -o "$out/ours" \
  "$bin" --balanced "$shape" "$T" > "$out/ours.log" 2>&1 ||
  { tail -20 "$out/ours.log" >&2; exit 1; }
ncu "$@" -k regex:_moe_gemm --launch-count 2 -f -o "$out/triton" \
  python3 bench/triton_moe.py --shapes "$shape" --tokens "$T" --reps 1 --balanced \
  --config "$cfg" > "$out/triton.log" 2>&1 || { tail -20 "$out/triton.log" >&2; exit 1; }
for r in ours triton; do
  ncu -i "$out/$r.ncu-rep" --page details --csv > "$out/$r.csv"
done
python3 bench/ncu_compare.py "$out/ours.csv" "$out/triton.csv" > "$out/compare.md"
echo "wrote $out/compare.md"
