#!/bin/sh
# nvcc_strict.sh OUT NVCC ARGS...: runs the compile, shows what it printed,
# and fails (removing OUT) when ptxas reported a performance loss, such as
# wgmma instructions serialized (C7510, C7518). ptxas prints those as
# information, which -Xptxas -Werror does not catch; kernels.mk says why
# the build refuses them.
out=$1
shift
log=$(mktemp) || exit 1
"$@" 2>"$log"
rc=$?
cat "$log" >&2
if [ "$rc" -eq 0 ] && grep -q 'Performance Loss' "$log"; then
  echo "$out: ptxas reports a performance loss (above); not building it" >&2
  rc=1
fi
rm -f "$log"
[ "$rc" -eq 0 ] || rm -f "$out"
exit "$rc"
