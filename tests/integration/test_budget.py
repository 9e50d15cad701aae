"""train.budget_minutes (training/plan.py): a run paced by its elapsed time, on a clock
the test controls (one second each time it is read), so every number below follows from the
budget alone: the learning rate, validation and snapshot points, the last step, a resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import tiny_config
from transformer_mt.cli import main
from transformer_mt.runs.directory import list_checkpoints, list_snapshots, load_checkpoint
from transformer_mt.training import fit
from transformer_mt.training.plan import Budget, BudgetTooShort
from transformer_mt.training.plan import TrainState

from run_helpers import assert_same_state, resume_from

BUDGET_SECONDS, WARMUP = 120, 10


class Ticks:
    """A clock that advances one second each time it is read: the trainer reads it once per
    step and once per validation point, so a step costs 1 s and a validation point 1 s."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def budget_config(**overrides: object):
    return tiny_config(train__budget_minutes=BUDGET_SECONDS / 60, train__warmup_steps=WARMUP,
                       data__task_size=300, train__log_every=1, model__dropout=0.1, **overrides)


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of BUDGET_SECONDS on the ticking clock (~7 s): about 110 steps, the fewest in which the
    warmup, the decay to zero, the validation and snapshot points each show."""
    run = tmp_path_factory.mktemp("budget") / "run"
    fit(budget_config(), run, progress=False, clock=Ticks())
    return run


def events(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def elapsed_before(run: Path) -> dict[int, float]:
    """The elapsed time before each step: after the step before it, and its validation
    point's one second if it made one."""
    validated = {e["step"] for e in events(run, "valid")}
    return {e["step"] + 1: e["elapsed"] + (e["step"] in validated) for e in events(run, "train")} | {1: 0.0}


def test_the_learning_rate_warms_up_by_steps_then_falls_to_zero_at_the_budget(budgeted: Path) -> None:
    """lrate(step) = peak * step / warmup up to the warmup, then peak * (B - t) / (B - t_w)
    with t the elapsed time before the step and t_w that at the end of the warmup."""
    cfg = budget_config()
    peak = cfg.train.lr_scale * cfg.model.d_model ** -0.5 * WARMUP ** -0.5  # equation 3 at step = warmup
    train, before = events(budgeted, "train"), elapsed_before(budgeted)
    assert [e["step"] for e in train] == list(range(1, len(train) + 1))
    t_w = train[WARMUP - 1]["elapsed"]
    for e in train:
        step = e["step"]
        want = (peak * step / WARMUP if step <= WARMUP
                else peak * (BUDGET_SECONDS - before[step]) / (BUDGET_SECONDS - t_w))
        assert e["lr"] == pytest.approx(want, rel=1e-9), step
    assert train[-1]["lr"] < 0.05 * peak  # annealed by the last step


def test_validation_every_tenth_snapshots_in_the_last_tenth_and_the_run_fits(budgeted: Path) -> None:
    """A step and a validation point cost one second each: validation points follow each
    tenth (12 s) of the budget; the run stops when one more step and the two closing
    validations (its last step's, the average's) would pass 120 s; the snapshots of the last
    tenth (every 2.4 s from 108 s) and of the last step are averaged."""
    train, valid, before = events(budgeted, "train"), events(budgeted, "valid"), elapsed_before(budgeted)
    crossings = [e["step"] for e in train if math.floor(e["elapsed"] / 12) > math.floor(before[e["step"]] / 12)]
    last = train[-1]["step"]
    assert [e["step"] for e in valid] == crossings + ([last] if last not in crossings else [])
    assert len(crossings) == 9  # 12, 24, ..., 108 s; the tenth would be the budget's end
    final = load_checkpoint(list_checkpoints(budgeted / "checkpoints")[-1])["trainer"]
    assert final["step"] == last and final["elapsed"] <= BUDGET_SECONDS - 1  # the average's validation fits
    assert train[-1]["elapsed"] + 1 + 2 * final["validation_seconds"] > BUDGET_SECONDS - 1  # one more would not
    snapshots = [int(p.stem.removeprefix("step_")) for p in list_snapshots(budgeted / "snapshots")]
    in_last_tenth = [e["step"] for e in train if e["elapsed"] >= 108 and math.floor(e["elapsed"] / 2.4) >
                     math.floor(before[e["step"]] / 2.4)]
    assert snapshots == sorted({*in_last_tenth, last})[-5:]
    assert (budgeted / "average.safetensors").is_file() and events(budgeted, "average")


def test_a_resumed_budget_continues_from_the_recorded_time(budgeted: Path, tmp_path: Path) -> None:
    first = int(list_checkpoints(budgeted / "checkpoints")[0].stem.removeprefix("step_"))
    assert_same_state(resume_from(budgeted, first, tmp_path / "stopped", clock=Ticks()))


def test_a_budget_whose_warmup_cannot_fit_is_refused_after_its_first_steps() -> None:
    """20 steps took 30 s: 1.5 s a step, so a warmup of 100 steps needs 2.5 minutes of a
    2-minute budget."""
    budget = Budget(seconds=120.0, warmup_steps=100, peak=1e-3)
    assert not budget.after_step(TrainState(step=19, elapsed=28.5), 27.0).stop
    with pytest.raises(BudgetTooShort, match=r"train.budget_minutes=2: the warmup's 100 steps take about 2.5 "
                                             r"minutes here \(1.500 s a step over the first 20\); give more than "
                                             r"2.5 minutes or lower train.warmup_steps"):
        budget.after_step(TrainState(step=20, elapsed=30.0), 28.5)
    assert not Budget(seconds=160.0, warmup_steps=100, peak=1e-3).after_step(TrainState(step=20, elapsed=30.0),
                                                                             28.5).stop


def test_the_cli_refuses_a_tiny_budget_in_one_line_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    """The refusal is one line, after the one that says which of the tiny preset's options the
    budget sets aside."""
    run = tmp_path / "run"
    code = main(["-q", "train", "tiny", "--run", str(run), "--no-progress", "--data.task_size=200",
                 "--train.budget_minutes=0.001"])
    set_aside, refused = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert set_aside.endswith("train.budget_minutes=0.001 sets the learning rate, validation, averaging and the end "
                              "itself: train.schedule=linear, train.max_steps=400, train.valid_every=200 not used")
    assert "train.budget_minutes=0.001: the warmup's 50 steps take about" in refused, refused
    assert not run.exists()  # nothing half-made
