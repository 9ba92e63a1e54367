#!/usr/bin/env python3
"""Time to quality inside a Slurm allocation: hpctrain's modes (srun, MPI) against PyTorch DDP (srun +
torchrun, or srun alone with torch.distributed reading Slurm's environment) on the same nodes.
jobs/slurm/scaling.sbatch runs it on the batch node; every run is an srun step over all nodes.

  sbatch --nodes=4 --export=ALL,MODES=ddp,dp,lsgd8,stream16-i4 jobs/slurm/scaling.sbatch
  jobs/bench/slurm_scaling.py --out DIR [--modes ddp,dp,lsgd8] [--target-step 16] ...   (inside salloc)

The modes are those of jobs/bench/time_to_quality.py (MODES, and the same configs, through its write_config):
ddp/pma8/accel8 are the reference, the others hpctrain; NAME:key=value+key=value adds one. In order:
  1. the link between the nodes, measured once: jobs/cluster/allreduce_probe.c (mpicc) with one rank
     per node, a small message (latency alpha) and --probe-bytes (rate B: bytes on the node's
     interface per second when its counters see the traffic, else payload bytes per second; the median
     of --probe-calls calls; alpha from the fastest small call);
  2. initial weights: one hpctrain step at lr 1e-30 (the reference starts from them: --init);
  3. DDP trains --target-step steps; its eval loss there is the target, its training time the baseline;
  4. every other mode trains until an evaluation is at or below the target (train.target_eval_loss;
     the reference the same key) or its training seconds pass --budget x DDP's (SIGTERM: stopped).
Writes into --out: scaling.md (table, link, commands), scaling.csv, scaling.png (eval loss against
training seconds, one line per mode), link.json, runs/<mode>/ (metrics.jsonl, logs). Beside every
measured sync time (hpctrain: comm seconds per exchange, steps after --warmup) stands the cost model's
(jobs/bench/cost_model.py: ring_net(S, W, B, alpha) with the measured B and alpha): the network part
only; packing and checksums are not modelled (cost_model's t_local needs uncapped points).
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model as cm  # noqa: E402
import run_report as rep  # noqa: E402
import scaling_emulate as se  # noqa: E402  (sh, env_base, link_bits, venv_python, RunFailed)
import time_to_quality as ttq  # noqa: E402  (MODES, write_config and add_config_args, resolve_modes, watch)

ROOT = se.ROOT
REF_TASK = os.path.join(ROOT, "jobs", "slurm", "torch_ref_task.sh")


def log(msg):
    print(f"[scaling {datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="report directory (the job's directory)")
    p.add_argument("--hpctrain", default=os.path.join(ROOT, "build", "bin", "hpctrain"))
    p.add_argument("--python", help="interpreter with torch (default: the scripts/setup-python.sh venv)")
    p.add_argument("--data", help="causal-lm dataset (default: Debian's fortunes prepared into --out)")
    p.add_argument("--modes", default="ddp,dp,lsgd8", help=f"of {', '.join(ttq.MODES)}; or NAME:key=value+...")
    p.add_argument("--target-step", type=int, default=16, help="DDP's eval loss at this step is the target")
    p.add_argument("--budget", type=float, default=1.5, help="stop a mode after this x DDP's training seconds")
    p.add_argument("--max-steps", type=int, default=0, help="step cap of the other modes (default 4 x target)")
    ttq.add_config_args(p, eval_batches=4, lr_warmup=4, n_layer=2, d_model=64, seq_len=64, micro_batch=8,
                        micro_batch_help="samples per rank per step")
    p.add_argument("--seed", type=int, default=1, help="data.seed (data order)")
    p.add_argument("--device", default="cpu", help="hpctrain's train.device (the reference runs on CPU, gloo)")
    p.add_argument("--set", nargs="*", default=[], dest="sets", metavar="KEY=VALUE", help="every run, both sides")
    p.add_argument("--mpi", default="pmix", help="srun --mpi= for hpctrain and the probe")
    p.add_argument("--ref-launcher", choices=["torchrun", "srun"], default="torchrun")
    p.add_argument("--master-addr", help="the reference's rendezvous address (default: the first node's)")
    p.add_argument("--master-port", type=int, default=29700)
    p.add_argument("--probe-bytes", type=int, default=4_000_000, help="message for the link rate")
    p.add_argument("--probe-calls", type=int, default=3)
    p.add_argument("--ompi-tcp-tuning", action="store_true",
                   help="OpenMPI over TCP: no emulated put, eager sends to 4 MiB (else the directions take turns)")
    p.add_argument("--link-cap", help="nominal rate per node and direction (20mbit, 100gbit): printed beside B")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of tokens/s and sync times")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run, start-up included")
    a = p.parse_args(argv)
    try:
        a.modes = ttq.resolve_modes(a.modes)
    except ValueError as e:
        p.error(str(e))
    if a.target_step < 1 or a.eval_every < 1 or a.target_step % a.eval_every:
        p.error(f"--target-step {a.target_step} must be a positive multiple of --eval-every {a.eval_every}")
    if a.link_cap and not se.link_bits(a.link_cap):
        p.error(f"--link-cap '{a.link_cap}' is not a rate such as 20mbit, 10gbit")
    a.max_steps = a.max_steps or 4 * a.target_step
    a.command = "jobs/bench/slurm_scaling.py " + " ".join(argv)
    return a


def allocation(a):
    """Nodes, tasks per node, CPUs per task and the first node's address, from Slurm's environment."""
    env = os.environ
    if not env.get("SLURM_JOB_ID"):
        sys.exit("slurm_scaling.py: error: not inside a Slurm allocation (SLURM_JOB_ID is unset): "
                 "submit jobs/slurm/scaling.sbatch with sbatch")
    a.job = env["SLURM_JOB_ID"]
    a.nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    a.ntasks = int(env.get("SLURM_NTASKS") or a.nodes)
    if a.ntasks % a.nodes:
        sys.exit(f"slurm_scaling.py: error: {a.ntasks} tasks do not spread evenly over {a.nodes} nodes: "
                 "use --ntasks-per-node")
    a.per_node = a.ntasks // a.nodes
    a.cpus = int(env.get("SLURM_CPUS_PER_TASK") or 1)
    names = subprocess.run(["scontrol", "show", "hostnames", env.get("SLURM_JOB_NODELIST", "")],
                           capture_output=True, text=True).stdout.split()
    a.nodelist = names or [env.get("SLURMD_NODENAME", "localhost")]
    if not a.master_addr:
        # NodeAddr: what the nodes reach each other by (the node's name unless slurm.conf says otherwise).
        show = subprocess.run(["scontrol", "show", "node", a.nodelist[0]], capture_output=True, text=True).stdout
        addr = [w.split("=", 1)[1] for w in show.split() if w.startswith("NodeAddr=")]
        a.master_addr = addr[0] if addr else a.nodelist[0]


def srun(a, per_node, *extra):
    return ["srun", f"--nodes={a.nodes}", f"--ntasks={a.nodes * per_node}", f"--ntasks-per-node={per_node}",
            "--kill-on-bad-exit=0", "--wait=60", *extra]


def srun_one(a):
    return ["srun", "--nodes=1", "--ntasks=1", f"--mpi={a.mpi}", "--kill-on-bad-exit=0"]


# OpenMPI's TCP transport as jobs/cluster/emulate.sh tunes it (docs/cluster.md, "Link efficiency"): no
# emulated RDMA put and eager sends up to 4 MiB, so both directions of an exchange move at once (with
# OpenMPI's defaults they take turns: about half the link), 4 MiB socket buffers. For Ethernet clusters
# where MPI runs over OpenMPI's tcp BTL; no effect on InfiniBand/UCX. --ompi-tcp-tuning.
OMPI_TCP_TUNING = {"OMPI_MCA_btl_tcp_flags": "send,inplace,need-ack,need-csum",
                   "OMPI_MCA_btl_tcp_eager_limit": "4194304", "OMPI_MCA_btl_tcp_rndv_eager_limit": "4194304",
                   "OMPI_MCA_btl_tcp_max_send_size": "4194304", "OMPI_MCA_btl_tcp_sndbuf": "4194304",
                   "OMPI_MCA_btl_tcp_rcvbuf": "4194304"}


def env_for(a):
    env = se.env_base()
    env["OMP_NUM_THREADS"] = str(a.cpus)
    if a.ompi_tcp_tuning:
        env.update(OMPI_TCP_TUNING)
    return env


# ---------------------------------------------------------------- 1. the link

def probe_link(a):
    """{B, alpha, header, basis, ...} from allreduce_probe across the nodes (one rank each); {'error'} if not."""
    if a.nodes < 2:
        return {"error": "one node: no link between nodes to measure"}
    if not shutil.which("mpicc"):
        return {"error": "mpicc not found (load the MPI module that provides it): the link was not measured"}
    exe = os.path.join(a.out, "allreduce_probe")
    p = subprocess.run(["mpicc", "-O2", "-o", exe, os.path.join(ROOT, "jobs", "cluster", "allreduce_probe.c")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": f"mpicc allreduce_probe.c failed: {p.stderr.strip()[-300:]}"}
    log_path = os.path.join(a.out, "probe.log")
    cmd = srun(a, 1, f"--mpi={a.mpi}") + [exe, "-v", "-n", str(a.probe_calls), "-w", "1", "8", str(a.probe_bytes)]
    try:
        se.sh(cmd, log_path, a.timeout, env_for(a))
    except se.RunFailed as e:
        return {"error": f"the probe failed: {e}"}
    calls, summary = {}, {}
    for line in open(log_path):
        kv = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
        if line.startswith("probe call="):
            calls.setdefault(int(kv["bytes"]), []).append(float(kv["s"]))
        elif line.startswith("probe bytes="):
            summary[int(kv["bytes"])] = {k: float(v) for k, v in kv.items()}
    big = max(summary) if summary else None
    if not big or len(summary) < 2:
        return {"error": f"no probe result in {log_path}"}
    w = a.nodes
    t_small = min(calls[min(summary)])  # latency: the fastest call (CPU contention only adds to it)
    t_big = sorted(calls[big])[len(calls[big]) // 2]
    tx, ring = summary[big]["tx_bytes_per_call_per_node"], summary[big]["ring_bytes_per_call"]
    link = {"alpha": t_small / (2 * (w - 1)), "t_small": t_small, "t_big": t_big, "bytes": big,
            "payload_bits": ring * 8 / t_big, "tx_per_call": tx, "ring_per_call": ring, "nodes": w}
    if tx >= 0.9 * ring:  # the interface counters see the exchange: rate on the wire, headers included
        link.update(B=tx * 8 / t_big, header=cm.HEADER, basis="wire")
    else:                 # they do not (InfiniBand, or nodes sharing one network stack): payload rate
        link.update(B=ring * 8 / t_big, header=0.0, basis="payload")
    cap = se.link_bits(a.link_cap) if a.link_cap else None
    link["cap"] = cap
    log(f"link: measured {link['B'] / 1e6:.2f} Mbit/s per node and direction ({link['basis']}; payload "
        f"{link['payload_bits'] / 1e6:.2f} Mbit/s; median of {a.probe_calls} all-reduces of {big} B over {w} nodes), "
        f"latency alpha {link['alpha'] * 1e6:.0f} us" +
        (f"; cap {a.link_cap}: {link['B'] / cap:.3f} of it" if cap else ""))
    print(f"link measured_bits_per_s={link['B']:.0f} basis={link['basis']} payload_bits_per_s="
          f"{link['payload_bits']:.0f} alpha_s={link['alpha']:.6f} cap_bits_per_s={cap or 0:.0f}", flush=True)
    return link


def predicted_sync(link, s, world):
    """The cost model's seconds for one exchange of the mode's bytes per sync over `world` ranks."""
    if "B" not in link or not s.get("bytes_per_sync"):
        return None
    return cm.ring_net(s["bytes_per_sync"], world, link["B"], link["alpha"], header=link["header"])


# ---------------------------------------------------------------- 2-4. the runs

def prepare(a):
    if not a.data:
        a.data = os.path.join(a.out, "fortunes.h5")
        if not os.path.exists(a.data):
            se.sh(srun_one(a) + [a.hpctrain, "prepare", "--input", "/usr/share/games/fortunes", "--output", a.data],
                  os.path.join(a.out, "prepare.log"), a.timeout, env_for(a))
    a.data = os.path.abspath(a.data)
    out = os.path.join(a.out, "runs", "init")
    shutil.rmtree(out, ignore_errors=True)
    cfg = ttq.write_config(a, "init", a.seed, 1, 0.0)
    se.sh(srun_one(a) + [a.hpctrain, "train", "--config", cfg, "--set", f"train.output_dir={out}",
                         f"train.threads={a.cpus}", *a.sets, "train.max_steps=1", "train.lr=1e-30", "train.min_lr=0",
                         "train.warmup_steps=0", "checkpoint.save_final=true", "eval.strategy=no"],
          out + ".log", a.timeout, env_for(a))
    files = sorted(f for f in os.listdir(os.path.join(out, "checkpoints")) if f.endswith(".h5"))
    if not files:
        raise se.RunFailed(f"the init run wrote no checkpoint under {out}/checkpoints")
    a.init = os.path.join(out, "checkpoints", files[-1])


def run_mode(a, index, mode, target, budget_s, steps):
    kind, what, n_local = ttq.MODES[mode]
    out = os.path.join(a.out, "runs", mode)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cfg = ttq.write_config(a, mode, a.seed, steps, target)
    env = env_for(a)
    common = [f"train.threads={a.cpus}", *a.sets]
    if kind == "ours":
        cmd = srun(a, a.per_node, f"--mpi={a.mpi}") + [a.hpctrain, "train", "--config", cfg, "--set",
                                                       f"train.output_dir={out}", f"train.device={a.device}",
                                                       *common, *what]
    else:
        sets = ([f"local_sgd.steps={n_local}"] if what != "ddp" else []) + common
        ref = ["-m", "hpctrain_ref.train_ref", "--config", cfg, "--variant", what, "--out", out, "--init", a.init,
               *sum((["--set", s] for s in sets), []), *ttq.ref_precision_args(a)]
        env.update(MASTER_ADDR=a.master_addr, MASTER_PORT=str(a.master_port + index), REF_PYTHON=a.python,
                   REF_LAUNCHER=a.ref_launcher, REF_NPROC_PER_NODE=str(a.per_node),
                   REF_LOG_DIR=os.path.join(out, "torchrun-logs"))
        if a.ref_launcher == "torchrun":  # one torchrun per node, which starts the node's ranks
            cmd = srun(a, 1, "--mpi=none", f"--cpus-per-task={a.per_node * a.cpus}") + ["bash", REF_TASK, *ref]
        else:                             # one srun task per rank
            cmd = srun(a, a.per_node, "--mpi=none") + ["bash", REF_TASK, *ref]
    log(f"{mode}: {' '.join(cmd)}")
    with open(out + ".log", "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    stopped, wall = ttq.watch([proc], os.path.join(out, "metrics.jsonl"), budget_s, a.timeout)
    if proc.returncode not in (0, 75) and not stopped:
        tail = open(out + ".log", errors="replace").read().strip().splitlines()[-3:]
        raise se.RunFailed(f"exit {proc.returncode}: {' | '.join(tail)} (log {out}.log)")
    s = rep.summarize(rep.read_metrics(os.path.join(out, "metrics.jsonl")), target, a.warmup)
    if not s["steps"]:
        raise se.RunFailed(f"no step in {out}/metrics.jsonl (log {out}.log)")
    s.update(wall=wall, stopped=stopped, kind="hpctrain" if kind == "ours" else f"PyTorch {what}")
    return ddp_bytes_per_sync(s) if what == "ddp" else s


def ddp_bytes_per_sync(s):
    """DDP: one gradient all-reduce per step; the reference does not time it, so only the model's figure."""
    if s.get("bytes_sent") and s.get("steps"):
        s["bytes_per_sync"] = s["bytes_sent"] / s["steps"]
    return s


