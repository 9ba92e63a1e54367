#!/usr/bin/env bash
# End-to-end cases for `hpctrain` under mpirun. Usage: run.sh CASE (environment from ctest:
# HPCTRAIN, CUSTOM_LOOP, MPIEXEC, MPIEXEC_FLAGS (a ;-list), OpenMPI root variables).
set -uo pipefail
source "$(dirname "$0")/../support/case.sh" cli "$1"

TINY=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
      --set train.micro_batch_size=8 --set train.lr=3e-3 --set train.warmup_steps=5 --set eval.max_batches=4
      --set train.threads=1)

case "$CASE" in
  help)
    for sub in prepare train eval inspect; do expect_rc 0 "$HPCTRAIN" "$sub" --help; done
    expect_rc 1 "$HPCTRAIN" no-such-command
    ;;
  train_smoke)
    lm_data
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run" "${TINY[@]}" \
      --set train.max_steps=40 --set log.every_steps=1 --set eval.strategy=steps --set eval.every_steps=20 \
      --set local_sgd.enabled=true --set local_sgd.steps=4
    expect_text "rank 1 on host"
    [ -f "$WORK/run/config.toml" ] || fail "no config.toml"
    python3 - "$WORK/run/metrics.jsonl" <<'PY' || fail "metrics check"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
train = [l for l in lines if "loss" in l]
evals = [l for l in lines if "eval_loss" in l]
for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "bytes_sent", "drift"):
    assert all(key in l for l in train), key
assert len(train) == 40, len(train)
first = sum(l["loss"] for l in train[:5]) / 5
last = sum(l["loss"] for l in train[-5:]) / 5
print(f"mean loss first 5 steps {first:.3f}, last 5 steps {last:.3f}; evals {[round(e['eval_loss'],3) for e in evals]}")
assert last < first - 0.3, "loss did not go down"
assert len(evals) == 2 and all("eval_perplexity" in e and "eval_accuracy" in e for e in evals)
PY
    ls "$WORK/run/checkpoints/"*.h5 >/dev/null 2>&1 || fail "no final checkpoint"
    if command -v gnuplot >/dev/null; then
      file "$WORK/run/loss.png" | grep -q "PNG image" || fail "the run drew no loss.png"
    fi
    ;;
  bad_config)
    lm_data
    expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set model.n_head=3
    expect_text "model.n_head"
    expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.no_such=1
    expect_text "train.no_such"
    printf '[train]\nlr = "fast"\n' >"$WORK/bad.toml"
    expect_rc 1 mpi 2 "$HPCTRAIN" train --config "$WORK/bad.toml"
    expect_text "train.lr"
    expect_rc 1 mpi 2 "$HPCTRAIN" train --config "$WORK/missing.toml"
    expect_text "missing.toml"
    # A model vocabulary smaller than the data's: the data do not fit the model (exit 2), named with both sizes.
    expect_rc 2 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set model.vocab_size=100
    expect_text "exceeds the model's vocab_size 100"
    ;;
  missing_data)
    expect_rc 2 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/nope.h5"
    expect_text "nope.h5"
    echo "not hdf5" >"$WORK/text.h5"
    expect_rc 2 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/text.h5"
    expect_text "not an HDF5 file"
    ;;
  bad_data_path_one_rank)
    # Only rank 1 cannot see the file (as on a node without the mount): the job must still end cleanly.
    lm_data
    cat >"$WORK/wrap.sh" <<WRAP
