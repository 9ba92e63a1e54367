#!/usr/bin/env python3
"""Time to quality across capped links: wall-clock seconds until the eval loss reaches PyTorch DDP's
own eval loss at step --target-step, on the emulated cluster (jobs/cluster/emulate.sh, root).

  jobs/bench/time_to_quality.py --nodes 4 --links 20mbit,100mbit --seeds 1,2 \
      --modes ddp,pma8,accel8,dp,lsgd8,stream16-i4,diloco8 --out runs/ttq
  jobs/bench/time_to_quality.py --nodes 2 --ranks-per-node 2 --links 20mbit --modes ddp,hier8-i4 --out runs/ttq-hier

Per (link, seed): PyTorch DDP (tests/python/hpctrain_ref, torchrun per node, gloo) trains --target-step
steps; its eval loss there is the target and its time to the target is its training time to that
step. Every other mode then trains with the same model, initial weights, data order (data.seed =
seed) and learning rate until an evaluation is at or below the target, within
run_report.TARGET_TOLERANCE (1e-4: a mode that retraces DDP's steps matches its loss only to the 6th
digit) (hpctrain: train.target_eval_loss; the reference variants: the same key) or until its training time exceeds
--budget x DDP's time (then "not reached"). The learning rate is constant after a linear warmup
(train.lr_schedule = constant), so where a mode stops does not change its schedule. Evaluations
(every --eval-every steps, on the whole seeded --eval-batches subset of the validation split, the
same for all) are not counted as training time: time = the sum of the step seconds each run logs.

Reported per mode (mean over seeds, and per seed in the CSV): time to target and its ratio to DDP,
steps to target, payload bytes to target (bytes this rank handed to MPI up to that step, across
groups only for the hierarchical mode), the eval loss at DDP's time to target, the compute-bound
ratio (time to target / (steps to target x the step time without communication, measured by a
run that never exchanges)), and the evaluation's standard error. Plot: eval loss against training
seconds, one curve per mode, one panel per link (seed 1).
"""
import argparse
import datetime
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_config  # noqa: E402
import run_report as rep  # noqa: E402  (reaches, TARGET_TOLERANCE)
import scaling_emulate as se  # noqa: E402  (the emulated cluster, the reference runs, init weights)

LSGD = ["local_sgd.enabled=true"]
# name: (kind, hpctrain --set overrides or reference variant, local SGD N of the reference)
MODES = {
    "ddp": ("ref", "ddp", 1),
    "pma8": ("ref", "pma", 8),
    "accel8": ("ref", "accel", 8),
    "dp": ("ours", ["local_sgd.enabled=false"], 1),
    "dp-overlap": ("ours", ["local_sgd.enabled=false", "local_sgd.overlap_grad_allreduce=true"], 1),
    "lsgd8": ("ours", LSGD + ["local_sgd.steps=8"], 8),
    "lsgd16": ("ours", LSGD + ["local_sgd.steps=16"], 16),
    "lsgd32": ("ours", LSGD + ["local_sgd.steps=32"], 32),
    "lsgd64": ("ours", LSGD + ["local_sgd.steps=64"], 64),
    "lsgd-auto": ("ours", LSGD + ["local_sgd.steps=auto"], 0),  # N chosen at start (lib/train/auto_local_steps.h)
    # N, fragments and the exchange dtype chosen at start, each fragment's exchange overlapped with a step.
    "auto-all": ("ours", LSGD + ["local_sgd.steps=auto", "local_sgd.fragments=auto", "local_sgd.comm_dtype=auto",
                                "local_sgd.overlap_steps=1"], 0),
    "lsgd8-i8": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.comm_dtype=int8"], 8),
    "lsgd8-i4": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.comm_dtype=int4"], 8),
    "stream8-i4": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.fragments=2", "local_sgd.overlap_steps=1",
                                  "local_sgd.comm_dtype=int4"], 8),
    "stream8-i8": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.fragments=2", "local_sgd.overlap_steps=1",
                                  "local_sgd.comm_dtype=int8"], 8),
    "stream16-i4": ("ours", LSGD + ["local_sgd.steps=16", "local_sgd.fragments=4", "local_sgd.overlap_steps=1",
                                   "local_sgd.comm_dtype=int4"], 16),
    "diloco8": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.outer=diloco"], 8),
    "diloco8-paper": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.outer=diloco", "local_sgd.outer_lr=0.7",
                                     "local_sgd.outer_momentum=0.9"], 8),
    "hier8-i4": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.group_size=0", "local_sgd.fragments=2",
                                "local_sgd.overlap_steps=1", "local_sgd.comm_dtype=int4"], 8),
    "hier8": ("ours", LSGD + ["local_sgd.steps=8", "local_sgd.group_size=0"], 8),
}
NOCOMM = LSGD + ["local_sgd.steps=1000000"]  # never exchanges: the compute-only step time


