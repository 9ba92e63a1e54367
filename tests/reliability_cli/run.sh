#!/usr/bin/env bash
# Failure injection through the real binary under mpirun (1 and 2 ranks): each bad input ends with
# its exact exit code and one message naming the problem and the file or key, once per job, with
# no rank hanging and no checkpoint that existed before touched. Usage: run.sh CASE.
# Environment from ctest: HPCTRAIN, MPIEXEC, MPIEXEC_FLAGS (a ;-list), OpenMPI root variables.
set -uo pipefail
source "$(dirname "$0")/../support/case.sh" reliability "$1"

# expect RC NAME CMD...: runs CMD (output in $WORK/NAME.log), requires exit code RC exactly.
expect() {
  local want=$1 name=$2; shift 2
  "$@" >"$WORK/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && { tail -20 "$WORK/$name.log"; fail "$name: timed out (a rank hung?)"; }
  [ "$rc" -eq "$want" ] || { tail -30 "$WORK/$name.log"; fail "$name: exit code $rc, expected $want"; }
}
# has NAME TEXT: the log holds TEXT; once NAME TEXT: exactly one line of the log holds it.
has() { grep -q -- "$2" "$WORK/$1.log" || { tail -20 "$WORK/$1.log"; fail "$1.log lacks '$2'"; }; }
once() {
  local n; n=$(grep -c -- "$2" "$WORK/$1.log")
  [ "$n" -eq 1 ] || { cat "$WORK/$1.log"; fail "$1.log holds '$2' $n times, expected once per job"; }
  note "$1: exit as expected, one line: $(grep -m1 -- "$2" "$WORK/$1.log" | sed 's/^\[[^]]*\] //')"
}

# exactly NAME TEXT: one line of the log holds TEXT (a fixed string, not a pattern), and no backtrace.
exactly() {
  local n; n=$(grep -c -F -- "$2" "$WORK/$1.log")
  [ "$n" -eq 1 ] || { cat "$WORK/$1.log"; fail "$1.log holds '$2' $n times, expected once per job"; }
  grep -qi "backtrace\|terminate called\|frame #" "$WORK/$1.log" && { cat "$WORK/$1.log"; fail "$1: a backtrace"; }
  note "$1: exit as expected, one line: $(grep -m1 -F -- "$2" "$WORK/$1.log" | sed 's/^\[[^]]*\] //')"
}

TINY=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
      --set train.micro_batch_size=4 --set train.threads=1 --set eval.strategy=no --set train.max_steps=6)
train() {  # train NP OUTDIR ARGS...
  local np=$1 out=$2; shift 2
  mpi "$np" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/$out" "${TINY[@]}" "$@"
}
ckpt() { echo "$WORK/$1/checkpoints/$(printf 'ckpt-%08d.h5' "$2")"; }
# Fingerprint of every checkpoint file under a directory (name + sha256), to prove nothing changed.
fingerprint() { (cd "$1" && find . -name 'ckpt-*.h5' -type f -print0 | sort -z | xargs -0 -r sha256sum); }