#!/usr/bin/env bash
r=\${OMPI_COMM_WORLD_RANK:-\${PMIX_RANK:-0}}
if [ "\$r" = 1 ]; then exec "$HPCTRAIN" "\$@" --set data.path="$WORK/elsewhere.h5"; fi  # last override wins
exec "$HPCTRAIN" "\$@"
WRAP
    chmod +x "$WORK/wrap.sh"
    expect_rc 2 mpi 2 "$WORK/wrap.sh" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run" "${TINY[@]}"
    expect_text "elsewhere.h5"
    ;;
  nan_loss)
    lm_data
    expect_rc 3 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run" "${TINY[@]}" \
      --set train.lr=1e30 --set train.min_lr=0 --set train.warmup_steps=0 --set train.grad_clip=0 --set train.max_steps=30
    expect_text "non-finite loss"
    ;;
  rank_throws)
    lm_data
    HPCTRAIN_TEST_FAIL_RANK=1 HPCTRAIN_TEST_FAIL_STEP=3 expect_rc 3 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" \
      --set train.output_dir="$WORK/run" "${TINY[@]}" --set train.max_steps=30
    expect_text "injected failure on rank 1 at step 3"
    ;;
  custom_loop)
    lm_data
    expect_rc 0 mpi 2 "$CUSTOM_LOOP" --data "$WORK/lm.h5" --steps 30
    expect_text "parameter averages"
    ;;
  langid)
    inputs=()
    for lang in en:"$FORTUNES" de:"$FORTUNES/de" it:"$FORTUNES/it" es:"$FORTUNES/es"; do
      inputs+=("${lang%%:*}=${lang#*:}")
    done
    "$HPCTRAIN" prepare --labels-from-dirs --input "${inputs[@]}" --seq-len 64 --output "$WORK/langid.h5" \
      --val-fraction 0.1 >/dev/null 2>&1 || fail "prepare langid"
    expect_rc 0 mpi 2 "$HPCTRAIN" train --config "${HPCTRAIN_SOURCE_DIR}/inputs/configs/langid.toml" \
      --set data.path="$WORK/langid.h5" --set train.output_dir="$WORK/run" --set model.seq_len=64 \
      --set train.max_steps=60 --set eval.strategy=steps --set eval.every_steps=30 --set train.threads=1
    python3 - "$WORK/run/metrics.jsonl" <<'PY' || fail "langid metrics"
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if "eval_f1" in l]
print([(e["step"], round(e["eval_accuracy"], 3), round(e["eval_f1"], 3)) for e in evals])
assert len(evals) == 2
assert evals[-1]["eval_accuracy"] > 0.5, "4 languages: chance is ~0.25"
PY
    ;;
  eval_checkpoint)
    lm_data
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run" "${TINY[@]}" \
      --set train.max_steps=10 --set eval.strategy=steps --set eval.every_steps=10 --set eval.max_batches=0
    want=$(python3 -c "import json;print([json.loads(l) for l in open('$WORK/run/metrics.jsonl') if 'eval_loss' in l][-1]['eval_loss'])")
    ckpt=$(ls "$WORK/run/checkpoints/"ckpt-*.h5 | tail -n 1)
    for np in 1 3; do
      expect_rc 0 mpi $np "$HPCTRAIN" eval --checkpoint "$ckpt"
      got=$(awk '/^eval_loss/{print $2}' "$WORK/out.txt")
      python3 -c "import sys; w,g=$want,$got; print('train-time', w, 'eval', g); sys.exit(abs(w-g) > 1e-5*abs(w))" \
        || fail "eval_loss $got with $np ranks differs from $want"
    done
    ;;
  speed_features)
    # bf16 autocast on CPU, the fused optimizer, per-phase timers and a Chrome trace of steps 2..3.
    # A CPU without native bf16 (no avx512_bf16/amx_bf16 in /proc/cpuinfo) must refuse autocast
    # naming the key; the features are then checked with the emulated bf16 the message offers.
    lm_data
    BF16=(--set train.autocast=bf16)
    if ! grep -qwE "avx512_bf16|amx_bf16" /proc/cpuinfo; then
      expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run0" "${TINY[@]}" \
        --set train.max_steps=4 --set eval.strategy=no "${BF16[@]}"
      expect_once "config key 'train.autocast': bf16 on this CPU would be emulated"
      note "no native bf16 on this CPU: refused naming train.autocast; the rest runs with train.autocast_emulated"
      BF16+=(--set train.autocast_emulated=true)
    fi
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run" "${TINY[@]}" \
      --set train.max_steps=4 --set log.every_steps=1 --set eval.strategy=no "${BF16[@]}" \
      --set train.optimizer_impl=fused --set log.trace_steps=2:3
    expect_text "ms/step median/max over ranks: .*forward [0-9]*/[0-9]* backward"
    # model.attention = auto under bf16 on a CPU resolves to eager, says so once, and the run stores it.
    expect_once "model.attention = auto: eager"
    expect_text "recompute none, attention eager"
    grep -qx "attention = 'eager'" "$WORK/run/config.toml" || fail "config.toml does not store model.attention = eager"
    python3 - "$WORK/run" <<'PY' || fail "phases / trace"
import json, sys
run = sys.argv[1]
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"loss"' in l]
assert len(lines) == 4
for l in lines:
    ph = l["phase_s"]
    for name in ("data", "forward", "backward", "comm", "optimizer", "eval", "checkpoint"):
        p = ph[name]
        assert p["min"] <= p["median"] <= p["max"], (name, p)
    assert ph["forward"]["median"] > 0 and ph["backward"]["median"] > 0 and ph["optimizer"]["median"] > 0
for rank in (0, 1):
    t = json.load(open(f"{run}/trace/rank{rank}.json"))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    steps = sorted({e["args"]["step"] for e in ev})
    names = {e["name"] for e in ev}
    assert steps == [2, 3], steps
    assert {"data", "forward", "backward", "optimizer", "comm"} <= names, names
    assert all(e["pid"] == rank and e["dur"] >= 0 for e in ev)
print(f"--- 4 steps with phase min/median/max; traces of steps 2..3 on both ranks ({len(ev)} events on rank 1)")
PY
    expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run2" "${TINY[@]}" \
      --set train.max_steps=4 --set eval.strategy=no --set log.trace_steps=3:9
    expect_text "config key 'log.trace_steps': steps 3..9 are outside the run (steps 1..4)"
    expect_once "outside the run"
    mkdir -p "$WORK/run3" && echo x >"$WORK/run3/trace"
    expect_rc 2 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run3" "${TINY[@]}" \
      --set train.max_steps=4 --set eval.strategy=no --set log.trace_steps=1:2
    expect_text "log.trace_steps directory $WORK/run3/trace cannot be created"
    # Selective recompute under bf16 autocast trains (it was refused before its backward made autocast's casts).
    expect_rc 0 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/run4" "${TINY[@]}" \
      --set train.max_steps=4 --set eval.strategy=no "${BF16[@]}" --set recompute.policy=selective
    expect_text "precision autocast bf16"
    ;;
  *) fail "unknown case" ;;
esac
echo "PASS($CASE)"
