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
        lines += ["", f"Blocking points on a capped link: {len(errs)}, mean |error| {100 * sum(errs) / len(errs):.0f}%, "
                      f"max {100 * max(errs):.0f}%, within 20%: {sum(e <= 0.2 for e in errs)} of {len(errs)}."]
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
                  "LSGD 32 | N* | LSGD 8 vs DP overlapped |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for B in (100e9, 200e9, 400e9):
            for nodes in (8, 64):  # 2 (N-1)/N: 1.75 to 1.97, the node count barely matters
                for ex, S in (("fp32", 4 * P), ("bf16", 2 * P)):
                    ts = sync_time(S, nodes, B)
                    rel = lambda n: (tc + ts / n) / tc
                    ov = (tc + max(0.0, ts - F_BACKWARD * tc)) / tc
                    nstar = next((n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if rel(n) <= 1.05), ">256")
                    gain = ov / rel(8)
                    verdict = f"{gain:.2f}x" + (" (stops paying)" if gain < 1.10 else "")
                    lines.append(f"| {nodes} | {B / 1e9:.0f} Gbit/s | {ex} | {ts * 1e3:.0f} | {ts / tc:.2f} | "
                                 f"{rel(1):.2f} | {ov:.2f} | {rel(4):.2f} | {rel(8):.2f} | {rel(32):.2f} | {nstar} | "
                                 f"{verdict} |")
        lines.append("")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="?", help="scaling.csv from jobs/bench/scaling.py --emulate")
    p.add_argument("--out", help="also write the Markdown here")
    a = p.parse_args()
    parts = []
    if a.csv:
        pts = load(a.csv)
        if not pts:
            sys.exit(f"cost_model: no synchronising points in {a.csv}")
        parts += ["### Predicted vs measured sync time", "", measured_table(pts), ""]
    parts += ["### Extrapolation (on paper)", "", paper_table()]
    text = "\n".join(parts)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")


if __name__ == "__main__":
    main()
