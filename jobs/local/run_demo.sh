#!/usr/bin/env bash
# Local launcher without Slurm: prepares the demo data if missing and trains the demo model with
# mpirun on this machine. Run from anywhere:
#
#   jobs/local/run_demo.sh                         # 2 ranks, inputs/configs/demo.toml
#   NP=4 jobs/local/run_demo.sh --set train.max_steps=50    # extra args go to `hpctrain train`
#
# Knobs (environment):
NP="${NP:-2}"                                            # MPI ranks
BUILD_DIR="${BUILD_DIR:-build}"                          # where cmake built hpctrain
CONFIG="${CONFIG:-inputs/configs/demo.toml}"             # training config
DEMO_DATA="${DEMO_DATA:-data/demo.h5}"                   # must match data.path in CONFIG
DEMO_TEXT="${DEMO_TEXT:-/usr/share/games/fortunes}"      # text the demo data is made from
THREADS_PER_RANK="${THREADS_PER_RANK:-}"                 # empty: cores / NP (at least 1)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
hpctrain="$BUILD_DIR/bin/hpctrain"
die() { echo "run_demo: error: $*" >&2; exit 1; }
[ -x "$hpctrain" ] || die "$hpctrain not found: build first (cmake -S . -B $BUILD_DIR -G Ninja && cmake --build $BUILD_DIR)"
[ -f "$CONFIG" ] || die "config $CONFIG not found"
command -v mpirun >/dev/null || die "mpirun not found (Debian package openmpi-bin)"

# mpirun refuses root unless asked, and a laptop has fewer cores than ranks: allow both.
MPIRUN=(mpirun -np "$NP")
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  MPIRUN+=(--oversubscribe --bind-to none)
  [ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if [ -z "$THREADS_PER_RANK" ]; then
  THREADS_PER_RANK=$(( $(nproc) / NP )); [ "$THREADS_PER_RANK" -ge 1 ] || THREADS_PER_RANK=1
fi
export OMP_NUM_THREADS="$THREADS_PER_RANK"

if [ ! -f "$DEMO_DATA" ]; then
  echo "run_demo: preparing $DEMO_DATA from $DEMO_TEXT"
  mkdir -p "$(dirname "$DEMO_DATA")"
  "$hpctrain" prepare --input "$DEMO_TEXT" --output "$DEMO_DATA"
fi
echo "run_demo: ${MPIRUN[*]} $hpctrain train --config $CONFIG $* ($OMP_NUM_THREADS thread(s) per rank)"
exec "${MPIRUN[@]}" "$hpctrain" train --config "$CONFIG" "$@"
