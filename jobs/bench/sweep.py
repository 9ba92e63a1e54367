#!/usr/bin/env python3
"""Sweeps as Slurm job arrays: a grid of `--set` overrides becomes one array task per combination,
each training in its own run directory; `collect` gathers every task into one table and one plot.

  jobs/bench/sweep.py submit 'local_sgd.steps=8,16 x local_sgd.comm_dtype=fp32,int8' --array-parallel 2 \\
      --config inputs/configs/demo.toml --set local_sgd.enabled=true train.max_steps=200 --dir runs/sweep-a \\
      -- --nodes=2 --ntasks-per-node=4 --time=30 --partition=gpu          # after '--': sbatch options
  jobs/bench/sweep.py submit grid.toml --dir runs/sweep-b                  # the grid as a TOML file
  jobs/bench/sweep.py collect runs/sweep-a [--wait] [--target 2.10]

The grid. On the command line: axes separated by whitespace (an optional 'x' between them reads well),
each axis `section.key=v1,v2,...`; the tasks are every combination (the product), in order, the
last axis varying fastest. As a TOML file:

  [grid]                         # every combination of these lists is one task
  "local_sgd.steps" = [8, 16]
  local_sgd.comm_dtype = ["fp32", "int8"]      # dotted keys or nested tables work alike
  [set]                          # overrides every task gets (optional; --set adds more)
  "local_sgd.enabled" = true

`--task 'key=value key=value'` (repeatable) adds one task with exactly those overrides after the
grid's; a sweep may consist of --task entries alone.

Every key must be a config key (`hpctrain train --help-config`); submit refuses anything else, naming
the key, before any job is queued (--no-check skips that: e.g. when the compute nodes run another
build; a task with an unknown key then fails and collect names it with hpctrain's error line). A value may not contain whitespace (jobs/slurm/train.sbatch's SETS is
split on it). train.output_dir and checkpoint.dir are the sweep's: DIR/task-<i>.

submit writes DIR/sweep.json (the grid, the tasks, the job id), DIR/tasks.tsv (index, name,
overrides: what jobs/slurm/sweep.sbatch reads), DIR/sweep.env (paths for the tasks), then runs
`sbatch --array=0-K%P --output=DIR/task-%a.out [sbatch options] jobs/slurm/sweep.sbatch DIR`. Each task
is jobs/slurm/train.sbatch (pre-flight, srun, pre-emption and requeue) in DIR/task-<i>.

collect reads every task's metrics.jsonl and output and writes DIR/sweep.md, sweep.csv and sweep.png
(eval loss against training seconds, one line per task): final and best eval loss, median tokens/s,
bytes sent, training seconds (sum of step seconds), wall seconds (first to last time stamp of the
task's output), time to --target. A failed task is named with its error (the `[error]` line of its
output) and the others are still collected. Exit code 0 when every task finished, 1 otherwise.
"""
import argparse
import datetime
import difflib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_report as rep  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESERVED = {"train.output_dir": "the sweep sets it per task (DIR/task-<i>)",
            "checkpoint.dir": "the sweep sets it per task (DIR/task-<i>/checkpoints)"}


class SweepError(Exception):
    pass


# ---------------------------------------------------------------- the grid

