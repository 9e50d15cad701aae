"""Two CPU processes under torchrun (DDP, gloo) end with identical weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

WORKER = Path(__file__).with_name("ddp_worker.py")


def test_torchrun_two_ranks_agree(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(WORKER), str(tmp_path / "run"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rank0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    assert (tmp_path / "run" / "checkpoints" / "step_12.pt").is_file()
    saved = torch.load(tmp_path / "run" / "checkpoints" / "step_12.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[k], rank0[k]) for k in rank0)
