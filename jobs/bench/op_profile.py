#!/usr/bin/env python3
"""Operator profiles of two runs side by side: where each side's step time goes, per operator.

Reads two Chrome traces written by torch's profiler (Kineto, CPU activities): hpctrain's
`log.trace_steps` operator profile (<output_dir>/trace/rank<r>.ops.json) and the reference's
`--profile-steps` (the same file name under its --out). Each operator's self time (its duration
minus that of the operators it called, per thread) is summed over the traced steps and divided by
their number. Phase of an operator: backward when it runs under an autograd node
("autograd::engine::evaluate_function: ..."), optimizer when under an optimizer step or an Adam
kernel, otherwise forward/other (forward, loss, clipping, zeroing, data).

  jobs/bench/op_profile.py OURS.ops.json THEIRS.ops.json --steps 3 [--top 25] [--labels ours,torch]
"""
import argparse
import collections
import json
import re
import sys

BACKWARD = "autograd::engine::evaluate_function"
OPTIMIZER = re.compile(r"optimizer|adam", re.IGNORECASE)
PHASES = ("forward/other", "backward", "optimizer")


def load_events(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"op_profile: cannot read the trace {path}: {e}")
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and "dur" in e]
    if not ops:
        sys.exit(f"op_profile: {path} holds no CPU operator events (was it written by torch's profiler?)")
    return ops


def self_times(events):
    """{(phase, name): self microseconds} over all threads."""
    out = collections.Counter()
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack = []  # [event, end, phase, children microseconds]
        def close(entry):
            ev, _, phase, child = entry
            out[(phase, ev["name"])] += float(ev["dur"]) - child
        for e in evs:
            start, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][1] <= start:
                close(stack.pop())
            parent_phase = stack[-1][2] if stack else None
            if stack:
                stack[-1][3] += dur
            name = e["name"]
            if parent_phase in ("backward", "optimizer"):
                phase = parent_phase
            elif name.startswith(BACKWARD):
                phase = "backward"
            elif OPTIMIZER.search(name):
                phase = "optimizer"
            else:
                phase = "forward/other"
            stack.append([e, start + dur, phase, 0.0])
        while stack:
            close(stack.pop())
    return out


def table(ours, theirs, steps, top, labels):
    per_step = lambda c: {k: v / steps / 1e3 for k, v in c.items()}  # ms per step
    a, b = per_step(self_times(ours)), per_step(self_times(theirs))
    la, lb = labels
    lines = [f"| phase | {la} ms/step | {lb} ms/step | {la}/{lb} |", "|---|---|---|---|"]
    for phase in PHASES + ("all",):
        sa = sum(v for (p, _), v in a.items() if phase in ("all", p))
        sb = sum(v for (p, _), v in b.items() if phase in ("all", p))
        lines.append(f"| {phase} | {sa:.1f} | {sb:.1f} | {sa / sb:.2f} |" if sb else f"| {phase} | {sa:.1f} | {sb:.1f} | - |")
    lines += ["", f"Top {top} operators by self time (the larger of the two sides):", "",
              f"| phase | operator | {la} ms/step | {lb} ms/step | {la} - {lb} |", "|---|---|---|---|---|"]
    keys = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0)))
    for k in keys[:top]:
        x, y = a.get(k, 0.0), b.get(k, 0.0)
        lines.append(f"| {k[0]} | `{k[1][:70]}` | {x:.2f} | {y:.2f} | {x - y:+.2f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ours")
    p.add_argument("theirs")
    p.add_argument("--steps", type=int, required=True, help="steps each trace covers")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--labels", default="ours,torch")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be >= 1")
    labels = a.labels.split(",")
    if len(labels) != 2:
        p.error("--labels wants two names separated by a comma")
    print(table(load_events(a.ours), load_events(a.theirs), a.steps, a.top, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
