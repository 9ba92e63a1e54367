#!/usr/bin/env python3
"""Communication cost model (issue 14 item 3): latency-bandwidth ring all-reduce plus step compute.

  t_sync(S, W, B) = t_local(S) + 2 (W-1) alpha + 2 (W-1)/W x S x (1 + h) x 8 / B
  t_step          = t_compute + t_sync / N                       (blocking; N = 1: per-step averaging)
  t_step(overlap) = t_compute + max(0, t_sync - f x t_compute)    (DDP-style: buckets hide under backward)

S: bytes exchanged per sync (per rank); W: ranks (one per node); B: link bits/s per node and direction;
h: Ethernet/IP/TCP header overhead (the veth counters give 1.055-1.06 x the ring model's payload);
alpha: per-message latency (a veth pair: tens of microseconds; netem is absent, docs/cluster.md);
t_local(S) = a + S / R: what a sync costs without a link (pack, scale, checksum, the drift sum),
fitted on the link=none points; f: the fraction of a step that backward is (~2/3).

Local SGD variants (time_to_quality.py's modes) extend the step time:

  S_x             = P x b(dtype)                                     b: 4 fp32, 2 bf16, 1 + 4/64 int8, 0.5 + 4/64 int4
  t_frag          = t_sync(S_x / F, W, B)                            one of F fragments (F = 1: the whole model)
  exposed         = max(0, t_frag - tau x t_compute)                 tau = overlap_steps (0: blocking)
  t_step          = t_compute + t_intra + F x exposed / N            t_intra: per-step all-reduce inside a group

Hierarchical groups of G ranks per node split the cross-node exchange over the G ranks, but those
share the node's link, so the node still carries the whole S_x: t_sync is that of the node ring.
`local_sgd.steps = auto` (lib/train/auto_local_steps.h) evaluates the same t_step at start-up from a
timed step and timed all-reduces. Time to target = steps to target x t_step; the steps are measured (the model says nothing about
convergence). `--ttq ttq.csv --nocomm S` checks it against jobs/bench/time_to_quality.py.

Reads the CSV of `jobs/bench/scaling.py --emulate` and prints, as Markdown:
  1. predicted vs measured sync time for every point that synchronises (error in %),
  2. ON PAPER, an extrapolation to 8-64 nodes of 8 H200 at 100-400 Gbit/s for GPT-2 small and a ~1B
     shape: step times of per-step averaging (blocking, overlapped), local SGD N, bf16 exchange;
     the N beyond which local SGD stops paying.

  jobs/bench/cost_model.py runs/scaling-emulate/scaling.csv [--out docs-section.md]
"""
import argparse
import csv
import math
import sys

HEADER = 0.055          # wire bytes / payload bytes - 1 (measured: 1.055-1.06, docs/cluster.md)
ALPHA_EMU = 50e-6       # s per message on the emulated cluster (veth + bridge + TCP stack)
F_BACKWARD = 2.0 / 3.0  # backward / (forward + backward)


def fnum(x):
    try:
        v = float(x)
        return None if math.isnan(v) else v
    except (TypeError, ValueError):
        return None


def ring_net(S, W, B, alpha, header=HEADER):
    if W < 2:
        return 0.0
    wire = 2 * (W - 1) / W * S * (1 + header) * 8 / B if B else 0.0
    return 2 * (W - 1) * alpha + wire


def fit_local(points):
    """t_local(S) = a + S / R by least squares over the link=none points (S, t)."""
    xs = [(p["S"], p["t"]) for p in points if p["link_bits"] == 0]
    if len(xs) < 2:
        return (xs[0][1], float("inf")) if xs else (0.0, float("inf"))
    n = len(xs)
    mx = sum(x for x, _ in xs) / n
    my = sum(y for _, y in xs) / n
    sxx = sum((x - mx) ** 2 for x, _ in xs)
    if sxx == 0:
        return my, float("inf")
    slope = sum((x - mx) * (y - my) for x, y in xs) / sxx
    a = my - slope * mx
    return max(0.0, a), (1.0 / slope if slope > 0 else float("inf"))


def load(path):
    out = []
    for r in csv.DictReader(open(path)):
        S, t = fnum(r.get("bytes_per_sync")), fnum(r.get("sync_s"))
        if not S or t is None or r.get("error") or int(r["nodes"]) < 2:
            continue
        out.append({"nodes": int(r["nodes"]), "link": r["link"], "link_bits": fnum(r.get("link_bits")) or 0.0,
                    "mode": r["mode"], "S": S, "t": t, "step": fnum(r.get("step_s_median")),
                    "compute": fnum(r.get("compute_step_s"))})
    return out


def error_summary(lead, errs):
    """One line on the relative errors |model - measured| / measured of a table's points."""
    return (f"{lead}{len(errs)} points, mean |error| {100 * sum(errs) / len(errs):.0f}%, max {100 * max(errs):.0f}%, "
            f"within 20%: {sum(e <= 0.2 for e in errs)} of {len(errs)}.")


