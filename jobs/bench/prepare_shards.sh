#!/usr/bin/env bash
# Wall time of `hpctrain prepare`: one file (no mpirun) vs 2 and 3 shards (mpirun -np 2/3), mpirun
# start-up included, REPS repetitions interleaved. Corpora: Debian's fortunes directory, and a
# larger one made of COPIES copies of its files (byte tokenizer only: BPE training is serial).
# Usage: jobs/bench/prepare_shards.sh [HPCTRAIN_BINARY] [REPS] [COPIES]   (prints "rep corpus tokenizer R seconds")
set -euo pipefail
BIN=${1:-build/bin/hpctrain}; REPS=${2:-3}; COPIES=${3:-16}
BIN=$(realpath "$BIN")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FORTUNES=/usr/share/games/fortunes
WORK=$(mktemp -d /tmp/ht-prepare-bench-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/big"
for i in $(seq -w 1 "$COPIES"); do
  for f in "$FORTUNES"/*; do  # the files prepare reads from the directory: regular, no index files
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    case "$f" in *.dat|*.u8|*.pos) continue ;; esac
    cp "$f" "$WORK/big/$(basename "$f")-$i"
  done
done
seconds() { local s; s=$(date +%s.%N); "$@" >"$WORK/log" 2>&1 || { cat "$WORK/log"; exit 1; }; echo "$(date +%s.%N) - $s" | bc; }
for rep in $(seq "$REPS"); do
  for corpus in fortunes big; do
    in=$FORTUNES; [ "$corpus" = big ] && in=$WORK/big
    for tok in byte bpe; do
      [ "$corpus" = big ] && [ "$tok" = bpe ] && continue
      targs=(); [ "$tok" = bpe ] && targs=(--tokenizer bpe --vocab-size 1024)
      for np in 1 2 3; do
        rm -f "$WORK"/out*.h5
        if [ "$np" = 1 ]; then w=$(seconds "$BIN" prepare --input "$in" --output "$WORK/out.h5" "${targs[@]}")
        else w=$(seconds mpirun --oversubscribe -np "$np" "$BIN" prepare --input "$in" --output "$WORK/out.h5" "${targs[@]}"); fi
        echo "$rep $corpus $tok $np $w"
      done
    done
  done
done