def run_all(a, link):
    results = {}
    ddp = results["ddp"] = run_mode(a, 0, "ddp", 0.0, 0, a.target_step)
    hit = next(((st, loss) for st, loss in ddp["evals"] if st >= a.target_step), None)
    if not hit:
        raise se.RunFailed(f"DDP logged no evaluation at step {a.target_step} (log {a.out}/runs/ddp.log)")
    a.target = hit[1]
    ddp.update(rep.summarize(rep.read_metrics(os.path.join(a.out, "runs", "ddp", "metrics.jsonl")), a.target,
                             a.warmup))
    ddp_bytes_per_sync(ddp)
    log(f"ddp: target eval loss {a.target:.4f} at step {hit[0]}, {ddp['tts']:.1f} training seconds")
    pred = predicted_sync(link, ddp, a.ntasks)
    if pred:
        print(f"sync ddp: not measured (the reference does not time its all-reduce), cost model {pred:.4f} s, "
              f"{ddp['bytes_per_sync']:.0f} B per exchange over {a.ntasks} ranks", flush=True)
    for i, mode in enumerate(a.modes):
        if mode == "ddp":
            continue
        try:
            s = results[mode] = run_mode(a, i, mode, a.target, a.budget * ddp["tts"], a.max_steps)
            pred = predicted_sync(link, s, a.ntasks)
            reached = (f"reached at step {s['tts_step']}, {s['tts']:.1f} s ({ddp['tts'] / s['tts']:.2f}x DDP)"
                       if s["tts"] else f"NOT reached ({'budget' if s['stopped'] else 'step cap'})")
            log(f"{mode}: {reached}")
            if s.get("sync_s"):
                print(f"sync {mode}: measured {s['sync_s']:.4f} s per exchange, cost model "
                      f"{rep.fmt(pred, '{:.4f}')} s" + (f" ({100 * (pred - s['sync_s']) / s['sync_s']:+.0f}%)"
                                                        if pred else "") +
                      f", {s['bytes_per_sync']:.0f} B per exchange over {a.ntasks} ranks", flush=True)
        except se.RunFailed as e:
            results[mode] = {"error": str(e)}
            log(f"{mode}: FAILED {e}")
    return results


