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

# toml_strings SECTION KEY < TOML: the value of KEY in [SECTION] of --dump-config's output, one
# line per string: 'literal' and "basic" strings (with \" \\ \t \n escapes) alike, and every
# element of an array such as ['/a.h5', '/b.h5'] (data.path of several files). A bare value
# (number, boolean) is printed as it stands. Comments after the value are ignored.
toml_strings() {
  awk -v want_section="$1" -v want_key="$2" '
    /^[ \t]*\[/ { line = $0; gsub(/^[ \t]*\[|\][ \t]*$/, "", line); section = line; next }
    section != want_section { next }
    {
      line = $0
      if (!match(line, /^[ \t]*[A-Za-z0-9_.-]+[ \t]*=[ \t]*/)) next
      key = substr(line, 1, RLENGTH); sub(/[ \t]*=.*/, "", key); gsub(/^[ \t]+/, "", key)
      if (key != want_key) next
      rest = substr(line, RLENGTH + 1); found = 0
      for (i = 1; i <= length(rest); i++) {
        c = substr(rest, i, 1)
        if (c == "#") break
        if (c == "\047") {                      # literal string: no escapes
          j = index(substr(rest, i + 1), "\047")
          if (j == 0) exit 1
          print substr(rest, i + 1, j - 1); found = 1; i += j
        } else if (c == "\"") {                 # basic string: backslash escapes
          value = ""
          for (i++; i <= length(rest); i++) {
            c = substr(rest, i, 1)
            if (c == "\\") {
              i++; e = substr(rest, i, 1)
              value = value (e == "n" ? "\n" : e == "t" ? "\t" : e)
            } else if (c == "\"") break
            else value = value c
          }
          print value; found = 1
        } else if (c !~ /[][ \t,]/) {          # a bare value
          match(substr(rest, i), /^[^][ \t,#]+/)
          print substr(rest, i, RLENGTH); found = 1; i += RLENGTH - 1
        }
      }
      exit found ? 0 : 1
    }'
}

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
      toml_strings train output_dir | head -n 1) || true
if [ -z "$OUT" ]; then echo "run_demo: could not read train.output_dir from 'hpctrain train --dump-config'; the loss curves are in the run directory (loss.png)"
elif [ -f "$OUT/loss.png" ]; then echo "run_demo: loss curves: $OUT/loss.png"
else echo "run_demo: no $OUT/loss.png (gnuplot not installed? apt-get install gnuplot-nox)"; fi