def measured_table(points):
    a, R = fit_local(points)
    lines = [f"t_local(S) = {a * 1e3:.1f} ms + S / {R / 1e6:.0f} MB/s (fitted on the link=none points); "
             f"h = {HEADER}; alpha = {ALPHA_EMU * 1e6:.0f} us.", "",
             "| nodes | link | mode | S per sync (MB) | measured s | predicted s | error |",
             "|---|---|---|---|---|---|---|"]
    errs = []
    for p in points:
        pred = a + p["S"] / R + ring_net(p["S"], p["nodes"], p["link_bits"], ALPHA_EMU)
        overlapped = "overlap" in p["mode"]
        err = (pred - p["t"]) / p["t"] if p["t"] > 0 else float("nan")
        if not overlapped and p["link_bits"] > 0:
            errs.append(abs(err))
        note = " (exposed part only: overlapped)" if overlapped else ""
        lines.append(f"| {p['nodes']} | {p['link']} | {p['mode']} | {p['S'] / 1e6:.2f} | {p['t']:.3f} | "
                     f"{pred:.3f} | {100 * err:+.0f}%{note} |")
    if errs:
        lines += ["", error_summary("Blocking points on a capped link: ", errs)]
    return "\n".join(lines)


# ---------------------------------------------------------------- local SGD variants

def bytes_per_value(dtype, block=64):
    return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0 + 4.0 / block, "int4": 0.5 + 4.0 / block}[dtype]


def variant_of(sets):
    """(N, F, tau, dtype, hierarchical) from a list of hpctrain --set overrides (N None: steps = auto, which
    also covers fragments and comm_dtype = auto: the choice is in the run's log and config.toml)."""
    kv = dict(x.split("=", 1) for x in sets if "=" in x)
    lsgd = kv.get("local_sgd.enabled") == "true"
    steps = kv.get("local_sgd.steps", "8")
    fragments = kv.get("local_sgd.fragments", "1")
    return ((None if steps == "auto" else int(steps)) if lsgd else 1, None if fragments == "auto" else int(fragments),
            int(kv.get("local_sgd.overlap_steps", 0)), kv.get("local_sgd.comm_dtype", "fp32") if lsgd else "fp32",
            "local_sgd.group_size" in kv)


def variant_step(tc, P, nodes, B, N=1, F=1, tau=0, dtype="fp32", t_intra=0.0, alpha=ALPHA_EMU, local=(0.0, math.inf)):
    """Mean step time of local SGD with N, F fragments, overlap tau and the exchange dtype (see the docstring)."""
    S = P * bytes_per_value(dtype) / F
    t_frag = local[0] + S / local[1] + ring_net(S, nodes, B, alpha)
    exposed = max(0.0, t_frag - tau * tc) if tau > 0 else t_frag
    return tc + t_intra + F * exposed / N, t_frag


