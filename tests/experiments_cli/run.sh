#!/usr/bin/env bash
# Issue 17 cases through the real binary under mpirun. Usage: run.sh CASE. Environment from ctest:
# HPCTRAIN, MPIEXEC, MPIEXEC_FLAGS (a ;-list), HPCTRAIN_SOURCE_DIR, OpenMPI root variables.
set -uo pipefail
source "$(dirname "$0")/../support/case.sh" exp "$1"
SRC="${HPCTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"

HT_MPI_TIMEOUT=240
TINY=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
      --set train.micro_batch_size=8 --set train.lr=3e-3 --set train.warmup_steps=5 --set train.threads=1
      --set train.device=cpu --set eval.max_batches=4)
# train NP OUT ARGS...: a tiny LM run on $WORK/lm.h5 into $WORK/OUT, expecting exit 0.
train() {
  local np=$1 out=$2; shift 2
  expect_rc 0 mpi "$np" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.output_dir="$WORK/$out" \
    "${TINY[@]}" "$@"
}
evals() {  # "step eval_loss" per evaluation of a run
  python3 -c "import json,sys;[print(l['step'],l['eval_loss']) for l in map(json.loads,open(sys.argv[1])) if 'eval_loss' in l]" \
    "$WORK/$1/metrics.jsonl"
}

case "$CASE" in
  tensorboard)
    lm_data
    train 2 run --set train.max_steps=12 --set log.every_steps=4 --set eval.strategy=steps --set eval.every_steps=6 \
      --set log.tensorboard=true
    ls "$WORK/run/"events.out.tfevents.* >/dev/null 2>&1 || fail "no event file in the run directory"
    # Expected: every number of every metrics line under its JSON path, and config.toml as text.
    python3 - "$WORK/run" >"$WORK/expected.json" <<'PY' || fail "expected"
import json, sys
run = sys.argv[1]
scalars = {}
def walk(obj, prefix, step):
    for k, v in obj.items():
        tag = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            walk(v, tag, step)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and tag != "step":
            scalars.setdefault(tag, []).append([step, v])
for line in open(f"{run}/metrics.jsonl"):
    m = json.loads(line)
    walk(m, "", m["step"])
