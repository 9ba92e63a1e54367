#!/usr/bin/env python3
"""Our own speed levers, side by side in one sitting (issue 15): each comparison alternates its
variants (A B A B ...) for --pairs rounds and reports medians.

  threads   2 ranks x 1 thread vs 1 rank x 2 threads, same global batch (16 x 2 samples), per shape
  optimizer train.optimizer_impl = plain | foreach | fused: the optimizer phase (clip + AdamW) per step
  bf16      train.autocast = none | bf16: tokens/s per shape, and the demo's eval loss after 100 steps

Shapes: demo (4 layers x 128, 4 heads, seq_len 128) and large (4 x 512, 8 heads, seq_len 256).
tokens/s = global tokens of the steps after --warmup over their summed step seconds (rank 0).

  jobs/bench/speed_features.py --out runs/speed-features [--only threads,optimizer,bf16]
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

import bench_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {
    "demo": ["model.n_layer=4", "model.d_model=128", "model.n_head=4", "model.seq_len=128"],
    "large": ["model.n_layer=4", "model.d_model=512", "model.n_head=8", "model.seq_len=256"],
}
# The benchmarks' shared recipe, without evaluation (run() adds it) and on the plain paths the features
# are measured against.
BASE = bench_config.as_sets({"local_sgd": {"enabled": False}, "recompute": {"policy": "none"}})


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


def run(a, name, ranks, sets, steps, eval_at_end=False):
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    ev = ["eval.strategy=steps", f"eval.every_steps={steps}", "eval.batch_size=16", "eval.max_batches=0"] \
        if eval_at_end else ["eval.strategy=no"]
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", a.hpctrain, "train",
           "--set", f"data.path={a.data}", "--set", f"train.output_dir={out}", "--set", f"train.max_steps={steps}"]
    for s in BASE + sets + ev:
        cmd += ["--set", s]
    with open(out + ".log", "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env(), timeout=3600)
    if p.returncode != 0:
        sys.exit(f"speed_features: run {name} failed (exit {p.returncode}); log {out}.log")
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    steps_ = [r for r in rows if "loss" in r and "step" in r]
    steady = steps_[a.warmup:]
    tokens = steady[-1]["tokens_seen"] - steps_[a.warmup - 1]["tokens_seen"]
    evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
    return {"tokens_per_s": tokens / sum(s["step_seconds"] for s in steady),
            "optimizer_ms": 1e3 * statistics.fmean(s["phase_s"]["optimizer"]["rank0"] for s in steady),
            "step_ms": 1e3 * statistics.median(s["step_seconds"] for s in steady),
            "mfu": statistics.median(s["mfu"] for s in steady),
            "eval_loss": evals[-1] if evals else None}


def alternate(a, variants):
    """variants: {label: (ranks, sets, steps, eval)} -> {label: [result per pair]}"""
    res = {k: [] for k in variants}
    for i in range(a.pairs):
        for label, (ranks, sets, steps, ev) in variants.items():
            name = f"{label}-{i}".replace(" ", "_").replace("/", "-").replace(",", "")
            res[label].append(run(a, name, ranks, sets, steps, ev))
            print(f"[{i + 1}/{a.pairs}] {label}: {res[label][-1]['tokens_per_s']:.0f} tokens/s, "
                  f"optimizer {res[label][-1]['optimizer_ms']:.2f} ms", flush=True)
    return res


def per_shape(a, key, values):
    """Each shape at 2 ranks x 1 thread with `key` set to each of values, alternated:
    {shape: {value: [result per pair]}}."""
    res = {}
    for shape, sets in SHAPES.items():
        mb = 16 if shape == "demo" else 4
        r = alternate(a, {f"{shape} {v}": (2, sets + [f"train.micro_batch_size={mb}", "train.threads=1", f"{key}={v}"],
                                           a.steps, False) for v in values})
        res[shape] = {v: r[f"{shape} {v}"] for v in values}
    return res


def med(rs, k):
    return statistics.median(r[k] for r in rs)


def span(rs, k, fmt="{:.0f}"):
    v = [r[k] for r in rs]
    return f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}-{fmt.format(max(v))}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--data", help="causal-lm dataset (default: Debian's fortunes prepared into --out)")
    p.add_argument("--out", default="runs/speed-features")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", default="threads,optimizer,bf16")
    a = p.parse_args()
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    a.data = a.data or os.path.join(a.out, "fortunes.h5")
    if not os.path.exists(a.data):
        subprocess.run([a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", a.data],
                       check=True, stdout=subprocess.DEVNULL)
    only = set(a.only.split(","))
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Command: `jobs/bench/speed_features.py {' '.join(sys.argv[1:])}`, {started}, {a.pairs} alternating "
             f"pairs, {a.steps} steps ({a.warmup} not timed), {os.cpu_count()} cores.", ""]
    if "threads" in only:
        lines += ["| shape | 2 ranks x 1 thread tokens/s | 1 rank x 2 threads tokens/s | 2x1 / 1x2 |", "|---|---|---|---|"]
        for shape, sets in SHAPES.items():
            mb = 16 if shape == "demo" else 4
            r = alternate(a, {f"{shape} 2x1": (2, sets + [f"train.micro_batch_size={mb}", "train.threads=1"], a.steps, False),
                              f"{shape} 1x2": (1, sets + [f"train.micro_batch_size={2 * mb}", "train.threads=2"], a.steps,
                                               False)})
            x, y = r[f"{shape} 2x1"], r[f"{shape} 1x2"]
            lines.append(f"| {shape} (global batch {2 * mb}) | {span(x, 'tokens_per_s')} | {span(y, 'tokens_per_s')} | "
                         f"{med(x, 'tokens_per_s') / med(y, 'tokens_per_s'):.2f}x |")
        lines.append("")
    if "optimizer" in only:
        lines += ["| shape | optimizer_impl | optimizer phase ms/step (clip + AdamW) | vs plain | tokens/s |",
                  "|---|---|---|---|---|"]
        for shape, r in per_shape(a, "train.optimizer_impl", ("plain", "foreach", "fused")).items():
            plain = med(r["plain"], "optimizer_ms")
            for impl, x in r.items():
                lines.append(f"| {shape} | {impl} | {span(x, 'optimizer_ms', '{:.2f}')} | "
                             f"{med(x, 'optimizer_ms') / plain:.2f}x | {med(x, 'tokens_per_s'):.0f} |")
        lines.append("")
    if "bf16" in only:
        lines += ["| shape | autocast | tokens/s | bf16 / fp32 | MFU (vs the peak of the precision in use) |",
                  "|---|---|---|---|---|"]
        for shape, r in per_shape(a, "train.autocast", ("none", "bf16")).items():
            fp32 = med(r["none"], "tokens_per_s")
            for ac, x in r.items():
                lines.append(f"| {shape} | {ac} | {span(x, 'tokens_per_s')} | {med(x, 'tokens_per_s') / fp32:.2f}x | "
                             f"{100 * med(x, 'mfu'):.1f}% |")
        # Quality: the demo config's model and batch, 100 steps, full validation split at the end.
        v = {f"demo-100 {ac}": (2, SHAPES["demo"] + ["train.micro_batch_size=16", "train.threads=1",
                                                     f"train.autocast={ac}"], 100, True) for ac in ("none", "bf16")}
        a_pairs, a.pairs = a.pairs, 1
        r = alternate(a, v)
        a.pairs = a_pairs
        f, b = r["demo-100 none"][0]["eval_loss"], r["demo-100 bf16"][0]["eval_loss"]
        lines += ["", f"Demo shape, 100 steps, eval loss over the whole validation split: fp32 {f:.4f}, bf16 {b:.4f} "
                  f"({100 * (b - f) / f:+.2f}%)."]
    text = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "report.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