# ---------------------------------------------------------------- report

HEADERS = ["mode", "kind", "tokens/s median", "time to target s", "vs DDP", "steps to target",
           "bytes to target MB", "final eval loss", "sync s measured", "sync s cost model"]


def rows_of(a, results, link):
    ddp = results.get("ddp", {})
    md, csv_rows = [], []
    for mode in a.modes:
        s = results.get(mode, {"error": "not run"})
        if "error" in s:
            md.append([mode, "", f"FAILED: {s['error']}"] + [""] * (len(HEADERS) - 3))
            csv_rows.append([mode, "", None, None, None, None, None, None, None, None, s["error"]])
            continue
        pred = predicted_sync(link, s, a.ntasks)
        ratio = ddp["tts"] / s["tts"] if s.get("tts") and ddp.get("tts") else None
        mb = s["bytes_to_target"] / 1e6 if s.get("bytes_to_target") is not None else None
        tts = rep.fmt(s["tts"]) if s.get("tts") else f"not reached ({'budget' if s['stopped'] else 'step cap'})"
        md.append([mode, s["kind"], rep.fmt(s["tokens_per_s_median"], "{:.0f}"), tts,
                   rep.fmt(ratio, "{:.2f}x") if mode != "ddp" else "1.00x", rep.fmt(s["tts_step"], "{:.0f}"),
                   rep.fmt(mb, "{:.2f}"), rep.fmt(s["final_eval_loss"], "{:.4f}"), rep.fmt(s.get("sync_s"), "{:.4f}"),
                   rep.fmt(pred, "{:.4f}")])
        csv_rows.append([mode, s["kind"], s["tokens_per_s_median"], s.get("tts"), ratio, s.get("tts_step"),
                         s.get("bytes_to_target"), s["final_eval_loss"], s.get("sync_s"), pred, None])
    return md, csv_rows


