#!/usr/bin/env python3
"""Steps to a loss against the local SGD period N: the curve that `local_sgd.steps = auto` charges.

auto (lib/train/auto_local_steps.h) predicts a candidate's time to a loss as its step time times the
steps it needs, modelled as steps(1) x (1 + local_sgd.auto_step_penalty x log2 N). The step time it
measures at start-up; the steps it cannot (that needs the training run itself). This driver measures
them, on the model and data of the time-to-quality benchmark (time_to_quality.py writes the same
config: constant learning rate after warmup, the whole validation split, data order = seed), and fits
the penalty.

Steps do not depend on the link, so the ranks run on this host's shared memory (no emulated cluster,
no root). Per seed: per-step averaging (mode dp, the N = 1 of the model) trains --target-step steps;
its eval loss there is the target. Every other mode then trains until an evaluation is at or below
the target (train.target_eval_loss, within run_report.TARGET_TOLERANCE) or --max-steps. Evaluations
every --eval-every steps (default 4, twice as fine as time_to_quality.py's): "steps" is the first
evaluated step at or below the target; "crossing" interpolates linearly between the evaluation before
it and that one (the finer estimate the fit uses). A mid-cycle evaluation is the mean over ranks of
their local replicas' losses, as in time_to_quality.py.

Fit: the ratio r = crossing(N) / crossing(dp) of every run of N > 1, least squares of r - 1 against
log2 N through the origin (the model has no other parameter); also per seed, for its spread.

  jobs/bench/steps_to_loss.py --out runs/steps-to-loss                      # N = 1..32, seeds 1,2,3
  jobs/bench/steps_to_loss.py --modes n2,n8,lsgd8-i4,stream16-i4 --seeds 1  # any fixed-N mode of time_to_quality.py
  jobs/bench/steps_to_loss.py --modes n2-o1,n4-o1 --seeds 1,2  # nK-oT: N = K, each average merged T steps later

Writes <out>/steps_to_loss.md (tables, fit, command, date), steps_to_loss.csv, runs/<mode>-s<seed>/.
"""
import argparse
import datetime
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_report as rep  # noqa: E402  (crossing, reaches, TARGET_TOLERANCE, md_table, write_csv)
import time_to_quality as ttq  # noqa: E402  (MODES, add_config_args, write_config)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mode_sets(name):
    """(hpctrain --set overrides, N) of a mode: nK = plain local SGD with N = K (n1 = per-step averaging),
    nK-oT the same with each average merged T steps after it starts (local_sgd.overlap_steps = T), or a
    fixed-N hpctrain mode of time_to_quality.py."""
    m = re.fullmatch(r"n(\d+)(?:-o(\d+))?", name)
    if m:
        n, overlap = int(m.group(1)), int(m.group(2) or 0)
        if n < 1:
            raise ValueError(f"mode {name}: N must be >= 1")
        if overlap and not 0 < overlap < n:
            raise ValueError(f"mode {name}: the overlap must be in 1..N-1")
        if n == 1:
            return ttq.MODES["dp"][1], 1
        return ttq.LSGD + [f"local_sgd.steps={n}"] + ([f"local_sgd.overlap_steps={overlap}"] if overlap else []), n
    if name not in ttq.MODES or ttq.MODES[name][0] != "ours" or ttq.MODES[name][2] < 1:
        fixed = [k for k, v in ttq.MODES.items() if v[0] == "ours" and v[2] >= 1 and k not in ("dp",)]
        raise ValueError(f"unknown mode {name}: want nK (K >= 1) or one of {', '.join(fixed)}")
    return ttq.MODES[name][1], ttq.MODES[name][2]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--data", help="causal-lm dataset (default: Debian's fortunes prepared into --out)")
    p.add_argument("--out", default="runs/steps-to-loss")
    p.add_argument("--ranks", type=int, default=4, help="ranks on this host (time_to_quality.py's 4 nodes x 1)")
    p.add_argument("--modes", default="n2,n4,n8,n16,n32", help="besides dp (n1), which every seed runs first")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--target-step", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=0, help="step cap for every mode (default 3 x --target-step)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    ttq.add_config_args(p)
    p.set_defaults(eval_every=4)
    a = p.parse_args(argv)
    a.seeds = [int(s) for s in a.seeds.split(",")]
    try:
        a.modes = [m for m in a.modes.split(",") if m and m != "n1"]
        a.sets = {m: mode_sets(m) for m in ["n1", *a.modes]}
    except ValueError as e:
        p.error(str(e))
    if a.target_step % a.eval_every:
        p.error(f"--target-step {a.target_step} must be a multiple of --eval-every {a.eval_every}")
    a.max_steps = a.max_steps or 3 * a.target_step
    a.command = "jobs/bench/steps_to_loss.py " + " ".join(argv)
    return a


def log(msg):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def run(a, mode, seed, steps, target):
    name = f"{mode}-s{seed}"
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    cfg = ttq.write_config(a, name, seed, steps, target)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe", "--bind-to", "none", a.hpctrain, "train",
           "--config", cfg, "--set", f"train.output_dir={out}", *sum((["--set", s] for s in a.sets[mode][0]), [])]
    with open(out + ".log", "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=a.timeout).returncode
    if rc != 0:
        raise RuntimeError(f"{name}: exit {rc} (log {out}.log)")
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    return [(r["step"], r["eval_loss"], r.get("eval_loss_stderr")) for r in rows if "eval_loss" in r]


def fit(points):
    """Least squares of r - 1 = p x log2 N through the origin over (N, r) points (N > 1); None if none."""
    pts = [(math.log2(n), r) for n, r in points if n > 1 and r is not None]
    den = sum(x * x for x, _ in pts)
    return sum(x * (r - 1) for x, r in pts) / den if den else None


def report(a, res, started):
    lines = [f"# Steps to a loss against N ({started})", "",
             f"Command: `{a.command}`", "",
             f"{a.ranks} ranks on one host (shared memory), model {a.n_layer} x {a.d_model}, seq {a.seq_len}, "
             f"micro-batch {a.micro_batch}/rank, lr {a.lr} constant after {a.lr_warmup} warmup steps, "
             f"{a.precision}; the whole validation split every {a.eval_every} steps. Target per seed: dp's eval "
             f"loss at step {a.target_step}.", ""]
    rows, csv = [], []
    for seed in a.seeds:
        base = res.get(("n1", seed))
        if not base or base.get("error"):
            continue
        for mode in ["n1", *a.modes]:
            r = res.get((mode, seed), {})
            ratio = r["crossing"] / base["crossing"] if r.get("crossing") and base.get("crossing") else None
            r["ratio"] = ratio
            stderr = statistics.median(e for _, _, e in r["evals"] if e) if r.get("evals") else None
            rows.append([mode, a.sets[mode][1], seed, rep.fmt(base["target"], "{:.4f}"),
                         r.get("error") or rep.fmt(r.get("step"), "{:.0f}", "not reached"),
                         rep.fmt(r.get("crossing"), "{:.1f}"), rep.fmt(ratio, "{:.3f}"), rep.fmt(stderr, "{:.4f}")])
            csv.append([mode, a.sets[mode][1], seed, base["target"], r.get("step"), r.get("crossing"), ratio, stderr])
    lines.append(rep.md_table(["mode", "N", "seed", "target", "steps (first eval at/below)",
                               "crossing (interpolated)", "ratio to dp", "eval stderr"], rows))
    means = []
    for mode in a.modes:
        rs = [res[(mode, s)]["ratio"] for s in a.seeds if res.get((mode, s), {}).get("ratio")]
        n = a.sets[mode][1]
        model = 1 + a.penalty_default * math.log2(n)
        means.append([mode, n, len(rs), rep.fmt(statistics.fmean(rs) if rs else None, "{:.3f}"),
                      f"{min(rs):.3f}-{max(rs):.3f}" if rs else "-", f"{model:.3f}"])
    lines += ["", "Mean ratio per mode over the seeds that reached the target:", ""]
    lines.append(rep.md_table(["mode", "N", "seeds", "mean ratio", "range",
                               f"model at the default penalty {a.penalty_default}"], means))
    plain = [m for m in a.modes if re.fullmatch(r"n\d+", m)]
    pts = [(a.sets[m][1], res.get((m, s), {}).get("ratio")) for m in plain for s in a.seeds]
    p_all = fit(pts)
    per_seed = {s: fit([(a.sets[m][1], res.get((m, s), {}).get("ratio")) for m in plain]) for s in a.seeds}
    if plain:  # the penalty is fitted on plain averaging only (nK without overlap)
        lines += ["", f"Fitted penalty over the plain modes ({', '.join(plain)}), all seeds: "
                      f"**{rep.fmt(p_all, '{:.4f}')}**; per seed: "
                  + ", ".join(f"seed {s} {rep.fmt(v, '{:.4f}')}" for s, v in per_seed.items())
                  + f" (local_sgd.auto_step_penalty's default: {a.penalty_default})."]
    if p_all is not None:
        worst = max((abs(r - (1 + p_all * math.log2(n))) / r, n, r) for n, r in pts if n > 1 and r)
        lines.append(f"Largest misfit of the fitted line: {100 * worst[0]:.1f} % (N = {worst[1]}, ratio {worst[2]:.3f}).")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "steps_to_loss.md"), "w") as f:
        f.write(text)
    rep.write_csv(os.path.join(a.out, "steps_to_loss.csv"),
                  ["mode", "n", "seed", "target", "steps", "crossing", "ratio", "eval_stderr"], csv)
    return text


