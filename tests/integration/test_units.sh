#!/bin/sh
# test_units.sh: the systemd units as `make install` writes them (from
# systemd/*.in) pass systemd-analyze verify, and each service's exposure
# stays at most 2.0 (headroomd, and headroom-metrics which feeds
# node_exporter). Installed with PREFIX and SYSCONFDIR in a temporary
# folder, not a DESTDIR, so that the paths in the units are the installed
# files themselves and verify finds them. Skips (77) where
# systemd-analyze is not installed.
set -u
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: test_units: systemd-analyze not installed"
  exit 77
fi
dir=$(mktemp -d /tmp/hr-units-XXXXXX)
trap 'rm -rf "$dir"' EXIT
make --no-print-directory install PREFIX="$dir/usr" SYSCONFDIR="$dir/etc" \
  >"$dir/log" 2>&1 || { cat "$dir/log"; echo "FAIL: test_units: make install"; exit 1; }
udir=$dir/usr/lib/systemd/system
units="headroomd.service headroomd.socket headroom-metrics.service
       headroom-metrics.timer"
fail=0
echo "systemd-analyze verify (units installed in $udir):"
if ! (cd "$udir" && systemd-analyze verify $(for u in $units; do echo "./$u"; done)); then
  echo "FAIL: systemd-analyze verify"; fail=1
fi
for s in headroomd.service headroom-metrics.service; do
  echo "systemd-analyze security --offline $s (threshold 2.0):"
  out=$(cd "$udir" && systemd-analyze security --offline=true --threshold=20 \
        "./$s" 2>&1); rc=$?
  echo "$out" | grep -E "Overall exposure|^✗" || true
  if [ $rc -ne 0 ]; then
    echo "FAIL: $s: exposure above 2.0"; fail=1
  fi
done
exit $fail
