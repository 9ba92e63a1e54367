"""Reading run directories and writing reports: shared by jobs/bench/sweep.py (collect) and
jobs/bench/slurm_scaling.py (jobs/slurm/scaling.sbatch).

A run is what `hpctrain train` (or the PyTorch reference, tests/python/hpctrain_ref) leaves in its
output directory: metrics.jsonl, one JSON object per line; step lines carry step_seconds,
tokens_per_s, bytes_sent (hpctrain also comm_seconds, syncs, grad_allreduces), evaluation lines
eval_loss. Training seconds exclude evaluations and start-up: hpctrain's lines carry them
(train_seconds, the sum over every step, also those log.every_steps does not log); for lines without
the field (the reference logs every step) they are the running sum of step_seconds.
"""
import csv
import json
import math
import os
import re
import statistics
import subprocess

# An evaluation within this of the target counts as reaching it. The same trajectory evaluated by
# two programs (ours and PyTorch's, or two summation orders of one all-reduce) differs in the 6th
# digit; without a tolerance a per-step mode that retraces DDP's steps misses DDP's own loss by
# 1e-6 half of the time and is charged a whole evaluation interval more. 1e-4 is about 1/80 of the
# standard error of one evaluation on the validation split these benchmarks use (0.008).
TARGET_TOLERANCE = 1e-4


def reaches(loss, target):
    """True when an eval loss counts as at or below the target."""
    return loss <= target + TARGET_TOLERANCE


def crossing(evals, target):
    """(first evaluated step at or below the target, the step where the loss crosses it by linear
    interpolation from the evaluation before) or (None, None). evals: (step, loss, ...) in step order."""
    prev = None
    for step, loss, *_ in evals:
        if reaches(loss, target):
            if prev is None or prev[1] <= loss:
                return step, float(step)
            return step, prev[0] + (step - prev[0]) * (prev[1] - target) / (prev[1] - loss)
        prev = (step, loss)
    return None, None


def read_metrics(path):
    """The metrics lines of a run as dicts; a torn or malformed line (a run killed mid-write) is skipped."""
    rows = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(r, dict):
                    rows.append(r)
    except OSError:
        pass
    return rows


