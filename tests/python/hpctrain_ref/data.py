"""Readers of hpctrain's HDF5 files for the reference: the dataset (docs/data-format.md) with the
same sample order as lib/data (splitmix64 Fisher-Yates permutation from (seed, epoch), position
arithmetic of data::BatchGeometry), and the model parameters of a checkpoint (/model/<name>)."""
import h5py
import numpy as np
import torch

_M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & _M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def below(self, bound):
        limit = _M64 - (_M64 % bound)
        x = self.next()
        while x >= limit:
            x = self.next()
        return x % bound


def mix_seed(a, b):
    ha = SplitMix64((a & _M64) ^ 0x6A09E667F3BCC908).next()
    return SplitMix64(ha ^ (((b & _M64) * 0xD1B54A32D192ED03 + 0x243F6A8885A308D3) & _M64)).next()


def epoch_permutation(n, seed, epoch, shuffle):
    perm = list(range(n))
    if not shuffle or n < 2:
        return perm
    rng = SplitMix64(mix_seed(seed, epoch))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Dataset:
    """One split of a dataset file; samples as lib/data/sample_source.cpp reads them."""

    def __init__(self, path, split, seq_len):
        self.path, self.split = path, split
        self.file = h5py.File(path, "r")
        attrs = self.file.attrs
        fmt = _text(attrs.get("format", ""))
        if fmt != "hpctrain-dataset":
            raise ValueError(f"{path}: not an hpctrain dataset (root attribute format = '{fmt}')")
        self.task = _text(attrs["task"])
        self.vocab_size = int(attrs["vocab_size"])
        self.pad_id = int(attrs["pad_id"])
        if self.task == "causal-lm":
            self.tokens = self.file[f"/{split}/tokens"]
            self.seq_len = seq_len
            n_tokens = self.tokens.shape[0]
            self.size = (n_tokens - 1) // seq_len if n_tokens > seq_len else 0
        else:
            self.input_ids = self.file[f"/{split}/input_ids"]
            self.labels = self.file[f"/{split}/labels"]
            self.seq_len = seq_len or self.input_ids.shape[1]
            self.num_labels = len(attrs["label_names"])
            self.size = self.input_ids.shape[0]

    def read(self, ids):
        """Batch of samples ids -> (input [B,T] int64, target, mask or None)."""
        T = self.seq_len
        if self.task == "causal-lm":
            rows = np.stack([self.tokens[i * T: i * T + T + 1] for i in ids]).astype(np.int64)
            x = torch.from_numpy(rows)
            return x[:, :T].contiguous(), x[:, 1:].contiguous(), None
        order = sorted(ids)
        pos = {i: k for k, i in enumerate(order)}
        xs = self.input_ids[order, :T].astype(np.int64)  # h5py needs increasing indices
        ys = self.labels[order].astype(np.int64)
        sel = [pos[i] for i in ids]
        x, y = torch.from_numpy(xs[sel]), torch.from_numpy(ys[sel])
        return x, y, x.ne(self.pad_id).long()

    def close(self):
        self.file.close()


class TrainStream:
    """Micro-batches of one rank in lib/data/loader.h order: micro-step m of rank r in optimizer
    step b takes permutation positions b*G + (m*W + r)*B ... (G = W*A*B); epochs roll over."""

    def __init__(self, ds, world, rank, micro_batch, grad_accum, shuffle, seed):
        self.ds, self.W, self.r, self.B, self.A = ds, world, rank, micro_batch, grad_accum
        self.shuffle, self.seed = shuffle, seed
        self.G = world * grad_accum * micro_batch
        self.steps_per_epoch = ds.size // self.G
        if self.steps_per_epoch == 0:
            raise ValueError(f"{ds.path}: {ds.size} {ds.split} samples are fewer than one global batch of {self.G}")
        self._epoch, self._perm = None, None

    def micro_batch(self, step, micro):
        epoch, b = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, epoch_permutation(self.ds.size, self.seed, epoch, self.shuffle)
        first = b * self.G + (micro * self.W + self.r) * self.B
        return self.ds.read(self._perm[first:first + self.B])


def eval_subset(n, count, seed):
    """data::eval_subset: `count` distinct sorted indices of [0, n), a seeded partial Fisher-Yates on a
    stream of its own ("evalsubs"); all of [0, n) when count <= 0 or count >= n."""
    idx = list(range(n))
    if count <= 0 or count >= n:
        return idx
    rng = SplitMix64(mix_seed(seed, 0x6576616C73756273))
    for i in range(count):
        j = i + rng.below(n - i)
        idx[i], idx[j] = idx[j], idx[i]
    return sorted(idx[:count])


def eval_shard(n, world, rank):
    """Contiguous shard of data::EvalReader: [r*n/W, (r+1)*n/W)."""
    return rank * n // world, (rank + 1) * n // world


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read_checkpoint_params(path):
    """{name: float32 tensor} from the /model group of an hpctrain checkpoint."""
    with h5py.File(path, "r") as f:
        fmt = _text(f.attrs.get("format", ""))
        if fmt != "hpctrain-checkpoint":
            raise ValueError(f"{path}: not an hpctrain checkpoint (root attribute format = '{fmt}')")
        out = {}
        f["model"].visititems(lambda name, obj: out.__setitem__(name, torch.from_numpy(obj[()].astype(np.float32)))
                              if isinstance(obj, h5py.Dataset) else None)
        return out


def load_params_into(model, params, path="checkpoint"):
    state = model.state_dict()
    missing = [k for k in state if k not in params]
    if missing:
        raise ValueError(f"{path}: parameters missing: {', '.join(missing[:5])}")
    for k, t in state.items():
        if tuple(params[k].shape) != tuple(t.shape):
            raise ValueError(f"{path}: {k} has shape {tuple(params[k].shape)}, the model {tuple(t.shape)}")
    with torch.no_grad():
        for k, t in state.items():
            t.copy_(params[k])


def write_params(path, model, attrs=None):
    """Parameters as /model/<name> float32 datasets (the checkpoint layout's model part)."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "hpctrain-reference-params"
        for k, v in (attrs or {}).items():
            f.attrs[k] = v
        for name, p in model.state_dict().items():
            f.create_dataset(f"model/{name}", data=p.detach().cpu().float().numpy())


def read_checkpoint_params_any(path):
    """/model/<name> of an hpctrain checkpoint or of a file written by write_params."""
    with h5py.File(path, "r") as f:
        out = {}
        f["model"].visititems(lambda name, obj: out.__setitem__(name, torch.from_numpy(obj[()].astype(np.float32)))
                              if isinstance(obj, h5py.Dataset) else None)
        return out
