#!/usr/bin/env python3
"""What a local-SGD sync costs inside the trainer, next to the per-step gradient all-reduce of the
same bytes on the same ranks (issue 23): tests/bench/bench_sync.cpp times the sync path alone; this
runs `hpctrain train` and reads the comm phase of every step from metrics.jsonl.

Two runs per repetition, alternating, same model, data and ranks, telemetry at its defaults:
  dp     local_sgd.enabled = false: one blocking gradient all-reduce per step
  local  local_sgd.enabled = true, steps = N: one parameter average every N steps
Per run, over the steps after --warmup (phase_s.comm, median over ranks, per step):
  dp: comm per step (the gradient all-reduce); local: comm of the sync steps (the steps where the
  `syncs` counter grew) and of the other steps. The ratio sync / gradient all-reduce is what the
  issue bounds (<= 1.2x), and the non-sync steps' comm (< 2 ms).

--launcher local: `mpirun -np R` on this host (shared memory); --launcher emulate: `jobs/cluster/
emulate.sh mpirun` across an emulated cluster that is already up (`emulate.sh up --nodes 2 --link
100mbit`), one rank per node.

  jobs/bench/sync_in_trainer.py --shape demo --reps 3 --out runs/sync-in-trainer
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys

import bench_config
import run_report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {  # the shapes of compare_python.py and bench_sync.cpp
    "demo": {"n_layer": 4, "d_model": 128, "n_head": 4, "seq_len": 128, "micro_batch": 8},
    "larger": {"n_layer": 4, "d_model": 512, "n_head": 8, "seq_len": 256, "micro_batch": 4},
}


def launcher(a):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if a.launcher == "emulate":
        return [os.path.join(ROOT, "jobs", "cluster", "emulate.sh"), "mpirun", "-np", str(a.ranks),
                "-x", "OMP_NUM_THREADS=1"], env
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(a.ranks), "-x", "OMP_NUM_THREADS=1"], env


def run(a, name, data, local):
    shape = SHAPES[a.shape]
    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    cfg = bench_config.write(os.path.join(out, "input.toml"), {
        "model": {k: shape[k] for k in ("n_layer", "d_model", "n_head", "seq_len")},
        "data": {"path": data, "seed": 1234},
        "train": {"micro_batch_size": shape["micro_batch"], "max_steps": a.steps, "threads": 1,
                  "autocast": "bf16" if a.precision == "bf16" else "none", "output_dir": out},
        "local_sgd": {"enabled": local, "steps": a.local_steps},
        "eval": {"strategy": "no"},
        "log": {"every_steps": 1}})
    cmd, env = launcher(a)
    with open(os.path.join(out, "output.log"), "w") as log:
        rc = subprocess.run(cmd + [a.hpctrain, "train", "--config", cfg], stdout=log, stderr=subprocess.STDOUT,
                            env=env, timeout=3600).returncode
    if rc != 0:
        sys.exit(f"sync_in_trainer: {name} failed (exit {rc}): "
                 f"{run_report.error_message(os.path.join(out, 'output.log'))}; see {out}/output.log")
    return run_report.read_metrics(os.path.join(out, "metrics.jsonl"))


def comm_per_step(rows, warmup):
    """[(step, comm seconds (median over ranks), synced at this step)] for the steps after warmup."""
    steps = [r for r in rows if "phase_s" in r and "step" in r]
    out, prev_syncs = [], 0
    for r in steps:
        synced = r.get("syncs", 0) > prev_syncs
        prev_syncs = r.get("syncs", 0)
        if r["step"] > warmup:
            out.append((r["step"], r["phase_s"]["comm"]["median"], synced))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--data", help="causal-lm dataset (default: Debian's fortunes prepared into --out)")
    p.add_argument("--out", default="runs/sync-in-trainer")
    p.add_argument("--shape", choices=sorted(SHAPES), default="demo")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=34, help="steps per run (N = 8: syncs at 8, 16, 24, 32)")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out")
    p.add_argument("--local-steps", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--launcher", choices=["local", "emulate"], default="local")
    a = p.parse_args()
    if a.reps < 1 or a.ranks < 2 or a.local_steps < 2 or a.steps < a.warmup + a.local_steps + 1:
        sys.exit("sync_in_trainer: needs --reps >= 1, --ranks >= 2, --local-steps >= 2 and --steps >= --warmup + "
                 "--local-steps + 1 (a sync and a non-sync step after the warm-up)")
    a.out = os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    if not os.access(a.hpctrain, os.X_OK):
        sys.exit(f"sync_in_trainer: --hpctrain {a.hpctrain} is not an executable (build it: scripts/build.sh)")
    if a.data and not os.path.isfile(a.data):
        sys.exit(f"sync_in_trainer: --data {a.data}: no such file")
    data = a.data
    if not data:
        data = os.path.join(a.out, "fortunes.h5")
        if not os.path.exists(data):
            log = os.path.join(a.out, "prepare.log")
            with open(log, "w") as f:
                rc = subprocess.run([a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", data],
                                    stdout=f, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                sys.exit(f"sync_in_trainer: preparing {data} failed (exit {rc}): {run_report.error_message(log)}")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = []
    for rep in range(1, a.reps + 1):
        dp = comm_per_step(run(a, f"dp-{rep}", data, False), a.warmup)
        ls = comm_per_step(run(a, f"local-{rep}", data, True), a.warmup)
        syncs = [c for _, c, synced in ls if synced]
        other = [c for _, c, synced in ls if not synced]
        if not syncs:  # the horizon holds one (checked above): the run did not average
            sys.exit(f"sync_in_trainer: local-{rep} recorded no sync after the warm-up (its syncs counter never grew)")
        grad, sync = statistics.median(c for _, c, _ in dp), statistics.median(syncs)
        other_median = statistics.median(other)
        rows.append([rep, f"{1e3 * grad:.2f}", f"{1e3 * sync:.2f}", len(syncs), f"{sync / grad:.3f}",
                     f"{1e3 * other_median:.3f}", f"{1e3 * max(other):.3f}"])
        print(f"rep {rep}: grad all-reduce {1e3 * grad:.2f} ms/step, sync {1e3 * sync:.2f} ms ({sync / grad:.3f}x), "
              f"non-sync comm median {1e3 * other_median:.3f} max {1e3 * max(other):.3f} ms", flush=True)
    headers = ["rep", "dp: comm ms per step (median)", "local: comm ms of a sync step (median)", "syncs",
               "sync / gradient all-reduce", "local: comm ms of a non-sync step (median)", "(max)"]
    text = (f"# A local-SGD sync inside the trainer against the per-step gradient all-reduce\n\n"
            f"{started}; shape {a.shape}, {a.precision}, {a.ranks} ranks, launcher {a.launcher}, N = {a.local_steps}, "
            f"{a.steps} steps, the first {a.warmup} left out; phase_s.comm, median over ranks.\n\n"
            f"`{' '.join(sys.argv)}`\n\n" + run_report.md_table(headers, rows) + "\n")
    with open(os.path.join(a.out, "sync_in_trainer.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
