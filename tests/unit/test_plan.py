"""training/plan.py: what StepPlan decides after each step, on the run's one clock."""

from __future__ import annotations

from transformer_mt.common.config import TrainConfig
from transformer_mt.training.plan import ConstantSchedule, Decision, Progress, StepPlan, TrainState


def test_step_plan_validates_every_valid_every_and_stops_at_max_steps_or_max_seconds() -> None:
    """Validation and a snapshot at multiples of valid_every; the end at max_steps, or at the
    first step after which the run's clock (validation included) reached max_seconds."""
    plan = StepPlan(ConstantSchedule(1e-3), total_steps=10, valid_every=4, max_seconds=30.0, averaged=0)
    decisions = [plan.after_step(TrainState(step=step, elapsed=2.0 * step), 2.0 * (step - 1)) for step in range(1, 11)]
    assert [d.validate for d in decisions] == [step % 4 == 0 for step in range(1, 11)]
    assert all(d.snapshot == d.validate for d in decisions)
    assert [d.stop for d in decisions] == [False] * 9 + [True]
    assert plan.after_step(TrainState(step=3, elapsed=30.0), 29.0) == Decision(stop=True)
    assert not plan.after_step(TrainState(step=3, elapsed=29.9), 29.0).stop
    unlimited = StepPlan.of(TrainConfig(schedule="constant", lr=5e-4, max_steps=7), d_model=64)
    assert unlimited.total_steps == 7 and unlimited.lr_at(Progress(3)) == 5e-4
    assert not unlimited.after_step(TrainState(step=6, elapsed=1e9), 0.0).stop  # max_seconds 0: no limit


def test_a_checkpoint_of_a_former_version_resumes_without_the_keys_it_no_longer_keeps() -> None:
    saved = {"step": 40, "train_seconds": 12.5, "elapsed": 15.0, "warmup_elapsed": 3.0, "validation_seconds": 1.0,
             "best": 2.5, "best_metric": "bleu", "bad_validations": 1}
    assert TrainState.from_checkpoint(saved) == TrainState(step=40, elapsed=15.0, warmup_elapsed=3.0,
                                                           validation_seconds=1.0, best=2.5, bad_validations=1)
