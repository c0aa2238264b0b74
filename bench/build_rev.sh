#!/bin/sh
# build_rev.sh REV DIR [NVCC_EXTRA]: the kernels of git revision REV (a
# commit, branch or tag of this repository) built into the build
# directory DIR with their moe_phases, for a side-by-side run against
# this tree or another revision:
#
#   sh bench/build_rev.sh main build-p
#   sh bench/build_rev.sh exp/some-branch build-x
#   make bench-ab AB_BUILDS="build-p build-x"      (on an H200)
#
# so that a change kept on a branch is timed without checking it out.
# NVCC_EXTRA defaults to -DHR__MOE_NO_VARIANTS=1: in a revision from
# before the one kernel build, whose static library (moe_phases') held
# the benchmark's variants, it builds both libraries as production's, so
# that an old revision is timed on the code it shipped; a later revision
# has one build, and the define changes nothing there.
# BUILD_REV_TARGETS (paths under DIR, default tests/moe_phases) builds
# other programs too, e.g. the GPU tests of the branch:
#
#   BUILD_REV_TARGETS="tests/test_moe_correct tests/test_moe_grids" \
#     sh bench/build_rev.sh exp/some-branch build-t ""
#
# REV's files are exported (git archive) to a temporary directory and
# built there, with BUILD=DIR made absolute; DIR is emptied first. Run
# from the repository root; needs nvcc. DIR's programs find DIR's
# libraries relative to themselves (Makefile TESTBIN_RPATH), so DIR can be
# copied whole to the GPU machine, under any path; leave LD_LIBRARY_PATH
# without another build's lib there, which would come first.
set -eu
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: build_rev.sh REV DIR [NVCC_EXTRA]" >&2
  exit 2
fi
rev=$1
dir=$2
extra=${3--DHR__MOE_NO_VARIANTS=1}
if ! git rev-parse --verify --quiet "$rev^{commit}" >/dev/null; then
  echo "build_rev.sh: $rev: not a revision of this repository" >&2
  exit 2
fi
case $dir in
  /*) abs=$dir ;;
  *) abs=$(pwd)/$dir ;;
esac
src=$(mktemp -d "${TMPDIR:-/tmp}/hr-rev.XXXXXX")
trap 'rm -rf "$src"' EXIT
git archive "$rev" | tar -x -C "$src"
rm -rf "$abs"
echo "build_rev.sh: $rev ($(git rev-parse --short "$rev")) into $dir, NVCC_EXTRA=$extra"
targets=
for t in ${BUILD_REV_TARGETS:-tests/moe_phases}; do
  targets="$targets $abs/$t"
done
# shellcheck disable=SC2086 # one word per target
make -s -C "$src" BUILD="$abs" NVCC_EXTRA="$extra" $targets
git rev-parse "$rev" > "$abs/REVISION"
echo "build_rev.sh: built$targets"
