"""Standalone checks of the PyTorch reference (no hpctrain binary needed): untrained loss ~ ln(V),
recompute changes nothing numerically, the schedule and sampler ports, DDP on 2 ranks equals one
process with twice the accumulation (same samples per step), and the communication counters of
the DDP / PeriodicModelAverager / Accelerate LocalSGD variants. Usage: test_reference.py WORKDIR"""
import math
import os
import sys

import torch

from common import Checks, read_jsonl, run_reference, step_lines
from hpctrain_ref import data, make_dataset
from hpctrain_ref.train_ref import lr_at

CONFIG = """
[model]
n_layer = 2
n_head = 2
d_model = 32
seq_len = 32
[data]
path = "{path}"
shuffle = true
[train]
micro_batch_size = 2
grad_accum_steps = 2
max_steps = 4
lr = 1e-3
warmup_steps = 1
threads = 1
[eval]
max_batches = 2
batch_size = 4
[local_sgd]
steps = 2
"""


def main(work):
    os.makedirs(work, exist_ok=True)
    c = Checks()
    ds_path = os.path.join(work, "ds.h5")
    make_dataset.write(ds_path, make_dataset.fortune_docs(300))
    cfg = os.path.join(work, "ref.toml")
    open(cfg, "w").write(CONFIG.format(path=ds_path))

    perm = data.epoch_permutation(1000, 1234, 0, True)
    c.check(sorted(perm) == list(range(1000)) and perm != list(range(1000)), "epoch_permutation is a shuffle")
    c.check(perm == data.epoch_permutation(1000, 1234, 0, True) and perm != data.epoch_permutation(1000, 1234, 1, True),
            "epoch_permutation deterministic per (seed, epoch)")
    t = {"lr": 1.0, "min_lr": 0.1, "warmup_steps": 2, "lr_schedule": "cosine"}
    c.check(abs(lr_at(t, 0, 12) - 0.5) < 1e-12 and abs(lr_at(t, 2, 12) - 1.0) < 1e-12
            and abs(lr_at(t, 12, 12) - 0.1) < 1e-12 and abs(lr_at(t, 7, 12) - 0.55) < 1e-12, "lr schedule points")

    # One process accumulating 4 micro-batches == DDP over 2 ranks accumulating 2 (same sample set per step).
    run_reference(f"{work}/acc4", cfg, ["train.grad_accum_steps=4"], extra=["--save-params", f"{work}/acc4.h5"])
    single = step_lines(f"{work}/acc4/metrics.jsonl")
    c.check(abs(single[0]["loss"] - math.log(258)) < 0.05 * math.log(258),
            f"untrained loss {single[0]['loss']:.4f} ~ ln(258) = {math.log(258):.4f}")
    c.check(all(math.isfinite(r["loss"]) for r in single) and len(single) == 4, "4 finite steps")
    run_reference(f"{work}/acc4_rc", cfg, ["train.grad_accum_steps=4"], extra=["--recompute"])
    rc = step_lines(f"{work}/acc4_rc/metrics.jsonl")
    c.check(max(abs(a["loss"] - b["loss"]) for a, b in zip(single, rc)) < 1e-6, "recompute: same losses")

    run_reference(f"{work}/ddp", cfg, [], variant="ddp", ranks=2,
                  extra=["--save-params", f"{work}/ddp.h5", "--ddp-count-hook"])
    a, b = data.read_checkpoint_params_any(f"{work}/acc4.h5"), data.read_checkpoint_params_any(f"{work}/ddp.h5")
    diff = max(float((a[k] - b[k]).abs().max()) for k in a)
    c.check(diff < 1e-5, f"ddp(2 ranks) == single(accum x2) after 4 steps: max |diff| {diff:.2e}")
    ddp = read_jsonl(f"{work}/ddp/summary-rank0.json")[0]
    n_bytes = sum(v.numel() * 4 for v in a.values())
    # The benchmark counts DDP's traffic as the parameter bytes per step; the hook measures it.
    c.check(ddp["bytes_per_step"] == n_bytes and ddp["allreduce_calls"] >= 4,
            f"ddp buckets counted by the comm hook: {ddp['bytes_per_step']} bytes/step == parameter bytes {n_bytes}")

    n_tensors = len(a)
    # 4 steps, N = 2: the averager runs after step indices 0 and 2, plus a final average;
    # Accelerate syncs every parameter tensor after steps 2 and 4 and again when its scope exits.
    for variant, calls, extra in (("pma", 3, []), ("accel", 3 * n_tensors, ["--recompute"])):
        out = f"{work}/{variant}{'_rc' if extra else ''}"
        run_reference(out, cfg, [], variant=variant, ranks=2, extra=extra)
        s = [read_jsonl(f"{out}/summary-rank{r}.json")[0] for r in range(2)]
        c.check(all(x["allreduce_calls"] == calls for x in s),
                f"{variant}{' +recompute' if extra else ''}: {s[0]['allreduce_calls']} all-reduces (expected {calls})")
        c.check(all(x["val_loss"] is not None and math.isfinite(x["val_loss"]) for x in s)
                and abs(s[0]["val_loss"] - s[1]["val_loss"]) < 1e-9, f"{variant}: ranks agree on val loss")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hpctrain-ref-test"))
