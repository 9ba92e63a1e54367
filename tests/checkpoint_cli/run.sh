#!/usr/bin/env bash
# End-to-end checkpoint cases through the real binary under mpirun. Usage: run.sh CASE.
# Environment from ctest: HPCTRAIN, MPIEXEC, MPIEXEC_FLAGS (a ;-list), H5DIFF, H5DUMP, OpenMPI root vars.
# "Bit-identical" = h5diff exit 0 on /model (and the optimizer, counters and per-rank RNG groups) of the
# final checkpoints, plus equal per-step losses in metrics.jsonl.
set -uo pipefail
source "$(dirname "$0")/../support/case.sh" ckpt-cli "$1"
H5DIFF=${H5DIFF:-$(command -v h5diff)}
H5DUMP=${H5DUMP:-$(command -v h5dump)}
source "$(dirname "$0")/../support/skip.sh"
if [ ! -x "$H5DIFF" ] || [ ! -x "$H5DUMP" ]; then skip_suite "h5diff/h5dump not found (apt-get install hdf5-tools)"; fi
H5LS="$(dirname "$H5DIFF")/h5ls"

# Tiny model, CPU, one thread per rank, no eval, a metrics line per step, 20 steps. Nothing that
# bears on exactness is pinned: peak FLOP/s is measured at start as users run it.
BASE=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
      --set train.micro_batch_size=4 --set train.lr=3e-3 --set train.warmup_steps=2 --set train.threads=1
      --set train.device=cpu --set eval.strategy=no --set log.every_steps=1
      --set train.max_steps=20 --set checkpoint.keep=5)

# What users run: BASE without the pins of train.threads (default 0 = cores / ranks on the node) and
# eval.strategy (default 'epoch': evaluated at every epoch end and at the end of training). With
# small_lm_data an epoch is 6 steps on 2 ranks and 13 on 1, so the 20 steps cross epoch ends.
DEFAULTS=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
          --set train.micro_batch_size=4 --set train.lr=3e-3 --set train.warmup_steps=2
          --set train.device=cpu --set log.every_steps=1 --set train.max_steps=20 --set checkpoint.keep=5)
RUN_BASE=("${BASE[@]}")  # what train() runs with; the *_defaults cases switch it to DEFAULTS

# train LOG OUTDIR WANT_RC NP ARGS...: `hpctrain train` on NP ranks, output in $WORK/LOG.log.
train() {
  local log=$1 out=$2 want=$3 np=$4; shift 4
  mpi "$np" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" "${RUN_BASE[@]}" --set train.output_dir="$WORK/$out" "$@" \
    >"$WORK/$log.log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && { tail -30 "$WORK/$log.log"; fail "$log: timed out (a rank hung?)"; }
  [ "$rc" -eq "$want" ] || { tail -40 "$WORK/$log.log"; fail "$log: exit code $rc, expected $want"; }
  note "$log: exit code $rc as expected"
}
has() { grep -q -- "$2" "$WORK/$1.log" || { tail -30 "$WORK/$1.log"; fail "$1.log lacks '$2'"; }; }
ckpt() { echo "$WORK/$1/checkpoints/$(printf 'ckpt-%08d.h5' "$2")"; }

# The top-level objects of a checkpoint file, one per line, sorted. h5ls runs on its own (not in a
# pipeline), so that its failure is reported with its own message instead of an empty list.
top_level() {
  local listing
  listing=$("$H5LS" "$1" 2>"$WORK/h5ls.err") || { cat "$WORK/h5ls.err" >&2; echo "h5ls $1 failed (exit $?)" >&2; return 1; }
  [ -n "$listing" ] || { echo "h5ls $1 listed no objects" >&2; return 1; }
  awk '{print $1}' <<<"$listing" | sort
}

# Two checkpoints hold the same objects and every group and dataset is identical (h5diff exit 0);
# only the root's provenance attributes (time, run_id) and /config (each run's own output
# directory and save interval) may differ.
same_checkpoint() {
  local a=$1 b=$2 g
  [ -f "$a" ] || fail "missing $a"
  [ -f "$b" ] || fail "missing $b"
  local ga gb
  ga=$(top_level "$a") || fail "h5ls $a failed"
  gb=$(top_level "$b") || fail "h5ls $b failed"
  [ "$ga" = "$gb" ] || fail "the files hold different objects: [$(echo $ga)] vs [$(echo $gb)]"
  grep -qx model <<<"$ga" || fail "$a has no /model (h5ls lists: $(echo $ga))"
  for g in $ga; do
    [ "$g" = config ] && continue
    "$H5DIFF" "$a" "$b" "/$g" "/$g" >"$WORK/h5diff.txt" 2>&1 \
      || { head -20 "$WORK/h5diff.txt"; fail "/$g differs: h5diff $a $b /$g"; }
  done
  note "h5diff: $(echo $ga | wc -w) objects identical: $(echo $ga) ($(basename "$a"))"
}

