#!/usr/bin/env bash
# Data-parallel strategies and optimizers: bad input through the real binary. Usage: run.sh CASE.
# Environment from ctest: HPCTRAIN, MPIEXEC, MPIEXEC_FLAGS (a ;-list), OpenMPI root variables.
set -uo pipefail
source "$(dirname "$0")/../support/case.sh" parallel "$1"

TINY=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
      --set train.micro_batch_size=4 --set train.max_steps=8 --set train.threads=1 --set train.device=cpu
      --set log.every_steps=1 --set eval.strategy=no --set log.plot=false)
# refused NP TEXT SETS...: exit 1, TEXT once for the job, no training step, nothing in the run dir.
refused() {
  local np=$1 text=$2; shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  rm -rf "$WORK/run"
  expect_rc 1 mpi "$np" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run" "${TINY[@]}" "${sets[@]}"
  expect_once "$text"
  grep -q "step *1/" "$WORK/out.txt" && fail "a rank trained before the refusal"
  [ -z "$(find "$WORK/run" -type f ! -name '.hpctrain.lock' 2>/dev/null)" ] || fail "the refused run wrote $(find "$WORK/run" -type f)"
  note "refused ($np ranks): $(grep -F -- "$text" "$WORK/out.txt" | head -n 1)"
}

# trained NAME SETS...: a 2-rank run of TINY into $WORK/NAME that must succeed (final checkpoint kept).
trained() {
  local name=$1; shift
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/$name" "${TINY[@]}" \
    "${sets[@]}"
}
# last_metric NAME FIELD: FIELD of the run's last training line.
last_metric() {
  python3 -c "import json,sys;r=[json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l];print(r[-1][sys.argv[2]])" \
    "$WORK/$1/metrics.jsonl" "$2"
}
same_model() {  # same_model A B: the final checkpoints' /model groups are bit-identical
  h5diff -q "$WORK/$1/checkpoints/ckpt-00000008.h5" "$WORK/$2/checkpoints/ckpt-00000008.h5" /model /model \
    || fail "$1 and $2 end with different models"
}

