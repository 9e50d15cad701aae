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

import torch

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


def test_killed_run_resumes_bit_identically(tmp_path: Path) -> None:
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

    resumed = subprocess.run([sys.executable, "-m", "transformer_mt", "train", "--run", str(killed),
                              "--no-progress"], capture_output=True, text=True, timeout=300, env=THREADS)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stderr
    a, b = final_weights(straight), final_weights(killed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


WRITER = """
import sys, torch
from pathlib import Path
from transformer_mt.runs.directory import save_checkpoint
state = {"w": torch.randn(4_000_000)}
for step in range(1000):
    save_checkpoint(state, Path(sys.argv[1]) / f"step_{step}.pt")
"""


def test_a_killed_save_leaves_only_complete_checkpoints(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    deadline = time.time() + 120
    while len(list_checkpoints(tmp_path)) < 3 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.013)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    found = list_checkpoints(tmp_path)
    assert len(found) >= 3
    for path in found:
        assert load_checkpoint(path)["w"].numel() == 4_000_000


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
