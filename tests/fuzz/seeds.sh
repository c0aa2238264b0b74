#!/bin/sh
# seeds.sh PROTOCOL.md DIR: every example line of the protocol document
# as fuzz seeds, the way tests/unit/test_proto.c finds them (the lines of
# each ```json block).
#   DIR/fuzz_reply/NNN   one example line each, and all of them together
#   DIR/fuzz_daemon/NNN  the hello example, then one example line; and
#                        every line in document order (a whole session)
set -eu
doc=$1
out=$2
mkdir -p "$out/fuzz_reply" "$out/fuzz_daemon"
awk -v out="$out" '
  /^```/ { injson = (!injson && $0 == "```json"); next }
  injson && length($0) > 0 {
    n++
    line[n] = $0
    if(hello == "" && index($0, "\"type\":\"hello\",\"versions\""))
      hello = $0
  }
  END {
    if(n < 30 || hello == "") {
      print "seeds.sh: found " n " examples and no hello in " FILENAME > "/dev/stderr"
      exit 1
    }
    for(i = 1; i <= n; i++) {
      f = sprintf("%s/fuzz_reply/%03d", out, i)
      print line[i] > f; close(f)
      f = sprintf("%s/fuzz_daemon/%03d", out, i)
      print hello > f; print line[i] > f; close(f)
      all = all line[i] "\n"
    }
    f = out "/fuzz_reply/all";  printf "%s", all > f; close(f)
    f = out "/fuzz_daemon/all"; printf "%s", all > f; close(f)
    print n
  }' "$doc"
