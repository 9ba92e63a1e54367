#!/usr/bin/env python3
"""A/B benchmark: `hpctrain train` against the Python stack (issue 9, part 2), in one sitting.

Same model, data file, sample order, initial weights (ours writes them), optimizer, schedule,
steps, 2 ranks with the same threads per rank. Runs alternate ours / theirs (A B A B ...) for
--pairs rounds, for two comparisons, each without and with activation recompute, and in each
precision of --precision: fp32 (theirs with torch's default AdamW, ours with its default fused
one), and bf16 = each side at its best on a CPU with native bf16 (ours: train.autocast = bf16 and
the fused AdamW; theirs: torch.autocast('cpu', bfloat16) around the forward and AdamW(fused=True)):
  dp     ours: per-step gradient all-reduce            vs torch DDP over gloo
  local  ours: local SGD, one fused average every N    vs torch PeriodicModelAverager (post-local SGD)
                                                       and Accelerate LocalSGD, same N
Per run: tokens/s = global tokens of steps (warmup, S] / their summed step seconds (rank 0's clock,
averaging included); peak RSS per rank (ru_maxrss: /usr/bin/time for ours, getrusage for theirs);
our allocator peak per step (metrics peak_step_bytes); bytes one rank hands to the collectives per
step; validation loss at the end (same shards, same batches). A failed run or a NaN loss makes the
configuration report no ratio. The Python side needs the venv of scripts/setup-python.sh.

  jobs/bench/compare_python.py --hpctrain build/bin/hpctrain --out runs/compare-python
With --baseline OTHER_BUILD a third run per configuration and pair measures a change of ours in the
same sitting (its row's ratio: ours over the baseline build).
"""
import argparse
import datetime
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

import bench_config
import op_profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(ROOT, "tests", "python")


def write_config(a, path, data):
    """One evaluation at the last step, on the first eval_batches batches of the validation split."""
    return bench_config.write(path, {
        "model": {"n_layer": a.n_layer, "n_head": a.n_head, "vocab_size": a.vocab_size, "d_model": a.d_model,
                  "seq_len": a.seq_len},
        "data": {"path": data, "seed": 1234},
        "train": {"micro_batch_size": a.micro_batch, "max_steps": a.steps, "threads": a.threads},
        "eval": {"strategy": "steps", "every_steps": a.steps, "batch_size": 16, "max_batches": a.eval_batches}})


class RunFailed(Exception):
    pass


def venv_python(explicit):
    cache = os.environ.get("HPCTRAIN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hpctrain")
    py = explicit or os.path.join(cache, "venv-torch-2.11.0", "bin", "python")
    ok = os.access(py, os.X_OK) and (explicit or os.path.exists(os.path.join(cache, "venv-torch-2.11.0", ".complete")))
    if not ok:
        sys.exit(f"compare_python: the Python environment is missing ({py}); run ./scripts/setup-python.sh first "
                 f"(or pass --python)")
    return py


def sh(cmd, log, env, timeout):
    with open(log, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"timed out after {timeout}s (log {log})")
    if p.returncode != 0:
        tail = open(log, errors="replace").read()[-600:].strip().splitlines()[-3:]
        raise RunFailed(f"exit {p.returncode}: {' | '.join(tail)} (log {log})")


def base_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    env["PYTHONPATH"] = PYDIR + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_ours(a, name, cfg, overrides, timeout=1800, binary=None):
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe", "--bind-to", "none",
           "/usr/bin/time", "-f", "HT_MAXRSS_KB %M", binary or a.hpctrain, "train", "--config", cfg,
           "--set", f"train.output_dir={out}", *sum((["--set", o] for o in overrides), [])]
    if a.profile:
        cmd += ["--set", f"log.trace_steps={a.profile[0]}:{a.profile[1]}"]
    sh(cmd, out + ".log", base_env(), timeout)
    rss = [int(x) * 1024 for x in re.findall(r"HT_MAXRSS_KB (\d+)", open(out + ".log").read())]
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    steps = [r for r in rows if "loss" in r and "step" in r]
    evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
    r = collect(steps, evals[-1] if evals else None, sorted(rss, reverse=True)[: a.ranks],
                max((r.get("peak_step_bytes", 0) for r in steps), default=None), a)
    # Mean over the timed steps of rank 0's phase seconds (log.every_steps = 1: one step per line).
    steady = steps[a.warmup:]
    r["phases_per_step"] = {f"{k}_s": statistics.fmean(s["phase_s"][k]["rank0"] for s in steady)
                            for k in steady[-1].get("phase_s", {})}
    return r


