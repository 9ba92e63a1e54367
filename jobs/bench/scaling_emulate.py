#!/usr/bin/env python3
"""Scaling across emulated nodes (issue 14 item 2): `jobs/bench/scaling.py --emulate ...` runs here.

For every (nodes, link) the emulated cluster (jobs/cluster/emulate.sh, root) is brought up with that
many nodes and that cap, and every mode trains the same model, data order and global batch across
it, one rank per node: hpctrain under `emulate.sh mpirun`, the PyTorch reference
(tests/python/hpctrain_ref) under one torchrun per node (`emulate.sh exec`, GLOO_SOCKET_IFNAME=eth0).

Per point:
  tokens/s        median over the steady steps (after --warmup) and aggregate (all tokens / all step seconds)
  comm fraction   time inside our averaging / step time, steady steps (metrics comm_seconds); for the
                  reference, its average phase (DDP's all-reduce hides in backward: not separable, '-')
  sync s          comm seconds per exchange (gradient all-reduce or parameter average), steady steps
  wire bytes      sum over nodes of the veth TX counter deltas (emulate.sh status --bytes), against the
                  ring model 2 (W-1) x bytes_sent (per rank, hpctrain's own counter) + (W-1) x S for the
                  start-up broadcast of the parameters: wire / model ~ 1.05 (Ethernet/IP/TCP headers)
  r               communication/compute ratio: ring-model sync time at the link rate / compute step time
                  (the 1-node step time), so the table reads across model sizes and link speeds
  time to target  seconds of training (sum of step seconds, evaluations excluded) until the eval loss
                  is <= the target: the eval loss that per-step gradient averaging (mode dp) reaches at
                  step round(--target-frac x steps) on the same (nodes, link). Evaluations every
                  --eval-every steps (a multiple of every local SGD N, so an evaluation never averages).
                  The reference DDP computes per-step averaging's updates: its time to target is its
                  time to the step where our dp run reached the target (its final val loss is shown).

Writes <out>/scaling.md (table + commands), scaling.csv, points.json, scaling-*.png (gnuplot) and
runs/<point>/ (metrics, logs). --smoke: 1 node, then 2 nodes at 100 Mbit/s with the modes dp,
dp-overlap, lsgd8 and ddp, 24 steps, target at step 12 (< 2 minutes on 2 cores).
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
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_config  # noqa: E402
import run_report as rep  # noqa: E402  (reaches: the target comparison of every benchmark)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMU = os.path.join(ROOT, "jobs", "cluster", "emulate.sh")
PYDIR = os.path.join(ROOT, "tests", "python")

# Modes: (name, kind, hpctrain --set overrides or reference variant, local SGD N for eval spacing).
MODES = {
    "dp": ("ours", ["local_sgd.enabled=false", "local_sgd.overlap_grad_allreduce=false"], 1),
    "dp-overlap": ("ours", ["local_sgd.enabled=false", "local_sgd.overlap_grad_allreduce=true"], 1),
    "dp-bf16": ("ours", ["local_sgd.enabled=false", "local_sgd.comm_dtype=bf16"], 1),
    "lsgd4": ("ours", ["local_sgd.enabled=true", "local_sgd.steps=4"], 4),
    "lsgd8": ("ours", ["local_sgd.enabled=true", "local_sgd.steps=8"], 8),
    "lsgd32": ("ours", ["local_sgd.enabled=true", "local_sgd.steps=32"], 32),
    "lsgd8-bf16": ("ours", ["local_sgd.enabled=true", "local_sgd.steps=8", "local_sgd.comm_dtype=bf16"], 8),
    "lsgd8-overlap": ("ours", ["local_sgd.enabled=true", "local_sgd.steps=8", "local_sgd.overlap_steps=1"], 8),
    "diloco8": ("ours", ["local_sgd.enabled=true", "local_sgd.steps=8", "local_sgd.outer=diloco"], 8),
    "ddp": ("ref", "ddp", 1),
    "accel8": ("ref", "accel", 8),
}
FULL_MODES = list(MODES)
SMOKE_MODES = ["dp", "dp-overlap", "lsgd8", "ddp"]


def write_config(a, path, data):
    """A cosine schedule over the run's steps (warmup a quarter of them, at most 30), one thread per rank."""
    return bench_config.write(path, {
        "model": {"n_layer": a.n_layer, "n_head": 4, "d_model": a.d_model, "seq_len": a.seq_len},
        "data": {"path": data, "seed": 1234},
        "train": {"micro_batch_size": a.micro_batch, "max_steps": a.steps, "warmup_steps": min(30, a.steps // 4),
                  "threads": 1},
        "eval": {"strategy": "steps", "every_steps": a.eval_every, "batch_size": 16, "max_batches": a.eval_batches}})


class RunFailed(Exception):
    pass


def log(msg):
    print(f"[scaling {datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def env_base():
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["PYTHONPATH"] = PYDIR + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def sh(cmd, log_path, timeout, env=None):
    with open(log_path, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env or env_base(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"timed out after {timeout}s (log {log_path})")
    if p.returncode != 0:
        tail = open(log_path, errors="replace").read()[-800:].strip().splitlines()[-3:]
        raise RunFailed(f"exit {p.returncode}: {' | '.join(tail)} (log {log_path})")


# ---------------------------------------------------------------- the emulated cluster

def emu(*args, check=True):
    p = subprocess.run([EMU, *args], capture_output=True, text=True, env=env_base())
    if check and p.returncode != 0:
        raise RunFailed(f"emulate.sh {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def cluster_up(nodes, link):
    emu("down", check=False)
    emu("up", "--nodes", str(nodes), "--link", link)


def wire_bytes():
    """{node: tx_bytes} from the node-side veth counters."""
    out = {}
    for line in emu("status", "--bytes").splitlines():
        node, tx, _rx = line.split()
        out[node] = int(tx)
    return out


# ---------------------------------------------------------------- runs

def run_ours(a, name, nodes, sets):
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    train = [a.hpctrain, "train", "--config", a.cfg, "--set", f"train.output_dir={out}", *sets]
    if nodes == 1:
        cmd = train
    else:
        cmd = [EMU, "mpirun", "-np", str(nodes), "-x", "OMP_NUM_THREADS=1", *train]
    before = wire_bytes() if nodes > 1 else {}
    t0 = time.time()
    sh(cmd, out + ".log", a.timeout)
    wall = time.time() - t0
    after = wire_bytes() if nodes > 1 else {}
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    text = open(out + ".log", errors="replace").read()
    m = re.search(r"averaging parameters = \d+ tensors, (\d+) elements", text) or \
        re.search(r"averaging gradients = \d+ tensors, (\d+) elements", text)
    params = int(m.group(1)) if m else None
    return {"rows": rows, "wall_s": wall, "wire": {k: after[k] - before[k] for k in after}, "params": params}


def run_ref(a, name, nodes, variant, n_local):
    out = os.path.join(a.out, "runs", name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    sets = [f"local_sgd.steps={n_local}"] if variant == "accel" else []
    py = [a.python, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc_per_node", "1",
          "--master_addr", "10.77.0.1", "--master_port", str(a.port), "--max_restarts", "0",
          "--log-dir", os.path.join(out, "torchrun-logs")]
    ref = ["-m", "hpctrain_ref.train_ref", "--config", a.cfg, "--variant", variant, "--out", out, "--init", a.init,
           *sum((["--set", s] for s in sets), [])]
    env = env_base()
    env.update(GLOO_SOCKET_IFNAME="eth0", TP_SOCKET_IFNAME="eth0")
    before = wire_bytes()
    t0 = time.time()
    procs = []
    for k in range(nodes):
        cmd = [EMU, "exec", f"node{k + 1}", *py, "--node_rank", str(k), *ref]
        procs.append((subprocess.Popen(cmd, stdout=open(f"{out}.node{k + 1}.log", "w"), stderr=subprocess.STDOUT,
                                       env=env), f"{out}.node{k + 1}.log"))
    failed = []
    for p, path in procs:
        try:
            rc = p.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            raise RunFailed(f"timed out after {a.timeout}s ({path})")
        if rc != 0:
            failed.append(f"{path}: exit {rc}")
    wall = time.time() - t0
    after = wire_bytes()
    if failed:
        raise RunFailed("; ".join(failed))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    summaries = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "summary-rank*.json")))]
    return {"rows": rows, "wall_s": wall, "wire": {k: after[k] - before[k] for k in after},
            "val_loss": summaries[0]["val_loss"] if summaries else None,
            "param_bytes": None}


def init_weights(a):
    """Our seed's initial weights as a checkpoint (1 step at lr 1e-30), for the reference's --init."""
    out = os.path.join(a.out, "runs", "init")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.hpctrain, "train", "--config", a.cfg, "--set", f"train.output_dir={out}", "train.max_steps=1",
           "train.lr=1e-30", "train.min_lr=0", "train.warmup_steps=0", "train.lr_schedule=constant",
           "checkpoint.save_final=true", "eval.strategy=no"]
    sh(cmd, out + ".log", 600)
    files = sorted(glob.glob(os.path.join(out, "checkpoints", "*.h5")))
    if not files:
        raise RunFailed(f"the init run wrote no checkpoint under {out}/checkpoints")
    return files[-1]