def ttq_table(path, nocomm, params, link_bits, nodes):
    """Predicted vs measured time to target for every hpctrain mode of a time_to_quality.py ttq.csv."""
    sys.path.insert(0, __import__("os").path.dirname(__file__))
    from time_to_quality import MODES  # noqa: E402
    lines = ["| link | mode | N | F | tau | dtype | steps to target | measured s | predicted s | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    errs = []
    for r in csv.DictReader(open(path)):
        kind, sets, _ = MODES.get(r["mode"], ("ref", None, 1))
        tts, steps = fnum(r.get("tts_s")), fnum(r.get("tts_step"))
        if kind != "ours" or not tts or not steps or r["link"] not in link_bits:
            continue
        N, F, tau, dtype, hier = variant_of(sets)
        if N is None:
            continue  # steps = auto: the N it chose is in the run's log, not in the CSV
        step, _ = variant_step(nocomm, params * 1.0, nodes, link_bits[r["link"]], N, F, tau, dtype)
        pred = steps * step
        err = (pred - tts) / tts
        errs.append(abs(err))
        lines.append(f"| {r['link']} | {r['mode']} | {N} | {F} | {tau} | {dtype} | {steps:.0f} | {tts:.1f} | "
                     f"{pred:.1f} | {100 * err:+.0f}% |")
    if errs:
        lines += ["", error_summary("", errs)]
    return "\n".join(lines)


# ---------------------------------------------------------------- on paper

MODELS = {
    # name: (parameters, layers, d_model, seq_len)
    "GPT-2 small (124M)": (124.4e6, 12, 768, 1024),
    "~1B (24 x 2048)": (1.31e9, 24, 2048, 1024),
}
GPUS_PER_NODE = 8
H200_BF16 = 989e12      # dense bf16 FLOP/s
MFU = 0.40
TOKENS_PER_GPU = 16 * 1024
NVLINK = 450e9          # bytes/s per direction per GPU (NVLink 4 x 18 links ~ 900 GB/s both ways)
ALPHA_DC = 10e-6        # s per message across a datacenter network


def compute_step(P, L, d, T):
    flops_per_token = 6 * P + 12 * L * T * d
    return flops_per_token * TOKENS_PER_GPU * GPUS_PER_NODE / (GPUS_PER_NODE * H200_BF16 * MFU)


def sync_time(S, nodes, B):
    """Hierarchical: reduce-scatter + all-gather over NVLink inside the node, ring across nodes."""
    intra = 2 * (GPUS_PER_NODE - 1) / GPUS_PER_NODE * S / NVLINK
    return intra + ring_net(S, nodes, B, ALPHA_DC)


def paper_table():
    lines = ["**On paper** (not measured): each node 8 H200 at 40 % MFU, 8 x 16 x 1024 tokens per step; "
             "NVLink inside a node, a ring across nodes at the node's link rate; alpha 10 us; headers 5.5 %. "
             "Step time relative to compute alone (1.00 = communication free); DP = per-step averaging, "
             "blocking or overlapped with backward (f = 2/3); LSGD N = local SGD, blocking average every N steps; "
             "N* = the smallest N within 5 % of compute-bound; 'stops paying' = LSGD 8 less than 10 % faster "
             "than overlapped DP.", ""]
    for name, (P, L, d, T) in MODELS.items():
        tc = compute_step(P, L, d, T)
        lines += [f"*{name}*: S = {4 * P / 1e9:.2f} GB fp32 / {2 * P / 1e9:.2f} GB bf16 per sync, "
                  f"t_compute = {tc * 1e3:.0f} ms per step.", "",
                  "| nodes | link | exchange | t_sync ms | r | DP blocking | DP overlapped | LSGD 4 | LSGD 8 | "
                  "LSGD 32 | N* | LSGD 8 vs DP overlapped | LSGD 8 int4 | stream N=16 F=4 int4 tau=1 |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for B in (100e9, 200e9, 400e9):
            for nodes in (8, 64):  # 2 (N-1)/N: 1.75 to 1.97, the node count barely matters
                for ex, S in (("fp32", 4 * P), ("bf16", 2 * P)):
                    ts = sync_time(S, nodes, B)
                    rel = lambda n: (tc + ts / n) / tc
                    ov = (tc + max(0.0, ts - F_BACKWARD * tc)) / tc
                    nstar = next((n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if rel(n) <= 1.05), ">256")
                    gain = ov / rel(8)
                    verdict = f"{gain:.2f}x" + (" (stops paying)" if gain < 1.10 else "")
                    # The quantized and streaming columns do not depend on the exchange column's dtype.
                    i4 = (tc + sync_time(P * bytes_per_value("int4"), nodes, B) / 8) / tc
                    frag = sync_time(P * bytes_per_value("int4") / 4, nodes, B)
                    stream = (tc + 4 * max(0.0, frag - tc) / 16) / tc
                    lines.append(f"| {nodes} | {B / 1e9:.0f} Gbit/s | {ex} | {ts * 1e3:.0f} | {ts / tc:.2f} | "
                                 f"{rel(1):.2f} | {ov:.2f} | {rel(4):.2f} | {rel(8):.2f} | {rel(32):.2f} | {nstar} | "
                                 f"{verdict} | {i4:.3f} | {stream:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="?", help="scaling.csv from jobs/bench/scaling.py --emulate")
    p.add_argument("--out", help="also write the Markdown here")
    p.add_argument("--ttq", help="ttq.csv of jobs/bench/time_to_quality.py: predicted vs measured time to target")
    p.add_argument("--nocomm", type=float, help="with --ttq: the compute-only step seconds (its report states it)")
    p.add_argument("--nodes", type=int, default=4, help="with --ttq: the study's nodes")
    p.add_argument("--params", type=float, default=842_752, help="with --ttq: parameters of the model (demo: 842752)")
    a = p.parse_args()
    parts = []
    if a.csv:
        pts = load(a.csv)
        if not pts:
            sys.exit(f"cost_model: no synchronising points in {a.csv}")
        parts += ["### Predicted vs measured sync time", "", measured_table(pts), ""]
    if a.ttq:
        if not a.nocomm:
            sys.exit("cost_model: --ttq needs --nocomm (the compute-only step seconds of the same study)")
        rates = {"20mbit": 20e6, "100mbit": 100e6, "1gbit": 1e9, "10gbit": 10e9}
        parts += ["### Predicted vs measured time to target", "", ttq_table(a.ttq, a.nocomm, a.params, rates, a.nodes), ""]
    parts += ["### Extrapolation (on paper)", "", paper_table()]
    text = "\n".join(parts)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")


if __name__ == "__main__":
    main()
