"""Reference trainer: the same model, data order, AdamW, schedule and clipping as `hpctrain train`,
written with the Python stack a user would otherwise pick. Variants (--variant):
  single  one process, no communication
  ddp     DistributedDataParallel over gloo, gradients averaged every step (torch's C++ reducer)
  pma     post-local SGD: plain local steps + torch PeriodicModelAverager every N = local_sgd.steps
  accel   Hugging Face Accelerate's LocalSGD (Accelerator on CPU/gloo, model wrapped by prepare())
--recompute wraps every block in torch.utils.checkpoint (non-reentrant). Multi-rank variants are
launched with torchrun (python -m torch.distributed.run --nproc_per_node W -m hpctrain_ref.train_ref ...).
Rank 0 writes <out>/metrics.jsonl (one line per step, fields named as ours), every rank writes
<out>/summary-rank<r>.json (peak RSS, bytes communicated, val loss). Exit 3 on a non-finite loss.
With eval.strategy = steps it also evaluates every eval.every_steps steps (the averaged model of the
local SGD variants, computed on a copy: the training goes on unchanged) on the same seeded subset as
hpctrain, outside the step timing, and stops at the first evaluation at or below
train.target_eval_loss (> 0), as hpctrain does: time-to-quality runs.
--profile-steps A:B records steps A..B (1-based, the syntax of hpctrain's log.trace_steps) with torch.profiler (CPU operators) into
<out>/trace/rank<r>.ops.json, the format of hpctrain's log.trace_steps operator profile.
"""
import argparse
import contextlib
import gc
import json
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

from . import comm_stats
from .config import ConfigError, load
from .data import Dataset, TrainStream, eval_shard, eval_subset, load_params_into, read_checkpoint_params, write_params
from .model import Gpt, GptOptions, param_groups


