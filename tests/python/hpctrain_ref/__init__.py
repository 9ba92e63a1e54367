"""PyTorch reference implementation of hpctrain's GPT training step (the comparison oracle).

model.py mirrors lib/model/gpt.{h,cpp} parameter for parameter, data.py reads hpctrain's HDF5
dataset and checkpoint files, config.py reads the same TOML configs, train_ref.py trains with the
Python stack users would otherwise pick (DDP, PeriodicModelAverager, Accelerate LocalSGD).
"""
