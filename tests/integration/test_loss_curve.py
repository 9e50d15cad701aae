"""A tiny run's loss curve is the one main gave before the seams refactor (issue 29).

tests/data/tiny_curve_9498f71.json was recorded by `python tests/integration/test_loss_curve.py
OUT` on commit 9498f71, before the trainer, schedule, attention and decoding code were
reorganised: every training loss and learning rate of 60 steps (dropout, label smoothing,
accumulation and clipping on) and every validation loss and BLEU. A refactor that changes
behaviour changes some of these numbers. Floating-point sums depend on the CPU's kernels,
so the numbers must be equal bit for bit on a CPU of the recorded capability (AVX2,
AVX-512, ...), and within 1e-4 relative elsewhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "tiny_curve_9498f71.json"
OVERRIDES = ["--train.max_steps=60", "--train.valid_every=20", "--train.log_every=1", "--model.dropout=0.1",
             "--train.label_smoothing=0.1", "--train.accumulate=2", "--train.clip_norm=1.0",
             "--data.task_size=600", "--train.warmup_steps=30", "--train.lr_scale=0.5",
             "--train.early_stop_metric=loss"]


def tiny_curve(run: Path) -> dict:
    """Train the tiny preset with OVERRIDES into `run`; its (step, loss, lr) and (step, valid_loss, bleu)."""
    from transformer_mt.config import load_config
    from transformer_mt.training import fit

    fit(load_config("tiny", OVERRIDES), run, progress=False)
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {"train": [[e["step"], e["loss"], e["lr"]] for e in events if e["event"] == "train"],
            "valid": [[e["step"], e["valid_loss"], e["bleu"]] for e in events if e["event"] == "valid"]}


def test_the_tiny_loss_curve_is_mains(tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert golden["overrides"] == OVERRIDES
    got = tiny_curve(tmp_path / "run")
    assert [row[0] for row in got["train"]] == [row[0] for row in golden["train"]]
    assert [row[0] for row in got["valid"]] == [row[0] for row in golden["valid"]]
    if torch.backends.cpu.get_cpu_capability() == golden["cpu_capability"]:
        assert got["train"] == golden["train"]
        assert got["valid"] == golden["valid"]
    else:
        for kind in ("train", "valid"):
            for mine, theirs in zip(got[kind], golden[kind]):
                assert mine[1:] == pytest.approx(theirs[1:], rel=1e-4), (kind, mine[0])


if __name__ == "__main__":
    import tempfile

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        curve = tiny_curve(Path(tmp) / "run")
    record = {"overrides": OVERRIDES, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "torch": torch.__version__, **curve}
    Path(sys.argv[1]).write_text(json.dumps(record, indent=1) + "\n")
