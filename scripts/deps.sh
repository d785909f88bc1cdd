#!/usr/bin/env bash
# make's deps: the Debian packages (scripts/install-deps.sh, its arguments passed on) and .venv
# (scripts/python-env.sh), at the same time where the interpreter can already make a virtual
# environment: apt's and pip's downloads and unpacking overlap. Where it cannot yet (Debian's
# python3 without python3-venv), .venv is made after the packages are in.
#
#   scripts/deps.sh [--demo]        VENV, PYTHON as scripts/python-env.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ -x "${VENV:-.venv}/bin/python" ] || "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  scripts/python-env.sh >/dev/null &
  venv=$!
  scripts/install-deps.sh "$@"
  apt=$?
  wait "$venv"
  env=$?
  [ "$apt" -ne 0 ] && exit "$apt"
  exit "$env"
fi
scripts/install-deps.sh "$@" && scripts/python-env.sh >/dev/null
