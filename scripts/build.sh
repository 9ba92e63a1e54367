#!/usr/bin/env bash
# Configures and builds hpctrain into build/ (after ./scripts/setup.sh). Extra args go to ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_PREFIX=$(./scripts/setup.sh | tail -n 1)
export CCACHE_DIR="${CCACHE_DIR:-${HPCTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}/ccache}"
command -v mpirun >/dev/null || { echo "hpctrain: mpirun not found; install openmpi-bin or load an MPI module" >&2; exit 1; }
if [ ! -f build/build.ninja ]; then
  if ! cmake -S . -B build -G Ninja -DTorch_DIR="$TORCH_PREFIX/share/cmake/Torch" >build-configure.log 2>&1; then
    grep -h "hpctrain:" build-configure.log >&2 || tail -n 20 build-configure.log >&2
    echo "hpctrain: CMake configuration failed; full log in build-configure.log" >&2
    exit 1
  fi
fi
JOBS="${HPCTRAIN_BUILD_JOBS:-$(nproc)}"
cmake --build build -j "$JOBS" -- "$@"