# ---------------------------------------------------------------- summaries

def summarize(res, a, nodes, kind):
    rows = res["rows"]
    steps = [r for r in rows if "tokens_per_s" in r]
    evals = [r for r in rows if "eval_loss" in r]
    if len(steps) <= a.warmup + 1:
        raise RunFailed(f"only {len(steps)} step lines")
    steady = steps[a.warmup:]
    base = steps[a.warmup - 1] if a.warmup > 0 else None
    step_s = sum(r["step_seconds"] for r in steady)
    tokens = steady[-1]["tokens_seen"] - (base["tokens_seen"] if base else 0)
    out = {
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in steady),
        "tokens_per_s_aggregate": steps[-1]["tokens_seen"] / sum(r["step_seconds"] for r in steps),
        "tokens_per_s_steady": tokens / step_s,
        "step_s_median": statistics.median(r["step_seconds"] for r in steady),
        "steps": len(steps),
        "wall_s": res["wall_s"],
        "eval": [(r["step"], r["eval_loss"]) for r in evals],
        "cum_s": {},
        "wire_total": sum(res["wire"].values()) if res["wire"] else 0,
        "wire_per_node": res["wire"],
    }
    cum = 0.0
    for r in steps:
        cum += r["step_seconds"]
        out["cum_s"][r["step"]] = cum
    if kind == "ours":
        dcomm = steady[-1]["comm_seconds"] - (base["comm_seconds"] if base else 0.0)
        dsync = (steady[-1]["syncs"] + steady[-1]["grad_allreduces"]) - \
                ((base["syncs"] + base["grad_allreduces"]) if base else 0)
        dbytes = steady[-1]["bytes_sent"] - (base["bytes_sent"] if base else 0)
        out.update(comm_fraction=dcomm / step_s, syncs=dsync, sync_s=dcomm / dsync if dsync else None,
                   bytes_per_sync=dbytes / dsync if dsync else None, bytes_sent=steps[-1]["bytes_sent"],
                   param_bytes=4 * res["params"] if res.get("params") else None)
        if nodes > 1 and out["param_bytes"]:
            model = 2 * (nodes - 1) * out["bytes_sent"] + (nodes - 1) * out["param_bytes"]
            out["wire_model"] = model
            out["wire_over_model"] = out["wire_total"] / model if model else None
    else:
        out.update(comm_fraction=None, sync_s=None, val_loss=res.get("val_loss"),
                   bytes_sent=steps[-1].get("bytes_sent"))
    return out


