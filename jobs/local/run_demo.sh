#!/usr/bin/env bash
# Local launcher without Slurm: prepares the demo dataset on first use and runs the demo
# training on NP ranks with mpirun. Knobs (environment): NP (2), CONFIG, HPCTRAIN (binary).
# Extra arguments go to `hpctrain train` (e.g. --set train.max_steps=50, --resume).
set -euo pipefail
cd "$(dirname "$0")/../.."
NP="${NP:-2}"
CONFIG="${CONFIG:-inputs/configs/demo.toml}"
HPCTRAIN="${HPCTRAIN:-build/bin/hpctrain}"
DATA="${DATA:-data/fortunes.h5}"
FORTUNES_DIR="${FORTUNES_DIR:-/usr/share/games/fortunes}"

command -v mpirun >/dev/null || { echo "run_demo: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
[ -x "$HPCTRAIN" ] || { echo "run_demo: $HPCTRAIN not built; run ./scripts/build.sh" >&2; exit 1; }

MPI_FLAGS=(-np "$NP" --bind-to none)
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  [ "$(nproc)" -lt "$NP" ] && MPI_FLAGS+=(--oversubscribe)
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
fi

if [ ! -f "$DATA" ]; then
  [ -d "$FORTUNES_DIR" ] || { echo "run_demo: $FORTUNES_DIR missing (apt-get install fortunes)" >&2; exit 2; }
  mkdir -p "$(dirname "$DATA")"
  echo "run_demo: preparing $DATA from $FORTUNES_DIR (byte tokenizer)"
  "$HPCTRAIN" prepare --input "$FORTUNES_DIR" --output "$DATA"
fi

echo "run_demo: mpirun ${MPI_FLAGS[*]} $HPCTRAIN train --config $CONFIG $*"
mpirun "${MPI_FLAGS[@]}" "$HPCTRAIN" train --config "$CONFIG" --set "data.path=$DATA" "$@"
# The run directory as the trainer resolved it (--set train.output_dir=... included).
OUT=$("$HPCTRAIN" train --config "$CONFIG" --set "data.path=$DATA" "$@" --dump-config 2>/dev/null |
      awk -F' = ' '/^output_dir/{gsub(/"/, "", $2); print $2; exit}')
if [ -f "$OUT/loss.png" ]; then echo "run_demo: loss curves: $OUT/loss.png"
else echo "run_demo: no $OUT/loss.png (gnuplot not installed? apt-get install gnuplot-nox)"; fi
