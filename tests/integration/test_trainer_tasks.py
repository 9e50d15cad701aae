"""The Trainer is one loop for any task (training/task.py): a second, trivial task defined
here trains, validates, selects, checkpoints, resumes and averages through it unchanged."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from transformer_mt.common.config import Config, TrainConfig
from transformer_mt.runs.directory import RunDir, list_checkpoints, list_snapshots, load_checkpoint
from transformer_mt.training.loss import LabelSmoothingLoss
from transformer_mt.training.task import Selection
from transformer_mt.training.plan import StepPlan
from transformer_mt.training.trainer import RunContext, Trainer, seed_everything

V = 12  # the task: given token t, predict (t + 1) mod V


@dataclass
class Pairs:
    inputs: torch.Tensor  # (N,)
    targets: torch.Tensor  # (N,)

    @property
    def n_tokens(self) -> int:
        return self.inputs.numel()

    def to(self, device: torch.device) -> "Pairs":
        return Pairs(self.inputs.to(device), self.targets.to(device))


class CountingStream:
    """Endless seeded batches of 16 tokens; its position is its state."""

    def __init__(self, seed: int, rank: int) -> None:
        self.seed, self.rank, self.position = seed, rank, 0

    def __iter__(self):
        return self

    def __next__(self) -> Pairs:
        generator = torch.Generator().manual_seed(self.seed * 1000 + self.position * 7 + self.rank)
        self.position += 1
        inputs = torch.randint(0, V, (16,), generator=generator)
        return Pairs(inputs, (inputs + 1) % V)

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, 16)
        self.out = nn.Linear(16, V)

    def forward(self, batch: Pairs) -> tuple[torch.Tensor, torch.Tensor]:
        return self.out(self.embed(batch.inputs)), batch.targets


class SuccessorTask:
    selection = Selection("accuracy", higher_is_better=True)

    def build_model(self) -> nn.Module:
        return Lookup()

    def train_batches(self, seed: int, rank: int, world_size: int, accumulate: int) -> CountingStream:
        return CountingStream(seed, rank)

    def loss_view(self, model: nn.Module) -> nn.Module:
        return model

    def criterion(self, model: nn.Module) -> nn.Module:
        return LabelSmoothingLoss(V, pad_id=-100, epsilon=0.0)  # summed cross entropy, times the scale

    @torch.no_grad()
    def validate(self, model: nn.Module, device: torch.device, precision: str) -> dict[str, Any]:
        every = torch.arange(V)
        logits, targets = model(Pairs(every, (every + 1) % V))
        return {"accuracy": float((logits.argmax(-1) == targets).float().mean())}

    def summary(self, batches: CountingStream) -> str:
        return "successor task"


def trainer_of(run: Path, steps: int, average_last: int = 0, valid_every: int = 5,
               kind: type[Trainer] = Trainer) -> Trainer:
    """A Trainer of the successor task, `steps` steps at a constant rate, validating (and
    keeping a snapshot for averaging the last `average_last`) every `valid_every` steps."""
    train = TrainConfig(schedule="constant", lr=0.05, max_steps=steps, valid_every=valid_every, log_every=5,
                        precision="fp32", keep_last=50, average_last=average_last)
    cfg, task = Config(train=train), SuccessorTask()
    context = RunContext(cfg, RunDir(run), task, task.build_model(), torch.device("cpu"))
    return kind(context, StepPlan.of(cfg.train, cfg.model.d_model), progress=False)


def train(run: Path, steps: int, average_last: int = 0, valid_every: int = 5,
          kind: type[Trainer] = Trainer) -> Trainer:
    seed_everything(1)
    trainer = trainer_of(run, steps, average_last, valid_every, kind)
    trainer.resume()
    trainer.train()
    return trainer


def test_a_second_task_learns_through_the_same_loop(tmp_path: Path) -> None:
    trainer = train(tmp_path / "run", 60)
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["accuracy"] for e in events if e["event"] == "valid"][-1] == 1.0
    assert trainer.state.best == 1.0
    assert (tmp_path / "run" / "best.safetensors").is_file()
    assert list_checkpoints(tmp_path / "run" / "checkpoints")[-1].name == "step_60.pt"


def test_the_second_task_resumes_exactly(tmp_path: Path) -> None:
    straight = train(tmp_path / "straight", 20)
    train(tmp_path / "stopped", 10)
    resumed = train(tmp_path / "stopped", 20)
    assert resumed.state.step == 20
    for key, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key


def test_averaging_averages_the_last_snapshots(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(run, 23, average_last=3, valid_every=4)
    snapshots = list_snapshots(run / "snapshots")
    assert [p.name for p in snapshots] == ["step_16.safetensors", "step_20.safetensors", "step_23.safetensors"]
    final = load_checkpoint(run / "checkpoints" / "step_23.pt")["model"]
    assert all(torch.equal(final[k], v) for k, v in load_file(snapshots[-1]).items())
    tensors = [load_file(p) for p in snapshots]
    average = load_file(run / "average.safetensors")
    for key in average:
        expected = torch.stack([t[key] for t in tensors]).mean(0)
        assert torch.allclose(average[key], expected, atol=1e-7), key


def test_a_resume_drops_snapshots_of_steps_taken_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(run, 10, average_last=5, valid_every=2)
    for step in (6, 8, 10):  # as if killed after the snapshots of steps 6-10 but before their checkpoints
        (run / "checkpoints" / f"step_{step}.pt").unlink()
    trainer = trainer_of(run, 10, average_last=5, valid_every=2)
    assert trainer.resume() and trainer.state.step == 4
    assert [p.name for p in list_snapshots(run / "snapshots")] == ["step_2.safetensors", "step_4.safetensors"]
    trainer.train()
    assert [p.name for p in list_snapshots(run / "snapshots")] == [f"step_{s}.safetensors" for s in (2, 4, 6, 8, 10)]


def test_training_with_average_last_writes_the_average_the_command_rewrites(tmp_path: Path) -> None:
    """fit with train.average_last keeps snapshots and averages them; `average --last N`
    then averages those same snapshots (not the step checkpoints)."""
    from transformer_mt.cli import main
    from transformer_mt.training import fit
    from conftest import tiny_config

    run = tmp_path / "run"
    fit(tiny_config(train__max_steps=12, train__valid_every=4, data__task_size=200, train__average_last=2),
        run, progress=False)
    assert [p.name for p in list_snapshots(run / "snapshots")] == ["step_8.safetensors", "step_12.safetensors"]
    first = load_file(run / "average.safetensors")
    (run / "average.safetensors").unlink()
    assert main(["average", str(run), "--last", "2"]) == 0
    again = load_file(run / "average.safetensors")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


@pytest.mark.parametrize("best_so_far,average_wins", [(-1.0, True), (2.0, False)])
def test_the_average_becomes_the_default_model_only_if_it_wins(tmp_path: Path, best_so_far: float,
                                                             average_wins: bool) -> None:
    """Trainer.prefer_average validates average.safetensors at the end: against a best checkpoint
    it beats (accuracy -1) it becomes best.safetensors; against one it cannot beat (2), not."""
    run = tmp_path / "run"

    class Unbeaten(Trainer):
        def prefer_average(self) -> None:
            self.state.best = best_so_far
            super().prefer_average()

    train(run, 12, average_last=2, valid_every=4, kind=Unbeaten)
    best, average = load_file(run / "best.safetensors"), load_file(run / "average.safetensors")
    same = all(torch.equal(best[k], average[k]) for k in average)
    assert same == average_wins
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "average" and events[-1]["best"] == average_wins


def test_validation_decodes_to_its_own_length_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation's outputs stop at train.valid_max_len_a x source + train.valid_max_len_b tokens,
    not at decode.max_len_a/b's limit (which translate and evaluate keep)."""
    from transformer_mt.inference import translator
    from transformer_mt.training import fit
    from conftest import tiny_config

    limits: list[torch.Tensor] = []

    def spy(model, src, max_len, *args, **kwargs):
        limits.append(max_len)
        return greedy_decode(model, src, max_len, *args, **kwargs)

    greedy_decode = translator.greedy_decode
    monkeypatch.setattr(translator, "greedy_decode", spy)
    fit(tiny_config(train__max_steps=1, train__valid_every=1, data__task_size=200, train__valid_max_len_a=0,
                    train__valid_max_len_b=3, decode__max_len_a=1, decode__max_len_b=7), tmp_path / "run", progress=False)
    assert limits and all(bool((limit == 3).all()) for limit in limits)
