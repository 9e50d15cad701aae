"""Shared fixtures: tiny trained run directories (a translation run, a language-model run) and
the one torchrun launch of tests/integration/ddp_worker.py that tests use.

The suite runs on two pytest-xdist workers, one torch thread each (and one for every process
they start): a session fixture here is built once, by whichever worker asks first, in a folder
both read (`shared`), while the other waits on its lock."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
import torch
from filelock import FileLock

from run_helpers import WORLD_SIZE
from transformer_mt.common.config import load_config

WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1 under xdist; None in a single process
if WORKER:
    os.environ["OMP_NUM_THREADS"] = "1"  # the processes the tests start, too: two workers fill two cores
torch.set_num_threads(1 if WORKER else 2)

TINY_RUN_STEPS = 400  # training steps of the shared tiny_run: the tiny preset's

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


# The files that take longest, first (seconds on a 2-core EPYC under two workers: 39-45, then 17-33):
# xdist hands a file to whichever worker is free, in collection order (--no-loadscope-reorder: not by
# its count of tests), so the workers end together instead of one waiting while the other runs a long
# file last.
SLOWEST_FIRST = ("integration/test_marian_import.py", "integration/test_language_model_run.py",
                 "integration/test_ctranslate2_export.py", "integration/test_learner_run.py",
                 "unit/test_check_cases.py", "integration/test_ddp.py", "integration/test_server.py",
                 "integration/test_check_cli.py", "integration/test_readme.py", "integration/test_annotated_import.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(SLOWEST_FIRST)}
    tests = Path(__file__).resolve().parent
    items.sort(key=lambda item: rank.get(item.path.resolve().relative_to(tests).as_posix(), len(rank)))


def tiny_config(**overrides: object):
    """The `tiny` preset (copy task) with dotted overrides, e.g. train__max_steps=50."""
    return load_config("tiny", [f"--{k.replace('__', '.')}={v}" for k, v in overrides.items()])


@pytest.fixture(autouse=True)
def threads_kept() -> Iterator[None]:
    """torch's thread count as it was before each test (a benchmark's main() sets its own): the
    next test on this worker runs on the worker's one thread."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def shared(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `build(folder)` once per test session: by this process alone,
    or under xdist by the first worker to ask, the other waiting on the lock (then reading it)."""
    root = tmp_path_factory.getbasetemp()
    folder = (root.parent if WORKER else root) / f"shared_{name}"
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of the `tiny` preset as it is (the copy task, 400 steps, about 30 s;
    shared, read-only): a model that copies inputs it never saw and ends them with eos, as a
    trained model does (tests/integration/test_copy_task.py checks that it does)."""
    from transformer_mt.training import fit

    def build(folder: Path) -> None:
        fit(tiny_config(), folder / "run", progress=False)

    run = shared(tmp_path_factory, "tiny_run", build) / "run"
    assert load_config(run / "config.yaml").train.max_steps == TINY_RUN_STEPS
    return run


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A language-model run (lm_tiny, model.arch: decoder_only) trained for a few seconds on
    the number_lines text (shared, read-only): what the generate view's tests serve."""
    from transformer_mt.training import fit

    def build(folder: Path) -> None:
        fit(load_config("lm_tiny", ["--train.max_steps=60", "--data.task_size=500"]), folder / "run", progress=False)

    return shared(tmp_path_factory, "lm_run", build) / "run"


@pytest.fixture(scope="session")
def ddp_launch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One launch of tests/integration/ddp_worker.py (two CPU processes, one thread each) for
    every test that compares two processes with one: its trainings' folders under the returned
    path, and the launch's result (its stderr both launchers'; each launch costs seconds of
    imports). Two 'nodes': two torchrun launchers of one process each, joined by torchrun's
    c10d rendezvous on localhost, as two machines would be; whichever becomes rank 0, each
    rank keeps its shard and its dropout seed, so this trains what one launcher of two
    processes trains."""
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(WORLD_SIZE), "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:PORT",
            str(Path(__file__).with_name("integration") / "ddp_worker.py")]

    def launch(out: Path) -> None:
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = [part.replace("PORT", str(port)) for part in node] + [str(out)]
        # files, not pipes: neither launcher waits on a full one
        logs = [out / f"node{n}.log" for n in range(WORLD_SIZE)]
        nodes = []
        for log in logs:
            with open(log, "w", encoding="utf-8") as stderr:
                nodes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                              env={**os.environ, "OMP_NUM_THREADS": "1"}))
        try:
            codes = [n.wait(timeout=300) for n in nodes]
        finally:
            for n in nodes:
                n.kill() if n.poll() is None else None
        (out / "codes.json").write_text(json.dumps(codes))

    out = shared(tmp_path_factory, "ddp", launch)
    stderr = "".join((out / f"node{n}.log").read_text(encoding="utf-8") for n in range(WORLD_SIZE))
    result = subprocess.CompletedProcess(node, max(json.loads((out / "codes.json").read_text())), "", stderr)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """The real corpus folder; tests that need it skip with a reason where it is missing."""
    if not (MULTI30K / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    return MULTI30K