def target_loss(dp, frac, steps):
    """dp's eval loss at the evaluation nearest step round(frac x steps) (at or after it)."""
    want = max(1, round(frac * steps))
    cands = [(s, l) for s, l in dp["eval"] if s >= want]
    return cands[0] if cands else (dp["eval"][-1] if dp["eval"] else (None, None))


def time_to_target(s, target):
    for step, loss in s["eval"]:
        if rep.reaches(loss, target):
            return s["cum_s"].get(step), step
    return None, None


def ring_sync_s(nodes, bytes_per_sync, link_bits):
    if nodes < 2 or not link_bits or not bytes_per_sync:
        return 0.0
    return 2 * (nodes - 1) / nodes * bytes_per_sync * 8 / link_bits


LINK_BITS = {"none": 0, "100gbit": 100e9, "10gbit": 10e9, "1gbit": 1e9, "100mbit": 100e6, "20mbit": 20e6}


def link_bits(link):
    if link in LINK_BITS:
        return LINK_BITS[link]
    m = re.match(r"^(\d+)(kbit|mbit|gbit)$", link)
    return int(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)] if m else 0


# ---------------------------------------------------------------- report

def fmt(x, spec="{:.0f}", none="-"):
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def report(a, points, started):
    lines = [f"Measured {started} on {os.uname().nodename} ({os.cpu_count()} cores; "
             f"{'LOADED machine' if a.loaded else 'machine state: see note'}), one rank per emulated node, "
             f"model {a.n_layer} x {a.d_model}, seq_len {a.seq_len}, micro-batch {a.micro_batch}/rank, "
             f"{a.steps} steps ({a.warmup} warm-up steps not in the steady figures), evaluations every "
             f"{a.eval_every} steps ({a.eval_batches} batches).", "",
             f"Command: `{a.command}`", "",
             "| nodes | link | mode | tokens/s median | aggregate | vs DDP | comm fraction | sync s | r (ring sync / "
             "compute step) | wire bytes / model | target loss | time to target s | vs DDP | final eval loss |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        s = p.get("summary")
        if not s:
            lines.append(f"| {p['nodes']} | {p['link']} | {p['mode']} | FAILED: {p.get('error', '?')} "
                         "| | | | | | | | | | |")
            continue
        ddp = next((q for q in points if q["nodes"] == p["nodes"] and q["link"] == p["link"]
                    and q["mode"] == "ddp" and q.get("summary")), None)
        vs = fmt(s["tokens_per_s_aggregate"] / ddp["summary"]["tokens_per_s_aggregate"], "{:.2f}x") \
            if ddp and p["mode"] != "ddp" else "-"
        vt = fmt(ddp["tts"] / p["tts"], "{:.2f}x") if ddp and p.get("tts") and ddp.get("tts") \
            and p["mode"] != "ddp" else "-"
        final = s["eval"][-1][1] if s["eval"] else s.get("val_loss")
        lines.append(
            f"| {p['nodes']} | {p['link']} | {p['mode']} | {fmt(s['tokens_per_s_median'])} | "
            f"{fmt(s['tokens_per_s_aggregate'])} | {vs} | {fmt(s.get('comm_fraction'), '{:.2f}')} | "
            f"{fmt(s.get('sync_s'), '{:.3f}')} | {fmt(p.get('r'), '{:.2f}')} | {fmt(s.get('wire_over_model'), '{:.3f}')} | "
            f"{fmt(p.get('target'), '{:.4f}')} | {fmt(p.get('tts'), '{:.1f}')}"
            f"{'' if p.get('tts') or not p.get('target') else ' (not reached)'} | {vt} | {fmt(final, '{:.4f}')} |")
    lines += ["", "tokens/s: global tokens per second (all ranks); aggregate: all tokens / all step seconds "
              "(start-up steps included). vs DDP: aggregate tokens/s over PyTorch DDP's on the same nodes and link; "
              "time to target: ratio of DDP's time to ours. r: 2 (W-1)/W x bytes per sync x 8 / link rate over the "
              "1-node step time. wire bytes / model: sum of the veth TX deltas over 2 (W-1) x bytes_sent + (W-1) x "
              "parameter bytes (start-up broadcast); ~1.05 is Ethernet/IP/TCP headers."]
    return "\n".join(lines)


def write_csv(path, points):
    keys = ["nodes", "link", "link_bits", "mode", "tokens_per_s_median", "tokens_per_s_aggregate",
            "tokens_per_s_steady", "step_s_median", "comm_fraction", "syncs", "sync_s", "bytes_per_sync",
            "bytes_sent", "param_bytes", "wire_total", "wire_model", "wire_over_model", "r", "target", "tts",
            "tts_step", "final_eval_loss", "compute_step_s", "error"]
    rows = []
    for p in points:
        s = p.get("summary") or {}
        row = {k: s.get(k) for k in keys if k in s}
        row.update({k: p.get(k) for k in ("nodes", "link", "mode", "r", "target", "tts", "tts_step",
                                            "compute_step_s", "error")})
        row["link_bits"] = link_bits(p["link"])
        row["final_eval_loss"] = (s["eval"][-1][1] if s.get("eval") else s.get("val_loss")) if s else None
        rows.append([row.get(k) for k in keys])
    rep.write_csv(path, keys, rows)


def plot(a, points):
    """tokens/s and time to target against the link rate, one line per mode, one plot per node count."""
    order = ["none", "10gbit", "1gbit", "100mbit", "20mbit"]
    links = sorted({p["link"] for p in points if p["nodes"] > 1}, key=lambda l: order.index(l) if l in order else 99)
    pngs = []
    for nodes in sorted({p["nodes"] for p in points if p["nodes"] > 1}):
        dat = os.path.join(a.out, f"scaling-{nodes}nodes.dat")
        modes = [m for m in dict.fromkeys(p["mode"] for p in points if p["nodes"] == nodes)]
        with open(dat, "w") as f:
            for m in modes:
                f.write(f"# {m}\n")
                for i, l in enumerate(links):
                    p = next((q for q in points if q["nodes"] == nodes and q["link"] == l and q["mode"] == m), None)
                    if p and p.get("summary"):
                        f.write(f"{i} {p['summary']['tokens_per_s_aggregate']:.1f} {p.get('tts') or 'NaN'}\n")
                f.write("\n\n")
        png = os.path.join(a.out, f"scaling-{nodes}nodes.png")
        xt = ", ".join(f"'{l}' {i}" for i, l in enumerate(links))
        plots1 = ", ".join(f"'{dat}' index {i} u 1:2 w lp t '{m}'" for i, m in enumerate(modes))
        plots2 = ", ".join(f"'{dat}' index {i} u 1:3 w lp t '{m}'" for i, m in enumerate(modes))
        script = f"""set terminal pngcairo size 1100,450 noenhanced
set output '{png}'
set multiplot layout 1,2 title 'hpctrain on {nodes} emulated nodes ({a.machine}{", LOADED machine" if a.loaded else ""})'
set xtics ({xt}); set xrange [-0.3:{len(links) - 0.7}]; set grid; set key top right font ',8'
set xlabel 'link (each node, each way)'; set ylabel 'tokens/s (aggregate)'; set yrange [0:*]
plot {plots1}
set ylabel 'seconds to target eval loss'; set logscale y
plot {plots2}
unset multiplot
"""
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True, capture_output=True)
            pngs.append(png)
        except (OSError, subprocess.CalledProcessError) as e:
            log(f"gnuplot failed for {nodes} nodes: {e}")
    return pngs