def run_theirs(a, name, cfg, variant, overrides, recompute, bf16=False, timeout=1800):
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.python, "-m", "torch.distributed.run", "--nproc_per_node", str(a.ranks), "--master_addr", "127.0.0.1",
           "--master_port", str(a.port), "--log-dir", os.path.join(out, "torchrun-logs"),
           "-m", "hpctrain_ref.train_ref", "--config", cfg, "--variant", variant,
           "--out", out, "--init", a.init, *sum((["--set", o] for o in overrides), [])]
    if recompute:
        cmd.append("--recompute")
    cmd += bench_config.reference_args(bf16, a.torch_attention)
    if a.profile:
        cmd += ["--profile-steps", f"{a.profile[0]}:{a.profile[1]}"]
    os.makedirs(out, exist_ok=True)
    sh(cmd, out + ".log", base_env(), timeout)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    steps = [r for r in rows if "loss" in r and "step" in r]  # its periodic evaluations log lines of their own
    summaries = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "summary-rank*.json")))]
    r = collect(steps, summaries[0]["val_loss"] if summaries else None,
                [s["peak_rss_bytes"] for s in summaries], None, a)
    steady = steps[a.warmup:]
    r["phases_per_step"] = {k: statistics.fmean(s["phase_s"][k] for s in steady) for k in steady[-1].get("phase_s", {})}
    return r


def collect(steps, val_loss, rss, alloc_peak, a):
    if len(steps) != a.steps:
        raise RunFailed(f"{len(steps)} of {a.steps} steps logged")
    if not all(math.isfinite(s["loss"]) for s in steps) or val_loss is None or not math.isfinite(val_loss):
        raise RunFailed("non-finite loss")
    steady = steps[a.warmup:]
    seconds = sum(s["step_seconds"] for s in steady)
    tokens = steady[-1]["tokens_seen"] - steps[a.warmup - 1]["tokens_seen"] if a.warmup > 0 else steady[-1]["tokens_seen"]
    return {"tokens_per_s": tokens / seconds, "val_loss": val_loss, "peak_rss_bytes": rss,
            "alloc_peak_bytes": alloc_peak, "bytes_per_step": steps[-1].get("bytes_per_step", 0.0),
            "final_loss": steps[-1]["loss"], "opt_state_bytes": steps[-1].get("optimizer_state_bytes"), "step_s": statistics.median(s["step_seconds"] for s in steady),
            "mfu": statistics.median(s["mfu"] for s in steady) if "mfu" in steady[-1] else None}


BASELINE = "ours, --baseline build"


def plan(a):
    """(config label, side label, runner) in A B A B order for one pair."""
    lsgd = ["local_sgd.enabled=true", f"local_sgd.steps={a.local_steps}", "local_sgd.warmup_steps=0",
            "local_sgd.optimizer_state=local"]
    out = []
    for prec in a.precision:
        bf16 = prec == "bf16"
        for rc in a.recompute:
            ours_rc = [f"recompute.policy={'full' if rc else 'none'}", f"train.autocast={'bf16' if bf16 else 'none'}"]
            tag = f"{prec}, {'recompute' if rc else 'no recompute'}"
            local = f"local SGD N={a.local_steps}, {tag}"
            if "dp" in a.modes:
                out += [(f"dp, {tag}", "ours",
                         lambda n, o=ours_rc: run_ours(a, n, a.cfg, o + ["local_sgd.enabled=false"]))]
                if a.baseline:  # the same run with another build of ours: a change measured beside the reference
                    out.append((f"dp, {tag}", BASELINE, lambda n, o=ours_rc: run_ours(
                        a, n, a.cfg, o + ["local_sgd.enabled=false"], binary=a.baseline)))
                out.append((f"dp, {tag}", "torch DDP",
                            lambda n, rc=rc, b=bf16: run_theirs(a, n, a.cfg, "ddp", [], rc, b)))
                if a.overlap:  # DDP overlaps its all-reduce with backward; this is ours doing the same
                    out.append((f"dp, {tag}", "ours overlapped", lambda n, o=ours_rc: run_ours(
                        a, n, a.cfg, o + ["local_sgd.enabled=false", "local_sgd.overlap_grad_allreduce=true"])))
                if a.zero1:  # the ratio column reads: unsharded tokens/s over sharded = sharded step time / unsharded
                    out.append((f"dp, {tag}", "ours ZeRO-1", lambda n, o=ours_rc: run_ours(
                        a, n, a.cfg, o + ["local_sgd.enabled=false", "train.shard_optimizer=true"])))
            if "local" not in a.modes:
                continue
            out.append((local, "ours", lambda n, o=ours_rc: run_ours(a, n, a.cfg, o + lsgd)))
            if a.baseline:
                out.append((local, BASELINE, lambda n, o=ours_rc: run_ours(a, n, a.cfg, o + lsgd, binary=a.baseline)))
            out += [(local, "torch PeriodicModelAverager",
                     lambda n, rc=rc, b=bf16: run_theirs(a, n, a.cfg, "pma", [f"local_sgd.steps={a.local_steps}"], rc, b)),
                    (local, "Accelerate LocalSGD",
                     lambda n, rc=rc, b=bf16: run_theirs(a, n, a.cfg, "accel", [f"local_sgd.steps={a.local_steps}"], rc,
                                                          b))]
    return out


