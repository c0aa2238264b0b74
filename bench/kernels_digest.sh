#!/bin/sh
# kernels_digest.sh [REV]: a short digest (16 hex digits) of the kernels'
# sources, kernels/*.cu, *.cuh, *.h and kernels.mk (their flags), as they
# are in the working tree or, with REV, at that git revision. Run from the
# repository root.
#
# bench/gpu_report.sh writes it into its summary ("kernels: ..."), beside
# the commit line, so that a table made on a machine whose copy of the
# history is behind (or carries uncommitted files) can still be matched to
# the code that made it: `sh bench/kernels_digest.sh COMMIT` here prints the
# same digest for a commit with the same kernels. Each file counts with
# its path, so a renamed or an added file changes the digest too.
set -eu
rev=${1:-}
if [ $# -gt 1 ]; then
  echo "usage: kernels_digest.sh [REV]" >&2
  exit 2
fi
if [ -n "$rev" ] && ! git rev-parse --verify --quiet "$rev^{commit}" >/dev/null; then
  echo "kernels_digest.sh: $rev: not a revision of this repository" >&2
  exit 2
fi
is_source() {   # path: one of the files the digest covers?
  case $1 in
    kernels/*/*) return 1 ;;
    kernels/*.cu | kernels/*.cuh | kernels/*.h | kernels/kernels.mk) return 0 ;;
    *) return 1 ;;
  esac
}
if [ -n "$rev" ]; then
  files=$(git ls-tree --name-only "$rev" kernels/ | LC_ALL=C sort)
else
  files=$(ls kernels/* 2>/dev/null | LC_ALL=C sort)
fi
srcs=$(for f in $files; do if is_source "$f"; then printf '%s\n' "$f"; fi; done)
if [ -z "$srcs" ]; then
  echo "kernels_digest.sh: no kernel sources under kernels/${rev:+ at $rev}" >&2
  exit 1
fi
for f in $srcs; do
  printf '%s\n' "$f"
  if [ -n "$rev" ]; then git show "$rev:$f"; else cat "$f"; fi
done | sha256sum | cut -c1-16
