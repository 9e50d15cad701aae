"""Run by tests/integration/test_ddp.py under torchrun: the CLI's `train`, with the loss
of rank 1 alone made NaN at step 3 (as a diverging shard would)."""

import sys

from transformer_mt.cli import main
from transformer_mt.training.trainer import Trainer

original = Trainer.train_step


def poisoned(self: Trainer) -> dict:
    stats = original(self)
    if self.rank == 1 and self.state.step + 1 == 3:
        stats["loss"] = float("nan")
    return stats


Trainer.train_step = poisoned
sys.exit(main(["train", "tiny", "--run", sys.argv[1], "--no-progress", "--train.max_steps=20", "--train.valid_every=2",
               "--data.task_size=400", "--train.device=cpu"]))
