#!/bin/sh
# test_exports.sh: libheadroom.so exports exactly the functions the
# installed headroom.h declares (build/include/headroom.h: client/headroom.h
# with proto/hr_types.h written in), nothing else: no hr__ name, no wire
# codec (hr_proto_*, hr_buf_*, hr_status_free, ...), no policy. An
# exported symbol the header does not declare, or a declared function the
# library does not export, fails by name. And the layering under it:
# proto/, policy/ and daemon/ build without client/ on the include path,
# and headroomd holds no symbol of client/'s own.
set -u
lib=${HR_LIBDIR:-build/lib}
build=$(dirname "$lib")
so=$lib/libheadroom.so
hdr=$build/include/headroom.h
fail=0
for f in "$so" "$hdr" "$build/bin/headroomd"; do
  [ -e "$f" ] || { echo "FAIL: test_exports: $f not built"; exit 1; }
done
tmp=$(mktemp -d /tmp/hr-exports-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$so" | awk '$2 ~ /^[TWDBR]$/ { sub(/@.*/, "", $3); print $3 }' |
  sort -u > "$tmp/exported"
# Declarations: a return type, the name, "("; comments, preprocessor lines
# and the static inline functions (hr_lease_fill_nccl_config) left out.
python3 - "$hdr" > "$tmp/declared" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
text = re.sub(r"//[^\n]*", " ", text)
text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
text = re.sub(r"static\s+inline[^{]*\{.*?\n\}", " ", text, flags=re.S)
for n in sorted(set(re.findall(r"[\w\*]\s+\**\s*(hr_[a-z0-9_]+)\s*\(", text))):
    print(n)
PY
[ -s "$tmp/declared" ] || { echo "FAIL: test_exports: no function found in $hdr"; exit 1; }
for n in $(comm -23 "$tmp/exported" "$tmp/declared"); do
  echo "FAIL: libheadroom.so exports $n, which headroom.h does not declare"
  fail=1
done
for n in $(comm -13 "$tmp/exported" "$tmp/declared"); do
  echo "FAIL: headroom.h declares $n, which libheadroom.so does not export"
  fail=1
done
[ $fail = 0 ] && echo "ok: libheadroom.so exports the $(wc -l < "$tmp/declared") functions of headroom.h, nothing else"

# The daemon's side of the layering: its sources, the policy's and the
# codec's compile with no client/ include path ...
cc=${CC:-cc}
for f in proto/*.c policy/*.c daemon/*.c; do
  $cc -std=c11 -D_GNU_SOURCE -Iproto -Ipolicy -Idaemon -fsyntax-only "$f" \
    2> "$tmp/err" || { echo "FAIL: $f needs client/ to build:"; head -3 "$tmp/err"; fail=1; }
done
# ... and headroomd links none of client/'s objects.
for s in hr_client_open hr__client_sms hr__fallback_budget hr__io_main; do
  if nm "$build/bin/headroomd" 2>/dev/null | grep -q " [Tt] $s$"; then
    echo "FAIL: headroomd links $s, a client object"
    fail=1
  fi
done
[ $fail = 0 ] && echo "ok: proto/, policy/ and daemon/ build without client/; headroomd links no client object"
exit $fail
