"""Training: `fit` (config -> trained run directory), the Trainer (the loop), loss,
schedule and distributed set-up."""

from transformer_mt.training.fit import fit, train_vocabulary

__all__ = ["fit", "train_vocabulary"]