def resolve_modes(spec):
    """Mode names from 'ddp,lsgd8,NAME:key=value+key=value' (a custom hpctrain mode is added to MODES);
    ddp first, added when missing (its eval loss is the target). ValueError names an unknown mode."""
    modes = []
    for m in spec.split(","):
        if ":" in m:
            name, sets = m.split(":", 1)
            MODES[name] = ("ours", sets.split("+"), 1)
            m = name
        if m not in MODES:
            raise ValueError(f"unknown mode {m}; known: {', '.join(MODES)}")
        modes.append(m)
    if "ddp" not in modes:
        modes.insert(0, "ddp")
    return modes


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpctrain", default=os.path.join(se.ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--python", help="interpreter with torch + accelerate (default: the setup-python.sh venv)")
    p.add_argument("--data", help="causal-lm dataset (default: Debian's fortunes prepared into --out)")
    p.add_argument("--out", default="runs/ttq")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=1)
    p.add_argument("--links", default="20mbit,100mbit")
    p.add_argument("--modes", default="ddp,pma8,accel8,dp,lsgd8,stream16-i4,diloco8",
                   help=f"of {', '.join(MODES)}; or NAME:key=value,key=value for a custom hpctrain mode")
    p.add_argument("--seeds", default="1,2", help="data.seed values (data order)")
    p.add_argument("--target-step", type=int, default=64, help="DDP's eval loss at this step is the target")
    p.add_argument("--budget", type=float, default=1.5, help="stop a mode after this x DDP's time to target")
    p.add_argument("--max-steps", type=int, default=0, help="step cap for every mode (default 4 x --target-step)")
    add_config_args(p)
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run, start-up included")
    p.add_argument("--port", type=int, default=29690)
    p.add_argument("--nocomm-steps", type=int, default=24)
    a = p.parse_args(argv)
    a.links = a.links.split(",")
    a.seeds = [int(s) for s in a.seeds.split(",")]
    try:
        a.modes = resolve_modes(a.modes)
    except ValueError as e:
        p.error(str(e))
    a.max_steps = a.max_steps or 4 * a.target_step
    a.command = "jobs/bench/time_to_quality.py " + " ".join(argv)
    return a


def add_config_args(p, *, eval_batches=0, lr_warmup=16, n_layer=4, d_model=128, seq_len=128, micro_batch=16,
                    micro_batch_help=None):
    """The options write_config reads besides --data, with the caller's defaults (slurm_scaling.py writes
    its runs' configs through write_config too)."""
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--eval-batches", type=int, default=eval_batches, help="0 = the whole validation split")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lr-warmup", type=int, default=lr_warmup)
    p.add_argument("--n-layer", type=int, default=n_layer)
    p.add_argument("--d-model", type=int, default=d_model)
    p.add_argument("--seq-len", type=int, default=seq_len)
    p.add_argument("--micro-batch", type=int, default=micro_batch, help=micro_batch_help)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: every run at its best on a CPU with native bf16 (hpctrain: train.autocast = bf16, "
                        "model.attention = auto; the reference: torch.autocast bf16, AdamW(fused=True) and the eager "
                        "attention core, the faster one there)")