def toml_text(v):
    """A TOML value as `--set` text: true/false, numbers, bare strings, [arrays]."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "[" + ",".join(f'"{x}"' if isinstance(x, str) else toml_text(x) for x in v) + "]"
    raise SweepError(f"value {v!r} has a type --set cannot carry ({type(v).__name__})")


def flatten(table, prefix=""):
    """{'local_sgd': {'steps': [..]}} and {'local_sgd.steps': [..]} both give [('local_sgd.steps', [..])]."""
    out = []
    for k, v in table.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out += flatten(v, name + ".")
        else:
            out.append((name, v))
    return out


def parse_grid(tokens):
    """(axes [(key, [value text])], common sets [key=value]) from a TOML file or `key=v1,v2 x key=...` words."""
    if len(tokens) == 1 and tokens[0].endswith(".toml"):
        path = tokens[0]
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except OSError as e:
            raise SweepError(f"cannot read grid file {path}: {e.strerror}")
        except tomllib.TOMLDecodeError as e:
            raise SweepError(f"grid file {path} is not valid TOML: {e}")
        unknown = set(doc) - {"grid", "set"}
        if unknown:
            raise SweepError(f"grid file {path}: unknown table(s) {', '.join(sorted(unknown))} (only [grid] and [set])")
        axes = []
        for key, values in flatten(doc.get("grid", {})):
            if not isinstance(values, list) or not values:
                raise SweepError(f"grid file {path}: grid.{key} must be a non-empty list of values")
            axes.append((key, [toml_text(v) for v in values]))
        common = [f"{k}={toml_text(v)}" for k, v in flatten(doc.get("set", {}))]
        if not axes:
            raise SweepError(f"grid file {path} has no [grid] entries")
        return axes, common
    axes = []
    for word in " ".join(tokens).split():
        if word.lower() == "x":
            continue
        key, eq, values = word.partition("=")
        if not eq or not key:
            raise SweepError(f"grid axis '{word}' is not section.key=value1,value2,... (or give a .toml file)")
        vals = values.split(",")
        if any(v == "" for v in vals):
            raise SweepError(f"grid axis '{word}' has an empty value")
        axes.append((key, vals))
    if not axes:
        raise SweepError("the grid is empty: give section.key=v1,v2 axes or a .toml file")
    return axes, []


def config_keys(hpctrain):
    """The keys `hpctrain train --help-config` lists."""
    try:
        p = subprocess.run([hpctrain, "train", "--help-config"], capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise SweepError(f"cannot run {hpctrain} to list the config keys: {e.strerror} (set --hpctrain)")
    keys = set(re.findall(r"^\s+([a-z_]+\.[a-z0-9_]+)\s", p.stdout, re.M))
    if p.returncode != 0 or not keys:
        raise SweepError(f"'{hpctrain} train --help-config' listed no config keys (exit {p.returncode})")
    return keys


def check_keys(axes, common, keys, n_axes=None):
    """Every key a config key and not reserved; the first n_axes (default all) are grid axes, each once."""
    seen = set()
    n_axes = len(axes) if n_axes is None else n_axes
    named = [(k, "grid key" if i < n_axes else "--task key") for i, (k, _) in enumerate(axes)] + \
        [(s.partition("=")[0], "--set key") for s in common]
    for key, what in named:
        if key not in keys:
            near = difflib.get_close_matches(key, sorted(keys), n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise SweepError(f"{what} '{key}' is not a config key (`hpctrain train --help-config` lists them{hint})")
        if key in RESERVED:
            raise SweepError(f"{what} '{key}' cannot be swept or set: {RESERVED[key]}")
    for key, _ in axes[:n_axes]:
        if key in seen:
            raise SweepError(f"grid key '{key}' appears in two axes")
        seen.add(key)
    for key, vals in axes:
        for v in vals:
            if re.search(r"\s", v):
                raise SweepError(f"value '{v}' of {key} contains whitespace (train.sbatch splits SETS on it)")
    for s in common:
        if "=" not in s or re.search(r"\s", s):
            raise SweepError(f"--set '{s}' is not section.key=value without whitespace")


def tasks_of(axes):
    """[(name, [key=value])]: the product of the axes, the last varying fastest."""
    short = {k: k.rsplit(".", 1)[-1] for k, _ in axes}
    if len(set(short.values())) < len(short):
        short = {k: k for k, _ in axes}
    out = []
    for combo in itertools.product(*[vals for _, vals in axes]):
        sets = [f"{k}={v}" for (k, _), v in zip(axes, combo)]
        out.append((" ".join(f"{short[k]}={v}" for (k, _), v in zip(axes, combo)), sets))
    return out


# ---------------------------------------------------------------- submit

def extra_tasks(specs):
    """[(name, [key=value])] from --task 'key=value key=value' (one task each, after the grid's)."""
    out = []
    for spec in specs:
        sets = spec.split()
        if not sets:
            raise SweepError("--task '' names no override (give section.key=value ...)")
        for s in sets:
            if "=" not in s or s.startswith("="):
                raise SweepError(f"--task '{spec}': '{s}' is not section.key=value")
        out.append((" ".join(sets), sets))
    return out


def submit(a, sbatch_args):
    if not a.grid and not a.task:
        raise SweepError("nothing to sweep: give grid axes section.key=v1,v2, a .toml file, or --task")
    axes, common = parse_grid(a.grid) if a.grid else ([], [])
    common += a.set
    extra = extra_tasks(a.task)
    hpctrain = os.path.abspath(a.hpctrain)
    if not os.access(hpctrain, os.X_OK):
        raise SweepError(f"hpctrain executable {a.hpctrain} not found (build it: ./scripts/build.sh, or set --hpctrain)")
    if a.no_check:
        print("sweep: --no-check: the keys are not checked here; a task with an unknown key fails at its start")
    else:
        named = axes + [(s.partition("=")[0], [s.partition("=")[2]]) for _, sets in extra for s in sets]
        check_keys(named, common, config_keys(hpctrain), n_axes=len(axes))
    if not os.path.isfile(a.config):
        raise SweepError(f"config {a.config} not found")
    tasks = (tasks_of(axes) if axes else []) + extra
    d = os.path.abspath(a.dir or f"runs/sweep-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    if os.path.exists(os.path.join(d, "sweep.json")):
        raise SweepError(f"{d} already holds a sweep (sweep.json): choose another --dir")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tasks.tsv"), "w") as f:
        f.writelines(f"{i}\t{name}\t{' '.join(sets)}\n" for i, (name, sets) in enumerate(tasks))
    env = {"HPCTRAIN_ROOT": ROOT, "HPCTRAIN": hpctrain, "CONFIG": os.path.abspath(a.config),
           "DATA": os.path.abspath(a.data) if a.data else "", "COMMON_SETS": " ".join(common)}
    with open(os.path.join(d, "sweep.env"), "w") as f:
        f.write("# Written by jobs/bench/sweep.py submit; sourced by jobs/slurm/sweep.sbatch.\n")
        f.writelines(f"{k}={shlex.quote(v)}\n" for k, v in env.items())
    name = a.name or os.path.basename(d)
    cmd = ["sbatch", "--parsable", f"--array=0-{len(tasks) - 1}%{a.array_parallel}", f"--job-name={name}",
           f"--output={d}/task-%a.out", *sbatch_args, os.path.join(ROOT, "jobs", "slurm", "sweep.sbatch"), d]
    meta = {"name": name, "dir": d, "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "jobs/bench/sweep.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
            "grid": axes, "common_sets": common, "sbatch": cmd, "job_id": None,
            "tasks": [{"index": i, "name": n, "sets": s} for i, (n, s) in enumerate(tasks)]}
    print(f"sweep {name}: {len(tasks)} task(s) in {d}, at most {a.array_parallel} at a time")
    for i, (n, s) in enumerate(tasks):
        print(f"  task {i}: {' '.join(s)}")
    if a.dry_run:
        print("dry run: " + " ".join(shlex.quote(x) for x in cmd))
    else:
        if not shutil.which("sbatch"):
            raise SweepError("sbatch not found: run this on a Slurm login node (or --dry-run)")
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SweepError(f"sbatch refused the array (exit {p.returncode}): {p.stderr.strip()}")
        meta["job_id"] = p.stdout.strip().split(";")[0]
        print(f"submitted array job {meta['job_id']}: jobs/bench/sweep.py collect {d} --wait")
    with open(os.path.join(d, "sweep.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return 0


# ---------------------------------------------------------------- collect

STAMP = re.compile(r"^\[(?:\w+ )?(\d\d):(\d\d):(\d\d)\]")


def wall_seconds(out_path):
    """Seconds from the first to the last time stamp in a task's output (a midnight in between counts)."""
    secs, day, prev = [], 0, None
    for line in rep.output_lines(out_path):
        m = STAMP.match(line)
        if m:
            s = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
            if prev is not None and s < prev:
                day += 86400
            prev = s
            secs.append(s + day)
    return secs[-1] - secs[0] if len(secs) >= 2 else None


def queue_states(job_id):
    """{task index: squeue state} of the array's tasks still queued or running; None when squeue fails."""
    if not job_id or not shutil.which("squeue"):
        return None
    p = subprocess.run(["squeue", "-h", "-r", "-j", str(job_id), "-o", "%i %T"], capture_output=True, text=True)
    if p.returncode != 0:
        return {} if "Invalid job id" in p.stderr else None
    out = {}
    for line in p.stdout.split("\n"):
        m = re.match(r"\d+_(\d+) (\S+)", line.strip())
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def wait_for(meta, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        states = queue_states(meta["job_id"])
        if states is None:
            print("collect: squeue does not answer; collecting what is there", file=sys.stderr)
            return
        if not states:
            return
        time.sleep(2)
    print(f"collect: tasks still queued after {timeout_s} s; collecting what is there", file=sys.stderr)


def task_status(d, t, queued):
    """('ok' | 'FAILED' | a queue state, error message or None)."""
    out = os.path.join(d, f"task-{t['index']}.out")
    text = open(out, errors="replace").read() if os.path.exists(out) else ""
    if t["index"] in queued:
        return queued[t["index"]], None
    if re.search(r"\] training finished$", text, re.M):
        return "ok", None
    if not text:
        return "FAILED", f"no output ({out} is missing: the task never started or was cancelled)"
    return "FAILED", rep.error_message(out) or f"ended without finishing (see {out})"


def collect(a):
    d = os.path.abspath(a.dir)
    try:
        meta = json.load(open(os.path.join(d, "sweep.json")))
    except (OSError, json.JSONDecodeError) as e:
        raise SweepError(f"{d} holds no readable sweep.json ({e}): is it the --dir of 'sweep.py submit'?")
    if a.wait is not None:
        wait_for(meta, a.wait)
    queued = queue_states(meta.get("job_id")) or {}
    headers = ["task", "overrides", "status", "final eval loss", "best eval loss (step)", "tokens/s median",
               "bytes sent MB", "train s", "wall s"] + (["time to target s (step)"] if a.target else []) + ["error"]
    md, csv_rows, curves, failed = [], [], [], []
    for t in meta["tasks"]:
        i = t["index"]
        status, err = task_status(d, t, queued)
        s = rep.summarize(rep.read_metrics(os.path.join(d, f"task-{i}", "metrics.jsonl")), a.target)
        wall = wall_seconds(os.path.join(d, f"task-{i}.out"))
        if status != "ok":
            failed.append((i, t["name"], status, err))
        curves.append((f"{i}: {t['name']}", s["curve"]))
        best = f"{rep.fmt(s['best_eval_loss'], '{:.4f}')} ({s['best_eval_step']})" if s["best_eval_loss"] else "-"
        mb = s["bytes_sent"] / 1e6 if s["bytes_sent"] is not None else None
        row = [i, t["name"], status, rep.fmt(s["final_eval_loss"], "{:.4f}"), best,
               rep.fmt(s["tokens_per_s_median"], "{:.0f}"), rep.fmt(mb, "{:.2f}"), rep.fmt(s["train_s"]),
               rep.fmt(wall, "{:.0f}")]
        if a.target:
            row.append(f"{rep.fmt(s['tts'])} ({s['tts_step']})" if s["tts"] else "not reached")
        md.append(row + [err or ""])
        csv_rows.append([i, " ".join(t["sets"]), status, s["final_eval_loss"], s["best_eval_loss"],
                         s["best_eval_step"], s["tokens_per_s_median"], s["bytes_sent"], s["train_s"], wall,
                         s["tts"], s["tts_step"], s["steps"], err])
    rep.write_csv(os.path.join(d, "sweep.csv"), ["task", "overrides", "status", "final_eval_loss",
                  "best_eval_loss", "best_eval_step", "tokens_per_s_median", "bytes_sent", "train_s", "wall_s",
                  "time_to_target_s", "time_to_target_step", "steps", "error"], csv_rows)
    png = os.path.join(d, "sweep.png")
    why = rep.plot_curves(png, f"sweep {meta['name']}: eval loss against training seconds", curves)
    lines = [f"# Sweep {meta['name']}", "", f"Array job {meta.get('job_id') or '(not submitted)'}, "
             f"{len(meta['tasks'])} task(s), created {meta['created']}.", "", f"Command: `{meta['command']}`", "",
             f"Every task: {' '.join(meta['common_sets']) or '(no common overrides)'}" +
             (f"; target eval loss {a.target}" if a.target else ""), "", rep.md_table(headers, md), ""]
    if failed:
        lines += ["Not finished: " + "; ".join(f"task {i} ({n}) {st}: {e or 'still ' + st.lower()}"
                                               for i, n, st, e in failed), ""]
    lines += ["train s: the sum of step seconds (evaluations and start-up excluded); wall s: first to last time "
              "stamp of the task's output (task-<i>.out); bytes sent: what one rank handed to MPI.", ""]
    lines.append(f"![eval loss against training seconds](sweep.png)" if why is None else f"No plot: {why}.")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(d, "sweep.md"), "w") as f:
        f.write(text)
    print(text, end="")
    print(f"collect: wrote {d}/sweep.md, sweep.csv" + (", sweep.png" if why is None else ""))
    return 1 if failed else 0


def main(argv):
    sbatch_args = []
    if "--" in argv:
        k = argv.index("--")
        argv, sbatch_args = argv[:k], argv[k + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="write the task list and submit the array (options after '--' go to sbatch)")
    s.add_argument("grid", nargs="*", help="GRID.toml, or axes section.key=v1,v2 [x section.key=v1,v2 ...]")
    s.add_argument("--task", action="append", default=[], metavar="'KEY=VALUE ...'",
                   help="one more task with these overrides, after the grid's (repeatable)")
    s.add_argument("--no-check", action="store_true",
                   help="do not check the keys against this hpctrain's --help-config (a bad key then fails its task)")
    s.add_argument("--array-parallel", type=int, default=4, metavar="P", help="tasks running at once (%%P)")
    s.add_argument("--dir", help="sweep directory (default runs/sweep-<date>-<time>)")
    s.add_argument("--config", default=os.path.join(ROOT, "inputs", "configs", "demo.toml"))
    s.add_argument("--data", help="data.path for every task (default: the config's)")
    s.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="overrides every task gets")
    s.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    s.add_argument("--name", help="Slurm job name (default: the directory's name)")
    s.add_argument("--dry-run", action="store_true", help="write the files and print the sbatch command only")
    c = sub.add_parser("collect", help="one table (sweep.md, sweep.csv) and one plot (sweep.png) of every task")
    c.add_argument("dir")
    c.add_argument("--target", type=float, help="eval loss: time to reach it per task")
    c.add_argument("--wait", type=float, nargs="?", const=86400.0, metavar="SECONDS",
                   help="first wait until no task is queued or running (squeue), at most SECONDS")
    a = p.parse_args(argv)
    if a.cmd == "submit" and a.array_parallel < 1:
        p.error("--array-parallel must be >= 1")
    try:
        return submit(a, sbatch_args) if a.cmd == "submit" else collect(a)
    except SweepError as e:
        print(f"sweep.py: error: {e}", file=sys.stderr)
        return 2 if a.cmd == "collect" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
