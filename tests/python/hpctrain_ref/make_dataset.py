"""Writes a small causal-lm dataset in hpctrain's format (docs/data-format.md) from Debian's
fortune files with the byte tokenizer (ids 0..255 = bytes, 256 = <pad>, 257 = <eos>), or from
synthetic text when those files are absent. For standalone tests of the reference and as an
independent writer of the format; the benchmark uses `hpctrain prepare`.
Usage: python -m hpctrain_ref.make_dataset OUT.h5 [--max-docs N] [--val-fraction F]"""
import argparse
import glob
import random

import h5py
import numpy as np

PAD_ID, EOS_ID, VOCAB = 256, 257, 258


def fortune_docs(max_docs):
    docs = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith(".dat") or path.endswith(".u8"):
            continue
        try:
            text = open(path, "rb").read()
        except OSError:
            continue
        docs += [d.strip() for d in text.split(b"\n%\n") if d.strip()]
        if len(docs) >= max_docs:
            break
    if not docs:  # synthetic fallback: deterministic pseudo-sentences
        rng = random.Random(7)
        words = [b"alpha", b"beta", b"gamma", b"delta", b"mpi", b"rank", b"tensor", b"loss"]
        docs = [b" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) for _ in range(max_docs)]
    return docs[:max_docs]


def encode(docs):
    tokens, offsets = [], [0]
    for d in docs:
        tokens.extend(d)
        tokens.append(EOS_ID)
        offsets.append(len(tokens))
    return np.asarray(tokens, dtype=np.uint16), np.asarray(offsets, dtype=np.int64)


def write(path, docs, val_fraction=0.1):
    n_val = max(1, int(len(docs) * val_fraction))
    splits = {"train": encode(docs[n_val:]), "val": encode(docs[:n_val])}
    with h5py.File(path, "w") as f:
        for k, v in {"format": "hpctrain-dataset", "task": "causal-lm", "tokenizer": "byte"}.items():
            # Fixed-length ASCII: hpctrain's io::attr_string reads variable-length strings as ASCII only,
            # and HDF5 does not convert h5py's default variable-length UTF-8 to that.
            f.attrs[k] = np.bytes_(v)
        for k, v in {"format_version": 1, "vocab_size": VOCAB, "pad_id": PAD_ID, "eos_id": EOS_ID,
                     "num_tokens": sum(len(t) for t, _ in splits.values())}.items():
            f.attrs[k] = np.int64(v)
        for split, (tokens, offsets) in splits.items():
            f.create_dataset(f"{split}/tokens", data=tokens, chunks=(min(len(tokens), 65536),), fletcher32=True)
            f.create_dataset(f"{split}/doc_offsets", data=offsets, chunks=(min(len(offsets), 65536),),
                             fletcher32=True)
    return {s: len(t) for s, (t, _) in splits.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out")
    p.add_argument("--max-docs", type=int, default=2000)
    p.add_argument("--val-fraction", type=float, default=0.1)
    a = p.parse_args()
    print(write(a.out, fortune_docs(a.max_docs), a.val_fraction))


if __name__ == "__main__":
    main()