assert "loss" in scalars and "eval_loss" in scalars and "phase_s/forward/median" in scalars, sorted(scalars)
print(json.dumps({"scalars": scalars, "text": {"config": open(f"{run}/config.toml").read()}}))
PY
    bash "$SRC/tests/python/with_venv.sh" "$SRC/tests/python/tb_read.py" "$WORK/run" "$WORK/expected.json" \
      || fail "TensorBoard events differ from metrics.jsonl"
    ;;
  best_checkpoint)
    # lr 0.1: the validation accuracy climbs, then stays flat at the unigram plateau, so its best
    # (first reached, strict improvements only) is older than the two checkpoints the rotation keeps.
    lm_data
    RUN=(--set train.max_steps=32 --set eval.strategy=steps --set eval.every_steps=4 --set train.lr=0.1
         --set train.lr_schedule=constant --set train.grad_clip=0 --set checkpoint.every_steps=4 --set checkpoint.keep=2
         --set local_sgd.enabled=true --set local_sgd.steps=3)
    train 2 run "${RUN[@]}" --set checkpoint.keep_best=true --set checkpoint.best_metric=eval_accuracy
    read -r best_step best_loss < <(python3 - "$WORK/run/metrics.jsonl" <<'PY'
import json, sys
evals = [l for l in map(json.loads, open(sys.argv[1])) if "eval_loss" in l]
for e in evals: print(f"step {e['step']}: eval_accuracy {e['eval_accuracy']:.6f} eval_loss {e['eval_loss']:.6f}", file=sys.stderr)
best = max(evals, key=lambda e: (e["eval_accuracy"], -e["step"]))
print(best["step"], best["eval_loss"])
PY
)
    want=$(printf 'best-%08d.h5' "$best_step")
    [ "$(cat "$WORK/run/checkpoints/best")" = "$want" ] || fail "best pointer '$(cat "$WORK/run/checkpoints/best")', want $want"
    [ "$(ls "$WORK/run/checkpoints/"best-*.h5 | wc -l)" -eq 1 ] || fail "superseded best files were not removed"
    kept=$(cd "$WORK/run/checkpoints" && ls ckpt-*.h5 | tr '\n' ' ')
    echo "kept: $kept best: $want"
    oldest=$(ls "$WORK/run/checkpoints/"ckpt-*.h5 | head -n 1 | sed 's/.*ckpt-0*\([0-9]*\)\.h5/\1/')
    [ "$best_step" -lt "$oldest" ] || fail "the best (step $best_step) is not older than the kept checkpoints ($kept)"
    # The best file holds the averaged model that was evaluated (local SGD: step 4k is mid-interval).
    expect_rc 0 mpi 2 "$HPCTRAIN" eval --checkpoint best --set train.output_dir="$WORK/run" --set eval.max_batches=4
    got=$(awk '/^eval_loss/{print $2}' "$WORK/out.txt")
    python3 -c "import sys; w,g=$best_loss,$got; sys.exit(abs(w-g) > 1e-5*abs(w))" \
      || fail "eval of best: $got, the run logged $best_loss at step $best_step"
    expect_rc 0 mpi 1 "$HPCTRAIN" eval --checkpoint latest --set train.output_dir="$WORK/run" --set eval.max_batches=4
    expect_text "ckpt-00000032.h5"
    # Saves are passive: the same run without keep_best ends with the same final model.
    train 2 plain "${RUN[@]}"
    h5diff "$WORK/run/checkpoints/ckpt-00000032.h5" "$WORK/plain/checkpoints/ckpt-00000032.h5" /model /model \
      || fail "keep_best changed the training"
    ;;
  early_stopping)
    # Threshold 10 nats: no later evaluation improves by more, so patience 2 stops at the third
    # evaluation (step 12 of 40); the best still follows each (smaller) improvement.
    lm_data
    train 2 run --set train.max_steps=40 --set eval.strategy=steps --set eval.every_steps=4 \
      --set train.early_stopping_patience=2 --set train.early_stopping_threshold=10
    expect_text "early stopping: eval_loss has not improved by more than 10 for 2 evaluations (best .* at step 12)"
    expect_text "stopping at step 12 of 40"
    [ -f "$WORK/run/checkpoints/ckpt-00000012.h5" ] || fail "no checkpoint at the stopping step"
    last=$(python3 -c "import json;print(max(json.loads(l)['step'] for l in open('$WORK/run/metrics.jsonl')))")
    [ "$last" = 12 ] || fail "trained until step $last"
    ;;
  early_stopping_resume)
    # Patience 3 with evaluations every 4 steps stops at step 16 straight; stopped at step 8 and
    # resumed, the count (1 after step 8) must continue so the resumed run stops at 16 too.
    lm_data
    ES=(--set eval.strategy=steps --set eval.every_steps=4 --set train.early_stopping_patience=3
        --set train.early_stopping_threshold=10 --set train.lr_schedule=constant)
    train 2 straight --set train.max_steps=40 "${ES[@]}"
    expect_text "stopping at step 16 of 40"
    train 2 part --set train.max_steps=8 "${ES[@]}"
    train 2 part --set train.max_steps=40 "${ES[@]}" --resume
    expect_text "resumed at step 8"
    expect_text "stopping at step 16 of 40"
    ;;
  refusals)
    lm_data
    expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set train.early_stopping_patience=2 \
      --set eval.strategy=no
    expect_text "train.early_stopping_patience"; expect_text "eval.strategy = no"
    expect_once "config key"
    expect_rc 1 mpi 2 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set checkpoint.keep_best=true \
      --set checkpoint.best_metric=eval_f1
    expect_text "checkpoint.best_metric"; expect_text "eval_f1 is never logged"
    expect_rc 1 mpi 1 "$HPCTRAIN" train --set data.path="$WORK/lm.h5" --set checkpoint.best_metric=bleu
    expect_text "checkpoint.best_metric"
    expect_rc 2 mpi 2 "$HPCTRAIN" eval --checkpoint best --set train.output_dir="$WORK/none"
    expect_text "$WORK/none/checkpoints/best: no such checkpoint pointer"
    ;;
  plot)
    command -v gnuplot >/dev/null || { source "$SRC/tests/support/skip.sh"; skip_suite "gnuplot not installed"; }
    lm_data
    train 2 run --set train.max_steps=8 --set log.every_steps=2 --set eval.strategy=steps --set eval.every_steps=4
    expect_text "plot: $WORK/run/loss.png"
    python3 - "$WORK/run/loss.png" <<'PY' || fail "loss.png is not a PNG"
