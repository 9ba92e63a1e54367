#!/usr/bin/env bash
# usage: run.sh HPCTRAIN MAKE_BAD_FILES MPIEXEC [MPIEXEC_FLAGS...]
set -u
bin=$1; make_bad=$2; mpiexec=$3; shift 3
flags=("$@")
work=$(mktemp -d /tmp/ht_data_cli_XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
np2() { timeout 180 "$mpiexec" -np 2 "${flags[@]}" "$bin" "$@"; }
np1() { timeout 180 "$bin" "$@"; }  # prepare under mpirun writes shards (tests/shards_cli); these want one file

# --- prepare: LM with the byte tokenizer on an English fortune file
fort=/usr/share/games/fortunes
np1 prepare --input $fort/fortunes --input $fort/pets --output "$work/lm.h5" > "$work/prep.log" 2>&1 \
  || { cat "$work/prep.log"; fail "prepare (byte) exited non-zero"; }
[ -f "$work/lm.h5" ] || fail "prepare wrote no file"
ls "$work"/lm.h5.tmp-* >/dev/null 2>&1 && fail "temporary file left behind"
h5dump -H "$work/lm.h5" > "$work/lm.hdr" || fail "h5dump -H failed"
for want in 'GROUP "train"' 'GROUP "val"' 'DATASET "tokens"' 'DATASET "doc_offsets"' 'GROUP "tokenizer"' \
            'ATTRIBUTE "format"' 'ATTRIBUTE "format_version"' 'ATTRIBUTE "vocab_size"' 'ATTRIBUTE "tokenizer"' \
            'ATTRIBUTE "num_tokens"' 'ATTRIBUTE "pad_id"' 'ATTRIBUTE "eos_id"' 'H5T_STD_U16LE' 'H5T_STD_U64LE'; do
  grep -q "$want" "$work/lm.hdr" || fail "h5dump -H of the LM file lacks $want"
done
h5dump -p -H "$work/lm.h5" | grep -q FLETCHER32 || fail "h5dump shows no Fletcher32 filter"
np2 prepare --check "$work/lm.h5" --seq-len 64 --micro-batch 4 > "$work/check.log" 2>&1 \
  || { cat "$work/check.log"; fail "--check of a freshly prepared file failed"; }

# --- prepare: BPE and language-ID classification
np1 prepare --input $fort/fortunes --output "$work/bpe.h5" --tokenizer bpe --vocab-size 400 > "$work/bpe.log" 2>&1 \
  || { cat "$work/bpe.log"; fail "prepare (bpe) exited non-zero"; }
h5dump -H "$work/bpe.h5" | grep -q 'DATASET "merges"' || fail "BPE file lacks /tokenizer/merges"
np1 prepare --labels-from-dirs --input $fort/de --input $fort/it --input en=$fort --seq-len 64 \
  --output "$work/lang.h5" > "$work/lang.log" 2>&1 || { cat "$work/lang.log"; fail "prepare (classification) failed"; }
h5dump -H "$work/lang.h5" > "$work/lang.hdr"
for want in 'DATASET "input_ids"' 'DATASET "labels"' 'ATTRIBUTE "label_names"' 'ATTRIBUTE "seq_len"'; do
  grep -q "$want" "$work/lang.hdr" || fail "h5dump -H of the classification file lacks $want"
done
np2 prepare --check "$work/lang.h5" --micro-batch 4 > "$work/check2.log" 2>&1 \
  || { cat "$work/check2.log"; fail "--check of the classification file failed"; }

# --- prepare errors: missing input, no output left behind
np2 prepare --input "$work/no-such-dir" --output "$work/x.h5" > "$work/err.log" 2>&1
rc=$?
{ [ $rc -eq 2 ] && grep -q "no-such-dir: input not found" "$work/err.log"; } || { cat "$work/err.log"; fail "missing input: rc=$rc, expected 2"; }
[ -e "$work/x.h5" ] && fail "failed prepare left $work/x.h5"

# --- every bad file through the real binary, -np 2: message + non-zero exit, no hang (timeout)
"$make_bad" "$work" || fail "make_bad_files failed"
# Every bad file is a data error: exit code 2 exactly (a crash after the message would not pass).
check_bad() {  # file, expected message fragment
  local f=$1 msg=$2 rc
  np2 prepare --check "$work/$f" --seq-len 8 --micro-batch 2 > "$work/$f.log" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$msg" "$work/$f.log"; then
    echo "--- $f (rc=$rc)"; cat "$work/$f.log"; fail "bad file $f: expected exit code 2 and '$msg'"
  else
    echo "ok: $f -> rc=$rc: $(grep -m1 -- "$msg" "$work/$f.log")"
  fi
}
check_bad missing.h5 "missing.h5: file not found"
check_bad nothdf5.h5 "nothdf5.h5: not an HDF5 file"
check_bad truncated.h5 "truncated.h5"
check_bad names.h5 "/train/tokens is missing"
check_bad dtype.h5 "dtype.h5:/train/tokens: dtype float32"
check_bad twod.h5 "twod.h5:/train/tokens: shape \[100, 10\] has 2 dimension(s), expected 1-D"
check_bad zero.h5 "zero.h5:/train/tokens: zero tokens"
check_bad few.h5 "fewer samples than the 2 ranks"
check_bad vocab.h5 "token id 4000 >= vocab_size 258"
check_bad labels.h5 "outside label_names"
check_bad corrupt.h5 "checksum mismatch in $work/corrupt.h5:/train/tokens rows 640..703"
check_bad huge_vocab.h5 "huge_vocab.h5: root attribute vocab_size = 1099511627776 is outside \[1, 2^32\]"
check_bad attr64.h5 "attr64.h5: attribute 'vocab_size' holds 64 values, expected one"
check_bad offsets.h5 "offsets.h5:/train/doc_offsets: offset 2 (500) is below offset 1 (900)"
check_bad huge_dims.h5 "huge_dims.h5: dataset '/train/tokens' declares 2199023255552 bytes but the file has"
check_bad precision.h5 "precision.h5:/train/tokens: integer datatype with precision 12"
# A valid file behind a userblock reads like any other (chunk addresses are relative to it).
np2 prepare --check "$work/userblock.h5" --seq-len 8 --micro-batch 2 > "$work/userblock.log" 2>&1 \
  || { cat "$work/userblock.log"; fail "a valid dataset with a 512-byte userblock was refused"; }

# --- `hpctrain inspect` (dataset files go to data::describe): verifies every checksum
np2 inspect "$work/good.h5" > "$work/inspect.log" 2>&1 && grep -q "checksums ok" "$work/inspect.log" \
  || { cat "$work/inspect.log"; fail "inspect of a good dataset"; }
np2 inspect "$work/corrupt.h5" > "$work/inspect2.log" 2>&1
rc=$?
{ [ $rc -eq 2 ] && grep -q "checksum mismatch in $work/corrupt.h5:/train/tokens rows 640..703" "$work/inspect2.log"; } \
  || { cat "$work/inspect2.log"; fail "inspect of a corrupted dataset: rc=$rc"; }

# --- the same faults met by `hpctrain train` (one epoch of a tiny model), -np 2
check_train() {  # file, expected message fragment
  local f=$1 msg=$2 rc
  np2 train --set data.path="$work/$f" --set model.seq_len=8 --set model.n_layer=1 --set model.d_model=32 \
    --set model.n_head=2 --set train.micro_batch_size=2 --set train.epochs=1 --set train.max_steps=0 \
    --set eval.strategy=no --set train.output_dir="$work/run-$f" \
    > "$work/train-$f.log" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$msg" "$work/train-$f.log"; then
    echo "--- train $f (rc=$rc)"; tail -20 "$work/train-$f.log"; fail "train on $f: expected exit code 2 and '$msg'"
  else
    echo "ok: train $f -> rc=$rc"
  fi
}
check_train missing.h5 "missing.h5: file not found"
check_train dtype.h5 "dtype float32"
check_train few.h5 "fewer samples than the 2 ranks"
check_train vocab.h5 "token id 4000 >= vocab_size 258"
check_train corrupt.h5 "checksum mismatch in $work/corrupt.h5:/train/tokens rows 640..703"

echo "$failures failure(s)"
[ $failures -eq 0 ]
