"""A tiny Transformer must learn the copy task (the Annotated Transformer's first example)."""

from __future__ import annotations

from pathlib import Path

from transformer_mt.data.corpus import read_parallel
from transformer_mt.runs.directory import RunDir
from transformer_mt.inference.translator import Translator


def test_tiny_model_learns_to_copy(tiny_run: Path) -> None:
    """Trained with the `tiny` preset, the model copies sequences it never saw in
    training: exact match on the held-out test sequences (measured: 703 of 1000 are not
    in the training set, 693 of them copied exactly on an AMD EPYC). No wall-clock limit: a
    loaded machine trains slower, not worse."""
    run = tiny_run
    data = RunDir(run).data
    train = read_parallel(data / "train.src", data / "train.tgt")
    test = read_parallel(data / "test.src", data / "test.tgt")
    assert test.src == test.tgt
    seen = set(train.src)
    held_out = [line for line in test.src if line not in seen]
    assert len(held_out) >= 500, "most test sequences must be new to the model"
    hypotheses = Translator.from_run(run).translate(held_out)
    exact = sum(hyp.split() == ref.split() for hyp, ref in zip(hypotheses, held_out))
    right = total = 0
    for hyp, ref in zip(hypotheses, held_out):
        h, r = hyp.split(), ref.split()
        right += sum(a == b for a, b in zip(h, r))
        total += max(len(h), len(r))
    wrong = [(ref, hyp) for hyp, ref in zip(hypotheses, held_out) if hyp.split() != ref.split()][:5]
    assert exact >= 0.97 * len(held_out), (
        f"exact match {exact} of {len(held_out)}, token accuracy {right / total:.3f}; e.g. {wrong}")