def write_config(a, name, seed, steps, target):
    """A constant learning rate after warmup (the schedule must not depend on where a mode stops), the data
    order of `seed`, and the run stopping itself once its eval loss reaches `target` (0: never)."""
    return bench_config.write(os.path.join(a.out, f"{name}.toml"), {
        "model": {"n_layer": a.n_layer, "n_head": 4, "d_model": a.d_model, "seq_len": a.seq_len},
        "data": {"path": a.data, "seed": seed},
        "train": {"micro_batch_size": a.micro_batch, "max_steps": steps, "lr": a.lr, "min_lr": 0.0,
                  "warmup_steps": a.lr_warmup, "lr_schedule": "constant", "threads": 1,
                  "autocast": "bf16" if a.precision == "bf16" else "none",
                  "target_eval_loss": target + rep.TARGET_TOLERANCE if target else 0.0},
        "eval": {"strategy": "steps", "every_steps": a.eval_every, "batch_size": 16, "max_batches": a.eval_batches},
        "log": {"plot": False}})


def ref_precision_args(a):
    """The reference's options for --precision: in bf16 on a CPU torch trains fastest with the fused AdamW
    and the eager attention core (docs/benchmarks.md, "The attention core under bf16 on a CPU")."""
    bf16 = a.precision == "bf16"
    return bench_config.reference_args(bf16, "eager" if bf16 else "auto")


def watch(procs, metrics_path, budget_s, timeout):
    """Waits for the run; SIGTERM (hpctrain checkpoints and exits 75) once its training seconds exceed budget_s."""
    t0 = time.time()
    stopped = False
    while any(p.poll() is None for p in procs):
        if time.time() - t0 > timeout:
            for p in procs:
                p.kill()
            raise se.RunFailed(f"timed out after {timeout}s")
        if budget_s and not stopped and os.path.exists(metrics_path):
            cum = 0.0
            for line in open(metrics_path):
                try:
                    cum += json.loads(line).get("step_seconds", 0.0)
                except json.JSONDecodeError:
                    pass
            if cum > budget_s:
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                stopped = True
        time.sleep(0.5)
    return stopped, time.time() - t0


def run_mode(a, mode, name, seed, target, budget_s, steps):
    kind, what, n_local = MODES[mode]
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    cfg = write_config(a, name, seed, steps, target)
    env = se.env_base()
    np_ = a.nodes * a.ranks_per_node
    if kind == "ours":
        cmd = [se.EMU, "mpirun", "-np", str(np_), "-x", "OMP_NUM_THREADS=1", a.hpctrain, "train", "--config", cfg,
               "--set", f"train.output_dir={out}", *what]
        procs = [subprocess.Popen(cmd, stdout=open(out + ".log", "w"), stderr=subprocess.STDOUT, env=env)]
    else:
        env.update(GLOO_SOCKET_IFNAME="eth0", TP_SOCKET_IFNAME="eth0")
        sets = [f"local_sgd.steps={n_local}"] if what != "ddp" else []
        py = [a.python, "-m", "torch.distributed.run", "--nnodes", str(a.nodes), "--nproc_per_node",
              str(a.ranks_per_node), "--master_addr", "10.77.0.1", "--master_port", str(a.port), "--max_restarts", "0",
              "--log-dir", os.path.join(out, "torchrun-logs")]
        ref = ["-m", "hpctrain_ref.train_ref", "--config", cfg, "--variant", what, "--out", out, "--init", a.init,
               *sum((["--set", s] for s in sets), []), *ref_precision_args(a)]
        procs = [subprocess.Popen([se.EMU, "exec", f"node{k + 1}", *py, "--node_rank", str(k), *ref],
                                  stdout=open(f"{out}.node{k + 1}.log", "w"), stderr=subprocess.STDOUT, env=env)
                 for k in range(a.nodes)]
    before = se.wire_bytes()
    stopped, wall = watch(procs, os.path.join(out, "metrics.jsonl"), budget_s, a.timeout)
    wire = sum(v - before.get(k, 0) for k, v in se.wire_bytes().items())
    bad = [p.returncode for p in procs if p.returncode not in (0, 75) and not (stopped and p.returncode < 0)]
    if bad:
        raise se.RunFailed(f"exit {bad} (logs {out}*.log)")
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    s = summarize(rows, target, wire, wall, stopped)
    if kind == "ours" and "local_sgd.steps=auto" in what:
        s["chosen_n"] = chosen_local_steps(out)
    return s


