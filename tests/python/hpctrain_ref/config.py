"""Reads hpctrain TOML configs (defaults < file < section.key=value overrides), as lib/config does,
so that the reference trains exactly the configuration our binary trains. Only the keys the
reference uses are interpreted; the defaults mirror lib/config/config.h."""
import copy
import tomllib

DEFAULTS = {
    "model": {"task": "causal-lm", "n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 128, "max_seq_len": 0,
              "vocab_size": 0, "num_labels": 0, "dropout": 0.0, "bias": True,
              "attention": "auto"},
    "data": {"path": "", "shuffle": True, "seed": 1234, "prefetch_batches": 4},
    "train": {"output_dir": "runs/default", "micro_batch_size": 8, "grad_accum_steps": 1, "max_steps": 0,
              "epochs": 1, "lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 0, "lr_schedule": "cosine",
              "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0, "seed": 42,
              "device": "auto", "autocast": "none", "threads": 0, "nan_policy": "stop", "peak_flops": 0.0,
              "deterministic": False, "target_eval_loss": 0.0},
    "eval": {"strategy": "epoch", "every_steps": 0, "batch_size": 16, "max_batches": 0},
    "recompute": {"policy": "none", "k": 1, "first_n": 0},
    "local_sgd": {"enabled": False, "steps": 8, "warmup_steps": 0, "average_buffers": True,
                  "optimizer_state": "local", "outer": "average", "outer_lr": 1.0, "outer_momentum": 0.1,
                  "nesterov": True, "comm_dtype": "fp32", "overlap_steps": 0, "bucket_mb": 0, "overlap_grad_allreduce": False,
                  "consistency_check": True},
    "checkpoint": {"dir": "", "every_steps": 0, "keep": 2, "save_final": True},
    "log": {"every_steps": 10, "level": "info", "all_ranks": False, "metrics_file": "metrics.jsonl", "plot": True,
            "tensorboard": False},
}


class ConfigError(ValueError):
    pass


def _parse_value(text):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # bare string, as `--set data.path=/x.h5`


def _assign(cfg, name, value):
    section, _, key = name.partition(".")
    if section not in cfg or key not in cfg[section]:
        raise ConfigError(f"config key '{name}' is unknown")
    default = DEFAULTS[section][key]
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif name == "data.path" and isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value, ok = value[0], True  # hpctrain prints data.path as a list; the reference reads one file
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"config key '{name}': wrong type {type(value).__name__}")
    cfg[section][key] = value


def load(path=None, overrides=()):
    cfg = copy.deepcopy(DEFAULTS)
    if path:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        for section, table in doc.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: top-level key '{section}' is not a section")
            for key, value in table.items():
                _assign(cfg, f"{section}.{key}", value)
    for assignment in overrides:
        name, eq, text = assignment.partition("=")
        if not eq:
            raise ConfigError(f"override '{assignment}' is not section.key=value")
        _assign(cfg, name.strip(), _parse_value(text.strip()))
    return cfg
