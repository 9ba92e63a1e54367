#!/usr/bin/env bash
# README command 1: set up, build, prepare Debian's English fortunes into HDF5 (first run only)
# and train the demo GPT on 2 MPI ranks. Extra args are passed to `hpctrain train`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh hpctrain
exec ./jobs/local/run_demo.sh "$@"