def num(x):
    """x as a float, or None for a missing, non-numeric or non-finite value."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def summarize(rows, target=None, warmup=2):
    """Final and best eval loss, tokens/s, bytes, training seconds, the eval curve, time to `target`.

    curve: [(training seconds at the evaluation's step, eval loss)]; tts: training seconds to the first
    evaluation at or below target (None when not reached or no target); sync_s, bytes_per_sync: seconds and
    bytes per exchange over the steps after `warmup` (hpctrain's counters; None for the reference)."""
    steps = [r for r in rows if num(r.get("step_seconds")) is not None and "step" in r]
    cum, t = {}, 0.0
    for r in rows:
        if "step" not in r:
            continue
        if num(r.get("train_seconds")) is not None:
            t = r["train_seconds"]
        elif num(r.get("step_seconds")) is not None:
            t += r["step_seconds"]
        else:
            continue
        cum[r["step"]] = t
    evals = [(r["step"], r["eval_loss"]) for r in rows if num(r.get("eval_loss")) is not None and "step" in r]
    s = {"steps": steps[-1]["step"] if steps else 0, "train_s": t if steps else None,
         "curve": [(cum[st], loss) for st, loss in evals if st in cum], "evals": evals,
         "final_eval_loss": evals[-1][1] if evals else None, "final_eval_step": evals[-1][0] if evals else None,
         "best_eval_loss": None, "best_eval_step": None, "bytes_sent": None, "tokens_per_s_median": None,
         "tts": None, "tts_step": None, "bytes_to_target": None, "sync_s": None, "bytes_per_sync": None,
         "syncs": None}
    if evals:
        s["best_eval_step"], s["best_eval_loss"] = min(evals, key=lambda e: e[1])
    sent = [r for r in steps if num(r.get("bytes_sent")) is not None]
    if sent:
        s["bytes_sent"] = sent[-1]["bytes_sent"]
    steady = steps[warmup:] if len(steps) > warmup else steps
    tps = [r["tokens_per_s"] for r in steady if num(r.get("tokens_per_s")) is not None]
    if tps:
        s["tokens_per_s_median"] = statistics.median(tps)
    by_step = {r["step"]: r for r in steps}
    if target:
        hit = next((st for st, loss in evals if reaches(loss, target) and st in cum), None)
        if hit is not None:
            r = by_step.get(hit, {})  # an evaluation at a step log.every_steps did not log: no byte count
            s["tts"], s["tts_step"] = cum[hit], hit
            if num(r.get("bytes_sent")) is not None:
                s["bytes_to_target"] = r["bytes_sent"] - (num(r.get("inner_bytes_sent")) or 0)
    s.update(sync_stats(steps, warmup))
    return s


def sync_stats(steps, warmup):
    """Seconds and bytes per exchange (gradient all-reduce or parameter average), steps after warmup."""
    keys = ("comm_seconds", "syncs", "grad_allreduces", "bytes_sent")
    have = [r for r in steps if all(num(r.get(k)) is not None for k in keys)]
    if len(have) < 2:
        return {}
    base = have[warmup - 1] if 0 < warmup < len(have) else None
    last = have[-1]
    d = {k: last[k] - (base[k] if base else 0) for k in keys}
    syncs = d["syncs"] + d["grad_allreduces"]
    if syncs <= 0:
        return {"syncs": 0}
    return {"syncs": syncs, "sync_s": d["comm_seconds"] / syncs, "bytes_per_sync": d["bytes_sent"] / syncs}


def output_lines(path):
    """The lines of a job's output file (undecodable bytes replaced); [] when it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


ERROR_RE = re.compile(r"\[error\]\s*(?:\[rank \d+\]\s*)?(.*)")


def error_message(output_path):
    """The first `[error]` line of a job's output (hpctrain's one-line error), else its last 'error:' line."""
    lines = output_lines(output_path)
    for line in lines:
        m = ERROR_RE.search(line)
        if m:
            return m.group(1).strip()
    for line in reversed(lines):
        if "error:" in line:
            return line.split("error:", 1)[1].strip()
    return None


def fmt(x, spec="{:.1f}", none="-"):
    x = num(x) if not isinstance(x, str) else x
    return none if x is None else (x if isinstance(x, str) else spec.format(x))


def md_table(headers, rows):
    """A Markdown table; a '|' inside a cell (an error message) is escaped."""
    def cell(v):
        return str(v).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def write_csv(path, headers, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(headers)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])


def plot_curves(png, title, curves, xlabel="training seconds (evaluations excluded)", logx=False):
    """Eval loss against training seconds, one line per (name, [(x, y)]) with points, drawn by gnuplot
    (pngcairo). Returns None when drawn, else why not (no curve has a point, gnuplot missing or failing)."""
    curves = [(name, pts) for name, pts in curves if pts]
    if not curves:
        return "no run has an evaluation to plot (eval.strategy = steps draws a curve)"
    dat = os.path.splitext(png)[0] + ".dat"
    with open(dat, "w") as f:
        for name, pts in curves:
            f.write(f"# {name}\n" + "".join(f"{x:.4f} {y:.6f}\n" for x, y in pts) + "\n\n")

    def quote(s):
        return "'" + s.replace("'", "''") + "'"
    plots = ", ".join(f"{quote(dat)} index {i} using 1:2 with linespoints pt 7 ps 0.6 title {quote(name)}"
                      for i, (name, _) in enumerate(curves))
    script = (f"set terminal pngcairo size 900,560 noenhanced font ',10'\nset output {quote(png)}\n"
              f"set title {quote(title)}\nset xlabel {quote(xlabel)}\nset ylabel 'eval loss'\nset grid\n"
              f"set key outside right top font ',8'\n{'set logscale x' + chr(10) if logx else ''}plot {plots}\n")
    try:
        p = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"gnuplot could not run: {e}"
    if p.returncode != 0 or not os.path.exists(png):
        return f"gnuplot failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}"
    return None
