"""Correctness cross-check of `hpctrain train` against the PyTorch reference (issue 9, part 3).

Both sides start from the same weights (ours writes them: a 1-step run with lr = 1e-30 leaves the
seed's initialisation unchanged in its final checkpoint), read the same batches (same dataset
file, same shuffled order: data::epoch_permutation is ported to Python) with dropout 0, on 2 ranks:
  1. synchronous data parallel: ours (per-step gradient all-reduce) vs torch DDP over gloo:
     first-step loss equal to 1e-5 relative, every step's loss, and the parameters after 20 steps.
  2. local SGD, N = 4: ours (local_sgd.enabled) vs Accelerate's LocalSGD: parameters after 20 steps.
Usage: crosscheck.py --hpctrain BIN --work DIR
"""
import argparse
import json
import math
import os
import shutil
import sys

from common import Checks, latest_checkpoint, read_jsonl, run_ours, run_reference, step_lines
from hpctrain_ref import make_dataset
from hpctrain_ref.data import read_checkpoint_params_any

STEPS = 20
CONFIG = """
[model]
n_layer = 2
n_head = 4
d_model = 64
seq_len = 32
dropout = 0.0
[data]
path = "{path}"
shuffle = true
seed = 7
[train]
micro_batch_size = 4
grad_accum_steps = 2
max_steps = {steps}
lr = 2e-3
min_lr = 1e-4
warmup_steps = 3
lr_schedule = "cosine"
weight_decay = 0.1
grad_clip = 1.0
threads = 1
seed = 42
[eval]
strategy = "no"
[log]
every_steps = 1
[local_sgd]
steps = 4
"""


def param_diff(ours, theirs):
    """(max |a-b| over all parameters / largest |b| of all parameters, worst per-tensor max|a-b| / max|b|
    with its tensor name, max |a-b|)."""
    worst, name, abs_max, scale = 0.0, "", 0.0, 0.0
    for k, b in theirs.items():
        d = float((ours[k] - b).abs().max())
        mag = float(b.abs().max())
        abs_max, scale = max(abs_max, d), max(scale, mag)
        if d / max(mag, 1e-12) >= worst:
            worst, name = d / max(mag, 1e-12), k
    return abs_max / scale, worst, name, abs_max


