"""A tiny Transformer must learn the copy task (the Annotated Transformer's first example)."""

from __future__ import annotations

from pathlib import Path

from conftest import tiny_config
from transformer_mt.data.corpus import read_parallel
from transformer_mt.run import RunDir
from transformer_mt.training import fit
from transformer_mt.translator import Translator


def test_tiny_model_learns_to_copy(tmp_path: Path) -> None:
    run = tmp_path / "copy"
    state = fit(tiny_config(), run, progress=False).state
    assert state.train_seconds < 60
    test = read_parallel(RunDir(run).data / "test.src", RunDir(run).data / "test.tgt")
    hypotheses = Translator.from_run(run).translate(test.src)
    right = total = 0
    for hyp, ref in zip(hypotheses, test.tgt):
        h, r = hyp.split(), ref.split()
        right += sum(a == b for a, b in zip(h, r))
        total += max(len(h), len(r))
    assert right / total >= 0.99, f"token accuracy {right / total:.3f}"
