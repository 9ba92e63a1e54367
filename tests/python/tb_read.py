"""Reads hpctrain's TensorBoard event files with TensorBoard's own EventAccumulator and compares them
with what the run should have logged.

Usage: tb_read.py EVENTS_DIR EXPECTED.json
EXPECTED.json:
  {"scalars": {"train/loss": [[1, 3.25], [2, 3.0]], ...},   # tag -> [[step, value], ...] in order
   "text": {"config": "seed = 1"} | ["config"],               # tags that must exist (text checked if given)
   "allow_extra_tags": false}                                 # optional: tolerate unlisted scalar tags
Values are compared at float32 precision (TensorBoard stores simple_value as a float); "NaN"/Infinity
in the JSON match NaN/inf. Exits 0 when everything matches, 1 with one line per mismatch, 2 on usage.
"""
import json
import math
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.util import tensor_util

FLOAT32_REL_TOL = float(np.finfo(np.float32).eps)


def load(events_dir):
    acc = ea.EventAccumulator(events_dir, size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    return acc


def same_float32(got, want):
    want32 = float(np.float32(want))
    if math.isnan(want32) or math.isnan(got):
        return math.isnan(want32) and math.isnan(got)
    if math.isinf(want32) or math.isinf(got):
        return got == want32
    return math.isclose(got, want32, rel_tol=FLOAT32_REL_TOL, abs_tol=0.0)


def check_scalars(acc, expected, allow_extra):
    errors = []
    have = set(acc.Tags()[ea.SCALARS])
    for tag in sorted(set(expected) - have):
        errors.append(f"scalar tag '{tag}' missing (have: {sorted(have)})")
    if not allow_extra:
        for tag in sorted(have - set(expected)):
            errors.append(f"unexpected scalar tag '{tag}'")
    for tag in sorted(set(expected) & have):
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = [(int(s), float(v)) for s, v in expected[tag]]
        if len(got) != len(want):
            errors.append(f"scalar '{tag}': {len(got)} events, expected {len(want)} "
                          f"(steps {[s for s, _ in got]} vs {[s for s, _ in want]})")
            continue
        for (gs, gv), (ws, wv) in zip(got, want):
            if gs != ws or not same_float32(gv, wv):
                errors.append(f"scalar '{tag}': got (step {gs}, {gv!r}), expected (step {ws}, {wv!r})")
    return errors


def check_text(acc, expected):
    errors = []
    have = set(acc.Tags()[ea.TENSORS])
    wanted = expected if isinstance(expected, dict) else {t: None for t in expected}
    try:
        text_tags = set(acc.PluginTagToContent("text"))
    except KeyError:  # no summary carried text-plugin metadata
        text_tags = set()
    for tag, want in sorted(wanted.items()):
        if tag not in have:
            errors.append(f"text tag '{tag}' missing (tensor tags: {sorted(have)})")
            continue
        if tag not in text_tags:
            errors.append(f"tag '{tag}' is a tensor but not marked for the text plugin")
        if want is None:
            continue
        last = acc.Tensors(tag)[-1].tensor_proto
        got = tensor_util.make_ndarray(last).item()
        got = got.decode("utf-8", errors="replace") if isinstance(got, bytes) else str(got)
        if got != want:
            errors.append(f"text '{tag}': got {got!r}, expected {want!r}")
    return errors


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    events_dir, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path) as f:
        expected = json.load(f)
    acc = load(events_dir)
    errors = check_scalars(acc, expected.get("scalars", {}), bool(expected.get("allow_extra_tags", False)))
    errors += check_text(acc, expected.get("text", []))
    for e in errors:
        print(f"tb_read: {events_dir}: {e}", file=sys.stderr)
    if errors:
        return 1
    n = sum(len(v) for v in expected.get("scalars", {}).values())
    print(f"tb_read: {events_dir}: {n} scalar events in {len(expected.get('scalars', {}))} tags and "
          f"{len(expected.get('text', []))} text tags match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