def lr_at(t, step, total):
    """lib/train/optim.cpp LrSchedule::lr_at (step = optimizer steps already taken)."""
    lr, min_lr, warmup = t["lr"], t["min_lr"], t["warmup_steps"]
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if t["lr_schedule"] == "constant":
        return lr
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    coeff = 0.5 * (1.0 + math.cos(math.pi * progress)) if t["lr_schedule"] == "cosine" else 1.0 - progress
    return min_lr + coeff * (lr - min_lr)


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class Run:
    def __init__(self, args):
        self.args = args
        self.cfg = load(args.config, args.set)
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        if args.variant != "single" and self.world < 2:
            raise SystemExit(f"train_ref: variant {args.variant} needs >= 2 ranks; launch it with torchrun")
        t = self.cfg["train"]
        self.autocast = args.autocast or t["autocast"]
        if self.autocast not in ("none", "bf16"):
            raise ConfigError(f"train.autocast = {self.autocast!r}: the reference runs none or bf16")
        threads = t["threads"] if t["threads"] > 0 else max(1, (os.cpu_count() or 1) // local_world)
        torch.set_num_threads(threads)
        self.stats = comm_stats.install()
        self.accelerator = None
        if args.variant == "accel":
            from accelerate import Accelerator
            self.accelerator = Accelerator(cpu=True)
            if self.accelerator.num_processes != self.world:
                raise SystemExit(f"train_ref: Accelerate sees {self.accelerator.num_processes} processes, "
                                 f"torchrun started {self.world}")
        elif self.world > 1:
            dist.init_process_group("gloo")
        self.stats.paused = True  # setup collectives (parameter broadcast) are not per-step traffic
        self.build_model()
        self.stats.paused = False

    def build_model(self):
        m, d, t = self.cfg["model"], self.cfg["data"], self.cfg["train"]
        self.train_ds = Dataset(d["path"], "train", m["seq_len"])
        ds = self.train_ds
        if m["task"] != ds.task:
            raise SystemExit(f"train_ref: model.task = {m['task']} but {d['path']} holds {ds.task} data")
        opts = GptOptions(vocab_size=m["vocab_size"] or ds.vocab_size, n_layer=m["n_layer"], n_head=m["n_head"],
                          d_model=m["d_model"], max_seq_len=m["max_seq_len"] or m["seq_len"],
                          num_labels=(m["num_labels"] or ds.num_labels) if ds.task == "classification" else 0,
                          dropout=m["dropout"], bias=m["bias"],
                          attention="eager" if m["attention"] == "eager" else "sdpa")  # auto: torch's default
        torch.manual_seed(t["seed"])
        model = Gpt(opts, recompute=self.args.recompute)
        if self.args.init:
            load_params_into(model, read_checkpoint_params(self.args.init), self.args.init)
        torch.manual_seed(t["seed"] * 1000003 + self.rank + 1)  # dropout streams differ per rank
        self.gpt = model
        self.seq_len = m["seq_len"]
        self.param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        # fused=True: ATen's one-kernel AdamW (CPU and CUDA); None keeps torch's default choice.
        self.optimizer = torch.optim.AdamW(param_groups(model, t["weight_decay"]), lr=t["lr"],
                                           betas=(t["beta1"], t["beta2"]), eps=t["eps"],
                                           fused=True if self.args.fused else None)
        self.stream = TrainStream(ds, self.world, self.rank, t["micro_batch_size"], t["grad_accum_steps"],
                                  d["shuffle"], d["seed"])
        self.total = t["max_steps"] if t["max_steps"] > 0 else t["epochs"] * self.stream.steps_per_epoch
        self.wrapped = model
        v = self.args.variant
        if v == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            self.wrapped = DDP(model)
            if self.args.ddp_count_hook:
                self.wrapped.register_comm_hook(None, comm_stats.ddp_counting_hook)
        elif v == "pma":
            from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
            for p in model.parameters():
                dist.broadcast(p.data, src=0)
            self.averager = PeriodicModelAverager(period=self.cfg["local_sgd"]["steps"],
                                                  warmup_steps=self.cfg["local_sgd"]["warmup_steps"])
        elif v == "accel":
            self.wrapped, self.optimizer = self.accelerator.prepare(model, self.optimizer)

    def micro_steps(self, step):
        """Forward + backward of the grad_accum micro-batches; returns this rank's mean loss and tokens."""
        A = self.cfg["train"]["grad_accum_steps"]
        loss_sum, tokens = 0.0, 0
        for micro in range(A):
            t0 = time.perf_counter()
            x, y, mask = self.stream.micro_batch(step, micro)
            self.phase["data_s"] += time.perf_counter() - t0
            tokens += x.numel()
            sync_now = micro == A - 1
            ctx = self.wrapped.no_sync() if (self.args.variant == "ddp" and not sync_now) else contextlib.nullcontext()
            with ctx:
                t1 = time.perf_counter()
                # bf16 autocast on CPU: matmuls and attention in bf16, fp32 weights, loss in fp32.
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast == "bf16"):
                    loss = self.wrapped(x, y, mask)
                t2 = time.perf_counter()
                (loss / A).backward()
                self.phase["fwd_s"] += t2 - t1
                self.phase["bwd_s"] += time.perf_counter() - t2
            loss_sum += loss.item()
        return loss_sum / A, tokens

    def average_grads_now(self, step):
        """Synchronous warm-up of post-local SGD (local_sgd.warmup_steps), one flat all-reduce."""
        if self.args.variant != "pma" or step >= self.cfg["local_sgd"]["warmup_steps"]:
            return
        grads = [p.grad for p in self.gpt.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        off = 0
        for g in grads:
            g.copy_(flat[off:off + g.numel()].view_as(g))
            off += g.numel()

    def train(self):
        t = self.cfg["train"]
        lines = []
        metrics = open(os.path.join(self.args.out, "metrics.jsonl"), "w") if self.rank == 0 else None
        local_sgd = contextlib.nullcontext()
        if self.args.variant == "accel":
            from accelerate.local_sgd import LocalSGD
            local_sgd = LocalSGD(accelerator=self.accelerator, model=self.wrapped,
                                 local_sgd_steps=self.cfg["local_sgd"]["steps"], enabled=True)
        self.wrapped.train()
        self.steps_done, tokens_seen = 0, 0
        self.phase = dict.fromkeys(["data_s", "fwd_s", "bwd_s", "fwd_bwd_s", "clip_opt_s", "average_s", "other_s"],
                                   0.0)
        with local_sgd as lsgd:
            for step in range(self.total):
                self.profile(step + 1)
                before = dict(self.phase)
                t0 = time.perf_counter()
                lr = lr_at(t, step, self.total)
                for g in self.optimizer.param_groups:
                    g["lr"] = lr
                self.optimizer.zero_grad(set_to_none=True)
                t1 = time.perf_counter()
                loss, tokens = self.micro_steps(step)
                t2 = time.perf_counter()
                if not math.isfinite(loss):
                    print(f"train_ref rank {self.rank}: step {step + 1}: non-finite loss {loss}; stopping",
                          file=sys.stderr)
                    sys.exit(3)
                self.average_grads_now(step)
                grad_norm = self.clip(t["grad_clip"])
                self.optimizer.step()
                t3 = time.perf_counter()
                if self.args.variant == "pma":
                    self.averager.average_parameters(self.gpt.parameters())
                elif self.args.variant == "accel":
                    lsgd.step()
                t4 = time.perf_counter()
                seconds = t4 - t0
                # Per-phase timers (rank-local): forward+backward includes DDP's overlapped gradient all-reduce.
                self.phase["fwd_bwd_s"] += t2 - t1
                self.phase["clip_opt_s"] += t3 - t2
                self.phase["average_s"] += t4 - t3
                self.phase["other_s"] += t1 - t0
                self.steps_done += 1
                tokens_seen += tokens * self.world
                line = {"step": step + 1, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                        "tokens_per_s": tokens * self.world / seconds, "tokens_seen": tokens_seen,
                        "step_seconds": seconds, "peak_rss_bytes": peak_rss_bytes(),
                        **self.stats.snapshot(), "bytes_sent": self.bytes_sent(),
                        "phase_s": {k: v - before[k] for k, v in self.phase.items()}}
                line["bytes_per_step"] = line["bytes_sent"] / (step + 1)
                if metrics:
                    metrics.write(json.dumps(line) + "\n")
                    metrics.flush()
                lines.append(line)
                self.profile_done(step + 1)
                if self.periodic_eval(step + 1, metrics):
                    break
        ls = self.cfg["local_sgd"]
        last = self.total - 1  # PeriodicModelAverager averages after step indices warmup, warmup + N, ...
        if self.args.variant == "pma" and (last < ls["warmup_steps"] or (last - ls["warmup_steps"]) % ls["steps"]):
            from torch.distributed.algorithms.model_averaging import utils as ma_utils
            ma_utils.average_parameters(iter(self.gpt.parameters()), None)  # final average: one model to evaluate
        if metrics:
            metrics.close()
        return lines

    def profile(self, step):
        """Starts torch.profiler at the first step of --profile-steps (same span as hpctrain's)."""
        if self.args.profile_steps and step == self.args.profile_steps[0]:
            from torch.profiler import ProfilerActivity, profile
            self.profiler = profile(activities=[ProfilerActivity.CPU])
            self.profiler.__enter__()

    def profile_done(self, step):
        if getattr(self, "profiler", None) is not None and step >= self.args.profile_steps[1]:
            self.profiler.__exit__(None, None, None)
            os.makedirs(os.path.join(self.args.out, "trace"), exist_ok=True)
            self.profiler.export_chrome_trace(os.path.join(self.args.out, "trace", f"rank{self.rank}.ops.json"))
            self.profiler = None

    def periodic_eval(self, step, metrics):
        """Evaluation every eval.every_steps steps (strategy steps); True when the target is reached."""
        e, t = self.cfg["eval"], self.cfg["train"]
        if e["strategy"] != "steps" or e["every_steps"] <= 0 or step % e["every_steps"]:
            return False
        t0 = time.perf_counter()
        own = None
        if self.world > 1 and self.args.variant in ("pma", "accel"):
            # The replicas may differ between averages: evaluate their mean, then put each back.
            own = [p.detach().clone() for p in self.gpt.parameters()]
            self.stats.paused = True
            with torch.no_grad():
                for p in self.gpt.parameters():
                    dist.all_reduce(p.data)
                    p.data /= self.world
            self.stats.paused = False
        loss, stderr, samples = self.evaluate(with_stderr=True)
        if own is not None:
            with torch.no_grad():
                for p, o in zip(self.gpt.parameters(), own):
                    p.copy_(o)
        self.gpt.train()
        if metrics:
            metrics.write(json.dumps({"step": step, "eval_loss": loss, "eval_loss_stderr": stderr,
                                      "eval_samples": samples, "eval_seconds": time.perf_counter() - t0}) + "\n")
            metrics.flush()
        return t["target_eval_loss"] > 0 and loss is not None and loss <= t["target_eval_loss"]

    def clip(self, max_norm):
        params = self.gpt.parameters()
        if max_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        return float(torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))

    def bytes_sent(self):
        """Per-rank payload. DDP's C++ reducer bypasses torch.distributed.all_reduce: without the counting
        hook its traffic is the full gradient once per optimizer step (all parameters require grad)."""
        if self.args.variant == "ddp" and not self.args.ddp_count_hook:
            return self.param_bytes * self.steps_done
        return self.stats.allreduce_bytes

    def evaluate(self, with_stderr=False):
        e = self.cfg["eval"]
        if e["strategy"] == "no":
            return (None, None, 0) if with_stderr else None
        ds = Dataset(self.cfg["data"]["path"], "val", self.seq_len)
        # eval.max_batches > 0: the same seeded subset of max_batches x batch_size global samples as
        # data::EvalReader, split across ranks; 0: the whole split.
        subset = eval_subset(ds.size, e["max_batches"] * e["batch_size"], self.cfg["data"]["seed"])
        lo, hi = eval_shard(len(subset), self.world, self.rank)
        sums = torch.zeros(6, dtype=torch.float64)  # loss sum, -, tokens, per-sequence sum, squares, sequences
        self.gpt.eval()
        with torch.no_grad():
            pos = lo
            while pos < hi:
                ids = subset[pos:min(hi, pos + e["batch_size"])]
                x, y, mask = ds.read(ids)
                n = y.numel()
                sums[0] += self.gpt(x, y, mask).double() * n
                sums[2] += n
                if with_stderr:
                    for i in range(len(ids)):  # per-sequence mean loss, as hpctrain's stderr
                        li = float(self.gpt(x[i:i + 1], y[i:i + 1], mask[i:i + 1] if mask is not None else None))
                        sums[3] += li
                        sums[4] += li * li
                        sums[5] += 1
                pos += len(ids)
        self.stats.paused = True
        if self.world > 1:
            dist.all_reduce(sums)
        self.stats.paused = False
        ds.close()
        loss = float(sums[0] / sums[2]) if sums[2] > 0 else None
        if not with_stderr:
            return loss
        n = float(sums[5])
        var = (float(sums[4]) - n * (float(sums[3]) / n) ** 2) / (n - 1) if n > 1 else 0.0
        return loss, math.sqrt(max(0.0, var) / n) if n > 1 else None, int(n)

    def run(self):
        os.makedirs(self.args.out, exist_ok=True)
        t0 = time.perf_counter()
        lines = self.train()
        wall = time.perf_counter() - t0
        val_loss = self.evaluate()
        summary = {**self.stats.snapshot(), "variant": self.args.variant, "recompute": self.args.recompute, "rank": self.rank,
                   "world": self.world, "threads": torch.get_num_threads(), "steps": len(lines),
                   "tokens_seen": lines[-1]["tokens_seen"] if lines else 0, "train_seconds": wall,
                   "peak_rss_bytes": peak_rss_bytes(), "bytes_sent": self.bytes_sent(),
                   "bytes_per_step": self.bytes_sent() / max(1, len(lines)), "val_loss": val_loss,
                   "torch_version": torch.__version__, "phase_seconds": self.phase}
        with open(os.path.join(self.args.out, f"summary-rank{self.rank}.json"), "w") as f:
            json.dump(summary, f)
        if self.args.save_params and self.rank == 0:
            write_params(self.args.save_params, self.gpt, {"steps": len(lines)})
        if self.world > 1:
            dist.barrier()
            # PeriodicModelAverager, Accelerate's state and DDP keep references to the process group;
            # left alive, the group is torn down during interpreter finalization, where gloo's worker
            # threads can abort the process (SIGABRT, "terminate called without an active exception";
            # seen on rank 1 in CI). Drop every holder first so destroy_process_group really frees it.
            self.averager = self.wrapped = self.accelerator = self.optimizer = None
            gc.collect()
            dist.destroy_process_group()


