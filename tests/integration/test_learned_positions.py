"""`model.positional: learned` (Table 3 row E) end to end: a tiny copy-task run trains with a
learned positional table (its loss falls, the table moves from its initial values), is
saved and loaded (the run's translations equal the in-memory model's), and the Hugging
Face export refuses it in one line (Marian and Pegasus hold only sinusoids)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import tiny_config
from transformer_mt.cli import main
from transformer_mt.model import build_model
from transformer_mt.runs.directory import RunDir, load_run_model
from transformer_mt.training import fit
from transformer_mt.inference.translator import Translator

STEPS = 150
SOURCES = ["w4 w3", "w1 w9 w2 w5 w0 w8", "w6 w6 w6", "w2 w4 w1 w0 w9 w9 w7 w3 w5"]


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, torch.Tensor]:
    """(run directory, the Trainer after training, the positional table the run started from:
    fit seeds torch with train.seed and builds the model first, so the same seed and the
    run's recorded model config build the same start)."""
    cfg = tiny_config(model__positional="learned", data__task_size=1000, train__max_steps=STEPS,
                      train__valid_every=STEPS, train__warmup_steps=50, train__lr_scale=0.5, train__log_every=10)
    run = tmp_path_factory.mktemp("learned") / "run"
    trainer = fit(cfg, run, progress=False)
    recorded, _, _ = load_run_model(RunDir(run), "last")
    torch.manual_seed(recorded.train.seed)
    start = build_model(recorded.model).positional.table().detach().clone()
    return run, trainer, start


def test_learned_positions_train(learned_run) -> None:
    run, trainer, start = learned_run
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in events if e["event"] == "train"]
    assert len(losses) >= 10
    assert losses[-1] < 0.5 * losses[0], losses  # from about ln(vocab) to well under half of it
    table = trainer.model.positional.table().detach().cpu()
    assert trainer.model.positional.embedding.weight.requires_grad
    assert (table - start).abs().max() > 1e-3, "the positional table did not move in training"


def test_saved_run_translates_as_the_in_memory_model(learned_run) -> None:
    run, trainer, _ = learned_run
    cfg, tokenizer, loaded = load_run_model(RunDir(run), "last")
    assert cfg.model.positional == "learned"
    torch.testing.assert_close(loaded.positional.table(), trainer.model.positional.table().detach().cpu(),
                               rtol=0, atol=0)
    in_memory = Translator(trainer.model, tokenizer, cfg.decode, torch.device("cpu"))
    from_disk = Translator.from_run(run, device="cpu", checkpoint="last")
    for beam in (1, 4):
        ours = in_memory.search(SOURCES, in_memory.settings(beam=beam))
        theirs = from_disk.search(SOURCES, from_disk.settings(beam=beam))
        assert [row[0].tokens for row in ours] == [row[0].tokens for row in theirs]
        assert [row[0].score for row in ours] == pytest.approx([row[0].score for row in theirs], abs=1e-5)
    assert any(row[0].ids for row in ours), "the model outputs nothing: too little training to compare"


def test_hugging_face_export_refuses_learned_positions_in_one_line(learned_run, tmp_path: Path, capsys) -> None:
    run, _, _ = learned_run
    out = tmp_path / "hf"
    capsys.readouterr()
    assert main(["-q", "export", "hf", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "model.positional is learned" in err and "model.positional: sinusoidal" in err
    assert not out.exists()