def chosen_local_steps(run_dir):
    """What local_sgd.steps = auto chose, as "N" or "N/F/dtype" when the run also had fragments and
    comm_dtype to choose: the run's resolved config.toml stores the numbers."""
    import tomllib
    with open(os.path.join(run_dir, "config.toml"), "rb") as f:
        l = tomllib.load(f)["local_sgd"]
    if l["fragments"] == 1 and l["comm_dtype"] == "fp32":
        return l["steps"]
    return f'{l["steps"]}/{l["fragments"]}/{l["comm_dtype"]}'



def summarize(rows, target, wire, wall, stopped):
    cum, t = {}, 0.0
    steps = [r for r in rows if "step_seconds" in r]
    for r in steps:
        t += r["step_seconds"]
        cum[r["step"]] = t
    evals = [(r["step"], r["eval_loss"], r.get("eval_loss_stderr")) for r in rows if "eval_loss" in r]
    by_step = {r["step"]: r for r in steps}
    s = {"cum": cum, "evals": evals, "wire": wire, "wall": wall, "stopped_by_budget": stopped,
         "steps": len(steps), "train_s": t}
    hit = next(((st, l) for st, l, _ in evals if target and rep.reaches(l, target)), None)
    if hit:
        r = by_step.get(hit[0], {})
        s.update(tts=cum.get(hit[0]), tts_step=hit[0],
                 bytes_to_target=r.get("bytes_sent", 0) - r.get("inner_bytes_sent", 0))
        _, x = rep.crossing(evals, target)
        s.update(ttc=time_at_step(cum, x), ttc_step=x)
    s["stderr"] = statistics.median(e for _, _, e in evals if e is not None) if any(e for _, _, e in evals) else None
    return s


def time_at_step(cum, x):
    """Training seconds at the fractional step x: the step's seconds shared out linearly."""
    lo = math.floor(x)
    t_lo = cum.get(lo, 0.0)
    return t_lo if x == lo else t_lo + (x - lo) * (cum.get(lo + 1, t_lo) - t_lo)


def loss_at(s, seconds):
    """The mode's latest eval loss at or before `seconds` of training."""
    best = None
    for st, l, _ in s["evals"]:
        if s["cum"].get(st, math.inf) <= seconds:
            best = l
    return best


def nocomm_step_s(a, seed):
    name = "nocomm"
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    cfg = write_config(a, name, seed, a.nocomm_steps, 0.0)
    cmd = [se.EMU, "mpirun", "-np", str(a.nodes * a.ranks_per_node), "-x", "OMP_NUM_THREADS=1", a.hpctrain, "train",
           "--config", cfg, "--set", f"train.output_dir={out}", "eval.strategy=no", *NOCOMM]
    se.sh(cmd, out + ".log", a.timeout)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if "step_seconds" in l]
    return statistics.median(r["step_seconds"] for r in rows[4:])


