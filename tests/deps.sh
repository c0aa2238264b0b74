#!/bin/sh
# deps.sh PKG:HEADER ...: make sure the Debian build dependencies are there.
# A package counts as present when its header is found (or, with no header
# named, when dpkg knows it). As root, installs what is missing (apt-get
# update first); otherwise prints exactly what is missing and fails.
missing=""
for spec in "$@"; do
  pkg=${spec%%:*}
  hdr=${spec#*:}
  if [ -n "$hdr" ]; then
    echo "#include <$hdr>" | ${CC:-cc} $CPPFLAGS -E -x c - >/dev/null 2>&1 && continue
  else
    dpkg -s "$pkg" >/dev/null 2>&1 && continue
  fi
  missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq $missing >/dev/null || {
    echo "deps: apt-get install$missing failed" >&2; exit 1; }
  exit 0
fi
echo "deps: missing Debian packages:$missing" >&2
echo "deps: install them with: sudo apt-get install$missing" >&2
exit 1
