#!/bin/sh
# test_install.sh: `make install` into a DESTDIR lays out everything a
# package needs, and what it installs works: a program builds against the
# installed header and library through pkg-config and links the soname,
# and the installed daemon accepts the installed config.
set -u
dest=$(mktemp -d /tmp/hr-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: test_install: $*"; exit 1; }

make --no-print-directory install PREFIX=/usr DESTDIR="$dest" >"$dest/log" 2>&1 ||
  { cat "$dest/log"; fail "make install"; }
for f in usr/sbin/headroomd usr/bin/headroomctl usr/bin/headroom-run \
         usr/include/headroom.h usr/lib/libheadroom.a \
         usr/lib/libheadroom.so.0.1.0 usr/lib/pkgconfig/headroom.pc \
         usr/lib/systemd/system/headroomd.service \
         usr/lib/systemd/system/headroomd.socket \
         usr/lib/sysusers.d/headroom.conf etc/headroom/headroomd.conf \
         usr/share/doc/headroom/PROTOCOL.md usr/share/doc/headroom/operations.md; do
  [ -e "$dest/$f" ] || fail "missing $f"
done
[ "$(readlink "$dest/usr/lib/libheadroom.so.0")" = libheadroom.so.0.1.0 ] ||
  fail "libheadroom.so.0 does not point at libheadroom.so.0.1.0"
grep -q "ExecStart=/usr/sbin/headroomd --config /etc/headroom/headroomd.conf" \
  "$dest/usr/lib/systemd/system/headroomd.service" || fail "unit paths not substituted"
if grep -q "@[A-Z]*@" "$dest/usr/lib/systemd/system/"* "$dest/usr/lib/pkgconfig/headroom.pc"; then
  fail "an @PLACEHOLDER@ was left in an installed file"
fi

# Build a client through pkg-config against the installed tree only.
cat > "$dest/client.c" <<'C'
#include <stdio.h>
#include <headroom.h>
int main(void) { printf("%s\n", hr_strerror(HR_EBARRIER_TIMEOUT)); return 0; }
C
export PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_LIBDIR="$dest/usr/lib/pkgconfig"
flags=$(pkg-config --cflags --libs headroom) || fail "pkg-config headroom"
${CC:-cc} -o "$dest/client" "$dest/client.c" $flags || fail "build against the installed library"
readelf -d "$dest/client" | grep -q "NEEDED.*libheadroom.so.0" || fail "client does not link the soname"
LD_LIBRARY_PATH="$dest/usr/lib" "$dest/client" | grep -q "barrier" || fail "client did not run"

"$dest/usr/sbin/headroomd" --check-config --config "$dest/etc/headroom/headroomd.conf" \
  >/dev/null 2>&1 || fail "the installed daemon refuses the installed config"

# A live config is never overwritten: the new one goes beside it.
echo "# operator's" > "$dest/etc/headroom/headroomd.conf"
make --no-print-directory install PREFIX=/usr DESTDIR="$dest" >"$dest/log" 2>&1 || fail "second install"
grep -q "operator's" "$dest/etc/headroom/headroomd.conf" || fail "config overwritten"
[ -e "$dest/etc/headroom/headroomd.conf.new" ] || fail "no headroomd.conf.new"
echo "test_install: ok"
