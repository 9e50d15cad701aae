"""Run by tests/integration/test_ddp.py under torchrun: train, then save this rank's weights
and the names of the threads left once training has returned (its process group destroyed).

Rank 0 also records what a single-process reference needs to replay the run: the
weights training starts from and the encoded training pairs the batches are cut from.
Every rank records which files its training arrays are memory-mapped from."""

import json
import os
import sys
from pathlib import Path

import torch

from transformer_mt.config import load_config
from transformer_mt.training import fit
from transformer_mt.training.trainer import Trainer

STEPS = 6
run, out = sys.argv[1], sys.argv[2]
cfg = load_config("tiny", [f"--train.max_steps={STEPS}", f"--train.valid_every={STEPS}", "--data.task_size=400",
                           "--train.device=cpu", "--model.dropout=0.0", "--train.label_smoothing=0.1"])

start_training = Trainer.train


def record_then_train(self: Trainer):
    mapped = {"src": str(self.task.data.train_src.ids.filename), "tgt": str(self.task.data.train_tgt.ids.filename),
              "maps": [line.split()[-1] for line in open("/proc/self/maps") if ".ids" in line]}
    with open(os.path.join(out, f"rank{self.rank}_data.json"), "w", encoding="utf-8") as handle:
        json.dump(mapped, handle)
    if self.rank == 0:
        torch.save(self.model.state_dict(), os.path.join(out, "initial.pt"))
        with open(os.path.join(out, "train_data.json"), "w", encoding="utf-8") as handle:
            json.dump({"src": self.task.data.train_src.tolist(), "tgt": self.task.data.train_tgt.tolist()}, handle)
    return start_training(self)


Trainer.train = record_then_train
trainer = fit(cfg, run, progress=False)
torch.save(trainer.model.state_dict(), os.path.join(out, f"rank{os.environ['RANK']}.pt"))
threads = [Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task")]
with open(os.path.join(out, f"rank{os.environ['RANK']}_threads.json"), "w", encoding="utf-8") as handle:
    json.dump(threads, handle)
