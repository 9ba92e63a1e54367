#!/usr/bin/env python3
"""One causal attention core, forward + backward, with ATen's fused kernel (F.scaled_dot_product_attention)
and as hpctrain's model.attention = eager writes it (q/sqrt(d) @ k^T, causal masked_fill_, softmax, @ v),
in fp32 and under bf16 autocast, 1 thread: the measurement behind model::choose_attention's rule
(docs/benchmarks.md, "The attention core under bf16 on a CPU"). The input is the packed qkv [B, T, 3C]
split into heads as lib/model/gpt.cpp does.

  ~/.cache/hpctrain/venv-torch-2.11.0/bin/python jobs/bench/attention_kernels.py [--reps 20]
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

SHAPES = [  # B, T, C, heads, name
    (8, 128, 128, 4, "demo"), (4, 256, 512, 8, "larger"), (2, 256, 768, 12, "GPT-2 small, seq 256"),
    (2, 512, 768, 12, "GPT-2 small, seq 512"), (4, 512, 768, 12, "B 4, seq 512"), (1, 1024, 768, 12, "seq 1024"),
    (8, 64, 64, 2, "tiny")]


def split_heads(qkv, H):
    B, T, C3 = qkv.shape
    C = C3 // 3
    return [t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, 2)], (B, T, C)


def sdpa(qkv, H):
    (q, k, v), (B, T, C) = split_heads(qkv, H)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)


def eager(qkv, H):
    (q, k, v), (B, T, C) = split_heads(qkv, H)
    s = (q * (1.0 / math.sqrt(C // H))) @ k.transpose(-2, -1)
    s.masked_fill_(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2).contiguous().view(B, T, C)


def ms_per_call(fn, B, T, C, H, dtype, reps):
    qkv = torch.randn(B, T, 3 * C, dtype=dtype, requires_grad=True)
    grad = torch.randn(B, T, C, dtype=dtype)

    def once():
        with torch.autocast("cpu", torch.bfloat16, enabled=dtype == torch.bfloat16):
            y = fn(qkv, H)
        y.backward(grad)

    for _ in range(3):
        once()
    t = time.perf_counter()
    for _ in range(reps):
        once()
    return (time.perf_counter() - t) / reps * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(1)
    print("| shape (B, T, C, heads) | fp32 sdpa | fp32 eager | bf16 sdpa | bf16 eager | bf16 sdpa / eager |")
    print("|---|---|---|---|---|---|")
    for B, T, C, H, name in SHAPES:
        r = [ms_per_call(f, B, T, C, H, dt, a.reps) for dt in (torch.float32, torch.bfloat16) for f in (sdpa, eager)]
        print(f"| {name} ({B}, {T}, {C}, {H}) | {r[0]:.2f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[2] / r[3]:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