import os, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(sys.argv[1]) > 0, data[:8]
print(f"loss.png: PNG, {len(data)} bytes")
PY
    rm "$WORK/run/loss.png"
    expect_rc 0 "$HPCTRAIN" plot "$WORK/run" --output "$WORK"
    [ "$(head -c 4 "$WORK/loss.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "hpctrain plot wrote no PNG"
    # Two runs whose directories share a base name: the legend tells them apart by the path's
    # distinguishing part; --log-x draws runs of different lengths side by side.
    mkdir -p "$WORK/a" "$WORK/b"
    cp -r "$WORK/run" "$WORK/a/run"
    train 2 b/run --set train.max_steps=2 --set log.every_steps=1 --set eval.strategy=no --set log.plot=false
    expect_rc 0 "$HPCTRAIN" plot "$WORK/a/run" "$WORK/b/run" --output "$WORK/two" --log-x
    expect_once "plot: wrote $WORK/two/loss.png (runs: a/run, b/run)"
    [ -s "$WORK/two/loss.png" ] || fail "no PNG of the two runs"
    grep -q '"ranks":2' "$WORK/run/metrics.jsonl" || fail "metrics lines do not name the ranks (the plot title uses them)"
    # The time axis: train_seconds counts the steps log.every_steps = 2 did not log (3, 5, 7) too, so
    # the last line's exceeds the sum of the logged step times; an evaluation shares its step's value.
    python3 - "$WORK/run/metrics.jsonl" <<'PY' || fail "train_seconds"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "loss" in r]
