"""Training: `fit` (config -> trained run directory), the Trainer (the loop), loss,
schedule and distributed set-up."""

from transformer_mt.training.fit import fit, prepare_run, train_vocabulary

__all__ = ["fit", "prepare_run", "train_vocabulary"]
