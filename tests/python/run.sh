#!/bin/sh
# run.sh: the Python binding's tests (tests/python/test_*.py, standard
# library unittest), against the real headroomd and libheadroom of the
# build tree. Run by `make test` (tests/python/python.mk); by hand, from
# anywhere, after `make`:
#   tests/python/run.sh
# Exits with unittest's status; 77 (skip) only when there is no python3.
cd "$(dirname "$0")/../.." || exit 1
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: tests/python: no python3 on PATH"
  exit 77
fi
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
exec python3 -m unittest discover -s tests/python -t tests/python -v