# Per-step losses equal (exact doubles) for steps > FROM in two metrics files.
same_losses() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "losses differ"
import json, sys
def losses(p):
    return {l["step"]: l["loss"] for l in map(json.loads, open(p)) if "loss" in l}
a, b, start = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
steps = sorted(s for s in a if s > start)
assert steps and all(s in b for s in steps), (steps, sorted(b))
bad = [(s, a[s], b[s]) for s in steps if a[s] != b[s]]
assert not bad, f"loss differs at {bad[:3]}"
print(f"--- losses of steps {steps[0]}..{steps[-1]} identical")
PY
}

# Per-step evaluation results (eval_loss, eval_accuracy; exact doubles) equal for steps > FROM in two
# metrics files, and there are some: the evaluation ran after the resume.
same_eval() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "evaluation results differ"
import json, sys
def evals(p):
    return {l["step"]: (l["eval_loss"], l.get("eval_accuracy")) for l in map(json.loads, open(p)) if "eval_loss" in l}
a, b, start = evals(sys.argv[1]), evals(sys.argv[2]), int(sys.argv[3])
steps = sorted(s for s in a if s > start)
assert steps, f"no evaluation after step {start} in {sys.argv[1]} (evaluated at {sorted(a)})"
assert sorted(s for s in b if s > start) == steps, (steps, sorted(b))
bad = [(s, a[s], b[s]) for s in steps if a[s] != b[s]]
assert not bad, f"evaluation differs at {bad[:3]}"
print(f"--- evaluations at steps {steps} identical")
PY
}

# small_lm_data: $WORK/lm.h5 from the first 4000 bytes of fortunes (3357 training tokens): an epoch
# is a few steps, so epoch-end evaluation happens inside a 20-step run.
small_lm_data() {
  head -c 4000 "$FORTUNES/fortunes" >"$WORK/small.txt" || fail "cannot read $FORTUNES/fortunes"
  "$HPCTRAIN" prepare --input "$WORK/small.txt" --output "$WORK/lm.h5" --val-fraction 0.1 >"$WORK/prepare.log" 2>&1 \
    || { cat "$WORK/prepare.log"; fail "prepare failed"; }
}