def report(a, results, link, started):
    md, csv_rows = rows_of(a, results, link)
    rep.write_csv(os.path.join(a.out, "scaling.csv"),
                  ["mode", "kind", "tokens_per_s_median", "time_to_target_s", "vs_ddp", "steps_to_target",
                   "bytes_to_target", "final_eval_loss", "sync_s_measured", "sync_s_cost_model", "error"], csv_rows)
    png = os.path.join(a.out, "scaling.png")
    why = rep.plot_curves(png, f"job {a.job}: {a.nodes} node(s) x {a.per_node} rank(s), target "
                          f"{rep.fmt(getattr(a, 'target', None), '{:.4f}')}",
                          [(m, results[m]["curve"]) for m in a.modes if results.get(m, {}).get("curve")])
    if "B" in link:
        link_line = (f"{link['B'] / 1e6:.2f} Mbit/s per node and direction ({link['basis']} bytes; payload "
                     f"{link['payload_bits'] / 1e6:.2f} Mbit/s), latency alpha {link['alpha'] * 1e6:.0f} us (fastest 8-byte call), measured "
                     f"once by jobs/cluster/allreduce_probe.c (median of {a.probe_calls} all-reduces of "
                     f"{link['bytes']} B, one rank per node)" +
                     (f"; nominal cap {a.link_cap}: {link['B'] / link['cap']:.3f} of it" if link.get("cap") else ""))
    else:
        link_line = f"not measured: {link['error']}"
    lines = [f"# Time to quality on {a.nodes} node(s): Slurm job {a.job}", "",
             f"Measured {started} on nodes {','.join(a.nodelist)}, {a.per_node} rank(s) per node, {a.cpus} CPU(s) "
             f"per rank, hpctrain on {a.device} (MPI: srun --mpi={a.mpi}), the reference on CPU (gloo, "
             f"{a.ref_launcher}). Model {a.n_layer} x {a.d_model}, seq_len {a.seq_len}, micro-batch {a.micro_batch}"
             f"/rank, lr {a.lr} constant after {a.lr_warmup} warmup steps, data.seed {a.seed}. Target = DDP's eval "
             f"loss at step {a.target_step}: {rep.fmt(getattr(a, 'target', None), '{:.4f}')}; budget {a.budget} x "
             f"DDP's training seconds; evaluations every {a.eval_every} steps.", "",
             f"Link: {link_line}.", "", f"Command: `{a.command}`", "", rep.md_table(HEADERS, md), "",
             "tokens/s: global, median over the steps after the first " + str(a.warmup) + ". time to target: training "
             "seconds (sum of step seconds; evaluations and start-up excluded) to the first evaluation at or below "
             "the target; vs DDP: DDP's time / the mode's. bytes: what one rank handed to the exchange up to that "
             "step (DDP: the gradient bytes of its steps). sync s measured: hpctrain's comm seconds per exchange "
             "(overlapped modes: only the exposed part); cost model: ring_net(S, W, B, alpha) of "
             "jobs/bench/cost_model.py with S = bytes per exchange, W = ranks, B and alpha as measured above "
             "(the network part only). The first exchange of a run also opens MPI's connections (OpenMPI connects "
             "lazily), so a mode that exchanges rarely carries that in few samples.", ""]
    lines.append("![eval loss against training seconds](scaling.png)" if why is None else f"No plot: {why}.")
    with open(os.path.join(a.out, "scaling.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "link.json"), "w") as f:
        json.dump(link, f, indent=1)
    print("\n".join(lines), flush=True)


def main(argv):
    a = parse(argv)
    allocation(a)
    a.out = os.path.abspath(a.out)
    os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
    a.hpctrain = os.path.abspath(a.hpctrain)
    if not os.access(a.hpctrain, os.X_OK):
        sys.exit(f"slurm_scaling.py: error: hpctrain executable {a.hpctrain} not found (./scripts/build.sh, or HPCTRAIN=)")
    a.python = se.venv_python(shutil.which(a.python) or a.python if a.python else None)
    if any(ttq.MODES[m][0] == "ref" for m in a.modes) and not a.python:
        sys.exit("slurm_scaling.py: error: no Python with torch for the reference: run ./scripts/setup-python.sh "
                 "or set PYTHON= (a venv with torch, h5py, numpy on every node)")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    log(f"job {a.job}: {a.nodes} node(s) [{','.join(a.nodelist)}] x {a.per_node} rank(s), {a.cpus} CPU(s) per rank; "
        f"modes {','.join(a.modes)}; report in {a.out}")
    link = probe_link(a)
    if "error" in link:
        log(f"link: {link['error']}")
    try:
        prepare(a)
        results = run_all(a, link)
    except se.RunFailed as e:
        print(f"slurm_scaling.py: error: {e}", file=sys.stderr)
        report(a, {}, link, started)
        return 3
    report(a, results, link, started)
    return 1 if any("error" in s for s in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