case "$CASE" in
  config)
    lm_data
    mkdir -p "$WORK/a-dir"
    for np in 1 2; do
      expect 1 cfgdir$np mpi "$np" "$HPCTRAIN" train --config "$WORK/a-dir"
      once cfgdir$np "config file $WORK/a-dir: not a regular file (it is a directory)"
    done
    expect 1 dmodel train 2 run --set model.d_model=4000000 --set model.n_head=1
    once dmodel "config key 'model.d_model'"
    has dmodel "GiB of memory"
    expect 1 vocab train 2 run --set model.vocab_size=4294967297
    once vocab "config key 'model.vocab_size'"
    expect 1 maxseq train 1 run --set model.max_seq_len=40000000000
    once maxseq "config key 'model.max_seq_len'"
    expect 1 batch train 2 run --set train.micro_batch_size=900000000
    once batch "config key 'train.micro_batch_size'"
    expect 1 enum train 2 run --set train.autocast=fp8
    once enum "config key 'train.autocast': 'fp8' is not one of"
    ;;

  commands)
    expect 1 subcommand "$HPCTRAIN" trian --config x.toml
    once subcommand "unknown subcommand 'trian' (the subcommands are: "
    expect 1 subcommand2 mpi 2 "$HPCTRAIN" evaluate
    once subcommand2 "unknown subcommand 'evaluate'"
    printf 'In the beginning was the word.\n\nAnd the word was with the file.\n' >"$WORK/same.txt"
    cp "$WORK/same.txt" "$WORK/same.orig"
    expect 1 same mpi 2 "$HPCTRAIN" prepare --input "$WORK/same.txt" --output "$WORK/same.txt"
    once same "prepare: --output $WORK/same.txt is also an input"
    cmp -s "$WORK/same.txt" "$WORK/same.orig" || fail "prepare changed its input"
    mkdir -p "$WORK/corpus" && cp "$WORK/same.orig" "$WORK/corpus/a.txt"
    expect 1 same_dir "$HPCTRAIN" prepare --input "$WORK/corpus" --output "$WORK/corpus/a.txt"
    once same_dir "is also an input ($WORK/corpus/a.txt)"
    ;;

  data)
    # Bad dataset files (tests/data_cli/make_bad_files.cpp) through `train` on 1 and 2 ranks; the
    # data_cli suite runs the same files through `prepare --check`.
    "$MAKE_BAD_FILES" "$WORK" || fail "make_bad_files"
    for np in 1 2; do
      for spec in "huge_vocab.h5|root attribute vocab_size = 1099511627776 is outside" \
                  "attr64.h5|attribute 'vocab_size' holds 64 values, expected one" \
                  "offsets.h5|/train/doc_offsets: offset 2 (500) is below offset 1 (900)" \
                  "huge_dims.h5|dataset '/train/tokens' declares 2199023255552 bytes" \
                  "precision.h5|/train/tokens: integer datatype with precision 12"; do
        f=${spec%%|*} msg=${spec#*|}
        expect 2 "${f%.h5}_$np" mpi "$np" "$HPCTRAIN" train --set data.path="$WORK/$f" \
          --set train.output_dir="$WORK/run-$f-$np" "${TINY[@]}" --set model.seq_len=8
        once "${f%.h5}_$np" "$msg"
      done
    done
    ;;

  eval_checkpoint)
    lm_data
    expect 0 run train 1 run --set model.n_layer=4
    local_ckpt=$(ckpt run 6)
    # eval needs no writable output directory (it writes nothing), from any working directory: the
    # checkpoint stores an absolute data.path
    expect 0 eval_ro bash -c "cd / && timeout 300 $MPIEXEC -np 2 ${MPIFLAGS[*]} $HPCTRAIN eval --checkpoint $local_ckpt \
      --set train.output_dir=/proc/no-such-dir/x"
    has eval_ro "eval_loss"
    # a smaller model than the checkpoint's is refused, not truncated
    expect 1 eval_small mpi 2 "$HPCTRAIN" eval --checkpoint "$local_ckpt" --set model.n_layer=2
    once eval_small "does not fit the model: it has parameter 'blocks.2."
    # a dataset passed as a checkpoint
    expect 2 eval_dataset mpi 2 "$HPCTRAIN" eval --checkpoint "$WORK/lm.h5"
    once eval_dataset "lm.h5: not an hpctrain checkpoint"
    ;;

  resume)
    lm_data
    expect 0 base train 2 base --set local_sgd.enabled=true --set local_sgd.steps=4 --set checkpoint.every_steps=2
    before=$(fingerprint "$WORK/base/checkpoints")
    # per-rank AdamW moments (local SGD) resumed by a run that averages gradients every step
    expect 1 moments train 2 base --resume --set train.max_steps=8
    once moments "keeps the optimizer moments per rank"
    # a wrong global batch, a wrong width, a missing file, a damaged file
    expect 1 batch train 2 base --resume --set local_sgd.enabled=true --set train.micro_batch_size=8
    once batch "global batch"
    expect 1 width train 2 base --resume --set local_sgd.enabled=true --set model.d_model=128
    once width "has shape"
    expect 2 missing train 2 base --resume-from "$WORK/nope.h5"
    once missing "nope.h5"
    # other data under the same path
    cp "$WORK/lm.h5" "$WORK/lm.orig"
    "$HPCTRAIN" prepare --input "$FORTUNES/literature" --output "$WORK/lm.h5" >/dev/null 2>&1 || fail "prepare 2"
    expect 1 other_data train 2 base --resume --set local_sgd.enabled=true --set local_sgd.steps=4
    once other_data "was trained on other data than data.path holds now"
    [ "$(fingerprint "$WORK/base/checkpoints")" = "$before" ] || fail "a failed resume changed a checkpoint file"
    note "after 6 failed resumes every checkpoint file is still there, byte-identical"
    expect 0 allowed train 2 base --resume --set local_sgd.enabled=true --set local_sgd.steps=4 \
      --set checkpoint.allow_dataset_change=true --set train.max_steps=8
    has allowed "resuming .* on other data"
    cp "$WORK/lm.orig" "$WORK/lm.h5"
    # a stray name with 20+ digits in the checkpoint directory is not a checkpoint
    touch "$WORK/base/checkpoints/ckpt-123456789012345678901234.h5"
    expect 0 stray train 2 base --resume --set local_sgd.enabled=true --set local_sgd.steps=4 \
      --set checkpoint.allow_dataset_change=true --set train.max_steps=10
    has stray "resumed at step 8"
    ;;

  run_dir)
    lm_data
    # A job holding the directory and a second job on the same directory. The first is held at step 2
    # until a signal (HPCTRAIN_TEST_HOLD_AT_STEP), so it still holds the directory however slowly the
    # second one starts: the test waits for events, not for time. Released with SIGUSR1 (checkpoint,
    # exit 75) and resumed, it then finishes with its checkpoints intact.
    HPCTRAIN_TEST_HOLD_AT_STEP=2 train 2 shared --set train.max_steps=4 --set checkpoint.every_steps=1 \
      >"$WORK/first.log" 2>&1 &
    first=$!
    for i in $(seq 1 3000); do
      grep -q "holding at step 2" "$WORK/first.log" 2>/dev/null && break
      kill -0 $first 2>/dev/null || break
      sleep 0.1
    done
    grep -q "holding at step 2" "$WORK/first.log" 2>/dev/null || {
      kill $first 2>/dev/null; cat "$WORK/first.log"
      fail "the first job never held at step 2 (waited 300 s for 'holding at step 2' in first.log)"; }
    expect 1 second train 2 shared --set train.max_steps=4
    once second "train.output_dir $WORK/shared is in use by another run (pid "
    # Both ranks of the first job (each holds until its own signal; one not yet holding returns at once).
    pkill -USR1 -f "^$HPCTRAIN train .*train.output_dir=$WORK/shared( |$)" || fail "no rank of the first job to signal"
    wait $first
    rc=$?
    [ $rc -eq 75 ] || { tail -30 "$WORK/first.log"; fail "the first job: exit code $rc after SIGUSR1, expected 75"; }
    for s in 1 2; do [ -f "$(ckpt shared $s)" ] || fail "the first job lost its checkpoint $s"; done
    expect 0 first_resumed train 2 shared --set train.max_steps=4 --set checkpoint.every_steps=1 --resume
    has first_resumed "resumed at step 2"
    [ -f "$(ckpt shared 4)" ] || fail "the first job wrote no final checkpoint after its resume"
    note "the first job held the directory against the second, then finished with its checkpoints intact"
    # rotation after a fallback from a damaged newest checkpoint keeps the good file it resumed from
    expect 0 rot train 1 rot --set checkpoint.every_steps=2 --set checkpoint.keep=2 --set log.every_steps=1
    python3 - "$(ckpt rot 6)" <<'PY' || fail "damage"
import sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); d[len(d) // 2] ^= 0x5A; open(p, "wb").write(d)
PY
    # the resumed run saves at step 5 and dies at step 6, while the damaged step-6 file is still there
    HPCTRAIN_TEST_FAIL_RANK=0 HPCTRAIN_TEST_FAIL_STEP=6 expect 3 rot_resume train 1 rot --resume \
      --set checkpoint.every_steps=1 --set checkpoint.keep=2 --set log.every_steps=1
    has rot_resume "falling back to $(ckpt rot 4)"
    for s in 4 5 6; do [ -f "$(ckpt rot $s)" ] || fail "checkpoint $s is gone (rotation after a fallback)"; done
    "$HPCTRAIN" inspect "$(ckpt rot 4)" >/dev/null 2>&1 || fail "the good step-4 checkpoint does not verify"
    note "after the fallback from the damaged step-6 file, the good step-4 file the run resumed from is kept"
    expect 0 rot_final train 1 rot --resume --set checkpoint.every_steps=1 --set checkpoint.keep=2 --set log.every_steps=1
    has rot_final "resumed at step 5"
    "$HPCTRAIN" inspect "$(ckpt rot 6)" >/dev/null 2>&1 || fail "the step-6 checkpoint was not replaced by a good one"
    # metrics.jsonl holds each step once after a crash-resume, and its training seconds run on across
    # both resumes (from the checkpoint's train_seconds): every line adds exactly its own step's time.
    # The final checkpoint records the same total (hpctrain inspect prints it).
    "$HPCTRAIN" inspect "$(ckpt rot 6)" >"$WORK/inspect6.txt" 2>&1 || fail "inspect of the final checkpoint"
    python3 - "$WORK/rot/metrics.jsonl" "$WORK/inspect6.txt" <<'PY' || fail "metrics lines"
import collections, json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
steps = [r["step"] for r in rows]
dup = [s for s, n in collections.Counter(steps).items() if n > 1]
assert not dup, f"steps logged twice: {dup}"
assert steps == sorted(steps) and steps == list(range(1, 7)), steps
total = 0.0
for r in rows:
    total += r["step_seconds"]
    assert abs(r["train_seconds"] - total) <= 1e-9 * total, (r["step"], r["train_seconds"], total)
m = re.search(r"step 6, ([0-9.]+) training seconds", open(sys.argv[2]).read())
assert m and abs(float(m.group(1)) - total) < 1e-3, (m and m.group(0), total)
print(f"--- metrics.jsonl: steps {steps}, each once; train_seconds the running sum of step_seconds across "
      f"2 resumes ({total:.3f} s), the final checkpoint's the same")
PY
    ;;

  interop)
    # export, model.init_from and generate (docs/interop.md): each bad input named, nothing half-written
    lm_data
    expect 0 run train 1 run
    good=$(ckpt run 6)
    expect 0 export "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/hf"
    [ -f "$WORK/hf/model.safetensors" ] && [ -f "$WORK/hf/config.json" ] || fail "export wrote no model"
    expect 1 export_again "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/hf"
    once export_again "export: --output $WORK/hf exists and is not empty; pass --force to replace it"
    expect 0 export_force mpi 2 "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/hf" --force
    cp "$good" "$WORK/damaged.h5"
    python3 - "$WORK/damaged.h5" <<'PY' || fail "damage"
import sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); d[len(d) // 2] ^= 0x5A; open(p, "wb").write(d)
PY
    expect 2 export_damaged mpi 2 "$HPCTRAIN" export --checkpoint "$WORK/damaged.h5" --output "$WORK/hf2"
    once export_damaged "$WORK/damaged.h5"
    [ ! -e "$WORK/hf2" ] && [ -z "$(ls -d "$WORK"/hf2.* 2>/dev/null)" ] || fail "a failed export left files behind"
    note "a failed export leaves no output directory and no temporary one"
    expect 2 generate_damaged "$HPCTRAIN" generate --checkpoint "$WORK/damaged.h5" --prompt "The "
    once generate_damaged "$WORK/damaged.h5"
    expect 1 generate_long mpi 2 "$HPCTRAIN" generate --checkpoint "$good" --prompt "The " --max-new-tokens 61
    once generate_long "--max-new-tokens 61: the prompt (4 tokens) + 61 new tokens exceed the model's position table (model.max_seq_len = 64); at most 60 new tokens fit"
    expect 0 generate "$HPCTRAIN" generate --checkpoint "$good" --prompt "The " --max-new-tokens 60 --top-k 5 --top-p 0.9
    # model.init_from: a directory without config.json, a missing path, a model of another shape
    mkdir -p "$WORK/empty"
    expect 1 init_empty train 2 init --set model.init_from="$WORK/empty"
    once init_empty "model.init_from $WORK/empty: no $WORK/empty/config.json"
    expect 1 init_missing train 2 init --set model.init_from="$WORK/nope"
    once init_missing "model.init_from $WORK/nope: not found"
    expect 1 init_layers train 2 init --set model.init_from="$WORK/hf" --set model.n_layer=4
    once init_layers "model.init_from $WORK/hf: n_layer is 2 in config.json, 4 in the config"
    expect 1 init_ckpt train 2 init --set model.init_from="$good" --set model.d_model=128
    once init_ckpt "model.init_from $good: model.d_model is 64 in the checkpoint, 128 in the config"
    expect 2 init_damaged train 2 init --set model.init_from="$WORK/damaged.h5"
    once init_damaged "$WORK/damaged.h5"
    rm "$WORK/hf/model.safetensors"
    expect 1 init_noweights train 1 init --set model.init_from="$WORK/hf"
    once init_noweights "model.init_from $WORK/hf: no $WORK/hf/model.safetensors"
    # from a checkpoint, then resume: resume wins over init_from
    expect 0 init_ok train 2 init --set model.init_from="$good" --set train.max_steps=2
    has init_ok "initial weights from $good (hpctrain checkpoint)"
    expect 0 init_resume train 2 init --set model.init_from="$WORK/nope" --resume --set train.max_steps=4
    has init_resume "model.init_from $WORK/nope not used: the run resumes from a checkpoint"
    has init_resume "resumed at step 2"
    ;;

  sampling)
    # train.sample_every_steps is passive: the final averaged model is bitwise the same with it on or off
    lm_data
    expect 0 plain train 2 plain --set local_sgd.enabled=true --set local_sgd.steps=2 --set model.dropout=0.1
    expect 0 sampled train 2 sampled --set local_sgd.enabled=true --set local_sgd.steps=2 --set model.dropout=0.1 \
      --set train.sample_every_steps=2 --set train.sample_temperature=1.0
    has sampled "sample at step 2: \"The "
    h5diff "$(ckpt plain 6)" "$(ckpt sampled 6)" /model /model >"$WORK/h5diff.log" 2>&1 \
      || { cat "$WORK/h5diff.log"; fail "sampling changed the trained model"; }
    note "3 samples logged; /model of both runs identical (h5diff), dropout and local SGD on"
    ;;

  export_force)
    # --force replaces a previous export, never a run's work: the checkpoint being exported, a
    # directory above it, other checkpoints or pointers, a run directory. Nothing changes on refusal.
    lm_data
    expect 0 run train 1 run --set checkpoint.every_steps=3
    good=$(ckpt run 6)
    before=$(fingerprint "$WORK/run"); latest=$(cat "$WORK/run/checkpoints/latest")
    for np in 1 2; do
      expect 1 ckdir$np mpi $np "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/run/checkpoints" --force
      exactly ckdir$np "export: --force refused for --output $WORK/run/checkpoints: it holds the checkpoint being exported ($good); --force replaces only a previous export, so nothing was changed"
    done
    expect 1 rundir "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/run/" --force
    exactly rundir "--force refused for --output $WORK/run: it holds the checkpoint being exported"
    expect 1 above "$HPCTRAIN" export --checkpoint "$good" --output "$WORK" --force
    exactly above "--force refused for --output $WORK: it holds the checkpoint being exported"
    cp -r "$WORK/run" "$WORK/other"
    expect 1 other_run mpi 2 "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/other" --force
    exactly other_run "--force refused for --output $WORK/other: it is a training run directory (checkpoints, config.toml, metrics.jsonl)"
    expect 1 other_ckpts "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/other/checkpoints" --force
    exactly other_ckpts "--force refused for --output $WORK/other/checkpoints: it holds checkpoints (ckpt-00000003.h5, ckpt-00000006.h5, latest)"
    mkdir "$WORK/pointer" && cp "$WORK/run/checkpoints/latest" "$WORK/pointer/"
    expect 1 pointer "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/pointer" --force
    exactly pointer "--force refused for --output $WORK/pointer: it holds checkpoints (latest)"
    mkdir "$WORK/data" && cp "$WORK/lm.h5" "$WORK/data/"
    expect 1 data "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/data" --force
    exactly data "--force refused for --output $WORK/data: it holds HDF5 files, which an export never does (lm.h5)"
    [ -f "$WORK/data/lm.h5" ] || fail "a refused export removed the dataset"
    [ "$(fingerprint "$WORK/run")" = "$before" ] && [ "$(cat "$WORK/run/checkpoints/latest")" = "$latest" ] \
      || fail "a refused export changed the run's checkpoints"
    [ -f "$WORK/pointer/latest" ] && [ -f "$WORK/other/metrics.jsonl" ] || fail "a refused export removed files"
    [ -z "$(ls -d "$WORK"/*.tmp-* "$WORK"/*/*.tmp-* "$WORK"/*.old-* 2>/dev/null)" ] || fail "temporary directories left"
    note "after 8 refused exports every checkpoint, pointer and dataset is still there, byte-identical"
    # what --force is for: a previous export
    expect 0 first "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/hf"
    expect 0 replace mpi 2 "$HPCTRAIN" export --checkpoint "$good" --output "$WORK/hf" --force
    [ -f "$WORK/hf/model.safetensors" ] || fail "the replaced export has no model"
    ;;

  export_mode)
    # The exported directory is readable by others like any directory mkdir makes (0755 under the
    # umask), not 0700 from the temporary directory it was written in; its files 0644 under the umask.
    lm_data
    expect 0 run train 1 run
    good=$(ckpt run 6)
    modes() { (cd "$1" && stat -c '%a %n' . *); }
    for spec in "022 755 644" "027 750 640"; do
      read -r mask dir_mode file_mode <<<"$spec"
      for force in "" --force; do
        expect 0 "mode$mask$force" bash -c 'umask "$1" && exec "$2" export --checkpoint "$3" --output "$4" $5' _ \
          "$mask" "$HPCTRAIN" "$good" "$WORK/hf$mask" "$force"
        modes "$WORK/hf$mask" >"$WORK/modes.txt"
        awk -v d="$dir_mode" -v f="$file_mode" '($2 == "." && $1 != d) || ($2 != "." && $1 != f) {bad = 1} END {exit bad}' \
          "$WORK/modes.txt" || { cat "$WORK/modes.txt"; fail "umask $mask: modes are not $dir_mode / $file_mode"; }
      done
      note "umask $mask: export directory $dir_mode, files $file_mode (also after --force)"
    done
    ;;

  damaged_offsets)
    # A damaged chunk of /train/doc_offsets (read and verified by HDF5 at open): the message names the file.
    "$MAKE_BAD_FILES" "$WORK" || fail "make_bad_files"
    bad="$WORK/offsets_chunk.h5"
    msg="$bad: dataset '/train/doc_offsets': read failed (checksum mismatch or damaged data)"
    for np in 1 2; do
      expect 2 train$np mpi "$np" "$HPCTRAIN" train --set data.path="$bad" --set train.output_dir="$WORK/run$np" \
        "${TINY[@]}" --set model.seq_len=8
      exactly train$np "$msg"
      expect 2 inspect$np mpi "$np" "$HPCTRAIN" inspect "$bad"
      exactly inspect$np "$msg"
    done
    ;;

  generate_bounds)
    # --max-new-tokens near 2^63 and beyond int64 are refused up front naming the option; a tiny
    # temperature is greedy in the limit; a negative, NaN or infinite one is refused.
    lm_data
    expect 0 run train 1 run
    good=$(ckpt run 6)
    for np in 1 2; do
      expect 1 max$np mpi $np "$HPCTRAIN" generate --checkpoint "$good" --prompt "The " --max-new-tokens 9223372036854775807
      exactly max$np "--max-new-tokens 9223372036854775807: the prompt (4 tokens) + 9223372036854775807 new tokens exceed the model's position table (model.max_seq_len = 64); at most 60 new tokens fit"
      expect 1 digits$np mpi $np "$HPCTRAIN" generate --checkpoint "$good" --prompt "The " \
        --max-new-tokens 12345678901234567890123
      exactly digits$np "--max-new-tokens: 12345678901234567890123 does not fit a 64-bit integer (at most 9223372036854775807)"
    done
    gen=(generate --checkpoint "$good" --prompt "The " --max-new-tokens 40 --ignore-eos --print-ids)
    expect 0 greedy "$HPCTRAIN" "${gen[@]}" --temperature 0
    for t in 1e-300 4.9e-324; do
      expect 0 tiny$t mpi 2 "$HPCTRAIN" "${gen[@]}" --temperature "$t" --top-k 5 --top-p 0.9
      [ "$(grep '^ids' "$WORK/tiny$t.log")" = "$(grep '^ids' "$WORK/greedy.log")" ] \
        || { cat "$WORK/tiny$t.log" "$WORK/greedy.log"; fail "--temperature $t differs from greedy"; }
    done
    note "--temperature 1e-300 and 4.9e-324 generate the greedy tokens"
    for t in -1 nan inf; do
      expect 1 temp$t mpi 2 "$HPCTRAIN" "${gen[@]}" --temperature "$t"
      exactly temp$t "--temperature $t must be a finite number >= 0 (0 = greedy)"
    done
    ;;

  prompt_file)
    # --prompt-file: the way to pass long prompts; a missing one is named. A --prompt too long for
    # Open MPI's singleton start is refused before MPI_Init, pointing at --prompt-file.
    lm_data
    expect 0 run train 1 run
    good=$(ckpt run 6)
    printf 'The ' >"$WORK/prompt.txt"
    gen=(generate --checkpoint "$good" --max-new-tokens 20 --temperature 0 --print-ids)
    expect 0 inline "$HPCTRAIN" "${gen[@]}" --prompt "The "
    expect 0 file mpi 2 "$HPCTRAIN" "${gen[@]}" --prompt-file "$WORK/prompt.txt"
    [ "$(grep '^ids' "$WORK/file.log")" = "$(grep '^ids' "$WORK/inline.log")" ] || fail "--prompt-file differs from --prompt"
    for np in 1 2; do
      expect 2 missing$np mpi $np "$HPCTRAIN" "${gen[@]}" --prompt-file "$WORK/nope.txt"
      exactly missing$np "generate: --prompt-file $WORK/nope.txt: No such file or directory"
    done
    expect 2 dir "$HPCTRAIN" "${gen[@]}" --prompt-file "$WORK"
    exactly dir "generate: --prompt-file $WORK: is a directory"
    expect 1 none mpi 2 "$HPCTRAIN" "${gen[@]}"
    exactly none "generate: give the text to continue with --prompt TEXT or --prompt-file FILE"
    head -c 300000 /dev/zero | tr '\0' a >"$WORK/long.txt"
    expect 1 long_file "$HPCTRAIN" "${gen[@]}" --prompt-file "$WORK/long.txt"
    exactly long_file "the prompt (300000 tokens)"
    limit=$((32 * $(getconf PAGESIZE)))
    expect 1 long_arg "$HPCTRAIN" "${gen[@]}" --prompt "$(head -c 131000 "$WORK/long.txt")"
    exactly long_arg "(131000 of them in --prompt), more than the $limit bytes Open MPI can hand to its helper orted when hpctrain is started without mpirun; pass the prompt with --prompt-file FILE instead"
    grep -q "ORTE\|singleton application\|Argument list too long" "$WORK/long_arg.log" \
      && fail "Open MPI's own messages on a long --prompt"
    ;;

  init_from_types)
    # A config.json field of the wrong JSON type: a malformed file (exit 2) named with the field.
    lm_data
    expect 0 run train 1 run
    expect 0 export "$HPCTRAIN" export --checkpoint "$(ckpt run 6)" --output "$WORK/hf"
    i=0
    for spec in 'n_embd|"64"|field "n_embd" is a string ("64"), expected an integer' \
                'tie_word_embeddings|"true"|field "tie_word_embeddings" is a string ("true"), expected true or false' \
                'layer_norm_epsilon|[1e-5]|field "layer_norm_epsilon" is an array ([1e-05]), expected a number' \
                'model_type|2|field "model_type" is a number (2), expected a string'; do
      IFS='|' read -r field value msg <<<"$spec"
      i=$((i + 1)); dir="$WORK/hf$i"
      cp -r "$WORK/hf" "$dir"
      python3 - "$dir/config.json" "$field" "$value" <<'PY' || fail "edit config.json"
