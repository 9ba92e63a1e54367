"""Counts what the Python variants communicate: every torch.distributed.all_reduce /
all_reduce_coalesced / barrier call (PeriodicModelAverager and Accelerate go through them) and
every DDP gradient bucket (through a counting comm hook). Bytes = payload this rank hands to the
collective, the same definition as hpctrain's SyncStats.bytes_sent."""
import torch.distributed as dist


class CommStats:
    def __init__(self):
        self.allreduce_calls = 0
        self.allreduce_bytes = 0
        self.barriers = 0
        self.paused = False

    def add(self, tensors):
        if self.paused:
            return
        for t in tensors:
            self.allreduce_calls += 1
            self.allreduce_bytes += t.numel() * t.element_size()

    def snapshot(self):
        return {"allreduce_calls": self.allreduce_calls, "bytes_sent": self.allreduce_bytes,
                "barriers": self.barriers}


STATS = CommStats()
_installed = False


def install():
    """Wraps the torch.distributed entry points (looked up at call time by the libraries)."""
    global _installed
    if _installed:
        return STATS
    _installed = True
    orig_all_reduce, orig_barrier = dist.all_reduce, dist.barrier

    def counting_all_reduce(tensor, *args, **kwargs):
        STATS.add([tensor])
        return orig_all_reduce(tensor, *args, **kwargs)

    def counting_barrier(*args, **kwargs):
        if not STATS.paused:
            STATS.barriers += 1
        return orig_barrier(*args, **kwargs)

    dist.all_reduce = counting_all_reduce
    dist.barrier = counting_barrier
    return STATS


def ddp_counting_hook(process_group, bucket):
    """DDP comm hook: the default all-reduce (sum, then / world) plus byte counting."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    STATS.add([bucket.buffer()])
    STATS.paused = True  # the default hook calls dist.all_reduce itself: count the bucket once
    try:
        return default_hooks.allreduce_hook(process_group, bucket)
    finally:
        STATS.paused = False