evals = {r["step"]: r["train_seconds"] for r in rows if "eval_loss" in r}
assert [r["step"] for r in train] == [1, 2, 4, 6, 8], [r["step"] for r in train]
t = [r["train_seconds"] for r in train]
assert all(a < b for a, b in zip(t, t[1:])), t
logged = sum(r["step_seconds"] for r in train)
assert t[-1] > logged, (t[-1], logged)
by_step = {r["step"]: r["train_seconds"] for r in train}
assert sorted(evals) == [4, 8] and all(evals[s] == by_step[s] for s in evals), (evals, by_step)
print(f"train_seconds at step 8: {t[-1]:.4f} s, logged step times {logged:.4f} s; evaluations at {by_step}")
PY
    ;;
  plot_without_gnuplot)
    lm_data
    train 1 run --set train.max_steps=2 --set log.every_steps=1 --set eval.strategy=no --set log.plot=false
    # PATH with everything but gnuplot.
    mkdir "$WORK/bin"
    for tool in /usr/bin/* /bin/*; do
      [ "$(basename "$tool")" = gnuplot ] || ln -sf "$tool" "$WORK/bin/" 2>/dev/null
    done
    expect_rc 0 env PATH="$WORK/bin" "$HPCTRAIN" plot "$WORK/run"
    expect_once "gnuplot not found"
    [ ! -e "$WORK/run/loss.png" ] || fail "a PNG appeared without gnuplot"
    ;;
  plot_bad_lines)
    # A metrics line with a field of the wrong type is skipped with one warning naming file:line and
    # the field (a NaN loss is written as null); a torn last line is skipped silently.
    command -v gnuplot >/dev/null || { source "$SRC/tests/support/skip.sh"; skip_suite "gnuplot not installed"; }
    lm_data
    train 1 run --set train.max_steps=6 --set log.every_steps=1 --set eval.strategy=no --set log.plot=false
    python3 - "$WORK/run/metrics.jsonl" <<'PY' || fail "edit metrics.jsonl"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
for i, loss in ((1, "oops"), (3, None)):
    j = json.loads(lines[i]); j["loss"] = loss; lines[i] = json.dumps(j)
open(sys.argv[1], "w").write("\n".join(lines) + '\n{"step": 7, "lo')
PY
    expect_rc 0 mpi 2 "$HPCTRAIN" plot "$WORK/run"
    expect_once "plot: $WORK/run/metrics.jsonl:2: field \"loss\" is a string (\"oops\"), expected a number; line skipped (and 1 more such lines)"
    expect_once "plot: wrote $WORK/run/loss.png"
    [ "$(head -c 4 "$WORK/run/loss.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "no PNG"
    ;;
  plot_output)
    # --output: created when missing, refused naming --output when it cannot be; gnuplot's own
    # words (a one-point run's "empty x range" warnings, its errors) never reach the console alone.
    command -v gnuplot >/dev/null || { source "$SRC/tests/support/skip.sh"; skip_suite "gnuplot not installed"; }
    lm_data
    train 1 run --set train.max_steps=1 --set eval.strategy=no
    expect_once "plot: $WORK/run/loss.png"
    grep -qi "warning: empty\|adjusting to" "$WORK/out.txt" && fail "gnuplot's warnings on the console"
    expect_rc 0 mpi 2 "$HPCTRAIN" plot "$WORK/run" --output "$WORK/new/sub"
    [ -s "$WORK/new/sub/loss.png" ] || fail "no PNG in the created --output"
    touch "$WORK/afile"
    expect_rc 2 mpi 2 "$HPCTRAIN" plot "$WORK/run" --output "$WORK/afile/sub"
    expect_once "plot: --output $WORK/afile/sub cannot be created: $WORK/afile/sub: cannot create directory: Not a directory"
    if [ "$(id -u)" != 0 ]; then  # root writes anywhere
      mkdir "$WORK/ro" && chmod 555 "$WORK/ro"
      expect_rc 2 "$HPCTRAIN" plot "$WORK/run" --output "$WORK/ro"
      expect_once "plot: --output $WORK/ro is not writable"
    fi
    # A gnuplot that fails: its messages appear once, inside the one error line.
    mkdir "$WORK/bin"
    printf '#!/bin/sh\necho "line 3: cannot open file" >&2\necho "         ^" >&2\necho "plot failed here" >&2\nexit 1\n' \
      >"$WORK/bin/gnuplot"
    chmod +x "$WORK/bin/gnuplot"
    expect_rc 2 env PATH="$WORK/bin:$PATH" "$HPCTRAIN" plot "$WORK/run"
    expect_once "plot: gnuplot could not draw $WORK/run/loss.png (exit status 1): line 3: cannot open file / plot failed here"
    [ "$(wc -l <"$WORK/out.txt")" -eq 1 ] || fail "more than the one error line"
    ;;
  plot_signal)
    # Slurm delivers the pre-emption signal (USR1) to every process of the job step; one that arrives
    # while a finished run draws its plot must not kill gnuplot ("gnuplot failed ... (status 10)").
    # This gnuplot sends USR1 to the trainer and to itself, as srun does, then runs the real one.
    command -v gnuplot >/dev/null || { source "$SRC/tests/support/skip.sh"; skip_suite "gnuplot not installed"; }
    lm_data
    mkdir "$WORK/bin"
    printf '#!/bin/sh\nkill -USR1 $PPID $$\nexec %s "$@"\n' "$(command -v gnuplot)" >"$WORK/bin/gnuplot"
    chmod +x "$WORK/bin/gnuplot"
    # Without mpirun: mpirun started by its absolute path puts its own bin directory first in PATH.
    expect_rc 0 env PATH="$WORK/bin:$PATH" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" \
      --set train.output_dir="$WORK/run" "${TINY[@]}" --set train.max_steps=2 --set log.every_steps=1 \
      --set eval.strategy=no
    expect_once "plot: $WORK/run/loss.png"
    grep -q "no plot drawn" "$WORK/out.txt" && fail "the signal cost the plot"
    [ -s "$WORK/run/loss.png" ] || fail "no loss.png"
    ;;
  eval_subset)
    # langid (4 languages; the validation split is stored language by language). eval.max_batches = 2
    # x batch 8: 16 samples, drawn at random over the split, the same on 1 and 2 ranks.
    inputs=()
    for lang in en:"$FORTUNES" de:"$FORTUNES/de" it:"$FORTUNES/it" es:"$FORTUNES/es"; do inputs+=("${lang%%:*}=${lang#*:}"); done
    "$HPCTRAIN" prepare --labels-from-dirs --input "${inputs[@]}" --seq-len 64 --output "$WORK/langid.h5" \
      --val-fraction 0.1 >/dev/null 2>&1 || fail "prepare langid"
    expect_rc 0 mpi 2 "$HPCTRAIN" train --config "$SRC/inputs/configs/langid.toml" --set data.path="$WORK/langid.h5" \
      --set train.output_dir="$WORK/run" --set model.seq_len=64 --set train.max_steps=10 --set eval.strategy=no \
      --set train.threads=1 --set log.plot=false
    ckpt=$(ls "$WORK/run/checkpoints/"ckpt-*.h5 | tail -n 1)
    for np in 1 2 3; do
      expect_rc 0 mpi $np "$HPCTRAIN" eval --checkpoint "$ckpt" --set eval.max_batches=2 --set eval.batch_size=8 \
        --set train.threads=1
      grep '^eval_' "$WORK/out.txt" >"$WORK/np$np.txt"
    done
    python3 - "$WORK"/np1.txt "$WORK"/np2.txt "$WORK"/np3.txt <<'PY' || fail "subset differs between rank counts"
import sys
rows = [{k: float(v) for k, v in (l.split() for l in open(p))} for p in sys.argv[1:]]
for np, r in enumerate(rows, 1):
    print(f"np{np}: eval_loss {r['eval_loss']:.9f} count {r['eval_count']:.0f} labels {r['eval_labels_present']:.0f}")
first = rows[0]
assert first["eval_count"] == 16, f"{first['eval_count']} samples evaluated, expected 16"
assert first["eval_labels_present"] > 1, "the subset holds one language only"
for r in rows[1:]:
    assert r["eval_count"] == 16 and r["eval_labels_present"] == first["eval_labels_present"], rows
    assert abs(r["eval_loss"] - first["eval_loss"]) <= 1e-6 * abs(first["eval_loss"]), rows
PY
    ;;
  *) fail "unknown case" ;;
esac
echo "PASS($CASE)"