def mib(x):
    return f"{x / 2**20:.0f}" if x else "-"


def report(a, results, started):
    lines = ["MFU (ours only): model FLOPs per token x tokens/s over the peak FLOP/s per rank that our start-up "
             "measures in the precision in use (a square matmul; bf16 under autocast).", "",
             f"Measured {started} on {os.uname().nodename} ({os.cpu_count()} cores), {a.ranks} ranks x {a.threads} "
             f"thread, {a.pairs} alternating pairs, {a.steps} steps ({a.warmup} warm-up steps not timed), model "
             f"{a.n_layer} x {a.d_model} ({a.n_head} heads), vocab {a.vocab_size or 'of the data'}, seq_len {a.seq_len}, "
             f"micro-batch {a.micro_batch}/rank.", "", f"Command: `{' '.join(sys.argv)}`", "",
             "| configuration | side | tokens/s median [min-max] | ours/theirs | peak RSS MiB per rank | "
             "optimizer state MiB per rank | allocator peak MiB | bytes/step per rank | val loss | val loss vs ours | MFU |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for conf in dict.fromkeys(c for c, _ in results):
        sides = {s: r for (c, s), r in results.items() if c == conf}
        ours = sides.get("ours", {})
        ours_ok = ours and not ours["errors"]
        ours_med = statistics.median(x["tokens_per_s"] for x in ours["runs"]) if ours_ok else None
        ours_val = statistics.median(x["val_loss"] for x in ours["runs"]) if ours_ok else None
        for side, r in sides.items():
            if r["errors"]:
                lines.append(f"| {conf} | {side} | FAILED: {r['errors'][0]} | no ratio | | | | | | | |")
                continue
            tps = [x["tokens_per_s"] for x in r["runs"]]
            med = statistics.median(tps)
            ratio = "-" if side == "ours" else (f"{ours_med / med:.2f}x" if ours_med else "no ratio (ours failed)")
            rss = "/".join(mib(v) for v in r["runs"][-1]["peak_rss_bytes"])
            val = statistics.median(x["val_loss"] for x in r["runs"])
            dval = "-" if side == "ours" or ours_val is None else f"{100 * (val - ours_val) / ours_val:+.2f}%"
            alloc = mib(r["runs"][-1]["alloc_peak_bytes"]) if r["runs"][-1]["alloc_peak_bytes"] else "-"
            mfus = [x["mfu"] for x in r["runs"] if x.get("mfu") is not None]
            mfu = f"{100 * statistics.median(mfus):.1f}%" if mfus else "-"
            opt = mib(r["runs"][-1].get("opt_state_bytes"))
            lines.append(f"| {conf} | {side} | {med:.0f} [{min(tps):.0f}-{max(tps):.0f}] | {ratio} | {rss} | {opt} | {alloc} | "
                         f"{r['runs'][-1]['bytes_per_step']:.0f} | {val:.4f} | {dval} | {mfu} |")
    lines += ["", "Where the time goes (rank 0, last pair, ms per step, mean over the timed steps): ours from its "
              "phase timers (comm = gradient all-reduce or parameter averaging; optimizer = clip + AdamW); theirs "
              "timed around the same calls (backward includes DDP's gradient all-reduce, which it overlaps with "
              "backward; comm = PeriodicModelAverager / LocalSGD step; optimizer = clip + AdamW).", "",
              "| configuration | side | step | data | forward | backward | comm | optimizer |",
              "|---|---|---|---|---|---|---|---|"]
    for (conf, side), r in results.items():
        if r["errors"] or not r["runs"]:
            continue
        x = r["runs"][-1]
        ph = x.get("phases_per_step", {})
        if side.startswith("ours"):
            cols = [ph.get(k) for k in ("data_s", "forward_s", "backward_s", "comm_s", "optimizer_s")]
        else:
            cols = [ph.get(k) for k in ("data_s", "fwd_s", "bwd_s", "average_s", "clip_opt_s")]
        cells = " | ".join("-" if v is None else f"{1e3 * v:.1f}" for v in cols)
        lines.append(f"| {conf} | {side} | {1e3 * x['step_s']:.1f} | {cells} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--baseline", metavar="BINARY",
                   help="another hpctrain build (e.g. the commit before a change), run beside ours in every pair: "
                        "its row's ratio is ours over it, in the same sitting as the reference")
    p.add_argument("--python", help="interpreter with torch 2.11 + accelerate (default: the setup-python.sh venv)")
    p.add_argument("--data", help="causal-lm dataset (default: prepared from Debian's fortunes into --out)")
    p.add_argument("--out", default="runs/compare-python")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3, help="first steps excluded from tokens/s")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--local-steps", type=int, default=8)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--recompute", default="off,on", help="off,on | off | on")
    p.add_argument("--precision", default="fp32,bf16", help="fp32,bf16 | fp32 | bf16")
    p.add_argument("--port", type=int, default=29650)
    p.add_argument("--vocab-size", type=int, default=0, help="model.vocab_size (0: the dataset's; larger: unused rows)")
    p.add_argument("--modes", default="dp,local", help="dp,local | dp | local")
    p.add_argument("--zero1", action="store_true", help="also ours with train.shard_optimizer = true (dp rows)")
    p.add_argument("--torch-attention", choices=["sdpa", "eager"], default="sdpa",
                   help="the reference's attention core: sdpa (F.scaled_dot_product_attention, torch's and HF's "
                        "default) or eager (the matmul formulation hpctrain's model.attention = eager runs, HF's "
                        "attn_implementation='eager'), to give torch the kernel choice ours makes")
    p.add_argument("--overlap", action="store_true",
                   help="also ours with local_sgd.overlap_grad_allreduce = true (dp rows: buckets all-reduced during "
                        "backward, as DDP does)")
    p.add_argument("--profile", metavar="A:B",
                   help="operator profiles of steps A..B (within the warm-up steps, so the timed steps carry no "
                        "profiler overhead) on both sides, set side by side per configuration (op_profile.py)")
    p.add_argument("--preset", choices=["gpt2-small"],
                   help="gpt2-small: 12 x 768, 12 heads, vocab 50257 (124 M parameters; byte-level data, the "
                        "embedding rows above the dataset's vocabulary are never read), seq_len 256, micro-batch 2, "
                        "bf16 without recompute, 12 steps, 2 warm-up; explicit options after it still apply")
    argv = sys.argv[1:]
    if "--preset" in argv and argv[argv.index("--preset") + 1:][:1] == ["gpt2-small"]:
        argv = ["--n-layer", "12", "--d-model", "768", "--n-head", "12", "--vocab-size", "50257", "--seq-len", "256",
                "--micro-batch", "2", "--precision", "bf16", "--recompute", "off", "--steps", "12", "--warmup", "2",
                "--eval-batches", "2"] + argv
    a = p.parse_args(argv)
    if a.profile:
        first, _, last = a.profile.partition(":")
        if not (first.isdigit() and last.isdigit() and 2 <= int(first) <= int(last) <= a.warmup):
            sys.exit(f"compare_python: --profile {a.profile}: want A:B with 2 <= A <= B <= --warmup ({a.warmup}): "
                     f"the profiled steps must be untimed warm-up steps after the first")
        a.profile = (int(first), int(last))
    a.modes = a.modes.split(",")
    a.python = venv_python(a.python)
    a.recompute = [x == "on" for x in a.recompute.split(",")]
    a.precision = a.precision.split(",")
    if not set(a.precision) <= {"fp32", "bf16"}:
        sys.exit(f"compare_python: --precision takes fp32 and/or bf16, not '{','.join(a.precision)}'")
    if not os.access(a.hpctrain, os.X_OK):
        sys.exit(f"compare_python: {a.hpctrain} is not built (ninja -C build hpctrain)")
    if a.baseline and not os.access(a.baseline, os.X_OK):
        sys.exit(f"compare_python: --baseline {a.baseline} is not an executable")
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    data = a.data or os.path.join(a.out, "fortunes.h5")
    if not os.path.exists(data):
        try:
            sh([a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", data],
               os.path.join(a.out, "prepare.log"), base_env(), 600)
        except RunFailed as e:  # a binary without `prepare`: the reference's writer of the same format
            print(f"compare_python: hpctrain prepare failed ({e}); writing {data} with hpctrain_ref.make_dataset")
            sh([a.python, "-m", "hpctrain_ref.make_dataset", data, "--max-docs", "4000"],
               os.path.join(a.out, "prepare.log"), base_env(), 600)
    a.cfg = write_config(a, os.path.join(a.out, "bench.toml"), data)
    # Identical initial weights: our seed's init, unchanged by one step at lr 1e-30.
    init_weights(a)
    results = {}
    for i in range(a.pairs):
        for conf, side, runner in plan(a):
            r = results.setdefault((conf, side), {"runs": [], "errors": []})
            name = run_name(conf, side, i)
            try:
                r["runs"].append(runner(name))
                print(f"[pair {i + 1}/{a.pairs}] {conf} | {side}: {r['runs'][-1]['tokens_per_s']:.0f} tokens/s",
                      flush=True)
            except RunFailed as e:
                r["errors"].append(f"run {name}: {e}")
                print(f"[pair {i + 1}/{a.pairs}] {conf} | {side}: FAILED {e}", flush=True)
        text = write_report(a, results, started, f"{i + 1} of {a.pairs} pairs done")
    if a.profile:
        text += profile_report(a)
        open(os.path.join(a.out, "report.md"), "w").write(text)
    print(text)
    return 1 if any(v["errors"] for v in results.values()) else 0


def write_report(a, results, started, progress):
    """report.md and results.json after every pair, so an interrupted run still leaves its table."""
    cmd = "jobs/bench/compare_python.py " + " ".join(sys.argv[1:])
    text = f"Command: `{cmd}` ({progress})\n\n{report(a, results, started)}\n"
    open(os.path.join(a.out, "report.md"), "w").write(text)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({f"{c} | {s}": v for (c, s), v in results.items()}, f, indent=1)
    return text


def run_name(conf, side, pair):
    """The directory name of one run under <out>/runs (also where its trace is found)."""
    return re.sub(r"[^a-z0-9]+", "-", f"{conf}-{side}-{pair}".lower())


def profile_report(a):
    """Per configuration: rank 0's operator profile of ours beside each reference side (last pair)."""
    steps = a.profile[1] - a.profile[0] + 1
    lines = ["", f"## Operator profiles (rank 0, steps {a.profile[0]}..{a.profile[1]}, last pair; torch's profiler "
             "on both sides: self time per operator, ms per step)", ""]
    confs = {}
    for conf, side, _ in plan(a):
        confs.setdefault(conf, []).append(side)
    for conf, sides in confs.items():
        trace = lambda side: os.path.join(a.out, "runs", run_name(conf, side, a.pairs - 1), "trace", "rank0.ops.json")
        for side in sides[1:]:
            if side.startswith("ours") or not (os.path.exists(trace("ours")) and os.path.exists(trace(side))):
                continue
            lines += [f"### {conf}: ours vs {side}", "",
                      op_profile.table(op_profile.load_events(trace("ours")), op_profile.load_events(trace(side)),
                                       steps, 25, ["ours", side]), ""]
    return "\n".join(lines) + "\n"


def init_weights(a):
    """Writes our seed's initial weights into a checkpoint (1 step at lr 1e-30) and points --init at it."""
    out = os.path.join(a.out, "runs", "init")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe", "--bind-to", "none", a.hpctrain, "train",
           "--config", a.cfg, "--set", f"train.output_dir={out}"]
    for o in ["train.max_steps=1", "train.lr=1e-30", "train.min_lr=0", "train.warmup_steps=0",
              "train.lr_schedule=constant", "checkpoint.save_final=true", "eval.strategy=no"]:
        cmd += ["--set", o]
    sh(cmd, out + ".log", base_env(), 600)
    files = glob.glob(os.path.join(out, "checkpoints", "*.h5"))
    if not files:
        sys.exit(f"compare_python: the init run wrote no checkpoint under {out}/checkpoints")
    a.init = sorted(files)[-1]


if __name__ == "__main__":
    sys.exit(main())
