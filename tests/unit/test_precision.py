"""train.precision: auto picks bf16 only where the device runs it natively."""

from __future__ import annotations

import logging

import pytest
import torch

from transformer_mt import run


@pytest.mark.parametrize("fast,expected", [(True, "bf16"), (False, "fp32")])
def test_auto_follows_the_hardware(monkeypatch: pytest.MonkeyPatch, fast: bool, expected: str) -> None:
    monkeypatch.setattr(run, "has_fast_bf16", lambda device: fast)
    assert run.resolve_precision("auto", torch.device("cpu")) == expected


def test_forced_precision_is_kept_and_slow_bf16_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(run, "has_fast_bf16", lambda device: False)
    with caplog.at_level(logging.WARNING, logger="transformer_mt"):
        assert run.resolve_precision("bf16", torch.device("cpu")) == "bf16"
        assert run.resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert caplog.text.count("far slower") == 1


def test_detection_answers_for_the_cpu() -> None:
    assert isinstance(run.has_fast_bf16(torch.device("cpu")), bool)
