#!/usr/bin/env python3
"""Scaling benchmark driver: the same training on 1, 2, 4 ranks (strong and weak scaling), local SGD
with N in {1, 4, 16}, and optionally 2 nodes x 2 ranks through Slurm. Reads each run's metrics.jsonl
(tokens_per_s, bytes_sent, comm_seconds) and writes a Markdown table, a CSV and a PNG plot (gnuplot).

  jobs/bench/scaling.py --hpctrain build/bin/hpctrain --data data/fortunes.h5 --out bench-out
  jobs/bench/scaling.py ... --slurm          # adds a 2-node x 2-rank run via srun (needs SLURM_CONF)
  jobs/bench/scaling.py --emulate [--smoke]  # across emulated nodes with capped links (root): scaling_emulate.py

Definitions (all measured after --warmup steps):
  tokens/s      global tokens per second: median over the logged steps
  efficiency    tokens/s(r ranks) / (r * tokens/s(1 rank)), for strong and weak scaling alike
  bytes/step    bytes one rank hands to MPI per optimizer step (gradients or parameters)
  comm s/step   seconds per step inside the averaging (pack, collective, unpack)
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

# A small model whose step is long enough to time and whose parameters make the messages real.
MODEL = ["model.n_layer=2", "model.n_head=4", "model.d_model=128", "model.seq_len=64",
         "train.device=cpu", "train.threads=1", "eval.strategy=no", "log.every_steps=1",
         "checkpoint.save_final=false", "train.lr_schedule=constant", "train.warmup_steps=0"]


def plan(args):
    """(name, family, ranks, nodes, micro_batch, local_sgd_N or 0) for every run."""
    runs = []
    for r in (1, 2, 4):  # strong: global batch fixed at 16 samples per step
        runs.append((f"strong-{r}", "strong", r, 1, 16 // r, 0))
    for r in (1, 2, 4):  # weak: 4 samples per rank per step
        runs.append((f"weak-{r}", "weak", r, 1, 4, 0))
    for n in (1, 4, 16):  # local SGD at 4 ranks, weak-scaled batch
        runs.append((f"localsgd-N{n}", "local-sgd", 4, 1, 4, n))
    if args.slurm:
        runs.append(("weak-4-2nodes", "nodes", 4, 2, 4, 0))
        runs.append(("localsgd-N16-2nodes", "nodes", 4, 2, 4, 16))
    return runs


def launcher(args, ranks, nodes):
    if nodes > 1 or args.slurm_all:
        return ["srun", "--mpi=pmix", f"--nodes={nodes}", f"--ntasks={ranks}",
                f"--ntasks-per-node={ranks // nodes}", "--cpus-per-task=1", "--time=10"]
    return [args.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]


def run_one(args, name, ranks, nodes, micro, n_local):
    out_dir = os.path.join(args.out, "runs", name)
    shutil.rmtree(out_dir, ignore_errors=True)
    sets = MODEL + [f"data.path={args.data}", f"train.output_dir={out_dir}",
                    f"train.max_steps={args.steps}", f"train.micro_batch_size={micro}"]
    if n_local:
        sets += ["local_sgd.enabled=true", f"local_sgd.steps={n_local}"]
    cmd = launcher(args, ranks, nodes) + [args.hpctrain, "train", "--config", args.config, "--set"] + sets
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print(f"[scaling] {name}: {' '.join(cmd)}", flush=True)
    log_path = os.path.join(args.out, f"{name}.log")
    os.makedirs(args.out, exist_ok=True)
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout_s).returncode
    if rc != 0:
        sys.exit(f"[scaling] {name} failed with exit code {rc}; see {log_path}")
    return summarize(os.path.join(out_dir, "metrics.jsonl"), args.warmup)


def summarize(path, warmup):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    steps = [l for l in lines if "tokens_per_s" in l]
    if len(steps) <= warmup + 1:
        sys.exit(f"[scaling] {path}: only {len(steps)} step lines; raise --steps")
    first, last = steps[warmup], steps[-1]
    dsteps = last["step"] - first["step"]
    return {
        "tokens_per_s": statistics.median(l["tokens_per_s"] for l in steps[warmup + 1:]),
        "bytes_per_step": (last["bytes_sent"] - first["bytes_sent"]) / dsteps,
        "comm_s_per_step": (last["comm_seconds"] - first["comm_seconds"]) / dsteps,
        "step_s": statistics.median(l["step_seconds"] for l in steps[warmup + 1:]),
    }


def table(results, base):
    rows = ["| run | family | ranks | nodes | micro batch | local SGD N | tokens/s | efficiency | "
            "bytes/step (per rank) | comm s/step | step s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (name, fam, ranks, nodes, micro, n), m in results:
        b = base.get("strong" if fam == "strong" else "weak")
        eff = m["tokens_per_s"] / (ranks * b) if b else float("nan")
        rows.append(f"| {name} | {fam} | {ranks} | {nodes} | {micro} | {n or '-'} | {m['tokens_per_s']:.0f} | "
                    f"{eff:.2f} | {m['bytes_per_step']:.0f} | {m['comm_s_per_step']:.4f} | {m['step_s']:.3f} |")
    return "\n".join(rows)


def plot(args, results, base):
    dat = os.path.join(args.out, "scaling.dat")
    with open(dat, "w") as f:
        for fam in ("strong", "weak"):
            f.write(f"# {fam}\n")
            for (name, fm, ranks, nodes, micro, n), m in results:
                if fm == fam:
                    f.write(f"{ranks} {m['tokens_per_s']:.1f} {ranks * base[fam]:.1f}\n")
            f.write("\n\n")
        f.write("# local-sgd\n")
        for (name, fm, ranks, nodes, micro, n), m in results:
            if fm == "local-sgd":
                f.write(f"{n} {m['tokens_per_s']:.1f} {m['comm_s_per_step'] * 1000:.3f}\n")
    png = os.path.join(args.out, "scaling.png")
    script = f"""set terminal pngcairo size 1000,420 noenhanced
