"""Shared fixtures: tiny trained run directories (a translation run, a language-model run) and
the one torchrun launch of tests/integration/ddp_worker.py that tests use."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from run_helpers import WORLD_SIZE
from transformer_mt.common.config import load_config

torch.set_num_threads(2)

TINY_RUN_STEPS = 400  # training steps of the shared tiny_run: the tiny preset's

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def tiny_config(**overrides: object):
    """The `tiny` preset (copy task) with dotted overrides, e.g. train__max_steps=50."""
    return load_config("tiny", [f"--{k.replace('__', '.')}={v}" for k, v in overrides.items()])


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of the `tiny` preset as it is (the copy task, 400 steps, about 30 s;
    shared, read-only): a model that copies inputs it never saw and ends them with eos, as a
    trained model does (tests/integration/test_copy_task.py checks that it does)."""
    from transformer_mt.training import fit

    run = tmp_path_factory.mktemp("tiny_run") / "run"
    fit(tiny_config(), run, progress=False)
    assert load_config(run / "config.yaml").train.max_steps == TINY_RUN_STEPS
    return run


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A language-model run (lm_tiny, model.arch: decoder_only) trained for a few seconds on
    the number_lines text (shared, read-only): what the generate view's tests serve."""
    from transformer_mt.training import fit

    run = tmp_path_factory.mktemp("lm_run") / "run"
    fit(load_config("lm_tiny", ["--train.max_steps=60", "--data.task_size=500"]), run, progress=False)
    return run


@pytest.fixture(scope="session")
def ddp_launch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One launch of tests/integration/ddp_worker.py (two CPU processes, one thread each) for
    every test that compares two processes with one: its trainings' folders under the returned
    path, and the launch's result (its stderr both launchers'; each launch costs seconds of
    imports). Two 'nodes': two torchrun launchers of one process each, joined by torchrun's
    c10d rendezvous on localhost, as two machines would be; whichever becomes rank 0, each
    rank keeps its shard and its dropout seed, so this trains what one launcher of two
    processes trains."""
    out = tmp_path_factory.mktemp("ddp")
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(WORLD_SIZE), "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
            str(Path(__file__).with_name("integration") / "ddp_worker.py"), str(out)]
    logs = [out / f"node{n}.log" for n in range(WORLD_SIZE)]  # files, not pipes: neither launcher waits on a full one
    nodes = []
    for log in logs:
        with open(log, "w", encoding="utf-8") as stderr:
            nodes.append(subprocess.Popen(node, stdout=subprocess.DEVNULL, stderr=stderr,
                                          env={**os.environ, "OMP_NUM_THREADS": "1"}))
    try:
        codes = [n.wait(timeout=300) for n in nodes]
    finally:
        for n in nodes:
            n.kill() if n.poll() is None else None
    stderr = "".join(log.read_text(encoding="utf-8") for log in logs)
    result = subprocess.CompletedProcess(node, max(codes), "", stderr)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """The real corpus folder; tests that need it skip with a reason where it is missing."""
    if not (MULTI30K / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    return MULTI30K
