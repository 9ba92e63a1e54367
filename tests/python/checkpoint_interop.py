"""Interoperability proof for hpctrain checkpoints: a checkpoint written by `hpctrain train` is read
with plain h5py into an equivalent PyTorch GPT (tests/python/hpctrain_ref/model.py), and that model's
validation loss equals `hpctrain eval --checkpoint FILE` on the same data.

Usage: checkpoint_interop.py --hpctrain BIN [--work DIR]   (run through with_venv.sh; a missing
prerequisite ends it through tests/support/skip.sh: exit 77 = skipped, or 1 under scripts/test.sh)
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

import h5py
import numpy as np
import torch

from common import skip_suite
from hpctrain_ref.model import Gpt, GptOptions

FORTUNES = "/usr/share/games/fortunes/fortunes"


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return p.stdout


def read_checkpoint(path):
    """Everything a user needs, with h5py alone: provenance, config text, /model tensors."""
    with h5py.File(path, "r") as f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        assert attrs["format"] == "hpctrain-checkpoint" and int(attrs["format_version"]) == 1, attrs
        config = f["config"][0].decode()
        params = {}
        for name, ds in f["model"].items():
            assert ds.fletcher32, f"/model/{name} has no Fletcher32 checksum"
            params[name] = torch.from_numpy(np.asarray(ds[()]))
        step = int(f["state/step"][0])
    return attrs, tomllib.loads(config), params, step


def val_loss(model, data_path, seq_len, batch):
    """Mean next-token cross-entropy over the whole validation split (windows of seq_len + 1 tokens
    every seq_len tokens, as data::EvalReader reads them on one rank)."""
    with h5py.File(data_path, "r") as f:
        tokens = np.asarray(f["val/tokens"][()], dtype=np.int64)
    n = (len(tokens) - 1) // seq_len
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, n, batch):
            ids = range(start, min(n, start + batch))
            rows = torch.from_numpy(np.stack([tokens[i * seq_len: i * seq_len + seq_len + 1] for i in ids]))
            x, y = rows[:, :-1], rows[:, 1:]
            logits = model.lm_logits(x).float()
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                                                       reduction="sum").item()
            count += y.numel()
    return total / count, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpctrain", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    if not os.path.exists(FORTUNES):
        skip_suite(f"{FORTUNES} missing (apt-get install fortunes)")
    work = a.work or tempfile.mkdtemp(prefix="ht-interop-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.set_num_threads(1)
    data = os.path.join(work, "lm.h5")
    run([a.hpctrain, "prepare", "--input", FORTUNES, "--output", data, "--val-fraction", "0.1"])
    run([a.hpctrain, "train", "--set", f"data.path={data}", "--set", f"train.output_dir={work}/run",
         "--set", "model.n_layer=2", "--set", "model.d_model=64", "--set", "model.n_head=4",
         "--set", "model.seq_len=64", "--set", "train.micro_batch_size=8", "--set", "train.max_steps=30",
         "--set", "train.lr=3e-3", "--set", "train.threads=1", "--set", "train.device=cpu",
         "--set", "train.peak_flops=1e12", "--set", "eval.strategy=no"])
    ckpt = os.path.join(work, "run", "checkpoints", "ckpt-00000030.h5")
    out = run([a.hpctrain, "eval", "--checkpoint", ckpt, "--set", "eval.max_batches=0"])
    m = re.search(r"eval_loss ([0-9.]+)", out)
    assert m, out
    ours = float(m.group(1))

    attrs, cfg, params, step = read_checkpoint(ckpt)
    mc = cfg["model"]
    opts = GptOptions(vocab_size=int(mc["vocab_size"]), n_layer=int(mc["n_layer"]), n_head=int(mc["n_head"]),
                      d_model=int(mc["d_model"]), max_seq_len=int(mc.get("max_seq_len") or mc["seq_len"]),
                      dropout=0.0, bias=bool(mc.get("bias", True)))
    model = Gpt(opts)
    state = model.state_dict()
    assert set(state) == set(params), (sorted(set(state) ^ set(params)))[:5]
    model.load_state_dict(params, strict=True)
    ref, count = val_loss(model, data, int(mc["seq_len"]), int(cfg["eval"]["batch_size"]))
    print(f"checkpoint {ckpt}: step {step}, {len(params)} tensors, written by hpctrain {attrs['hpctrain_version']} "
          f"/ libtorch {attrs['torch_version']} on {attrs['world_size']} rank(s)")
    print(f"validation loss: hpctrain eval {ours:.6f}, PyTorch + h5py {ref:.6f} ({count} tokens), "
          f"difference {abs(ours - ref):.2e}")
    assert step == 30
    assert math.isfinite(ref) and abs(ours - ref) <= 2e-6 + 1e-5 * abs(ref), "validation losses differ"
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS(checkpoint_interop)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
