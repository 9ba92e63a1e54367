"""hpctrain <-> Hugging Face transformers, with the real library (label "python"):
  export:    a trained checkpoint exported with `hpctrain export` loads as GPT2LMHeadModel and gives the
             validation loss of `hpctrain eval` (same samples and batches, fp32) to 2e-6 relative; greedy
             `hpctrain generate` (with and without KV cache) equals transformers' greedy generate token
             for token, the prompt encoded by the exported tokenizer.json as `hpctrain prepare` would;
  init_from: a random GPT2LMHeadModel saved by transformers, loaded through model.init_from, gives
             transformers' loss on our data, and its weights arrive unchanged in our checkpoint.
Usage: hf_interop_check.py export|init_from --hpctrain BIN --work DIR"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import torch

from common import Checks, mpi_env, mpi_prefix, run
from hpctrain_ref.data import eval_subset

FORTUNES = "/usr/share/games/fortunes"
T, BATCH, BATCHES = 64, 8, 4  # eval: seq_len, eval.batch_size, eval.max_batches
TINY = ["model.n_layer=2", "model.d_model=64", "model.n_head=4", f"model.seq_len={T}", "train.micro_batch_size=8",
        "train.threads=1", "eval.strategy=no", f"eval.batch_size={BATCH}", f"eval.max_batches={BATCHES}"]
REL_TOL = 2e-6


def hpctrain(binary, args, log):
    run(mpi_prefix(1) + [binary, *args], log, env=mpi_env())
    return open(log).read()


def train(binary, work, name, data, extra):
    out = os.path.join(work, name)
    args = ["train", "--set", f"data.path={data}", "--set", f"train.output_dir={out}"]
    for o in TINY + extra:
        args += ["--set", o]
    hpctrain(binary, args, os.path.join(work, name + ".log"))
    ckpts = sorted(os.listdir(os.path.join(out, "checkpoints")))
    return os.path.join(out, "checkpoints", [c for c in ckpts if c.endswith(".h5")][-1])


def our_eval_loss(binary, work, ckpt):
    out = hpctrain(binary, ["eval", "--checkpoint", ckpt], os.path.join(work, "eval.log"))
    return float(re.search(r"eval_loss ([0-9.]+)", out).group(1))


def hf_eval_loss(model, data, seed=1234):
    """Mean next-token cross-entropy over the samples `hpctrain eval` reads: sample i is tokens
    [i*T, i*T + T + 1) of /val/tokens; eval.max_batches = BATCHES selects the seeded subset of
    BATCHES x BATCH samples (data::eval_subset with data.seed, default 1234)."""
    tokens = h5py.File(data, "r")["/val/tokens"][:].astype(np.int64)
    ids = eval_subset((len(tokens) - 1) // T, BATCH * BATCHES, seed)
    n = len(ids)
    rows = torch.tensor(np.stack([tokens[i * T:i * T + T + 1] for i in ids]))
    loss_sum, count = 0.0, 0
    with torch.no_grad():
        for b in range(0, n, BATCH):
            x = rows[b:b + BATCH]
            logits = model(x[:, :T]).logits.float()
            loss_sum += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1),
                                                          reduction="sum").double().item()
            count += x[:, 1:].numel()
    return loss_sum / count


def compare_losses(checks, ours, theirs, what):
    rel = abs(ours - theirs) / abs(theirs)
    print(f"{what}: hpctrain eval {ours:.6f}, transformers {theirs:.8f}, relative difference {rel:.2e} "
          f"(hpctrain prints 6 decimals)")
    checks.check(rel <= REL_TOL, f"{what}: losses agree to {REL_TOL} relative")


def check_export(binary, work, checks):
    from tokenizers import Tokenizer
    from transformers import GPT2LMHeadModel
    data = os.path.join(work, "bpe.h5")
    run([binary, "prepare", "--input", f"{FORTUNES}/fortunes", "--output", data, "--tokenizer", "bpe",
         "--vocab-size", "512", "--val-fraction", "0.1"], os.path.join(work, "prepare.log"))
    ckpt = train(binary, work, "run", data, ["train.max_steps=40", "train.lr=3e-3"])
    export = os.path.join(work, "hf")
    print(hpctrain(binary, ["export", "--checkpoint", ckpt, "--output", export], os.path.join(work, "export.log")))
    model = GPT2LMHeadModel.from_pretrained(export, torch_dtype=torch.float32).eval()
    compare_losses(checks, our_eval_loss(binary, work, ckpt), hf_eval_loss(model, data), "export (a)")

    prompt, new = "The meaning of life is ", 48
    ours = {}
    for mode in ["", "--no-kv-cache"]:
        args = ["generate", "--checkpoint", ckpt, "--prompt", prompt, "--max-new-tokens", str(new), "--temperature",
                "0", "--ignore-eos", "--print-ids"] + ([mode] if mode else [])
        out = hpctrain(binary, args, os.path.join(work, f"generate{mode}.log"))
        ours[mode] = [int(t) for t in re.search(r"^ids ([0-9 ]+)$", out, re.M).group(1).split()]
        print(f"hpctrain generate {mode or '(KV cache)'}: {out.strip().splitlines()[-1]}")
    prompt_ids = Tokenizer.from_file(os.path.join(export, "tokenizer.json")).encode(prompt).ids
    model.generation_config.eos_token_id = None  # as --ignore-eos: exactly `new` tokens
    with torch.no_grad():
        hf = model.generate(torch.tensor([prompt_ids]), max_new_tokens=new, do_sample=False, pad_token_id=256)
    theirs = hf[0, len(prompt_ids):].tolist()
    print(f"transformers greedy: {theirs}")
    checks.check(len(theirs) == new and ours[""] == theirs, f"greedy generate (c): {new} tokens equal transformers'")
    checks.check(ours["--no-kv-cache"] == ours[""], "greedy generate: KV cache and full recompute give the same ids")


def check_init_from(binary, work, checks):
    from transformers import GPT2Config, GPT2LMHeadModel
    data = os.path.join(work, "byte.h5")
    run([binary, "prepare", "--input", f"{FORTUNES}/fortunes", "--output", data, "--val-fraction", "0.1"],
        os.path.join(work, "prepare.log"))
    torch.manual_seed(7)
    cfg = GPT2Config(vocab_size=258, n_positions=T, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=257,
                     eos_token_id=257, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a mix-up of any tensor changes the loss
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    src = os.path.join(work, "hf-random")
    model.save_pretrained(src, safe_serialization=True)
    # One step at lr 1e-30 (the config requires lr > 0): every update is below the fp32 spacing of
    # the weights it touches, so the checkpoint holds the imported weights; checked below.
    ckpt = train(binary, work, "run", data, [f"model.init_from={src}", "train.max_steps=1", "train.lr=1e-30",
                                             "train.min_lr=0", "train.warmup_steps=0"])
    sd = model.state_dict()
    f = h5py.File(ckpt, "r")
    worst = 0.0
    for i in range(2):
        for ours, hf, tr in [("attn.qkv.weight", "attn.c_attn.weight", True), ("mlp.proj.bias", "mlp.c_proj.bias", False),
                             ("ln1.weight", "ln_1.weight", False)]:
            a = torch.tensor(f[f"model/blocks.{i}.{ours}"][:])
            b = sd[f"transformer.h.{i}.{hf}"]
            worst = max(worst, (a - (b.t() if tr else b)).abs().max().item())
    worst = max(worst, (torch.tensor(f["model/wte.weight"][:]) - sd["transformer.wte.weight"]).abs().max().item())
    print(f"init_from: largest difference between imported and transformers weights {worst:.3e}")
    checks.check(worst == 0.0, "init_from: the weights arrive unchanged (qkv transposed, biases, norms, wte)")
    compare_losses(checks, our_eval_loss(binary, work, ckpt), hf_eval_loss(model, data), "init_from (b)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["export", "init_from"])
    ap.add_argument("--hpctrain", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.set_num_threads(1)
    checks = Checks()
    (check_export if a.mode == "export" else check_init_from)(os.path.abspath(a.hpctrain), a.work, checks)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
