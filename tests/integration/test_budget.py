"""train.budget_minutes: a plan fixed on the run's first steps, recorded, resumed exactly;
budgets that cannot fit the warmup refused in one line before training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import tiny_config
from transformer_mt.cli import main
from transformer_mt.errors import UserError
from transformer_mt.runs import list_checkpoints, load_checkpoint
from transformer_mt.training import fit
from transformer_mt.training import budget
from transformer_mt.training.budget import Plan, make_plan, steps_that_fit

from run_helpers import assert_same_state, resume_from


def test_a_plan_by_hand() -> None:
    """600 s, 0.1 s a step, 5 s a validation point: 10% of 600 s allows 12 validations, capped
    at 10; 11 validations (the last for the average) leave 545 s = 5450 steps."""
    plan = make_plan(600.0, 0.1, 5.0, warmup_steps=100)
    assert plan.total_steps == 5450
    assert plan.valid_every == 545
    assert (plan.average_last, plan.average_every) == (5, 109)  # 5 snapshots over the last 10%: 545 steps


@pytest.mark.parametrize("per_step,per_validation", [(0.02, 0.5), (0.05, 2.0), (0.3, 40.0), (1.0, 7.0)])
def test_machines_of_different_speed_each_get_a_plan_that_fits(per_step: float, per_validation: float) -> None:
    budget = 1800.0
    plan = make_plan(budget, per_step, per_validation, warmup_steps=200)
    validations = -(-plan.total_steps // plan.valid_every)  # validation points the run will make
    spent = plan.total_steps * per_step + (validations + 1) * per_validation
    assert spent <= budget
    assert spent > budget - per_step - per_validation - 0.1 * budget  # and it uses the budget
    assert validations * per_validation <= max(0.1 * budget, per_validation)


def test_a_budget_that_cannot_fit_the_warmup_is_refused() -> None:
    """30 s: one validation point (10 s) and the final one leave 10 s, 50 steps. The
    advice, 15 minutes, is enough: 9 validation points and the final one leave 800 s = 4000 steps."""
    with pytest.raises(UserError, match=r"train.budget_minutes=0.5: fits 50 steps .* fewer than "
                                        r"train.warmup_steps=4000; give at least 15.0 minutes"):
        make_plan(30.0, 0.2, 10.0, warmup_steps=4000)
    assert make_plan(15 * 60.0, 0.2, 10.0, warmup_steps=4000).total_steps >= 4000


def test_the_cli_refuses_a_tiny_budget_in_one_line_before_training(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    code = main(["-q", "train", "tiny", "--run", str(run), "--no-progress", "--data.task_size=200",
                 "--train.budget_minutes=0.001"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "train.budget_minutes=0.001: fits" in err, err
    assert not run.exists()  # nothing half-made


def test_a_replan_by_hand() -> None:
    """After step 1000 (a validation point) with 600 s left, 0.5 s a step, 10 s a validation
    point every 500 steps: the last step 2100 takes 1100 steps (550 s) and the validation
    points at 1000, 1500, 2000, 2100 and the average's (50 s); step 2101 would not fit."""
    assert steps_that_fit(1000, 600.0, 0.5, 10.0, 500) == 2100
    assert steps_that_fit(1000, 5.0, 0.5, 10.0, 500) == 1001  # over budget: stop at the next step


def test_a_budgeted_run_keeps_its_plan_and_resumes_bit_identically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With re-plans: the calibration over-counts its steps' time twice, so the run re-plans
    at its validation points; the resumed run follows the recorded plan without re-planning."""
    monkeypatch.setattr(budget, "SLOWDOWN", 2.0)
    monkeypatch.setattr(budget, "VALIDATION_SHARE", 0.5)  # validation points enough to re-plan at
    straight = tmp_path / "straight"
    cfg = tiny_config(train__budget_minutes=0.25, train__warmup_steps=5, data__task_size=300, model__dropout=0.1)
    fit(cfg, straight, progress=False)
    plan = Plan(**json.loads((straight / "plan.json").read_text()))
    assert plan.calibration_steps == 5  # the warmup: fixed on the run's own steps
    assert plan.replans and plan.first_total_steps < plan.total_steps  # the first plan was too short
    events = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert min(e["step"] for e in events if e["event"] == "valid") > plan.calibration_steps
    last = list_checkpoints(straight / "checkpoints")[-1]
    assert last.name == f"step_{plan.total_steps}.pt"
    lrs = [e["lr"] for e in map(json.loads, (straight / "metrics.jsonl").read_text().splitlines())
           if e["event"] == "train"]
    final = load_checkpoint(last)
    last_lr = final["optimizer"]["param_groups"][0]["lr"]  # the rate of the last step
    assert last_lr < 0.05 * max(lrs)  # annealed by the end (the last logged step may come well before it)
    assert (straight / "average.safetensors").is_file()

    kept = list_checkpoints(straight / "checkpoints")
    if len(kept) < 2:
        pytest.skip("the plan made a single validation point on this (slow) machine: nothing to resume from")
    checkpoints = resume_from(straight, int(kept[0].stem.removeprefix("step_")), tmp_path / "stopped")
    assert json.loads((tmp_path / "stopped" / "plan.json").read_text()) == json.loads((straight / "plan.json").read_text())
    assert_same_state(checkpoints)


def test_the_plan_fits_the_budget_even_when_the_first_measurement_was_wrong(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy's few steps can run faster than the run's average (on a 2-core CPU ~25%):
    here they claim 100x faster steps. The plan is fixed on the run's own steps, so the
    run still ends within its budget instead of planning 100x too many steps."""
    real_measure = budget.measure

    def too_fast(*args, **kwargs):
        per_step, per_validation = real_measure(*args, **kwargs)
        return per_step / 100, per_validation

    monkeypatch.setattr(budget, "measure", too_fast)
    run = tmp_path / "run"
    cfg = tiny_config(train__budget_minutes=0.2, train__warmup_steps=20, data__task_size=300)
    trainer = fit(cfg, run, progress=False)
    plan = Plan(**json.loads((run / "plan.json").read_text()))
    assert plan.calibration_steps == 20 and trainer.state.step == plan.total_steps
    assert trainer.state.train_seconds < cfg.train.budget_minutes * 60


def test_replans_bring_a_plan_that_was_too_long_back_into_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A calibration that times its steps 4x too fast plans ~4x too many steps; the re-plans
    at the validation points, on the steps really timed, end the run within its budget, the
    learning rate annealed at its last step. The first re-plan waits for a second validation
    point after the calibration, 2 x valid_every steps in: with 10 validation points over 4x
    the steps that fit, that was at 67-80% of the steps the budget allowed (measured: step 270
    of 402), and a 12-second run's timing noise sometimes left it a step or two to anneal in;
    20 points put it at ~35% (step 146 of 423)."""
    monkeypatch.setattr(budget, "SLOWDOWN", 0.25)
    monkeypatch.setattr(budget, "VALIDATION_SHARE", 0.5)
    monkeypatch.setattr(budget, "MAX_VALIDATIONS", 20)
    run = tmp_path / "run"
    cfg = tiny_config(train__budget_minutes=0.2, train__warmup_steps=5, data__task_size=300, train__log_every=1)
    trainer = fit(cfg, run, progress=False)
    plan = Plan(**json.loads((run / "plan.json").read_text()))
    assert plan.replans and plan.first_total_steps > 2 * plan.total_steps
    assert trainer.state.step == plan.total_steps
    assert trainer.state.train_seconds < cfg.train.budget_minutes * 60
    lrs = [e["lr"] for e in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if e["event"] == "train"]
    assert lrs[-1] < 0.05 * max(lrs)