def fmt(x, spec="{:.1f}"):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def report(a, results, started, nocomm):
    lines = [f"Measured {started} on {os.uname().nodename} ({os.cpu_count()} cores), {a.nodes} emulated node(s) x "
             f"{a.ranks_per_node} rank(s), model {a.n_layer} x {a.d_model}, seq_len {a.seq_len}, micro-batch "
             f"{a.micro_batch}/rank, precision {a.precision}, lr {a.lr} constant after {a.lr_warmup} warmup steps; target = DDP's eval loss at "
             f"step {a.target_step}; budget {a.budget} x DDP's time; evaluations every {a.eval_every} steps "
             f"({'the whole validation split' if a.eval_batches == 0 else f'{a.eval_batches} batches of 16'}); "
             f"seeds {a.seeds}.", "", f"Command: `{a.command}`", "",
             "| link | mode | time to target s | vs DDP | steps to target | at the crossing s (step) | vs DDP there | "
             "payload MB to target | vs DDP bytes | loss at DDP's time | compute-bound ratio | eval stderr |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for link in a.links:
        for mode in a.modes:
            per = [results.get((link, mode, seed)) for seed in a.seeds]
            ddp = [results.get((link, "ddp", seed)) for seed in a.seeds]
            ok = [p for p in per if p and "error" not in p]
            if not ok:
                err = next((p.get("error") for p in per if p), "not run")
                lines.append(f"| {link} | {mode} | FAILED: {err} | | | | | | | | | |")
                continue
            reached = [p for p in ok if p.get("tts")]
            tts = statistics.mean(p["tts"] for p in reached) if len(reached) == len(ok) else None
            ratios = [d["tts"] / p["tts"] for p, d in zip(per, ddp) if p and d and p.get("tts") and d.get("tts")]
            bratio = [d["bytes_to_target"] / p["bytes_to_target"] for p, d in zip(per, ddp)
                      if p and d and p.get("bytes_to_target") and d.get("bytes_to_target")]
            steps = statistics.mean(p["tts_step"] for p in reached) if reached else None
            ttc = statistics.mean(p["ttc"] for p in reached) if len(reached) == len(ok) and reached else None
            ttc_step = statistics.mean(p["ttc_step"] for p in reached) if reached else None
            cratios = [d["ttc"] / p["ttc"] for p, d in zip(per, ddp) if p and d and p.get("ttc") and d.get("ttc")]
            mb = statistics.mean(p["bytes_to_target"] for p in reached) / 1e6 if reached else None
            at = [loss_at(p, d["tts"]) for p, d in zip(per, ddp) if p and d and d.get("tts")]
            at = [x for x in at if x is not None]
            cb = tts / (steps * nocomm[link]) if tts and steps and nocomm.get(link) else None
            note = "" if len(reached) == len(ok) else f" (reached in {len(reached)} of {len(ok)} seeds)"
            chosen = [str(p["chosen_n"]) for p in ok if p.get("chosen_n")]
            label = f"{mode} (N = {', '.join(chosen)})" if chosen else mode
            lines.append(
                f"| {link} | {label} | {fmt(tts)}{note} | {fmt(statistics.mean(ratios), '{:.2f}x') if ratios else '-'} | "
                f"{fmt(steps, '{:.0f}')} | {fmt(ttc)} ({fmt(ttc_step)}) | "
                f"{fmt(statistics.mean(cratios), '{:.2f}x') if cratios else '-'} | {fmt(mb, '{:.2f}')} | {fmt(statistics.mean(bratio), '{:.0f}x') if bratio else '-'} | "
                f"{fmt(statistics.mean(at), '{:.4f}') if at else '-'} | {fmt(cb, '{:.2f}')} | "
                f"{fmt(statistics.median(p['stderr'] for p in ok if p.get('stderr')), '{:.4f}') if any(p.get('stderr') for p in ok) else '-'} |")
    lines += ["", "time to target: training seconds (sum of step seconds; evaluations and start-up excluded) to the "
              "first evaluation at or below the target, mean over the seeds; vs DDP: mean of DDP's time / the mode's "
              "per seed. at the crossing: the training seconds (and step) where the eval loss crosses the target, "
              "interpolated linearly between the evaluations around it (what a finer evaluation grid would show; a "
              "mode crossing just after DDP's step is otherwise charged up to a whole evaluation interval), vs DDP "
              "there likewise. payload: bytes one rank handed to MPI up to that step (hierarchical: across groups only; "
              "DDP: the gradient bytes of its steps). compute-bound ratio: time to target / (steps to target x the "
              "step time of a run that never exchanges: " +
              ", ".join(f"{l} {fmt(nocomm.get(l), '{:.3f}')} s" for l in a.links) + "). eval stderr: standard error of "
              "one evaluation over its sequences (median over evaluations); differences between modes on the same "
              "fixed evaluation set are paired and vary less."]
    return "\n".join(lines)


def plot(a, results):
    pngs = []
    dat = os.path.join(a.out, "ttq.dat")
    with open(dat, "w") as f:
        for link in a.links:
            for mode in a.modes:
                s = results.get((link, mode, a.seeds[0]))
                f.write(f"# {link} {mode}\n")
                if s and "evals" in s:
                    for st, l, _ in s["evals"]:
                        if st in s["cum"]:
                            f.write(f"{s['cum'][st]:.2f} {l:.5f}\n")
                f.write("\n\n")
    png = os.path.join(a.out, "ttq.png")
    blocks, panels = 0, []
    for link in a.links:
        curves = []
        for mode in a.modes:
            curves.append(f"'{dat}' index {blocks} u 1:2 w lp pt 7 ps 0.5 t '{mode}'")
            blocks += 1
        target = statistics.mean(results[(link, "ddp", s)]["target"] for s in a.seeds
                                 if (link, "ddp", s) in results and "target" in results[(link, "ddp", s)]) \
            if any((link, "ddp", s) in results for s in a.seeds) else None
        tl = f"{target:.4f}" if target else "?"
        panels.append(f"set title '{link}: eval loss against training seconds (target {tl})'\n"
                      + (f"set arrow from graph 0, first {target} to graph 1, first {target} nohead dt 2\n" if target else "")
                      + "plot " + ", ".join(curves) + "\nunset arrow")
    script = f"""set terminal pngcairo size {600 * len(a.links)},480 noenhanced font ',9'
set output '{png}'
set multiplot layout 1,{len(a.links)} title 'hpctrain vs PyTorch: time to quality, {a.nodes} node(s) x {a.ranks_per_node} rank(s), seed {a.seeds[0]}'
set xlabel 'training seconds (evaluations excluded)'; set ylabel 'eval loss'; set grid; set key top right font ',8'
set logscale x; set format x '%g'
{chr(10).join(panels)}
unset multiplot
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True, capture_output=True)
        pngs.append(png)
    except (OSError, subprocess.CalledProcessError) as e:
        se.log(f"gnuplot failed: {e}")
    return pngs


def write_csv(a, results):
    rep.write_csv(os.path.join(a.out, "ttq.csv"),
                  ["link", "mode", "seed", "target", "tts_s", "tts_step", "bytes_to_target", "train_s", "steps",
                   "final_eval_loss", "stderr", "wire_bytes", "stopped_by_budget", "error", "crossing_s",
                   "crossing_step"],
                  [[link, mode, seed, s.get("target"), s.get("tts"), s.get("tts_step"), s.get("bytes_to_target"),
                    s.get("train_s"), s.get("steps"), s["evals"][-1][1] if s.get("evals") else None,
                    s.get("stderr"), s.get("wire"), s.get("stopped_by_budget"), s.get("error"), s.get("ttc"),
                    s.get("ttc_step")]
                   for (link, mode, seed), s in sorted(results.items())])


def main(argv):
    a = parse(argv)
    if os.geteuid() != 0:
        sys.exit("time_to_quality.py: must run as root (the emulated cluster needs network namespaces)")
    a.hpctrain = os.path.abspath(a.hpctrain)
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    a.python = se.venv_python(a.python)
    if not a.python:
        sys.exit("time_to_quality.py: the Python environment is missing; run ./scripts/setup-python.sh")
    a.data = os.path.abspath(a.data or os.path.join(a.out, "fortunes.h5"))
    if not os.path.exists(a.data):
        se.sh([a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", a.data],
              os.path.join(a.out, "prepare.log"), 600)
    # The reference starts from our initial weights (scaling_emulate.init_weights reads a.cfg).
    a.cfg = write_config(a, "init", a.seeds[0], 1, 0.0)
    a.init = se.init_weights(a)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results, nocomm = {}, {}
    try:
        for link in a.links:
            se.emu("down", check=False)
            se.emu("up", "--nodes", str(a.nodes), "--link", link, "--ranks-per-node", str(a.ranks_per_node))
            nocomm[link] = nocomm_step_s(a, a.seeds[0])
            se.log(f"{link}: compute-only step {nocomm[link]:.3f} s")
            for seed in a.seeds:
                ddp = results[(link, "ddp", seed)] = run_mode(a, "ddp", f"{link}-ddp-s{seed}", seed, 0.0, 0,
                                                            a.target_step)
                hit = next(((st, l) for st, l, _ in ddp["evals"] if st >= a.target_step), None)
                if not hit:
                    raise se.RunFailed(f"DDP logged no evaluation at step {a.target_step}: --target-step must be a "
                                       f"multiple of --eval-every")
                target = hit[1]
                ddp.update(target=target, tts=ddp["cum"][hit[0]], tts_step=hit[0], ttc=ddp["cum"][hit[0]],
                           ttc_step=float(hit[0]))
                ddp["bytes_to_target"] = ddp.get("bytes_to_target") or ddp_bytes(a, link, seed, hit[0])
                se.log(f"{link} seed {seed}: target {target:.4f} (DDP step {hit[0]}, {ddp['tts']:.1f} s)")
                for mode in a.modes:
                    if mode == "ddp":
                        continue
                    name = f"{link}-{mode}-s{seed}"
                    try:
                        s = run_mode(a, mode, name, seed, target, a.budget * ddp["tts"], a.max_steps)
                        s["target"] = target
                        results[(link, mode, seed)] = s
                        se.log(f"{name}: {'reached at step %d, %.1f s (%.2fx DDP)' % (s['tts_step'], s['tts'], ddp['tts'] / s['tts']) if s.get('tts') else 'NOT reached'}")
                    except se.RunFailed as e:
                        results[(link, mode, seed)] = {"error": str(e), "evals": []}
                        se.log(f"{name}: FAILED {e}")
                write_outputs(a, results, started, nocomm)
    finally:
        se.emu("down", check=False)
    text = write_outputs(a, results, started, nocomm)
    pngs = plot(a, results)
    with open(os.path.join(a.out, "ttq.md"), "a") as f:
        f.write("".join(f"\n![{os.path.basename(p)}]({os.path.basename(p)})\n" for p in pngs))
    print(text)
    return 0


def ddp_bytes(a, link, seed, step):
    """DDP's payload up to `step`: its metrics line's bytes_sent (the gradient bytes of every step)."""
    path = os.path.join(a.out, "runs", f"{link}-ddp-s{seed}", "metrics.jsonl")
    for line in open(path):
        r = json.loads(line)
        if r.get("step") == step and "bytes_sent" in r:
            return r["bytes_sent"]
    return None


def write_outputs(a, results, started, nocomm):
    text = report(a, results, started, nocomm)
    with open(os.path.join(a.out, "ttq.md"), "w") as f:
        f.write(text + "\n")
    write_csv(a, results)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({f"{k[0]}|{k[1]}|{k[2]}": {kk: vv for kk, vv in v.items() if kk != "cum"} for k, v in results.items()},
                  f, indent=1)
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
