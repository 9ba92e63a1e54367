#!/usr/bin/env python3
"""Unigram baseline of a causal-lm dataset: cross-entropy (nats/token) of the validation tokens
under the training split's token frequencies (add-one smoothing). A language model has learned
something beyond token frequencies only when its eval_loss is clearly below this number.

    /usr/bin/python3 jobs/bench/unigram_baseline.py data/fortunes.h5
"""
import math
import sys

import h5py
import numpy as np


def main(path: str) -> None:
    with h5py.File(path, "r") as f:
        vocab = int(f.attrs["vocab_size"])
        train = f["train/tokens"][...]
        val = f["val/tokens"][...]
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    ce = -logp[val].mean()
    print(f"{path}: vocab {vocab}, train {train.size} tokens, val {val.size} tokens")
    print(f"unigram cross-entropy on val: {ce:.4f} nats/token (perplexity {math.exp(ce):.2f}); "
          f"uniform: {math.log(vocab):.4f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: unigram_baseline.py DATASET.h5")
    main(sys.argv[1])