def step_range(text):
    a, sep, b = text.partition(":")
    if not sep or not a.isdigit() or not b.isdigit() or not 1 <= int(a) <= int(b):
        raise argparse.ArgumentTypeError(f"--profile-steps wants A:B with 1 <= A <= B, got {text!r}")
    return int(a), int(b)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hpctrain_ref.train_ref", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="hpctrain TOML config")
    p.add_argument("--set", action="append", default=[], help="section.key=value override (repeatable)")
    p.add_argument("--variant", choices=["single", "ddp", "pma", "accel"], default="single")
    p.add_argument("--recompute", action="store_true", help="torch.utils.checkpoint on every block")
    p.add_argument("--autocast", choices=["none", "bf16"], default=None,
                   help="bf16: forward under torch.autocast('cpu', torch.bfloat16); default: the config's "
                        "train.autocast, so one config trains both sides in the same precision")
    p.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    p.add_argument("--init", help="hpctrain checkpoint whose /model parameters are the initial weights")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--save-params", help="write the final parameters (/model/<name>) to this HDF5 file")
    p.add_argument("--ddp-count-hook", action="store_true",
                   help="ddp: route buckets through a counting Python comm hook instead of computing the bytes")
    p.add_argument("--profile-steps", type=step_range, default=None,
                   help="A:B: torch.profiler over steps A..B into <out>/trace/rank<r>.ops.json")
    args = p.parse_args(argv)
    try:
        Run(args).run()
    except (ConfigError, ValueError, OSError, KeyError) as e:
        print(f"train_ref: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    code = main()
    # Every output file is closed by now. Skip interpreter finalization, where third-party threads
    # (gloo, Accelerate) have aborted a finished process; the exit code is the run's own.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