import json, sys
path, field, value = sys.argv[1:]
j = json.load(open(path)); j[field] = json.loads(value); json.dump(j, open(path, "w"), indent=2)
PY
      for np in 1 2; do
        expect 2 "type${i}_$np" train $np "init$i" --set model.init_from="$dir"
        exactly "type${i}_$np" "model.init_from $dir: $dir/config.json: $msg"
      done
      [ ! -e "$WORK/init$i/checkpoints" ] || [ -z "$(ls "$WORK/init$i/checkpoints")" ] || fail "a refused run wrote checkpoints"
    done
    ;;

  metrics_file)
    # log.metrics_file is a name inside train.output_dir: a path is refused before anything is written.
    lm_data
    for np in 1 2; do
      expect 1 escape$np train $np run --set log.metrics_file=../escaped.jsonl
      exactly escape$np "config key 'log.metrics_file': '../escaped.jsonl' is not a file name: it names a file inside train.output_dir, so it may not contain '/'"
    done
    expect 1 absolute train 1 run --set log.metrics_file="$WORK/abs.jsonl"
    exactly absolute "config key 'log.metrics_file': '$WORK/abs.jsonl' is not a file name"
    [ ! -e "$WORK/escaped.jsonl" ] && [ ! -e "$WORK/abs.jsonl" ] && [ ! -e "$WORK/run" ] || fail "a refused run wrote files"
    expect 0 named train 1 run --set log.metrics_file=metrics-b.jsonl --set train.max_steps=2
    [ -s "$WORK/run/metrics-b.jsonl" ] || fail "no $WORK/run/metrics-b.jsonl"
    ;;

  *) fail "unknown case" ;;
esac
echo "PASS($CASE)"