def check_params(c, what, ours_path, theirs_path):
    """Parameters agree within float tolerance: 1e-4 of the parameters' scale overall and 1e-3 of each
    tensor's own largest magnitude (AdamW normalises updates, so components whose gradient is at rounding
    level can move by a few ulps of lr in either direction: small biases show the largest relative diff)."""
    rel, worst, name, d = param_diff(read_checkpoint_params_any(ours_path), read_checkpoint_params_any(theirs_path))
    c.check(rel < 1e-4, f"{what}: max |diff| {d:.2e} = {rel:.2e} of the parameter scale (< 1e-4)")
    c.check(worst < 1e-3, f"{what}: worst tensor {name}: max |diff| / max |value| = {worst:.2e} (< 1e-3)")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hpctrain", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    if not os.access(a.hpctrain, os.X_OK):
        print(f"crosscheck: hpctrain binary {a.hpctrain} not found or not executable; build target hpctrain")
        return 1
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    w = a.work
    ds = os.path.join(w, "ds.h5")
    make_dataset.write(ds, make_dataset.fortune_docs(600))
    cfg = os.path.join(w, "cross.toml")
    open(cfg, "w").write(CONFIG.format(path=ds, steps=STEPS))
    c = Checks()

    # Initial weights: our init, untouched by one step at lr 1e-30.
    run_ours(a.hpctrain, f"{w}/init", cfg, ["train.max_steps=1", "train.lr=1e-30", "train.min_lr=0",
                                           "train.lr_schedule=constant", "train.warmup_steps=0"])
    init = latest_checkpoint(f"{w}/init")

    # 1. Synchronous data parallel, evaluated at the end on a seeded subset of the validation split
    # (eval.max_batches > 0): both sides must draw the same global samples.
    ev = ["eval.strategy=steps", f"eval.every_steps={STEPS}", "eval.max_batches=3", "eval.batch_size=4"]
    run_ours(a.hpctrain, f"{w}/ours_dp", cfg, ev)
    run_reference(f"{w}/ref_ddp", cfg, ev, variant="ddp", ranks=2,
                  extra=["--init", init, "--save-params", f"{w}/ref_ddp.h5"])
    ours, ref = step_lines(f"{w}/ours_dp/metrics.jsonl"), step_lines(f"{w}/ref_ddp/metrics.jsonl")
    c.check(len(ours) == STEPS and len(ref) == STEPS, f"both logged {STEPS} steps (ours {len(ours)}, ref {len(ref)})")
    l0, r0 = ours[0]["loss"], ref[0]["loss"]
    rel0 = abs(l0 - r0) / abs(r0)
    c.check(rel0 <= 1e-5, f"first-step loss: ours {l0:.8f} vs torch {r0:.8f} (relative diff {rel0:.2e} <= 1e-5)")
    # zip stops at the shorter list: without the length check above, a side that logged fewer steps
    # would be compared on its steps only; with no step at all, the diff is infinite (a failure).
    rel_all = max((abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(ours, ref)), default=math.inf)
    c.check(rel_all <= 1e-4, f"all {STEPS} step losses agree: max relative diff {rel_all:.2e} <= 1e-4")
    c.check(ours[-1]["loss"] < ours[0]["loss"] - 0.5, f"loss decreases ({ours[0]['loss']:.3f} -> {ours[-1]['loss']:.3f})")
    check_params(c, f"parameters after {STEPS} DP steps", latest_checkpoint(f"{w}/ours_dp"), f"{w}/ref_ddp.h5")
    ours_eval = [r["eval_loss"] for r in read_jsonl(f"{w}/ours_dp/metrics.jsonl") if "eval_loss" in r]
    ref_eval = json.load(open(f"{w}/ref_ddp/summary-rank0.json"))["val_loss"]
    rel_eval = abs(ours_eval[-1] - ref_eval) / abs(ref_eval) if ours_eval and ref_eval else float("inf")
    c.check(rel_eval <= 1e-4, f"eval loss on the seeded subset of 12 validation samples: ours "
            f"{ours_eval[-1] if ours_eval else None} vs torch {ref_eval} (relative diff {rel_eval:.2e} <= 1e-4)")

    # 2. Local SGD, N = 4, optimizer moments kept local (Accelerate's behaviour).
    lsgd = ["local_sgd.enabled=true", "local_sgd.steps=4", "local_sgd.optimizer_state=local", "local_sgd.warmup_steps=0"]
    run_ours(a.hpctrain, f"{w}/ours_lsgd", cfg, lsgd)
    run_reference(f"{w}/ref_accel", cfg, [], variant="accel", ranks=2,
                  extra=["--init", init, "--save-params", f"{w}/ref_accel.h5"])
    ours, ref = step_lines(f"{w}/ours_lsgd/metrics.jsonl"), step_lines(f"{w}/ref_accel/metrics.jsonl")
    c.check(len(ours) == STEPS and len(ref) == STEPS,
            f"local SGD: both logged {STEPS} steps (ours {len(ours)}, Accelerate {len(ref)})")
    rel_all = max((abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(ours, ref)), default=math.inf)
    c.check(rel_all <= 1e-4, f"local SGD: all {STEPS} rank-0 losses agree: max relative diff {rel_all:.2e} <= 1e-4")
    check_params(c, f"parameters after {STEPS} local-SGD steps vs Accelerate LocalSGD",
                 latest_checkpoint(f"{w}/ours_lsgd"), f"{w}/ref_accel.h5")
    ours_bytes = ours[-1].get("bytes_sent") if ours else None
    ref_bytes = ref[-1].get("bytes_sent") if ref else None
    c.check(ours_bytes is not None and ours_bytes == ref_bytes,
            f"local SGD bytes per rank over {STEPS} steps: ours {ours_bytes} == Accelerate {ref_bytes}")
    c.check(all(math.isfinite(x["loss"]) for x in ours + ref), "no NaN")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
