"""Checkpoints: a killed run resumes bit-identically; a killed save never corrupts.

The one test that kills a training process with SIGKILL; the other resume checks stop a run
in-process (run_helpers.resume_from)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from transformer_mt.cli import main
from transformer_mt.common.config import load_config
from transformer_mt.runs.directory import list_checkpoints, load_checkpoint
from transformer_mt.training import fit

STEPS, EVERY = 20, 10  # killed once step 10 is saved, before step 20
ARGS = ["--train.max_steps=%d" % STEPS, "--train.valid_every=%d" % EVERY, "--model.dropout=0.1",
        "--data.task_size=500", "--train.keep_last=20"]


THREADS = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}  # the kernels of this process


def train(run: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "transformer_mt", "-q", "train", "tiny", "--run", str(run),
                             "--no-progress", *ARGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=THREADS)


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    last = list_checkpoints(run / "checkpoints")[-1]
    assert last.name == f"step_{STEPS}.pt"
    return load_checkpoint(last)["model"]


def test_killed_run_resumes_bit_identically(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    fit(load_config("tiny", ARGS), straight, progress=False)

    process = train(killed)
    deadline = time.time() + 300
    while not (killed / "checkpoints" / f"step_{EVERY}.pt").exists():
        assert process.poll() is None and time.time() < deadline, process.stderr.read()
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (killed / "checkpoints" / f"step_{STEPS}.pt").exists()

    assert main(["train", "--run", str(killed), "--no-progress"]) == 0  # resumed here: its kernels are this process's
    assert "resumed" in capsys.readouterr().err
    a, b = final_weights(straight), final_weights(killed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


WRITER = """
import os, signal, sys, torch
from pathlib import Path
from transformer_mt.runs.directory import save_checkpoint

class KilledHalfway:
    '''The file torch.save writes a checkpoint into: once `half` bytes of it have been written
    and flushed to the file save_checkpoint opened, the process SIGKILLs itself, inside the write.'''

    def __init__(self, handle, half):
        self.handle, self.left = handle, half

    def write(self, data):
        data = memoryview(data).cast("B")
        if len(data) >= self.left:
            self.handle.write(data[:self.left])
            self.handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        self.left -= len(data)
        return self.handle.write(data)

    def flush(self):
        self.handle.flush()

state, folder = {"w": torch.randn(4_000_000)}, Path(sys.argv[1])
for step in range(3):
    save_checkpoint(state, folder / f"step_{step}.pt")
half = (folder / "step_0.pt").stat().st_size // 2
save = torch.save
torch.save = lambda obj, handle, *args, **kwargs: save(obj, KilledHalfway(handle, half), *args, **kwargs)
save_checkpoint(state, folder / "step_3.pt")
sys.exit("not killed inside the write of step_3.pt")
"""


def test_a_killed_save_leaves_only_complete_checkpoints(tmp_path: Path) -> None:
    """SIGKILL halfway through writing step_3.pt (the writer kills itself from inside the write,
    so the kill cannot land before or after it): that half is on disk, in a file that is not a
    checkpoint, and the checkpoints are the three complete ones."""
    process = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path)], capture_output=True, text=True,
                             timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stderr
    found = list_checkpoints(tmp_path)
    assert [path.name for path in found] == ["step_0.pt", "step_1.pt", "step_2.pt"]
    for path in found:
        assert load_checkpoint(path)["w"].numel() == 4_000_000
    (partial,) = set(tmp_path.iterdir()) - set(found)  # the write the kill cut short
    assert "step_3.pt" in partial.name and partial.stat().st_size == found[0].stat().st_size // 2


def test_a_resume_takes_a_longer_plan_and_refuses_a_new_recipe(tiny_run: Path, tmp_path: Path, capsys) -> None:
    """On a finished run, `train --run RUN --train.max_steps=N` trains on to N (saying old ->
    new, and keeping N for later resumes); an override of what the weights were trained with
    (the learning rate) is refused in one line that points to --init-from, nothing changed."""
    from transformer_mt.cli import main

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    steps = load_config(run / "config.yaml").train.max_steps
    code = main(["train", "--run", str(run), "--no-progress", "--train.lr_scale=9", "--train.max_steps=999"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "train.lr_scale=9.0 (trained with 0.25) cannot apply" in err and f"--init-from {run}" in err
    assert load_config(run / "config.yaml").train.max_steps == steps
    assert main(["train", "--run", str(run), "--no-progress", f"--train.max_steps={steps + 20}",
                 "--train.valid_every=10"]) == 0
    assert f"train.max_steps {steps} -> {steps + 20}" in capsys.readouterr().err
    assert list_checkpoints(run / "checkpoints")[-1].name == f"step_{steps + 20}.pt"
    assert load_config(run / "config.yaml").train.max_steps == steps + 20