# ---------------------------------------------------------------- main

def parse(argv):
    p = argparse.ArgumentParser(prog="scaling.py --emulate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--emulate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--python", help="interpreter with torch + accelerate (default: the setup-python.sh venv)")
    p.add_argument("--data", help="causal-lm dataset (default: prepared from Debian's fortunes into --out)")
    p.add_argument("--out", default="runs/scaling-emulate")
    p.add_argument("--nodes", default="1,2,4")
    p.add_argument("--links", default="none,10gbit,1gbit,100mbit,20mbit")
    p.add_argument("--modes", default=",".join(FULL_MODES), help=f"of {', '.join(MODES)}")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=32, help="a multiple of every local SGD N in --modes")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--target-frac", type=float, default=0.75)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--port", type=int, default=29680)
    p.add_argument("--machine", default=f"{os.cpu_count()} CPUs")
    p.add_argument("--loaded", action="store_true", help="label the figures as taken on a loaded machine")
    p.add_argument("--smoke", action="store_true", help="1 and 2 nodes, 100mbit, dp/dp-overlap/lsgd8/ddp, 24 steps")
    a = p.parse_args(argv)
    if a.smoke:
        a.nodes, a.links, a.modes = "1,2", "100mbit", ",".join(SMOKE_MODES)
        a.steps, a.warmup, a.eval_every, a.eval_batches, a.target_frac = 24, 3, 8, 2, 0.5
    a.nodes = [int(x) for x in a.nodes.split(",")]
    a.links = a.links.split(",")
    a.modes = a.modes.split(",")
    bad = [m for m in a.modes if m not in MODES]
    if bad:
        p.error(f"unknown mode(s) {bad}; known: {', '.join(MODES)}")
    for m in a.modes:
        n = MODES[m][2]
        if a.eval_every % n:
            p.error(f"--eval-every {a.eval_every} is not a multiple of mode {m}'s N = {n}")
    a.command = "jobs/bench/scaling.py " + " ".join(argv)
    return a


