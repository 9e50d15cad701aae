"""Run once by the suite under torchrun (tests/conftest.py's ddp_launch, two nodes): seven
short trainings in one launch, each joining and leaving the process group, so that the suite
starts torchrun and imports torch once for all of them. Each writes under OUT/<name>/:

- average: fit 6 steps, then save this rank's weights and the names of the threads left
  once training has returned (its process group destroyed). Rank 0 also records what a
  single-process reference needs to replay the run: the weights training starts from and
  the encoded training pairs the batches are cut from. Every rank records which files its
  training arrays are memory-mapped from.
- nan: the CLI's `train` with the loss of rank 1 alone made NaN at step 3 (as a diverging
  shard would).
- time_cap: the CLI's `train` with train.max_seconds 1.5.
- budget: the CLI's `train` with train.budget_minutes 0.1.
- learner, lm: the CLI's `train` of tests/run_helpers.py's TWO_PROCESS_RUNS, which
  test_learner_run.py and test_language_model_run.py compare with one process.
- nodes: the CLI's `train tiny` of run_helpers.README_SCENARIO, uninterrupted: what the README's
  torchrun command killed and resumed must equal (test_ddp.py).

The CLI runs' exit codes go to OUT/rank<r>_codes.json. Each training joins a process group
and destroys it at its end, so seven groups one after another in one process are part of what
this launch checks (training/distributed.join_group).

The ranks take the same steps, so each run's folder is written once (by rank 0)."""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run_helpers import README_SCENARIO, TWO_PROCESS_ARGS, TWO_PROCESS_RUNS  # noqa: E402
from transformer_mt.cli import main
from transformer_mt.common.config import load_config
from transformer_mt.training import fit
from transformer_mt.training.trainer import Trainer

STEPS = 6
out = Path(sys.argv[1])
rank = int(os.environ["RANK"])
TINY = ["--data.task_size=400", "--train.device=cpu"]


def record_then_train(self: Trainer):
    mapped = {"src": str(self.task.data.train_src.ids.filename), "tgt": str(self.task.data.train_tgt.ids.filename),
              "maps": [line.split()[-1] for line in open("/proc/self/maps") if ".ids" in line]}
    (out / f"rank{self.rank}_data.json").write_text(json.dumps(mapped), encoding="utf-8")
    if self.rank == 0:
        torch.save(self.model.state_dict(), out / "initial.pt")
        data = {"src": self.task.data.train_src.tolist(), "tgt": self.task.data.train_tgt.tolist()}
        (out / "train_data.json").write_text(json.dumps(data), encoding="utf-8")
    return train(self)


def poisoned(self: Trainer) -> dict:
    stats = train_step(self)
    if self.rank == 1 and self.state.step + 1 == 3:
        stats["loss"] = float("nan")
    return stats


train, train_step = Trainer.train, Trainer.train_step
Trainer.train = record_then_train
trainer = fit(load_config("tiny", [f"--train.max_steps={STEPS}", f"--train.valid_every={STEPS}", *TINY,
                                   "--model.dropout=0.0", "--train.label_smoothing=0.1", "--train.schedule=paper"]),
              out / "average", progress=False)
Trainer.train = train
torch.save(trainer.model.state_dict(), out / f"rank{rank}.pt")
threads = [Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task")]
(out / f"rank{rank}_threads.json").write_text(json.dumps(threads), encoding="utf-8")


codes = {}
Trainer.train_step = poisoned
codes["nan"] = main(["train", "tiny", "--run", str(out / "nan"), "--no-progress", "--train.max_steps=20",
                     "--train.valid_every=2", *TINY])
Trainer.train_step = train_step
codes["time_cap"] = main(["train", "tiny", "--run", str(out / "time_cap"), "--no-progress", "--train.max_seconds=1.5",
                          "--train.max_steps=100000", "--train.valid_every=100000", *TINY])
codes["budget"] = main(["train", "tiny", "--run", str(out / "budget"), "--no-progress", "--train.budget_minutes=0.1",
                        "--train.warmup_steps=5", "--data.task_size=300", "--train.device=cpu", "--train.log_every=1"])
for name, (preset, args) in TWO_PROCESS_RUNS.items():
    codes[name] = main(["train", preset, "--run", str(out / name), "--no-progress", *TWO_PROCESS_ARGS, *args])
codes["nodes"] = main(["train", "tiny", "--run", str(out / "nodes"), *README_SCENARIO])
(out / f"rank{rank}_codes.json").write_text(json.dumps(codes), encoding="utf-8")
