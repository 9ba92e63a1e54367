"""Interoperability proof for hpctrain checkpoints: a checkpoint written by `hpctrain train` is read
with plain h5py into an equivalent PyTorch GPT (tests/python/hpctrain_ref/model.py), and that model's
validation loss equals `hpctrain eval --checkpoint FILE` on the same data. Then damaged counters
that pass the checksums (changed through h5py, which rewrites them, or a 16-bit word 0x0000 -> 0xFFFF
written into the file, which Fletcher32 cannot see) are refused by `inspect` and by a resume, each
naming the file and the counter.

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


def expect_refused(cmd, *needles):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 2 or not all(n in p.stdout for n in needles):
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode} (want 2 and {needles}):\n{p.stdout[-3000:]}")
    line = next((l for l in p.stdout.splitlines() if needles[-1] in l), "")
    print(f"refused (exit 2): {line.strip()[:200]}")


def patch_word_fletcher32_misses(path, dataset, value):
    """Turns bytes 2-3 of the int64 `value` in the dataset's only chunk from 00 00 into FF FF in place."""
    with h5py.File(path, "r") as f:
        offset = f[dataset].id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as f:
        f.seek(offset)
        assert f.read(8) == value.to_bytes(8, "little"), f"{dataset} does not hold {value} at byte {offset}"
        f.seek(offset + 2)
        f.write(b"\xff\xff")


def check_damaged_counters(hpctrain, ckpt, work, resume_args):
    """Each tampered copy passes the checksums (h5py rewrote them, or the change is one Fletcher32
    misses) and must still be refused by inspect and by a resume."""
    step_key = next(k for k in h5py.File(ckpt, "r")["optimizer/step"].keys())
    cases = [
        ("root_step", lambda f: f.attrs.modify("step", np.int64(31)), "root attribute step = 31 but /state/step = 30"),
        # A 16-bit word 0x0000 -> 0xFFFF written into the file's bytes, the stored checksum left as
        # it was: Fletcher32 (sums modulo 65535) cannot see it, the counter check must.
        ("state_step", None, f"/state/step = {30 + (0xFFFF << 16)}"),
        ("optimizer_step", lambda f: f[f"optimizer/step/{step_key}"].__setitem__((), 99),
         f"'optimizer/step/{step_key}' = 99 is not a step count between 0 and the training step 30"),
    ]
    for name, change, needle in cases:
        bad = os.path.join(work, f"damaged-{name}.h5")
        shutil.copy(ckpt, bad)
        if change is None:
            patch_word_fletcher32_misses(bad, "state/step", 30)
        else:
            with h5py.File(bad, "r+") as f:
                change(f)
        expect_refused([hpctrain, "inspect", bad], "checksums: OK", "counters: DAMAGED", bad, needle)
        expect_refused([hpctrain, "train", *resume_args, "--set", f"train.output_dir={work}/resume-{name}",
                        "--set", "train.max_steps=31", "--resume-from", bad], bad, needle)


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
    train_args = ["--set", f"data.path={data}", "--set", "model.n_layer=2", "--set", "model.d_model=64",
                  "--set", "model.n_head=4", "--set", "model.seq_len=64", "--set", "train.micro_batch_size=8",
                  "--set", "train.lr=3e-3", "--set", "train.threads=1", "--set", "train.device=cpu",
                  "--set", "train.peak_flops=1e12", "--set", "eval.strategy=no"]
    run([a.hpctrain, "train", *train_args, "--set", f"train.output_dir={work}/run", "--set", "train.max_steps=30"])
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
    check_damaged_counters(a.hpctrain, ckpt, work, train_args)
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS(checkpoint_interop)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