set output '{png}'
set multiplot layout 1,2 title 'hpctrain scaling ({args.machine})'
set xlabel 'ranks'; set ylabel 'tokens/s'; set key top left; set xtics (1,2,4); set grid
set xrange [0.9:4.3]; set yrange [0:*]
plot '{dat}' index 0 u 1:2 w lp t 'strong (global batch 16)', '' index 0 u 1:3 w l dt 2 t 'strong ideal', \\
     '' index 1 u 1:2 w lp t 'weak (4/rank)', '' index 1 u 1:3 w l dt 2 t 'weak ideal'
set xlabel 'local SGD steps N (4 ranks)'; set logscale x 2; set xtics (1,4,16); set ylabel 'tokens/s'
set xrange [0.8:20]; set yrange [0:*]; set y2range [0:*]
set y2label 'comm ms/step'; set y2tics; set ytics nomirror
plot '{dat}' index 2 u 1:2 w lp t 'tokens/s', '' index 2 u 1:3 axes x1y2 w lp t 'comm ms/step'
unset multiplot
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"[scaling] gnuplot failed ({e}); table only", file=sys.stderr)
        return None
    return png


def main():
    if "--emulate" in sys.argv[1:]:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import scaling_emulate
        return scaling_emulate.main(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpctrain", default="build/bin/hpctrain")
    p.add_argument("--config", default="/dev/null", help="base TOML (default: built-in defaults + the model above)")
    p.add_argument("--data", required=True, help="HDF5 dataset from `hpctrain prepare`")
    p.add_argument("--out", default="bench-out/scaling")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="steps ignored at the start")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--slurm", action="store_true", help="also run 2 nodes x 2 ranks with srun (SLURM_CONF)")
    p.add_argument("--slurm-all", action="store_true", help="launch every run with srun")
    p.add_argument("--timeout-s", type=int, default=900)
    p.add_argument("--machine", default=f"{os.cpu_count()} CPUs")
    args = p.parse_args()
    args.data = os.path.abspath(args.data)

    results = [(r, run_one(args, r[0], r[2], r[3], r[4], r[5])) for r in plan(args)]
    base = {fam: next(m["tokens_per_s"] for (n, f, ranks, *_), m in results if f == fam and ranks == 1)
            for fam in ("strong", "weak")}
    md = table(results, base)
    png = plot(args, results, base)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip()
    text = f"Measured {stamp} on {args.machine}; command: `{' '.join(sys.argv)}`\n\n{md}\n"
    if png:
        text += f"\nPlot: {png}\n"
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