# Flips the middle byte of the stored data of DATASET (found by content) in FILE.
flip_in_dataset() {
  local file=$1 ds=$2
  "$H5DUMP" -d "$ds" -b LE -o "$WORK/raw.bin" "$file" >/dev/null || fail "h5dump -b $ds"
  python3 - "$file" "$WORK/raw.bin" <<'PY' || fail "flip"
import sys
path, raw = sys.argv[1], open(sys.argv[2], "rb").read()
data = bytearray(open(path, "rb").read())
at = data.find(raw)
assert at >= 0 and len(raw) > 16, "dataset bytes not found"
data[at + len(raw) // 2] ^= 0x5A
open(path, "wb").write(data)
print(f"--- flipped byte {at + len(raw) // 2} of {path}")
PY
}

# The rank processes of an mpirun (its children).
ranks_of() { pgrep -P "$1" -f hpctrain; }
wait_for_file() {
  local f=$1 i
  for i in $(seq 1 600); do [ -e "$f" ] && return 0; sleep 0.2; done
  fail "timed out waiting for $f"
}

# background_train OUT SLOW_SAVE_MS ARGS...: `hpctrain train` on 2 ranks in the background, each
# checkpoint save slowed by SLOW_SAVE_MS; output $WORK/OUT, log $WORK/OUT.log, mpirun's pid in RUNNER.
background_train() {
  local out=$1 slow=$2; shift 2
  HPCTRAIN_TEST_SLOW_SAVE_MS=$slow "$MPIEXEC" -np 2 "${MPIFLAGS[@]}" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" \
    "${BASE[@]}" --set train.output_dir="$WORK/$out" "$@" >"$WORK/$out.log" 2>&1 &
  RUNNER=$!
}
# await_ranks FILE: waits until FILE exists, then puts the pids of RUNNER's ranks in RANK_PIDS.
await_ranks() {
  wait_for_file "$1"
  RANK_PIDS=$(ranks_of "$RUNNER")
  [ -n "$RANK_PIDS" ] || fail "no rank processes found"
}

# 20 steps straight that never save before the end, vs the same run saving at step 10 (a save
# changes nothing), vs a fresh process resumed from that step-10 checkpoint (resume is exact).
resume_case() {
  local np=$1; shift
  "${PREPARE:-lm_data}"
  train straight straight 0 "$np" --set checkpoint.every_steps=0 "$@"
  [ ! -e "$(ckpt straight 10)" ] || fail "the straight run saved at step 10"
  train saving saving 0 "$np" --set checkpoint.every_steps=10 "$@"
  train resumed resumed 0 "$np" --resume-from "$(ckpt saving 10)" --set checkpoint.every_steps=10 "$@"
  has resumed "resumed at step 10"
  same_checkpoint "$(ckpt straight 20)" "$(ckpt saving 20)"
  same_checkpoint "$(ckpt straight 20)" "$(ckpt resumed 20)"
  same_losses "$WORK/straight/metrics.jsonl" "$WORK/saving/metrics.jsonl" 0
  same_losses "$WORK/straight/metrics.jsonl" "$WORK/resumed/metrics.jsonl" 10
}

# resume_case on the defaults users run (DEFAULTS: threads and evaluation as `--help-config` says),
# dropout on: the resolved config must really hold the defaults, and the evaluations after the
# resume must equal the straight run's.
defaults_case() {
  local np=$1; shift
  RUN_BASE=("${DEFAULTS[@]}")
  PREPARE=small_lm_data
  resume_case "$np" --set model.dropout=0.1 "$@"
  grep -qx "threads = 0" "$WORK/resumed/config.toml" || fail "train.threads is not the default 0 in resumed/config.toml"
  grep -qx "strategy = 'epoch'" "$WORK/resumed/config.toml" || fail "eval.strategy is not the default 'epoch' in resumed/config.toml"
  note "$(grep -m1 -o "run: .* threads/rank" "$WORK/resumed.log")"
  same_eval "$WORK/straight/metrics.jsonl" "$WORK/saving/metrics.jsonl" 0
  same_eval "$WORK/straight/metrics.jsonl" "$WORK/resumed/metrics.jsonl" 10
}

case "$CASE" in
  resume_np1) resume_case 1 ;;
  resume_defaults_np1) defaults_case 1 ;;
  resume_defaults_np2) defaults_case 2 ;;
  resume_defaults_local_sgd_np1) defaults_case 1 --set local_sgd.enabled=true --set local_sgd.steps=4 ;;
  resume_defaults_local_sgd_np2) defaults_case 2 --set local_sgd.enabled=true --set local_sgd.steps=4 ;;
  resume_np2) resume_case 2 ;;
  resume_local_sgd)
    # Step 10 is mid-interval for N = 4: the replicas differ when the checkpoint is written.
    resume_case 2 --set local_sgd.enabled=true --set local_sgd.steps=4 --set model.dropout=0.1 ;;
  resume_local_sgd_np1) resume_case 1 --set local_sgd.enabled=true --set local_sgd.steps=4 --set model.dropout=0.1 ;;
  resume_local_sgd_overlap)
    resume_case 2 --set local_sgd.enabled=true --set local_sgd.steps=4 --set local_sgd.overlap_steps=2 ;;
  resume_diloco)
    resume_case 2 --set local_sgd.enabled=true --set local_sgd.steps=4 --set local_sgd.outer=diloco ;;
  resume_dropout) resume_case 2 --set model.dropout=0.1 ;;
  resume_eager_attention)
    # The matmul attention core with its dropout on the probabilities: the resumed run draws the
    # same masks; both runs store the kernel they trained with.
    resume_case 2 --set model.attention=eager --set model.dropout=0.1
    grep -qx "attention = 'eager'" "$WORK/resumed/config.toml" || fail "resumed/config.toml does not say attention = 'eager'" ;;
  resume_zero1) resume_case 2 --set train.shard_optimizer=true --set model.dropout=0.1 ;;
  resume_zero1_np3) resume_case 3 --set train.shard_optimizer=true ;;
  resume_zero1_hierarchical)
    # 4 ranks in 2 groups of 2: ZeRO-1 inside each group (each rank saves its group's gathered
    # moments), DiLoCo in 2 fragments across the groups; step 10 of N = 4 is mid-cycle.
    resume_case 4 --set local_sgd.enabled=true --set local_sgd.steps=4 --set local_sgd.group_size=2 \
      --set local_sgd.fragments=2 --set local_sgd.outer=diloco --set train.shard_optimizer=true
    has saving "inside each group of 2 ranks: ZeRO-1 over 2 ranks" ;;
  resume_streaming)
    # Step 10 of N = 4 with 2 fragments overlapped by 1 step: fragment 1 (begun at step 8) landed
    # at step 9, fragment 0 (begun at step 10) is in flight when the checkpoint is written; int8.
    resume_case 2 --set local_sgd.enabled=true --set local_sgd.steps=4 --set local_sgd.fragments=2 \
      --set local_sgd.overlap_steps=1 --set local_sgd.comm_dtype=int8 --set local_sgd.outer=diloco \
      --set local_sgd.outer_lr=0.5 --set model.dropout=0.1 ;;
  resume_grad_accum) resume_case 2 --set train.grad_accum_steps=2 ;;
  resume_recompute) resume_case 2 --set recompute.policy=full --set model.dropout=0.1 ;;

  ranks_change)
    # Same global batch (12 samples): 2 x 6 -> 1 x 12 and 3 x 4.
    lm_data
    train ref ref 0 2 --set checkpoint.every_steps=10 --set train.micro_batch_size=6
    train to1 to1 0 1 --resume-from "$(ckpt ref 10)" --set checkpoint.every_steps=10 --set train.micro_batch_size=12
    train to3 to3 0 3 --resume-from "$(ckpt ref 10)" --set checkpoint.every_steps=10 --set train.micro_batch_size=4
    for r in to1 to3; do
      has $r "resumed at step 10"
      has $r "checkpoint was written by 2 ranks"
      for ds in /state/step /state/tokens_seen /state/global_batch /state/loader; do
        "$H5DIFF" "$(ckpt ref 20)" "$(ckpt $r 20)" $ds $ds >/dev/null || fail "$r: $ds differs from the 2-rank run"
      done
    done
    note "data position (tokens_seen, loader state) after 2->1 and 2->3 equals the uninterrupted 2-rank run"
    python3 - "$WORK/ref/metrics.jsonl" "$WORK/to1/metrics.jsonl" "$WORK/to3/metrics.jsonl" <<'PY' || fail "loss"
