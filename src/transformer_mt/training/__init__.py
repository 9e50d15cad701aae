"""Training: a config in, a trained run directory out. A run is followed in three files:

    training/plan.py         the plan: the learning rate of each step (the schedules, equation 3),
                             when to validate, snapshot and stop, by steps or by a time budget
    training/trainer.py      the loop (section 5): one optimizer step, validation, checkpoints,
                             resume, averaging at the plan's points
    training/fit.py          `fit`: the run directory, the task, the plan and the loop put together

and what the loop is given:

    training/task.py            the seam between the loop and a kind of model
    training/translation.py     translation as a task (parallel corpus, encoder-decoder, BLEU)
    training/language_model.py  language modelling as a task (text stream, decoder-only model)
    training/loss.py            label-smoothed cross entropy (section 5.4)
    training/distributed.py     several processes with DDP, started by torchrun
"""

from transformer_mt.training.fit import fit, prepare_run, train_vocabulary

__all__ = ["fit", "prepare_run", "train_vocabulary"]
