#!/usr/bin/env bash
# Sharded datasets through the real binary under mpirun. Usage: run.sh CASE. Environment from
# ctest: HPCTRAIN, MPIEXEC, MPIEXEC_FLAGS (a ;-list), OpenMPI root variables.
set -uo pipefail
source "$(dirname "$0")/../support/case.sh" shards "$1"

HT_MPI_TIMEOUT=240
# prepare NP OUT ARGS...: NP = 1 runs without mpirun (one file), else NP shards.
prepare() {
  local np=$1 out=$2; shift 2
  if [ "$np" -eq 1 ]; then expect_rc 0 "$HPCTRAIN" prepare --output "$WORK/$out" "$@"
  else expect_rc 0 mpi "$np" "$HPCTRAIN" prepare --output "$WORK/$out" "$@"; fi
}
# raw FILE.h5 DATASET: the dataset's values, little-endian binary. Each call has its own file:
# two calls may run at once (a pipe and a process substitution).
raw() {
  local f; f=$(mktemp "$WORK/raw-XXXXXX")
  h5dump -d "$2" -b LE -o "$f" "$1" >/dev/null || fail "h5dump $1 $2"
  cat "$f"; rm -f "$f"
}
# same_content SINGLE SHARD...: each dataset of $DATASETS (default: /train and /val tokens) of the
# shards, concatenated, equals the single file's.
same_content() {
  local single=$1; shift
  for ds in ${DATASETS:-/train/tokens /val/tokens}; do
    raw "$single" $ds >"$WORK/a.bin"
    : >"$WORK/b.bin"
    for s in "$@"; do raw "$s" $ds >>"$WORK/b.bin"; done
    [ -s "$WORK/a.bin" ] || fail "$single: empty $ds"
    cmp -s "$WORK/a.bin" "$WORK/b.bin" || fail "$ds of $* concatenated differs from $single"
  done
}
TINY=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
      --set train.micro_batch_size=4 --set train.max_steps=8 --set train.threads=1 --set train.device=cpu
      --set log.every_steps=1 --set eval.strategy=steps --set eval.every_steps=4 --set eval.max_batches=0
      --set checkpoint.save_final=false)
# train NP OUT DATA_PATH ARGS... (DATA_PATH "": from a --config in ARGS)
train() {
  local np=$1 out=$2 data=$3; shift 3
  local set_data=(--set data.path="$data")
  [ -z "$data" ] && set_data=()  # data.path from --config
  expect_rc 0 mpi "$np" "$HPCTRAIN" train "${set_data[@]}" --set train.output_dir="$WORK/$out" "${TINY[@]}" "$@"
}
# losses RUN: "step loss" of every training line and "step eval_loss" of every evaluation.
losses() {
  python3 -c "
import json, sys
for l in map(json.loads, open(sys.argv[1])):
    for k in ('loss', 'eval_loss'):
        if k in l: print(l['step'], k, repr(l[k]))" "$WORK/$1/metrics.jsonl"
}
same_losses() {  # RUN_A RUN_B
  losses "$1" >"$WORK/$1.loss"; losses "$2" >"$WORK/$2.loss"
  [ "$(grep -c ' loss ' "$WORK/$1.loss")" -eq 8 ] || fail "$1: expected 8 training losses"
  [ "$(grep -c ' eval_loss ' "$WORK/$1.loss")" -ge 2 ] || fail "$1: expected 2 evaluations"
  diff "$WORK/$1.loss" "$WORK/$2.loss" || fail "losses of $2 differ from $1"
  echo "ok: $1 == $2 ($(wc -l <"$WORK/$1.loss") values)"
}

