#!/usr/bin/env python3
"""Writes the regression inputs of tests/fuzz/regressions/<target>/: one file per finding of
docs/reliability.md ("What it found and what changed"), each an input of the fuzz target that
builds the structure the finding was about. The ctest tests fuzz.<target> replay them (with the seed
corpus) through the target's properties; a fix that regresses turns the replay into a crash, a
finding or an out-of-memory, naming the file.

The original crash files of the fuzzing campaign were never kept (they lived in build-fuzz/), so
these are rebuilt from the findings. How an input becomes a structure: the targets read their
choices through LLVM's FuzzedDataProvider, which takes integers from the END of the input (one byte
per choice below 256 values, the last byte first) and strings/bytes from the FRONT; a choice of 0 is
the well-formed value, and an exhausted input gives 0. So an input is `front + back`, where `back`
sets the few choices that matter and leaves every other choice at 0.

For the HDF5 targets (checkpoint, dataset_meta) the position of a choice depends on every choice
before it; the positions below were found by trying each position and watching which HDF5 objects
the target created (an LD_PRELOAD trace of H5Lcreate_*, H5Tcommit2, H5Dcreate2, H5Dwrite) and which
steps refused the file (HT_FUZZ_STATS=1). If a target changes the order of its choices these inputs
stop building their structure (they still replay without a finding); rerun that check then:
`HT_FUZZ_STATS=1 build/bin/fuzz_replay_checkpoint tests/fuzz/regressions/checkpoint/<file>` prints
which steps completed and which refused (each file's comment below says what it should show).

Usage: python3 tests/fuzz/regressions/make_regressions.py   (rewrites the files; they are committed)
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def from_end(back, front=b"", pad=0):
    """An input whose choice at position p from the end (1 = last byte) is back[p]; other choices 0.
    `pad` zero bytes after `front` feed the targets' float tensors, which take their values from the
    front, so that they never eat into the choices."""
    n = max(back) if back else 0
    region = bytearray(n)
    for pos, value in back.items():
        region[n - pos] = value
    return bytes(front) + bytes(pad) + bytes(region)


def in_order(choices, front=b""):
    """An input whose integer choices, in the order the target consumes them, are `choices` (one
    byte each, except where a tuple gives the bytes of a wider choice, most significant first)."""
    seq = []
    for c in choices:
        seq.extend(c if isinstance(c, tuple) else (c,))
    return bytes(front) + bytes(reversed(seq))


def fdp_string(s):
    """s as ConsumeRandomLengthString reads it: backslashes doubled, ended by a backslash + 'E'."""
    return s.replace(b"\\", b"\\\\") + b"\\E"


INPUTS = {}

# --- checkpoint ---------------------------------------------------------------------------------
# Common choices: create_file 0 (pos 1); hostile objects on (pos 2 = 5), one of them (pos 3 = 0);
# world size 1; /config the valid text (pos 31 = 1; 0 would read a string from the front).
CK = {1: 0, 2: 5, 3: 0, 31: 1}
PAD = 1024
# fuzz_hostile_object: pos 73 = where (0 "model/wte.weight", 3 "x"), pos 74 = name (0 "loop"),
# pos 75 = kind. Every one of these must make read_file refuse the file (HT_FUZZ_STATS: read_file
# refused 1); before the fix, the hard-link cycle made the walk over the objects recurse forever.
for name, extra in {
    "hardlink-cycle-model-loop": {75: 2},  # /model/loop -> /model (the fuzzer's timeout)
    "hardlink-cycle-root": {73: 3, 75: 2},  # /loop -> /
    "softlink-to-parent": {75: 1},  # /model/loop -> soft "/model"
    "softlink-dangling": {75: 0},  # /model/loop -> soft "/does/not/exist"
    "external-link-to-checkpoint": {75: 3},  # /model/loop -> other.h5:/
    "external-link-missing-file": {75: 5},  # /model/loop -> /nonexistent/file.h5:/x
    "committed-datatype": {75: 4},  # /model/loop is a named datatype
}.items():
    INPUTS[f"checkpoint/{name}"] = from_end({**CK, **extra}, pad=PAD)
# Rank group names (no hostile objects: pos 2 = 0, so every later choice moves up by one: /config
# at 30). pos 71 = 3 adds a rank group named by pos 72: 0 = 20+ digits (std::stoll threw
# std::out_of_range, reported as a bare "stoll"), 3 = "01" (was read as rank 1). read_file refuses both.
RK = {1: 0, 2: 0, 3: 0, 30: 1, 71: 3}
INPUTS["checkpoint/rank-name-20-digits"] = from_end({**RK, 72: 0}, pad=PAD)
INPUTS["checkpoint/rank-name-leading-zero"] = from_end({**RK, 72: 3}, pad=PAD)

# --- dataset_meta -------------------------------------------------------------------------------
# A dataset reached through an external link: /train/tokens absent (pos 34 = 8), then one hostile
# object (pos 2 = 5, pos 3 = 0) that is an external link (pos 53 = 3) named "tokens" (pos 52 = 2)
# to other.h5:/train/tokens (pos 54 = 2). Dataset::open must refuse it (the chunk reader applied
# the other file's chunk addresses to this file's descriptor).
INPUTS["dataset_meta/external-link-train-tokens"] = from_end({1: 0, 2: 5, 3: 0, 34: 8, 52: 2, 53: 3, 54: 2}, pad=PAD)
# A BPE dataset (pos 4 = 3) with 40 merges (pos 5 = 40) whose /tokenizer/merges values come from
# the input (pos 53 = 19): merge i joins the token of merge i-1 with itself, a 2^40-byte token
# (from_merges asked for 1.6 GB). The tokenizer step must refuse it (HT_FUZZ_STATS: tokenizer refused 1).
DOUBLING = [(ord("a"), ord("a"))] + [(257 + i, 257 + i) for i in range(1, 40)]
INPUTS["dataset_meta/merges-doubling-40"] = from_end(
    {1: 0, 2: 0, 3: 0, 4: 3, 5: 40, 53: 19}, front=b"".join(struct.pack("<II", a, b) for a, b in DOUBLING), pad=PAD)

# --- tokenizer ----------------------------------------------------------------------------------
# 40 merges (the count is a 2-byte choice: 0, 40); merge 0 = ('a', 'a') (kind 0, then twice
# "a byte" = 2 and 'a'), merge i = (258 + i - 1, same) (kind 0, then twice "the newest id" = 1 and
# offset 0). The text after the merges is what both tokenizers round-trip.
choices = [(0, 40), 0, 2, ord("a"), 2, ord("a")]
for _ in range(1, 40):
    choices += [0, 1, 0, 1, 0]
INPUTS["tokenizer/merges-doubling-40"] = in_order(choices, front=b"aaaaaaaa aaaa aa a\n" * 4)

# --- config -------------------------------------------------------------------------------------
# One --set string (count choice 1) read from the front, then the TOML text (the rest).
def config_input(sets, toml=b""):
    return b"".join(fdp_string(s) for s in sets) + toml + in_order([len(sets)])


# The fuzzer's string: control characters and bytes that are not UTF-8 (the config then did not
# read back from the TOML stored in every checkpoint). Must be refused as a usage error.
INPUTS["config/set-control-bytes-invalid-utf8"] = config_input(
    [b"log.metrics_file= 6tric\x01\x00fil\x01\x00\x7f\xfe\x9fW\x16"])
INPUTS["config/set-byte-fe"] = config_input([b"data.path=a\xfeb"])
INPUTS["config/toml-escape-nul"] = config_input([], b'[data]\npath = "a\\u0000b"\n')
INPUTS["config/non-ascii-round-trip"] = config_input(
    ["data.path=daten/größe-東京-😀.h5".encode(), "train.output_dir=runs/é'\"x".encode()])


def main():
    for rel, data in sorted(INPUTS.items()):
        path = os.path.join(HERE, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        print(f"{rel}: {len(data)} bytes")


if __name__ == "__main__":
    main()
