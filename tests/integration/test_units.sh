#!/bin/sh
# test_units.sh: the systemd units as `make install` writes them pass
# systemd-analyze verify, and each service's exposure stays at most 2.0
# (headroomd, and headroom-metrics which feeds node_exporter).
# Skips (77) where systemd-analyze is not installed.
set -u
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: test_units: systemd-analyze not installed"
  exit 77
fi
top=$(pwd)
build=${HEADROOM_BUILD:-build}
dir=$(mktemp -d /tmp/hr-units-XXXXXX)
trap 'rm -rf "$dir"' EXIT
units="headroomd.service headroomd.socket headroom-metrics.service
       headroom-metrics.timer"
for u in $units; do
  sed -e "s|@BINDIR@|$top/$build/bin|g" -e "s|@PREFIX@|$top/$build|g" \
      -e "s|@SYSCONFDIR@|/etc|g" \
      -e "s|@DOCDIR@|/usr/share/doc/headroom|g" "systemd/$u" > "$dir/$u"
done
fail=0
echo "systemd-analyze verify:"
if ! (cd "$dir" && systemd-analyze verify $(for u in $units; do echo "./$u"; done)); then
  echo "FAIL: systemd-analyze verify"; fail=1
fi
for s in headroomd.service headroom-metrics.service; do
  echo "systemd-analyze security --offline $s (threshold 2.0):"
  out=$(cd "$dir" && systemd-analyze security --offline=true --threshold=20 \
        "./$s" 2>&1); rc=$?
  echo "$out" | grep -E "Overall exposure|^✗" || true
  if [ $rc -ne 0 ]; then
    echo "FAIL: $s: exposure above 2.0"; fail=1
  fi
done
exit $fail