case "$CASE" in
  equal)
    prepare 1 one.h5 --input "$FORTUNES"
    prepare 2 two.h5 --input "$FORTUNES"
    prepare 3 three.h5 --input "$FORTUNES"
    ls "$WORK"/*.tmp-* >/dev/null 2>&1 && fail "temporary file left behind"
    [ -e "$WORK/two.h5" ] && fail "sharded prepare wrote the single file too"
    same_content "$WORK/one.h5" "$WORK/two-00000-of-00002.h5" "$WORK/two-00001-of-00002.h5"
    same_content "$WORK/one.h5" "$WORK"/three-0000[0-2]-of-00003.h5
    expect_rc 0 mpi 2 "$HPCTRAIN" prepare --check "$WORK/three-*-of-00003.h5" --seq-len 64 --micro-batch 4
    # Training: the same loss at every step from the file, a glob, a ',' list and a TOML array.
    train 1 r1 "$WORK/one.h5"
    train 1 r1s2 "$WORK/two-*.h5"
    same_losses r1 r1s2
    train 2 r2 "$WORK/one.h5"
    train 2 r2s2 "$WORK/two-00001-of-00002.h5,$WORK/two-00000-of-00002.h5"  # listed out of order: sorted
    same_losses r2 r2s2
    printf '[data]\npath = ["%s", "%s", "%s"]\n' "$WORK"/three-0000[0-2]-of-00003.h5 >"$WORK/three.toml"
    train 2 r2s3 "" --config "$WORK/three.toml"
    same_losses r2 r2s3
    # The resolved config holds the list as a list: a TOML array of the three absolute files.
    grep -q "^path = \['$WORK/three-00000-of-00003.h5', '$WORK/three-00001-of-00003.h5', '$WORK/three-00002-of-00003.h5'\]" \
      "$WORK/r2s3/config.toml" || { grep '^path' "$WORK/r2s3/config.toml"; fail "the run's config.toml does not list the three shards as an array"; }
    train 3 r3 "$WORK/one.h5"
    train 3 r3s3 "$WORK/three-*-of-00003.h5"
    same_losses r3 r3s3
    ;;
  bpe_equal)
    in=(--input "$FORTUNES/computers" --input "$FORTUNES/science" --input "$FORTUNES/people" --tokenizer bpe
        --vocab-size 300)
    prepare 1 one.h5 "${in[@]}"
    prepare 3 three.h5 "${in[@]}"
    same_content "$WORK/one.h5" "$WORK"/three-0000[0-2]-of-00003.h5
    raw "$WORK/one.h5" /tokenizer/merges >"$WORK/merges-one.bin"
    [ -s "$WORK/merges-one.bin" ] || fail "one.h5: no BPE merges"
    for s in 0 1 2; do
      raw "$WORK/three-0000$s-of-00003.h5" /tokenizer/merges >"$WORK/merges-$s.bin"
      cmp -s "$WORK/merges-$s.bin" "$WORK/merges-one.bin" || fail "shard $s has other BPE merges than the single file"
    done
    echo "ok: 3 BPE shards = the single file"
    ;;
  cls_equal)
    # Classification (--labels-from-dirs): rows and labels of 2 and 3 shards = the single file's,
    # every shard names every label, and training gives the same losses.
    in=(--labels-from-dirs --input "$FORTUNES/de" --input "$FORTUNES/it" --input "$FORTUNES/es" --seq-len 64)
    prepare 1 one.h5 "${in[@]}"
    prepare 2 two.h5 "${in[@]}"
    prepare 3 three.h5 "${in[@]}"
    DATASETS="/train/input_ids /train/labels /val/input_ids /val/labels" \
      same_content "$WORK/one.h5" "$WORK/two-00000-of-00002.h5" "$WORK/two-00001-of-00002.h5"
    DATASETS="/train/input_ids /train/labels /val/input_ids /val/labels" \
      same_content "$WORK/one.h5" "$WORK"/three-0000[0-2]-of-00003.h5
    for s in "$WORK"/two-*.h5 "$WORK"/three-*.h5; do
      h5dump -a /label_names "$s" | grep -q '"de".*"it".*"es"' || fail "$s: label_names are not de, it, es"
    done
    train 2 c2 "$WORK/one.h5" --set model.task=classification
    train 2 c2s3 "$WORK/three-*-of-00003.h5" --set model.task=classification
    same_losses c2 c2s3
    ;;
  bad_input)
    prepare 1 byte.h5 --input "$FORTUNES/computers"
    prepare 1 bpe.h5 --input "$FORTUNES/computers" --tokenizer bpe --vocab-size 300
    prepare 1 bpe2.h5 --input "$FORTUNES/science" --tokenizer bpe --vocab-size 300
    t() { expect_rc "$1" mpi 2 "$HPCTRAIN" train --set data.path="$2" --set train.output_dir="$WORK/bad" "${TINY[@]}"; }
    t 2 "$WORK/byte.h5,$WORK/bpe.h5"
    expect_once "data.path: shard $WORK/byte.h5 has tokenizer byte, shard $WORK/bpe.h5 has bpe"
    t 2 "$WORK/bpe.h5,$WORK/bpe2.h5"
    expect_once "data.path: shard $WORK/bpe2.h5 has tokenizer merges"
    t 2 "$WORK/nothing-*.h5"
    expect_once "data.path: the pattern '$WORK/nothing-*.h5' matches no file"
    t 2 "$WORK/byte.h5,$WORK/missing.h5"
    expect_once "data.path: shard $WORK/missing.h5: file not found"
    t 1 "$WORK/byte.h5,,$WORK/bpe.h5"
    expect_once "config key 'data.path': empty entry in the path list"
    # Sharded prepare refusals: fewer input files than ranks; a label given twice.
    expect_rc 1 mpi 2 "$HPCTRAIN" prepare --input "$FORTUNES/computers" --output "$WORK/x.h5"
    expect_once "prepare: 1 input file(s) cannot make 2 shards"
    expect_rc 1 mpi 2 "$HPCTRAIN" prepare --labels-from-dirs --input "$FORTUNES/de" --input de="$FORTUNES/it" \
      --output "$WORK/y.h5"
    expect_once "label 'de' given twice"
    # An input without documents is refused as the single-file prepare refuses it, naming it.
    : >"$WORK/empty.txt"
    expect_rc 2 mpi 2 "$HPCTRAIN" prepare --input "$FORTUNES/computers" --input "$WORK/empty.txt" --output "$WORK/z.h5"
    expect_once "$WORK/empty.txt: no documents found"
    ls "$WORK"/x* "$WORK"/y* "$WORK"/z* >/dev/null 2>&1 && fail "a refused prepare left a file"
    ;;
  export_generate)
    # A checkpoint trained on 3 shards exports and generates exactly what one trained on the single
    # file does: the stored data.path lists the shards, and --data takes a glob or a list too.
    in=(--input "$FORTUNES/computers" --input "$FORTUNES/science" --input "$FORTUNES/people")
    prepare 1 one.h5 "${in[@]}"
    prepare 3 three.h5 "${in[@]}"
    final=(--set checkpoint.save_final=true --set eval.strategy=no)
    train 2 single "$WORK/one.h5" "${final[@]}"
    train 2 sharded "$WORK/three-*-of-00003.h5" "${final[@]}"
    ck() { echo "$WORK/$1/checkpoints/ckpt-00000008.h5"; }
    gen() { expect_rc 0 "$HPCTRAIN" generate --checkpoint "$(ck "$1")" --prompt "The " --max-new-tokens 24 --temperature 0 "${@:2}"; }
    for run in single sharded; do
      expect_rc 0 "$HPCTRAIN" export --checkpoint "$(ck $run)" --output "$WORK/hf-$run"
      gen $run --print-ids; grep -v 'tokens/s' "$WORK/out.txt" | grep -v '^\[' >"$WORK/gen-$run.txt"
      [ -s "$WORK/gen-$run.txt" ] || fail "$run: generate printed no text"
    done
    for f in model.safetensors config.json; do
      cmp -s "$WORK/hf-single/$f" "$WORK/hf-sharded/$f" || fail "exported $f differs between the single-file and the 3-shard run"
    done
    ls "$WORK/hf-sharded" | grep -q tokenizer || fail "the 3-shard export has no tokenizer"
    cmp -s "$WORK/gen-single.txt" "$WORK/gen-sharded.txt" || fail "generate differs: $(cat "$WORK/gen-single.txt") / $(cat "$WORK/gen-sharded.txt")"
    echo "ok: export and generate of the 3-shard checkpoint = the single file's: $(cat "$WORK/gen-sharded.txt")"
    gen sharded --data "$WORK/three-*-of-00003.h5"
    gen sharded --data "$WORK/three-00000-of-00003.h5,$WORK/three-00001-of-00003.h5,$WORK/three-00002-of-00003.h5"
    expect_rc 2 "$HPCTRAIN" generate --checkpoint "$(ck sharded)" --prompt "The " --data "$WORK/three-00000-of-00003.h5"
    expect_once "holds other data than checkpoint"
    ;;
  *) fail "unknown case" ;;
esac
echo "PASS($CASE)"
