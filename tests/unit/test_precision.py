"""train.precision: auto picks bf16 only where the device runs it natively."""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import pytest
import torch

from transformer_mt.common import device as devices


@pytest.mark.parametrize("fast,expected", [(True, "bf16"), (False, "fp32")])
def test_auto_follows_the_hardware(monkeypatch: pytest.MonkeyPatch, fast: bool, expected: str) -> None:
    monkeypatch.setattr(devices, "has_fast_bf16", lambda device: fast)
    assert devices.resolve_precision("auto", torch.device("cpu")) == expected


def test_forced_precision_is_kept_and_slow_bf16_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(devices, "has_fast_bf16", lambda device: False)
    with caplog.at_level(logging.WARNING, logger="transformer_mt"):
        assert devices.resolve_precision("bf16", torch.device("cpu")) == "bf16"
        assert devices.resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert caplog.text.count("far slower") == 1


# CPU features that execute bf16 matrix products natively (x86): AVX-512 BF16 (Cooper
# Lake, Sapphire Rapids, Zen 4 and later) and AMX-BF16 (Sapphire Rapids and later). An
# AVX-512 CPU without them (Skylake-SP to Ice Lake) or an AVX2-only one emulates bf16.
NATIVE_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}


def x86_cpu_flags() -> set[str]:
    """The feature flags the Linux kernel reports for the first CPU."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        pytest.skip(f"the flag check is written for x86 CPUs, this is {platform.machine()}")
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        pytest.skip(f"/proc/cpuinfo unavailable ({err}): no independent source of CPU flags")
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    pytest.skip("/proc/cpuinfo has no 'flags' line")


def test_detection_agrees_with_the_cpu_flags() -> None:
    """has_fast_bf16 must answer what the kernel's CPU flags say: native bf16 if and only
    if the CPU has AVX-512 BF16 or AMX-BF16."""
    flags = x86_cpu_flags()
    native = bool(flags & NATIVE_BF16_FLAGS)
    assert devices.has_fast_bf16(torch.device("cpu")) is native, (
        f"CPU flags {sorted(flags & (NATIVE_BF16_FLAGS | {'avx512f', 'avx2'}))}: native bf16 is {native}")


def test_a_device_name_torch_does_not_know_is_a_user_error() -> None:
    from transformer_mt.common.device import resolve_device
    from transformer_mt.common.errors import UserError

    with pytest.raises(UserError, match="'gpu0' is not a device name; use auto, cpu, cuda or cuda:N"):
        resolve_device("gpu0")
    assert resolve_device("cpu") == torch.device("cpu")
