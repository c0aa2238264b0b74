#!/bin/sh
# test_install.sh: `make install` into a DESTDIR lays out everything a
# package needs, after GNU and Debian conventions, and what it installs
# works: a program builds against the installed header and library through
# pkg-config and links the soname, the installed daemon accepts the
# installed config, `systemctl --root` enables the installed socket unit
# (no container, no running systemd), and `make uninstall` takes it all
# away again, leaving a config the operator changed.
set -u
dest=$(mktemp -d /tmp/hr-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: test_install: $*"; exit 1; }
inst() { make --no-print-directory "$@" >"$dest/log" 2>&1 ||
  { cat "$dest/log"; fail "make $*"; }; }

inst install PREFIX=/usr DESTDIR="$dest/root"
r=$dest/root
for f in usr/sbin/headroomd usr/bin/headroomctl usr/bin/headroom-run \
         usr/include/headroom.h usr/lib/libheadroom.a \
         usr/lib/libheadroom.so.0.1.0 usr/lib/pkgconfig/headroom.pc \
         usr/lib/systemd/system/headroomd.service \
         usr/lib/systemd/system/headroomd.socket \
         usr/lib/systemd/system/headroom-metrics.service \
         usr/lib/systemd/system/headroom-metrics.timer \
         usr/lib/sysusers.d/headroom.conf etc/headroom/headroomd.conf \
         usr/share/doc/headroom/PROTOCOL.md usr/share/doc/headroom/operations.md; do
  [ -e "$r/$f" ] || fail "missing $f"
done
# The kernels' library, and its .pc, where nvcc built them.
if [ -e "$r/usr/lib/libheadroom_moe.a" ]; then
  [ -e "$r/usr/lib/pkgconfig/headroom_moe.pc" ] || fail "no headroom_moe.pc"
fi
[ "$(readlink "$r/usr/lib/libheadroom.so.0")" = libheadroom.so.0.1.0 ] ||
  fail "libheadroom.so.0 does not point at libheadroom.so.0.1.0"
grep -q "ExecStart=/usr/sbin/headroomd --config /etc/headroom/headroomd.conf" \
  "$r/usr/lib/systemd/system/headroomd.service" || fail "unit paths not substituted"
if grep -q "@[A-Z_]*@" "$r/usr/lib/systemd/system/"* "$r/usr/lib/pkgconfig/"*.pc; then
  fail "an @PLACEHOLDER@ was left in an installed file"
fi

# Build a client through pkg-config against the installed tree only.
cat > "$dest/client.c" <<'C'
#include <stdio.h>
#include <headroom.h>
int main(void) { printf("%s\n", hr_strerror(HR_EBARRIER_TIMEOUT)); return 0; }
C
export PKG_CONFIG_SYSROOT_DIR="$r" PKG_CONFIG_LIBDIR="$r/usr/lib/pkgconfig"
flags=$(pkg-config --cflags --libs headroom) || fail "pkg-config headroom"
${CC:-cc} -o "$dest/client" "$dest/client.c" $flags || fail "build against the installed library"
readelf -d "$dest/client" | grep -q "NEEDED.*libheadroom.so.0" || fail "client does not link the soname"
LD_LIBRARY_PATH="$r/usr/lib" "$dest/client" | grep -q "barrier" || fail "client did not run"
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR

"$r/usr/sbin/headroomd" --check-config --config "$r/etc/headroom/headroomd.conf" \
  >/dev/null 2>&1 || fail "the installed daemon refuses the installed config"

# systemctl enable --now headroomd.socket, less the --now: on the installed
# tree, offline.
if command -v systemctl >/dev/null 2>&1; then
  systemctl --root="$r" enable headroomd.socket >"$dest/log" 2>&1 ||
    { cat "$dest/log"; fail "systemctl --root enable headroomd.socket"; }
  [ -L "$r/etc/systemd/system/sockets.target.wants/headroomd.socket" ] ||
    fail "enable did not link headroomd.socket into sockets.target.wants"
  systemctl --root="$r" disable headroomd.socket >/dev/null 2>&1 ||
    fail "systemctl --root disable headroomd.socket"
  rm -rf "$r/etc/systemd"
else
  echo "SKIP (part): test_install: no systemctl; enable not tried"
fi

# A live config is never overwritten: the new one goes beside it; and
# uninstall leaves it, since the operator changed it.
echo "# operator's" > "$r/etc/headroom/headroomd.conf"
inst install PREFIX=/usr DESTDIR="$r"
grep -q "operator's" "$r/etc/headroom/headroomd.conf" || fail "config overwritten"
[ -e "$r/etc/headroom/headroomd.conf.new" ] || fail "no headroomd.conf.new"
inst uninstall PREFIX=/usr DESTDIR="$r"
grep -q "left in place" "$dest/log" || fail "uninstall did not say it kept the config"
left=$(cd "$r" && find . -type f | sort)
[ "$left" = "./etc/headroom/headroomd.conf" ] ||
  fail "uninstall left more than the changed config: $left"

# Any other prefix: the config under PREFIX/etc, unless SYSCONFDIR says.
inst install PREFIX=/opt/hr DESTDIR="$dest/opt"
[ -e "$dest/opt/opt/hr/etc/headroom/headroomd.conf" ] || fail "PREFIX=/opt/hr: no config in /opt/hr/etc"
[ ! -e "$dest/opt/etc" ] || fail "PREFIX=/opt/hr wrote to /etc"
grep -q "ExecStart=/opt/hr/sbin/headroomd --config /opt/hr/etc/headroom/headroomd.conf" \
  "$dest/opt/opt/hr/lib/systemd/system/headroomd.service" || fail "PREFIX=/opt/hr: unit paths"
inst uninstall PREFIX=/opt/hr DESTDIR="$dest/opt"
left=$(cd "$dest/opt" && find . -type f)
[ -z "$left" ] || fail "uninstall left: $left"
inst install PREFIX=/opt/hr SYSCONFDIR=/etc/hr DESTDIR="$dest/sys"
[ -e "$dest/sys/etc/hr/headroom/headroomd.conf" ] || fail "SYSCONFDIR=/etc/hr not used"
echo "test_install: ok"