case "$CASE" in
  paths_ran)
    # The claimed path ran, through the real binary: the overlapped gradient all-reduce starts
    # buckets inside backward (buckets_in_backward > 0; 0 when blocking) and ends bit-identical to
    # the blocking run; forced host staging stages (staged_transfers > 0) and changes no bit.
    lm_data
    # d_model 256: 6.6 MB of gradients, 7 buckets of 1 MiB, most of them ready before backward ends.
    trained blocking local_sgd.enabled=false model.d_model=256 local_sgd.bucket_mb=1
    trained overlapped local_sgd.enabled=false model.d_model=256 local_sgd.bucket_mb=1 \
      local_sgd.overlap_grad_allreduce=true
    [ "$(last_metric blocking buckets_in_backward)" = 0 ] || fail "the blocking run counts buckets in backward"
    in_backward=$(last_metric overlapped buckets_in_backward)
    [ "$in_backward" -ge 8 ] || fail "overlap_grad_allreduce = true started $in_backward buckets inside backward in 8 steps"
    same_model blocking overlapped
    trained direct local_sgd.enabled=true local_sgd.steps=2
    HPCTRAIN_COMM_FORCE_STAGING=1 trained staged local_sgd.enabled=true local_sgd.steps=2
    [ "$(last_metric direct staged_transfers)" = 0 ] || fail "the direct run staged"
    staged=$(last_metric staged staged_transfers)
    [ "$staged" -ge 4 ] || fail "HPCTRAIN_COMM_FORCE_STAGING=1 staged $staged transfers in 4 syncs"
    same_model direct staged
    note "buckets in backward: $in_backward in 8 steps; staged transfers: $staged"
    ;;
  auto_steps)
    # local_sgd.steps = auto through the real binary: rank 0 prints the measurement and the choice
    # once, the run trains with that N (config.toml stores the number; every rank agreed, or the
    # strategy's settings hash would have refused), 16 steps with N give 16 / N syncs; the resumed
    # run keeps the checkpoint's N without measuring again.
    lm_data
    trained auto local_sgd.enabled=true local_sgd.steps=auto train.max_steps=16 checkpoint.every_steps=8
    expect_once "local_sgd.steps = auto: compute step"
    grep -F "local_sgd.steps = auto: compute step" "$WORK/out.txt" | grep -qF "encoded" &&
      fail "an fp32 exchange timed an encoded one"
    expect_once "local_sgd.steps = auto chose N = "
    chosen=$(sed -n 's/.*local_sgd.steps = auto chose N = \([0-9]*\) .*/\1/p' "$WORK/out.txt")
    stored=$(python3 -c "import sys,tomllib;print(tomllib.load(open(sys.argv[1],'rb'))['local_sgd']['steps'])" \
      "$WORK/auto/config.toml")
    [ -n "$chosen" ] && [ "$chosen" = "$stored" ] || fail "chose N = '$chosen', config.toml stores '$stored'"
    # With 16 steps at least 4 exchanges: N <= 4. N = 1 is the per-step gradient all-reduce (the mode
    # the model's N = 1 stands for): config.toml says local SGD is off, 16 gradient all-reduces, no sync.
    case "$chosen" in 1|2|4) ;; *) fail "N = $chosen leaves fewer than 4 exchanges in 16 steps" ;; esac
    enabled=$(python3 -c "import sys,tomllib;print(tomllib.load(open(sys.argv[1],'rb'))['local_sgd']['enabled'])" \
      "$WORK/auto/config.toml")
    syncs=$(last_metric auto syncs)
    allreduces=$(last_metric auto grad_allreduces)
    if [ "$chosen" = 1 ]; then
      expect_once "training with the per-step gradient all-reduce (local_sgd.enabled = false)"
      [ "$enabled" = False ] && [ "$syncs" = 0 ] && [ "$allreduces" = 16 ] ||
        fail "N = 1: local_sgd.enabled = $enabled, $syncs syncs and $allreduces gradient all-reduces in 16 steps"
      kept="$chosen (the per-step gradient all-reduce)"
    else
      [ "$enabled" = True ] && [ "$syncs" = $((16 / chosen)) ] ||
        fail "N = $chosen: local_sgd.enabled = $enabled, $syncs syncs in 16 steps, expected $((16 / chosen))"
      kept=$chosen
    fi
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/auto" "${TINY[@]}" \
      --set local_sgd.enabled=true --set local_sgd.steps=auto --set train.max_steps=24 --set checkpoint.every_steps=8 \
      --resume
    expect_once "local_sgd.steps = auto: $kept as chosen when the run started"
    grep -qF "auto chose N" "$WORK/out.txt" && fail "the resumed run measured and chose again"
    resumed_syncs=$(last_metric auto syncs)
    { [ "$chosen" = 1 ] && [ "$resumed_syncs" = 0 ]; } || { [ "$chosen" != 1 ] && [ "$resumed_syncs" -gt 0 ]; } ||
      fail "the resumed run did not keep the mode of N = $chosen: $resumed_syncs syncs"
    note "auto chose N = $chosen ($syncs syncs, $allreduces gradient all-reduces in 16 steps); the resumed run kept it"
    # overlap_steps = 1 asks N / F > 1 of local SGD, yet N = 1, the per-step all-reduce (no merge to
    # delay), is offered; a penalty of 1 (N = 2 needs twice the steps) makes it the choice. The run
    # trains the per-step mode with overlap_steps = 0 stored, which the resumed run keeps (a stored
    # overlap of 1 with N = 1 would be refused).
    trained auto-ovl local_sgd.enabled=true local_sgd.steps=auto local_sgd.overlap_steps=1 \
      local_sgd.auto_step_penalty=1 train.max_steps=16 checkpoint.every_steps=8
    expect_once "local_sgd.steps = auto chose N = 1 "
    stored=$(python3 -c "import sys,tomllib;l=tomllib.load(open(sys.argv[1],'rb'))['local_sgd'];print(l['steps'],l['enabled'],l['overlap_steps'])" \
      "$WORK/auto-ovl/config.toml")
    [ "$stored" = "1 False 0" ] || fail "N = 1 with overlap_steps = 1 asked: config.toml stores steps, enabled, overlap '$stored'"
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/auto-ovl" "${TINY[@]}" \
      --set local_sgd.enabled=true --set local_sgd.steps=auto --set local_sgd.overlap_steps=1 \
      --set local_sgd.auto_step_penalty=1 --set train.max_steps=24 --set checkpoint.every_steps=8 --resume
    expect_once "local_sgd.steps = auto: 1 (the per-step gradient all-reduce) as chosen when the run started"
    [ "$(last_metric auto-ovl syncs)" = 0 ] || fail "the resumed per-step run synced: $(last_metric auto-ovl syncs)"
    # fragments and comm_dtype = auto too: the printed choice is what config.toml stores (numbers and
    # a dtype, not "auto"), and the resumed run keeps all three. A penalty of 0 (steps do not grow
    # with N) makes a cycle with a hidden exchange win over the blocking per-step mode: N > 1.
    trained auto-all local_sgd.enabled=true local_sgd.steps=auto local_sgd.fragments=auto local_sgd.comm_dtype=auto \
      local_sgd.overlap_steps=1 local_sgd.auto_step_penalty=0 train.max_steps=16 checkpoint.every_steps=8
    # comm_dtype = auto weighs bf16, int8 and int4: each one's alltoall + allgather is timed beside the
    # fp32 all-reduce.
    fit="[0-9.]+ MB/s / [0-9.]+ ms"
    grep -F "local_sgd.steps = auto: compute step" "$WORK/out.txt" |
      grep -qE "encoded \(alltoall \+ allgather of two sizes\): bf16 $fit, int8 $fit, int4 $fit;" ||
      fail "the encoded exchange was not timed: $(grep -F "auto: compute step" "$WORK/out.txt")"
    expect_once "local_sgd.steps = auto chose N = "
    line=$(grep -F "local_sgd.steps = auto chose N = " "$WORK/out.txt")
    read -r n f d < <(sed -n 's/.*chose N = \([0-9]*\) with \([0-9]*\) fragment(s) and \([a-z0-9]*\) exchange.*/\1 \2 \3/p' <<<"$line")
    [ -n "${d:-}" ] || fail "no N, fragments and dtype in: $line"
    stored=$(python3 -c "import sys,tomllib;l=tomllib.load(open(sys.argv[1],'rb'))['local_sgd'];print(l['steps'],l['fragments'],l['comm_dtype'])" \
      "$WORK/auto-all/config.toml")
    [ "$stored" = "$n $f $d" ] || fail "chose '$n $f $d', config.toml stores '$stored'"
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/auto-all" "${TINY[@]}" \
      --set local_sgd.enabled=true --set local_sgd.steps=auto --set local_sgd.fragments=auto --set local_sgd.comm_dtype=auto \
      --set local_sgd.overlap_steps=1 --set local_sgd.auto_step_penalty=0 --set train.max_steps=24 \
      --set checkpoint.every_steps=8 --resume
    [ "$n" -gt 1 ] || fail "auto-all with a penalty of 0 chose N = $n"
    expect_once "local_sgd.steps = auto: $n, $f fragment(s), $d exchange as chosen when the run started"
    grep -qF "auto chose N" "$WORK/out.txt" && fail "the resumed run measured and chose again"
    note "auto with fragments and comm_dtype chose N = $n, F = $f, $d; the resumed run kept them"
    ;;
  bad_keys)
    lm_data
    refused 2 "config key 'train.shard_optimizer': shards the optimizer state of the per-step data-parallel mode, or with local_sgd.enabled = true inside the groups" \
      train.shard_optimizer=true local_sgd.enabled=true
    refused 1 "config key 'train.shard_optimizer': with local SGD it shards the optimizer state inside the groups of the hierarchical mode, but local_sgd.group_size = 0 (the 1 ranks of this node) gives groups of one rank" \
      train.shard_optimizer=true local_sgd.enabled=true local_sgd.group_size=0
    refused 1 "config key 'train.optimizer'" train.optimizer=lamb
    refused 2 "config key 'local_sgd.fragments': 8 fragments of whole blocks need at least as many blocks" \
      local_sgd.enabled=true local_sgd.fragments=8 local_sgd.steps=8
    refused 2 "config key 'local_sgd.fragments': 3 fragments do not divide local_sgd.steps = 8" \
      local_sgd.enabled=true local_sgd.fragments=3 local_sgd.steps=8 model.n_layer=4
    refused 2 "config key 'local_sgd.overlap_steps': 2 must be smaller than local_sgd.steps / local_sgd.fragments = 2" \
      local_sgd.enabled=true local_sgd.fragments=2 local_sgd.steps=4 local_sgd.overlap_steps=2
    refused 2 "config key 'local_sgd.quant_block': 63 is odd, but local_sgd.comm_dtype = int4 packs two values per byte" \
      local_sgd.enabled=true local_sgd.comm_dtype=int4 local_sgd.quant_block=63
    refused 1 "config key 'local_sgd.comm_dtype'" local_sgd.comm_dtype=int2
    refused 2 "config key 'local_sgd.steps': auto chooses N for flat local SGD" \
      local_sgd.enabled=true local_sgd.steps=auto local_sgd.group_size=2
    refused 2 "config key 'local_sgd.fragments': auto is chosen together with N: it needs local_sgd.enabled = true and local_sgd.steps = auto" \
      local_sgd.enabled=true local_sgd.steps=8 local_sgd.fragments=auto
    refused 2 "config key 'local_sgd.comm_dtype': auto is chosen together with N" local_sgd.enabled=false local_sgd.comm_dtype=auto
    refused 2 "config key 'local_sgd.steps': auto: no N in 1, 2, 4, ... 64 fits local_sgd.fragments = 2" \
      local_sgd.enabled=true local_sgd.steps=auto local_sgd.fragments=2 local_sgd.overlap_steps=40
    ;;
  bad_world)
    lm_data
    refused 2 "config key 'local_sgd.group_size': local_sgd.group_size = 3 is larger than the 2 ranks of the job" \
      local_sgd.enabled=true local_sgd.group_size=3
    refused 3 "config key 'local_sgd.group_size': local_sgd.group_size = 2 does not divide the 3 ranks of the job" \
      local_sgd.enabled=true local_sgd.group_size=2
    ;;
  other_optimizer)
    # A checkpoint of AdamW resumed with SGD (and one of SGD with AdamW): refused naming the key
    # and the file; the checkpoint directory and the metrics are left exactly as they were.
    lm_data
    for pair in "adamw sgd exp_avg" "sgd adamw momentum_buffer"; do
      read -r from to moment <<<"$pair"
      run="$WORK/r-$from"
      expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$run" "${TINY[@]}" \
        --set train.optimizer="$from" --set checkpoint.every_steps=4
      before=$(cd "$run" && find . -type f ! -name '.hpctrain.lock' -exec sha256sum {} + | sort)
      expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$run" "${TINY[@]}" \
        --set train.optimizer="$to" --set train.max_steps=12 --set checkpoint.every_steps=4 --resume
      expect_once "config key 'train.optimizer': checkpoint $run/checkpoints/ckpt-00000008.h5 holds the optimizer state '$moment', which train.optimizer = $to does not keep"
      after=$(cd "$run" && find . -type f ! -name '.hpctrain.lock' -exec sha256sum {} + | sort)
      [ "$before" = "$after" ] || fail "the refused resume changed files in $run: $(diff <(echo "$before") <(echo "$after"))"
      note "$from checkpoint resumed with $to: refused, nothing written"
    done
    ;;
  *) fail "unknown case" ;;
esac
