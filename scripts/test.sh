#!/usr/bin/env bash
# README command 2: set up, build everything, run the full test suite (unit, mpi, cli, python, slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/setup-python.sh >/dev/null || { echo "hpctrain: the Python reference environment could not be set up (see the message above); the python suites need it" >&2; exit 1; }
# Every suite must run here: a missing prerequisite fails its tests instead of skipping them.
export HPCTRAIN_REQUIRE_ALL_SUITES=1
cd build
ctest --output-on-failure --timeout 900 -j "${HPCTRAIN_TEST_JOBS:-2}" "$@"
