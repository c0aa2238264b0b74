#!/bin/sh
# routing_ab.sh MOE_PHASES OUT [moe_phases arguments]: both kernels'
# normal launches under random routing (k distinct experts a token) and
# under balanced routing (every expert T k / E pairs), same binary, same
# shapes and T, one after the other, and the ratio. What it separates:
# the time the experts' part-filled last token tiles cost. With random
# routing an expert's pair count spreads by about its square root around
# T k / E, so at T k / E near a multiple of a tile's 128 tokens about
# half the experts need one more tile, a few tokens wide, that streams
# the expert's weights once more (docs/kernels.md, "What is left").
#
#   sh bench/routing_ab.sh build/tests/moe_phases OUT.md \
#     --shapes deepseek-v3,qwen3-30b-a3b --tokens 2048,4096,8192,16384
#
# (or `make bench-routing`). HR_COMMIT names the commit in OUT when the
# tree has no .git (a copy on a GPU machine).
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 MOE_PHASES OUT [moe_phases arguments]" >&2
  exit 2
fi
bin=$1
out=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --no-phases --no-floor "$@" --out "$tmp/random.md" > "$tmp/random.log" 2>&1 ||
  { cat "$tmp/random.log" >&2; exit 1; }
"$bin" --no-phases --no-floor --balanced "$@" --out "$tmp/balanced.md" \
  > "$tmp/balanced.log" 2>&1 || { cat "$tmp/balanced.log" >&2; exit 1; }
commit=${HR_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "# Random against balanced routing, the same kernels"
  echo
  grep -m1 '^- machine:' "$tmp/random.md"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
  echo "- command: \`sh bench/routing_ab.sh $bin OUT $*\` (\`make bench-routing\`)"
  echo "- each side: \`moe_phases --no-phases --no-floor\` (medians of CUDA-event reps,"
  echo "  inputs rotating, all SMs); random: k distinct experts a token, uniformly;"
  echo "  balanced: slot j of token t to expert (t k + j) mod E"
  echo
  echo "| shape | T | kernel | random ms | balanced ms | random / balanced |"
  echo "|---|---|---|---|---|---|"
  # the normal launches' rows: | shape | T | kernel | default | ms | ...
  grep '| default |' "$tmp/random.md" | awk -F'|' '{gsub(/ /, ""); print $2, $3, $4, $6}' \
    > "$tmp/r.txt"
  grep '| default |' "$tmp/balanced.md" | awk -F'|' '{gsub(/ /, ""); print $2, $3, $4, $6}' \
    > "$tmp/b.txt"
  awk 'NR == FNR { b[$1 " " $2 " " $3] = $4; next }
       { k = $1 " " $2 " " $3
         if(k in b && b[k] > 0)
           printf "| %s | %s | %s | %.3f | %.3f | %.2fx |\n", $1, $2, $3, $4, b[k], $4 / b[k] }' \
    "$tmp/b.txt" "$tmp/r.txt"
  echo
  echo "## Random routing, as moe_phases printed it"
  echo
  sed -n '/^Normal launches/,$p' "$tmp/random.md"
  echo
  echo "## Balanced routing, as moe_phases printed it"
  echo
  sed -n '/^Normal launches/,$p' "$tmp/balanced.md"
} > "$out"
echo "wrote $out"