def default_penalty(a, seed):
    """local_sgd.auto_step_penalty as the dp run of `seed` resolved it (its output config.toml)."""
    text = open(os.path.join(a.out, "runs", f"n1-s{seed}", "config.toml")).read()
    m = re.search(r"^auto_step_penalty\s*=\s*([0-9.eE+-]+)", text, re.M)
    return float(m.group(1)) if m else float("nan")


def main(argv):
    a = parse(argv)
    a.hpctrain = os.path.abspath(a.hpctrain)
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    a.data = os.path.abspath(a.data or os.path.join(a.out, "fortunes.h5"))
    if not os.path.exists(a.data):
        subprocess.run([a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", a.data],
                       check=True, stdout=subprocess.DEVNULL)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    res = {}
    for seed in a.seeds:
        evals = run(a, "n1", seed, a.target_step, 0.0)
        a.penalty_default = default_penalty(a, seed)
        hit = next((l for s, l, _ in evals if s == a.target_step), None)
        if hit is None:
            sys.exit(f"steps_to_loss: dp logged no evaluation at step {a.target_step}")
        step, cross = rep.crossing(evals, hit)
        res[("n1", seed)] = {"evals": evals, "target": hit, "step": step, "crossing": cross}
        log(f"seed {seed}: target {hit:.4f} (dp, step {a.target_step}; crossing {cross:.1f})")
        for mode in a.modes:
            try:
                ev = run(a, mode, seed, a.max_steps, hit)
                step, cross = rep.crossing(ev, hit)
                res[(mode, seed)] = {"evals": ev, "step": step, "crossing": cross}
                log(f"seed {seed} {mode}: " + (f"step {step} (crossing {cross:.1f}, {cross / res[('n1', seed)]['crossing']:.3f}x dp)"
                                               if step else f"not reached in {a.max_steps} steps"))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                res[(mode, seed)] = {"error": str(e), "evals": []}
                log(f"seed {seed} {mode}: FAILED {e}")
        report(a, res, started)
    print(report(a, res, started))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