import json, sys
last = [[l["loss"] for l in map(json.loads, open(p)) if "loss" in l][-1] for p in sys.argv[1:]]
print(f"--- final loss: 2 ranks {last[0]:.5f}, 2->1 {last[1]:.5f}, 2->3 {last[2]:.5f}")
assert all(abs(x - last[0]) < 0.02 * last[0] for x in last), "continuation diverged"
PY
    ;;

  zero1_ranks_change)
    # A sharded checkpoint of 2 ranks resumed on 3 (sharded) and on 1 (unsharded): the state is
    # re-sharded; the data position equals the uninterrupted run's, the loss stays close.
    lm_data
    train ref ref 0 2 --set checkpoint.every_steps=10 --set train.micro_batch_size=6 --set train.shard_optimizer=true
    "$H5LS" "$(ckpt ref 10)/optimizer/exp_avg" >/dev/null || fail "the sharded checkpoint holds no optimizer state"
    train to3 to3 0 3 --resume-from "$(ckpt ref 10)" --set checkpoint.every_steps=10 --set train.micro_batch_size=4 \
      --set train.shard_optimizer=true
    train to1 to1 0 1 --resume-from "$(ckpt ref 10)" --set checkpoint.every_steps=10 --set train.micro_batch_size=12
    for r in to3 to1; do
      has $r "resumed at step 10"
      for ds in /state/step /state/tokens_seen /state/loader; do
        "$H5DIFF" "$(ckpt ref 20)" "$(ckpt $r 20)" $ds $ds >/dev/null || fail "$r: $ds differs from the 2-rank run"
      done
    done
    python3 - "$WORK/ref/metrics.jsonl" "$WORK/to3/metrics.jsonl" "$WORK/to1/metrics.jsonl" <<'PY' || fail "loss"
