#!/usr/bin/env bash
# Runs a Python script of this suite with the reference venv's interpreter (scripts/setup-python.sh).
# Exit 77 (ctest SKIP_RETURN_CODE) with one sentence when the venv is missing.
# HPCTRAIN_PYTHON overrides the interpreter. Usage: with_venv.sh SCRIPT.py [ARGS...]
set -euo pipefail
cache="${HPCTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}"
py="${HPCTRAIN_PYTHON:-$cache/venv-torch-2.11.0/bin/python}"
ready=1
[ -x "$py" ] || ready=0
# The venv of setup-python.sh is complete only once its stamp exists (an interrupted setup leaves none).
[ -n "${HPCTRAIN_PYTHON:-}" ] || [ -f "$cache/venv-torch-2.11.0/.complete" ] || ready=0
if [ "$ready" = 0 ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/../support/skip.sh"
  skip_suite "Python reference environment not found at $py; run ./scripts/setup-python.sh to enable the python tests"
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$@"