def venv_python(explicit):
    cache = os.environ.get("HPCTRAIN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hpctrain")
    py = explicit or os.path.join(cache, "venv-torch-2.11.0", "bin", "python")
    return py if os.access(py, os.X_OK) else None


def main(argv):
    a = parse(argv)
    if os.geteuid() != 0:
        sys.exit("scaling.py --emulate: must run as root (the emulated cluster needs network namespaces)")
    if not os.access(a.hpctrain, os.X_OK):
        sys.exit(f"scaling.py --emulate: {a.hpctrain} is not built (./scripts/build.sh)")
    a.hpctrain = os.path.abspath(a.hpctrain)
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    wants_ref = any(MODES[m][0] == "ref" for m in a.modes)
    a.python = venv_python(a.python)
    if wants_ref and not a.python:
        sys.exit("scaling.py --emulate: the Python environment is missing; run ./scripts/setup-python.sh "
                 "(or pass --python), or leave out the modes ddp and accel8")
    data = a.data or os.path.join(a.out, "fortunes.h5")
    if not os.path.exists(data):
        sh([a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", data],
           os.path.join(a.out, "prepare.log"), 600)
    a.cfg = write_config(a, os.path.join(a.out, "bench.toml"), os.path.abspath(data))
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t_start = time.time()
    if wants_ref:
        a.init = init_weights(a)
    points = []
    compute_step = None
    if 1 in a.nodes:
        name = "1node-single"
        try:
            s = summarize(run_ours(a, name, 1, ["local_sgd.enabled=false"]), a, 1, "ours")
            compute_step = s["step_s_median"]
            points.append({"nodes": 1, "link": "-", "mode": "single", "summary": s})
            log(f"{name}: {s['tokens_per_s_median']:.0f} tokens/s, step {compute_step:.3f} s")
        except RunFailed as e:
            points.append({"nodes": 1, "link": "-", "mode": "single", "error": str(e)})
            log(f"{name}: FAILED {e}")
    try:
        for nodes in [n for n in a.nodes if n > 1]:
            for link in a.links:
                cluster_up(nodes, link)
                group = []
                for mode in a.modes:
                    kind, what, n_local = MODES[mode]
                    name = f"{nodes}n-{link}-{mode}"
                    p = {"nodes": nodes, "link": link, "mode": mode, "compute_step_s": compute_step}
                    try:
                        res = run_ours(a, name, nodes, what) if kind == "ours" else run_ref(a, name, nodes, what, n_local)
                        p["summary"] = summarize(res, a, nodes, kind)
                        s = p["summary"]
                        log(f"{name}: {s['tokens_per_s_median']:.0f} tokens/s median, "
                            f"{s['tokens_per_s_aggregate']:.0f} aggregate, comm {fmt(s.get('comm_fraction'), '{:.2f}')}, "
                            f"wire/model {fmt(s.get('wire_over_model'), '{:.3f}')}")
                    except (RunFailed, OSError, ValueError, KeyError) as e:
                        p["error"] = str(e)
                        log(f"{name}: FAILED {e}")
                    group.append(p)
                finish_group(group, a, compute_step)
                points += group
                write_outputs(a, points, started)
    finally:
        emu("down", check=False)
    text = write_outputs(a, points, started)
    pngs = plot(a, points)
    with open(os.path.join(a.out, "scaling.md"), "a") as f:
        f.write("".join(f"\n![{os.path.basename(p)}]({os.path.basename(p)})\n" for p in pngs))
        f.write(f"\nTotal time {time.time() - t_start:.0f} s.\n")
    print(text)
    log(f"wrote {a.out}/scaling.md, scaling.csv, points.json{', ' + ', '.join(map(os.path.basename, pngs)) if pngs else ''} "
        f"in {time.time() - t_start:.0f} s")
    return 1 if any("error" in p for p in points) else 0


def finish_group(group, a, compute_step):
    """Target loss from dp on this (nodes, link); time to target and r for every point."""
    dp = next((p for p in group if p["mode"] == "dp" and p.get("summary")), None)
    target_step, target = target_loss(dp["summary"], a.target_frac, a.steps) if dp else (None, None)
    param_bytes = next((p["summary"]["param_bytes"] for p in group
                        if p.get("summary") and p["summary"].get("param_bytes")), None)
    for p in group:
        s = p.get("summary")
        if not s:
            continue
        if "wire_model" not in s and param_bytes and s.get("bytes_sent") and p["nodes"] > 1:
            # The reference: its payload counter (DDP: the gradient bytes per step) and the same broadcast.
            s["wire_model"] = 2 * (p["nodes"] - 1) * s["bytes_sent"] + (p["nodes"] - 1) * param_bytes
            s["wire_over_model"] = s["wire_total"] / s["wire_model"]
        if s.get("bytes_per_sync") and compute_step:
            p["r"] = ring_sync_s(p["nodes"], s["bytes_per_sync"], link_bits(p["link"])) / compute_step
        if target is None:
            continue
        p["target"] = target
        if p["mode"] == "ddp":
            # Same updates as per-step averaging: its time to the step where dp reached the target.
            step = time_to_target(dp["summary"], target)[1]
            p["tts"], p["tts_step"] = (s["cum_s"].get(step), step) if step else (None, None)
        else:
            p["tts"], p["tts_step"] = time_to_target(s, target)


def write_outputs(a, points, started):
    text = report(a, points, started)
    with open(os.path.join(a.out, "scaling.md"), "w") as f:
        f.write(text + "\n")
    write_csv(os.path.join(a.out, "scaling.csv"), points)
    with open(os.path.join(a.out, "points.json"), "w") as f:
        json.dump([{k: v for k, v in p.items() if k != "summary"} | {"summary": {k: v for k, v in (p.get("summary") or {}).items() if k != "cum_s"}} for p in points], f, indent=1)
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
