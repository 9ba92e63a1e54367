"""The training settings the benchmark drivers share, written as a TOML config or as `--set` words.

Every driver that compares modes or implementations trains the same recipe (AdamW at lr 2e-3 with
weight decay and clipping, no dropout, shuffled data, CPU, a metrics row per step, no checkpoints);
only the shape, the schedule and the evaluation differ per driver. Keeping the recipe in one place
means a change to it reaches every benchmark, and the file form is what the PyTorch reference
(tests/python/hpctrain_ref) reads, so both sides train the same configuration.
"""
import copy
import json

COMMON = {
    "model": {"dropout": 0.0},
    "data": {"shuffle": True},
    "train": {"grad_accum_steps": 1, "lr": 2e-3, "min_lr": 2e-4, "warmup_steps": 5, "lr_schedule": "cosine",
              "weight_decay": 0.1, "grad_clip": 1.0, "seed": 42, "device": "cpu"},
    "checkpoint": {"every_steps": 0, "save_final": False},
    "log": {"every_steps": 1},
}


def merged(overrides):
    """COMMON with `overrides` ({section: {key: value}}) laid over it."""
    cfg = copy.deepcopy(COMMON)
    for section, keys in overrides.items():
        cfg.setdefault(section, {}).update(keys)
    return cfg


def value_text(v, bare_strings=False):
    """A TOML value; with bare_strings, strings unquoted as `--set` takes them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return v if bare_strings else json.dumps(v)  # JSON's escapes are TOML's basic-string escapes
    raise TypeError(f"bench_config: no TOML form for {type(v).__name__} {v!r}")


def toml_text(overrides):
    lines = []
    for section, keys in merged(overrides).items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {value_text(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def write(path, overrides):
    with open(path, "w") as f:
        f.write(toml_text(overrides))
    return path


def as_sets(overrides):
    """["section.key=value", ...] for `hpctrain train --set`."""
    return [f"{section}.{k}={value_text(v, bare_strings=True)}"
            for section, keys in merged(overrides).items() for k, v in keys.items()]


def reference_args(bf16, attention="auto"):
    """The PyTorch reference's options for one precision and attention core: the config keys as `--set`
    words, and in bf16 its fused AdamW, the fastest optimizer torch has on a CPU (each side at its best)."""
    args = ["--set", f"train.autocast={'bf16' if bf16 else 'none'}", "--set", f"model.attention={attention}"]
    return args + (["--fused"] if bf16 else [])
