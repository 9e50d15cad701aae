"""Helpers the integration tests share: torchrun as the README runs it, what the suite's one
launch of tests/integration/ddp_worker.py trains for the tests that compare two processes with
one, one process training on one thread (what two single-thread ranks are compared with), the
largest weight difference, and a small corpus in the Multi30k file layout."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import torch

from check_cases.cases import HERE as CHECK_CASES

WORLD_SIZE = 2
TWO_PROCESS_STEPS = 6
TWO_PROCESS_ARGS = [f"--train.max_steps={TWO_PROCESS_STEPS}", f"--train.valid_every={TWO_PROCESS_STEPS}",
                    "--data.task_size=400", "--train.device=cpu", "--model.dropout=0.0", "--train.precision=fp32"]
# What tests/integration/ddp_worker.py trains beside its own scenarios, under OUT/<name>/, each with
# TWO_PROCESS_ARGS (name: preset, its own arguments): a learner's file (the tutorial check case,
# which every rank imports by path) and a language model.
TWO_PROCESS_RUNS = {"learner": ("tiny", [f"--model.file={CHECK_CASES / 'tutorial.py'}"]), "lm": ("lm_tiny", [])}

# The README's torchrun scenario (tests/integration/test_ddp.py): a run killed after step 10 and
# resumed must equal ddp_worker.py's uninterrupted OUT/nodes, dropout on (each rank draws its own).
README_SCENARIO = ["--no-progress", "--train.max_steps=20", "--train.valid_every=10", "--train.keep_last=10",
                   "--model.dropout=0.1", "--data.task_size=400", "--train.device=cpu", "--train.precision=fp32"]


def torchrun(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The README's command line: torchrun ... -m transformer_mt -- train ..."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD_SIZE),
               "-m", "transformer_mt", "--", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def fit_on_one_thread(preset: str, args: list[str], run: Path):
    """fit(preset + args) in this process on one thread, as each torchrun rank runs."""
    from transformer_mt.common.config import load_config
    from transformer_mt.training import fit

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fit(load_config(preset, args), run, progress=False)
    finally:
        torch.set_num_threads(threads)


def exit_codes(out: Path) -> list[dict[str, int]]:
    """Each rank's exit codes of ddp_worker.py's CLI runs under OUT, by name."""
    return [json.loads((out / f"rank{r}_codes.json").read_text()) for r in range(WORLD_SIZE)]


def two_process_weights(out: Path, name: str) -> dict[str, torch.Tensor]:
    """The weights ddp_worker.py's two ranks trained as OUT/<name> (TWO_PROCESS_RUNS), both having exited 0."""
    assert [codes[name] for codes in exit_codes(out)] == [0] * WORLD_SIZE
    return torch.load(out / name / "checkpoints" / f"step_{TWO_PROCESS_STEPS}.pt", weights_only=True)["model"]


def one_process_run(name: str, run: Path):
    """TWO_PROCESS_RUNS[name] trained by one process on one thread with twice the accumulation:
    what its two ranks must equal."""
    preset, args = TWO_PROCESS_RUNS[name]
    return fit_on_one_thread(preset, [*TWO_PROCESS_ARGS, *args, "--train.accumulate=2"], run)


def max_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts with the same keys."""
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def write_multi30k(folder: Path, languages: tuple[str, str] = ("de", "en"), lines: int = 60,
                   splits: tuple[str, ...] = ("train", "val", "test_2016_flickr"), seed: int = 0) -> None:
    """Random word pairs in the Multi30k layout (SPLIT.LANG.gz): the second language's
    sentence is the first one's words reversed."""
    rng = random.Random(seed)
    folder.mkdir()
    for split in splits:
        words = [[f"w{rng.randrange(30)}" for _ in range(rng.randrange(2, 7))] for _ in range(lines)]
        for lang, sentences in zip(languages, (words, [list(reversed(w)) for w in words])):
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("".join(" ".join(w) + "\n" for w in sentences))


def resume_from(run: Path, step: int, copy: Path, **fit_options: object) -> dict[str, dict]:
    """What a run killed right after writing its checkpoint of `step` trains to: a copy of the
    finished `run` keeps only the checkpoints up to `step` (the later metrics, snapshots and
    averages stay, as a killed run leaves them, for the resume to discard) and `fit` resumes
    it (with `fit_options`). Returns the final checkpoints of `run` and of the resumed copy, as
    {"straight": ..., "resumed": ...}, to compare with `assert_same_state`."""
    import shutil

    from transformer_mt.runs.directory import list_checkpoints, load_checkpoint
    from transformer_mt.training import fit

    shutil.copytree(run, copy)
    checkpoints = list_checkpoints(copy / "checkpoints")
    assert any(p.name == f"step_{step}.pt" for p in checkpoints), f"{run} has no checkpoint of step {step}"
    later = [p for p in checkpoints if int(p.stem.removeprefix("step_")) > step]
    assert later, f"{run} has no checkpoint after step {step}: nothing to resume"
    for path in later:
        path.unlink()
    fit(None, copy, progress=False, **fit_options)
    final = list_checkpoints(run / "checkpoints")[-1]
    return {"straight": load_checkpoint(final), "resumed": load_checkpoint(copy / "checkpoints" / final.name)}


def assert_same_state(checkpoints: dict[str, dict]) -> None:
    """The two checkpoints of `resume_from` hold bit-identical weights, optimizer moments and
    training state: the resumed run is the uninterrupted one."""
    a, b = checkpoints["straight"], checkpoints["resumed"]
    assert a["trainer"]["step"] == b["trainer"]["step"]
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for index, moments in a["optimizer"]["state"].items():
        for name, value in moments.items():
            assert torch.equal(value, b["optimizer"]["state"][index][name]), (index, name)
