"""Interop check of hpctrain's safetensors writer/reader against the real `safetensors` package.

Usage: safetensors_check.py OURS.safetensors THEIRS.safetensors
  OURS: written by ht::io::write_safetensors in tests/unit/test_io_safetensors.cpp; checked here with
        safetensors.numpy.load_file (values, dtypes, shapes, metadata).
  THEIRS: written here with safetensors.numpy.save_file; the C++ test then reads it with its reader.
Exits 0 on success, 1 with one line per mismatch.
"""
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file


def expected_ours():
    return {
        "a": np.array([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]], dtype=np.float32),
        "b": np.array([-2, 0, 7, 1 << 40], dtype=np.int64),
        "h": np.array([1.0, -2.5, 65504.0], dtype=np.float16),
        "u": np.array([[0, 1], [254, 255]], dtype=np.uint8),
        "z": np.zeros((0,), dtype=np.float32),
    }


def theirs():
    return {
        "x": (np.arange(6, dtype=np.float32) * 0.25).reshape(3, 2),
        "y": np.arange(-5, 0, dtype=np.int32),
        "z": np.array([np.pi, np.e], dtype=np.float64),
        "w": np.array([0, 127, 128, 255], dtype=np.uint8),
        "half": np.array([1.0, -2.5], dtype=np.float16),
        "empty": np.zeros((2, 0), dtype=np.float32),
    }


def check_ours(path):
    errors = []
    got = load_file(path)
    want = expected_ours()
    if set(got) != set(want):
        errors.append(f"{path}: tensors {sorted(got)} != {sorted(want)}")
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            continue
        if g.dtype != w.dtype or g.shape != w.shape or not np.array_equal(g, w):
            errors.append(f"{path}: tensor {name}: got {g.dtype}{list(g.shape)} {g.tolist()}, "
                          f"want {w.dtype}{list(w.shape)} {w.tolist()}")
    with safe_open(path, framework="np") as f:
        if f.metadata() != {"format": "np"}:
            errors.append(f"{path}: metadata {f.metadata()} != {{'format': 'np'}}")
    return errors


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ours, their_path = sys.argv[1], sys.argv[2]
    errors = check_ours(ours)
    save_file(theirs(), their_path, metadata={"format": "np"})
    for e in errors:
        print("safetensors_check: " + e, file=sys.stderr)
    if not errors:
        print(f"safetensors_check: {ours} loads in safetensors.numpy with the expected values; wrote {their_path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
