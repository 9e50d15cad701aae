"""Run by tests/integration/test_ddp.py under torchrun: train, then save this rank's weights."""

import os
import sys

import torch

from transformer_mt.config import load_config
from transformer_mt.training import fit

run, out = sys.argv[1], sys.argv[2]
cfg = load_config("tiny", ["--train.max_steps=12", "--train.valid_every=12", "--data.task_size=400",
                           "--train.device=cpu", "--model.dropout=0.1"])
trainer = fit(cfg, run, progress=False)
torch.save(trainer.model.state_dict(), os.path.join(out, f"rank{os.environ['RANK']}.pt"))
