"""The time-to-target arithmetic of the benchmark drivers (jobs/bench/run_report.py,
time_to_quality.py) on hand-made metrics: the first evaluation at the target, the interpolated
crossing and the training seconds there. Usage: bench_report_check.py"""
import os
import sys

from common import Checks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "jobs", "bench"))
import run_report as rep  # noqa: E402
import time_to_quality as ttq  # noqa: E402


def main():
    c = Checks()
    # Loss 2.80 at step 64, 2.70 at 72, target 2.75: first seen at 72, crossed at 68.
    c.check(rep.crossing([(64, 2.80, 0.01), (72, 2.70, 0.01)], 2.75) == (72, 68.0), "crossing halfway")
    c.check(rep.crossing([(8, 2.60, 0.01)], 2.70) == (8, 8.0), "at the target at the first evaluation")
    c.check(rep.crossing([(8, 2.80, 0.01), (16, 2.79, 0.01)], 2.70) == (None, None), "never reached")
    # Within the tolerance counts as reached (a per-step mode retracing DDP's loss to the 6th digit).
    c.check(rep.crossing([(56, 2.9, 0), (64, 2.75 + rep.TARGET_TOLERANCE / 2, 0)], 2.75)[0] == 64, "tolerance")
    c.check(ttq.time_at_step({1: 1.0, 2: 2.5, 3: 3.0}, 1.5) == 1.75, "seconds at a fractional step")
    c.check(ttq.time_at_step({1: 1.0, 2: 2.5}, 2.0) == 2.5, "seconds at a whole step")
    # A run of 0.5 s steps evaluated every 8 steps, crossing at step 68: time to target 36 s (step 72),
    # 34 s at the crossing.
    rows = [{"step": k, "step_seconds": 0.5, "bytes_sent": 100 * k} for k in range(1, 73)]
    rows += [{"step": 64, "eval_loss": 2.80, "eval_loss_stderr": 0.008},
             {"step": 72, "eval_loss": 2.70, "eval_loss_stderr": 0.008}]
    rows.sort(key=lambda r: (r["step"], "eval_loss" in r))
    s = ttq.summarize(rows, 2.75, 0, 0, False)
    c.check((s.get("tts_step"), s.get("tts")) == (72, 36.0), f"time to target {s.get('tts_step')} {s.get('tts')}")
    c.check((s.get("ttc_step"), s.get("ttc")) == (68.0, 34.0), f"at the crossing {s.get('ttc_step')} {s.get('ttc')}")
    c.check(s.get("bytes_to_target") == 7200, "bytes to the first evaluation at the target")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