import json, sys
runs = [[l["loss"] for l in map(json.loads, open(p)) if "loss" in l] for p in sys.argv[1:]]
last = [r[-1] for r in runs]
print(f"--- final loss: 2 ranks sharded {last[0]:.5f}, 2->3 sharded {last[1]:.5f}, 2->1 unsharded {last[2]:.5f}")
assert all(abs(x - last[0]) < 0.02 * last[0] for x in last), "continuation diverged"
PY
    ;;

  sigkill_mid_save)
    lm_data
    train ref ref 0 2 --set checkpoint.every_steps=5
    # The save at step 10 sleeps half-way (HPCTRAIN_TEST_SLOW_SAVE_MS); SIGKILL every rank then.
    background_train crash 3000 --set checkpoint.every_steps=5
    await_ranks "$WORK/crash/checkpoints/ckpt-00000010.h5.tmp"
    kill -9 $RANK_PIDS
    wait $RUNNER
    note "killed ranks $RANK_PIDS with SIGKILL during the step-10 save"
    [ ! -e "$(ckpt crash 10)" ] || fail "a half-written checkpoint carries the final name"
    [ "$(cat "$WORK/crash/checkpoints/latest")" = "ckpt-00000005.h5" ] || fail "latest moved"
    "$HPCTRAIN" inspect "$(ckpt crash 5)" >"$WORK/inspect.log" 2>&1 || { cat "$WORK/inspect.log"; fail "ckpt 5 damaged"; }
    train resume crash 0 2 --set checkpoint.every_steps=5 --resume
    has resume "resumed at step 5"
    has resume "left by an interrupted save"
    [ ! -e "$WORK/crash/checkpoints/ckpt-00000010.h5.tmp" ] || fail "stale tmp not removed"
    same_checkpoint "$(ckpt ref 20)" "$(ckpt crash 20)"
    same_losses "$WORK/ref/metrics.jsonl" "$WORK/crash/metrics.jsonl" 5
    ;;

  flipped_byte)
    lm_data
    train ref ref 0 2 --set checkpoint.every_steps=5 --set checkpoint.keep=3
    cp "$(ckpt ref 20)" "$WORK/pristine20.h5"
    flip_in_dataset "$(ckpt ref 20)" /model/wte.weight
    "$HPCTRAIN" inspect "$(ckpt ref 20)" >"$WORK/inspect.log" 2>&1
    [ $? -eq 2 ] || { cat "$WORK/inspect.log"; fail "inspect of a damaged file must exit 2"; }
    has inspect "checksums: DAMAGED"
    train resume ref 0 2 --set checkpoint.every_steps=5 --set checkpoint.keep=3 --resume
    has resume "ckpt-00000020.h5 is damaged"
    has resume "falling back to $WORK/ref/checkpoints/ckpt-00000015.h5"
    has resume "resumed at step 15"
    grep -m1 "is damaged" "$WORK/resume.log"
    same_checkpoint "$WORK/pristine20.h5" "$(ckpt ref 20)"
    ;;

  sigterm_requeue)
    lm_data
    train ref ref 0 2 --set checkpoint.every_steps=1
    background_train term 300 --set checkpoint.every_steps=1
    await_ranks "$(ckpt term 3)"
    kill -TERM $RANK_PIDS      # what Slurm does before a time limit: every task gets the signal
    sleep 0.15
    kill -USR1 $RANK_PIDS 2>/dev/null  # a second signal, most likely during the checkpoint write
    wait $RUNNER
    rc=$?
    [ $rc -eq 75 ] || { tail -30 "$WORK/term.log"; fail "exit code $rc after SIGTERM, expected 75"; }
    has term "received: checkpointing at step"  # signal 15, or 10 when the SIGUSR1 came last
    step=$(sed -n 's/.*received: checkpointing at step \([0-9]*\).*/\1/p' "$WORK/term.log" | head -1)
    note "SIGTERM -> checkpoint at step $step, exit code 75"
    [ "$(cat "$WORK/term/checkpoints/latest")" = "$(printf 'ckpt-%08d.h5' "$step")" ] || fail "latest is not step $step"
    "$HPCTRAIN" inspect "$(ckpt term "$step")" >"$WORK/inspect.log" 2>&1 || fail "signal checkpoint does not verify"
    train resume term 0 2 --set checkpoint.every_steps=1 --resume
    has resume "resumed at step $step"
    same_checkpoint "$(ckpt ref 20)" "$(ckpt term 20)"
    same_losses "$WORK/ref/metrics.jsonl" "$WORK/term/metrics.jsonl" "$step"
    ;;

  sigterm_during_startup)
    # SIGTERM while the ranks are still building (the measured peak FLOP/s alone takes ~0.5 s):
    # the signal is held until the first step, which checkpoints and exits 75.
    lm_data
    background_train early 0
    started=0
    for i in $(seq 1 600); do grep -q "on host" "$WORK/early.log" 2>/dev/null && { started=1; break; }; sleep 0.02; done
    [ "$started" = 1 ] || { kill "$RUNNER"; cat "$WORK/early.log"; fail "the ranks never reached start-up (no 'on host' line in 12 s)"; }
    RANK_PIDS=$(ranks_of "$RUNNER")
    [ -n "$RANK_PIDS" ] || fail "no rank processes found"
    kill -TERM $RANK_PIDS
    wait $RUNNER
    rc=$?
    [ $rc -eq 75 ] || { tail -30 "$WORK/early.log"; fail "exit code $rc after SIGTERM during start-up, expected 75"; }
    has early "received: checkpointing at step 1 "
    grep -q "run: 2 ranks" "$WORK/early.log" || fail "the run did not get past start-up"
    [ "$(cat "$WORK/early/checkpoints/latest")" = "ckpt-00000001.h5" ] || fail "latest is not the step-1 checkpoint"
    note "SIGTERM during start-up -> $(sed -n 's/.*\(checkpointing at step [0-9]*\).*/\1/p' "$WORK/early.log" | head -1), exit 75"
    ;;

  inspect)
    lm_data
    train run run 0 1 --set train.max_steps=5
    "$HPCTRAIN" inspect "$(ckpt run 5)" >"$WORK/inspect.log" 2>&1 || { cat "$WORK/inspect.log"; fail "inspect rc"; }
    cat "$WORK/inspect.log" | head -40
    for t in "format hpctrain-checkpoint v1" "step 5" "blocks.0.attn.qkv.weight" "\[192, 64\]" "L2 norm" \
             "tokens_seen = " "rank 0:" "rng/cpu" "config (/config" "checksums: OK"; do
      has inspect "$t"
    done
    "$H5DUMP" -H "$(ckpt run 5)" >"$WORK/h5dump.txt" || fail "h5dump -H failed"
    grep -q 'DATASET "blocks.0.attn.qkv.weight"' "$WORK/h5dump.txt" || fail "h5dump -H does not show /model"
    "$HPCTRAIN" inspect "$WORK/lm.h5" >"$WORK/inspect_data.log" 2>&1 || { cat "$WORK/inspect_data.log"; fail "dataset"; }
    echo "not hdf5" >"$WORK/text.h5"
    "$HPCTRAIN" inspect "$WORK/text.h5" >"$WORK/inspect_bad.log" 2>&1
    [ $? -eq 2 ] || fail "inspect of a non-HDF5 file must exit 2"
    ;;

  bad_input)
    lm_data
    train run run 0 1 --set train.max_steps=5
    train wrong_layers x1 1 1 --resume-from "$(ckpt run 5)" --set model.n_layer=3
    has wrong_layers "blocks.2"
    train wrong_width x2 1 1 --resume-from "$(ckpt run 5)" --set model.d_model=128
    has wrong_width "shape"
    train wrong_batch x3 1 1 --resume-from "$(ckpt run 5)" --set train.micro_batch_size=8
    has wrong_batch "global batch"
    train missing x4 2 1 --resume-from "$WORK/nope.h5"
    has missing "nope.h5"
    cp "$(ckpt run 5)" "$WORK/damaged.h5"
    flip_in_dataset "$WORK/damaged.h5" /model/wte.weight
    train damaged x5 2 2 --resume-from "$WORK/damaged.h5"
    has damaged "damaged.h5"
    echo x >"$WORK/a-file"
    train unwritable x6 2 1 --set train.max_steps=2 --set checkpoint.dir="$WORK/a-file/ckpts"
    has unwritable "a-file/ckpts"
    # Found at start-up, before any training step was taken.
    [ ! -s "$WORK/x6/metrics.jsonl" ] || fail "unwritable checkpoint dir found only after training started"
    ;;

  *) fail "unknown case" ;;
esac
echo "PASS($CASE)"
