"""`transformer-mt prepare` then `train`: the data is encoded once, training maps it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from transformer_mt.cli import main

TINY = ["--train.max_steps=2", "--train.valid_every=2", "--data.task_size=300", "--train.device=cpu"]


def test_prepare_then_train_uses_the_prepared_data(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert main(["prepare", "tiny", "--run", str(run), "--no-progress", *TINY]) == 0
    manifest = run / "prepared" / "manifest.json"
    counts = json.loads(manifest.read_text())["counts"]
    assert counts["train"]["lines"] == 300 and counts["valid"]["lines"] == 100
    assert (run / "config.yaml").is_file() and (run / "tokenizer.model").is_file()
    stamp = manifest.stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--run", str(run), "--no-progress"]) == 0
    said = capsys.readouterr().err  # a line for the validation point, as fairseq, JoeyNMT and Marian print
    assert re.search(r"^step 2: validation loss \d+\.\d{3}, BLEU \d+\.\d{2}, chrF \d+\.\d{2} \(best so far\)$", said, re.M)
    assert "finished at step 2" in said
    assert manifest.stat().st_mtime_ns == stamp  # mapped, not prepared again
    assert (run / "checkpoints" / "step_2.pt").is_file()
    assert main(["prepare", "--run", str(run), "--no-progress"]) == 0  # an existing run: checked, current


def test_a_corpus_changed_after_training_started_is_refused(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert main(["train", "tiny", "--run", str(run), "--no-progress", *TINY]) == 0
    train_src = run / "data" / "train.src"
    train_src.write_text("one more word " + train_src.read_text())
    capsys.readouterr()
    assert main(["train", "--run", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train.src differs from the file it was prepared from" in err
    assert "new --run" in err


def test_a_failed_prepare_leaves_no_run(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("eins\n")
    code = main(["prepare", "tiny", "--run", str(tmp_path / "run"), "--no-progress", "--data.task=",
                 f"--data.train_src={tmp_path / 'a.txt'}", f"--data.train_tgt={tmp_path / 'b.txt'}"])
    assert code == 2 and "a.txt has 2 lines but" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_smaller_than_asked_says_its_size(tmp_path: Path, capsys) -> None:
    """A small corpus has fewer pieces than data.vocab_size: one line gives the size reached."""
    from transformer_mt.data.tokenizers.registry import load_tokenizer

    run = tmp_path / "run"
    assert main(["vocab", "tiny", "--run", str(run), "--data.task_size=300", "--data.vocab_size=5000"]) == 0
    reached = len(load_tokenizer(run / "tokenizer.model"))
    assert f"the corpus gave a vocabulary of {reached} pieces, fewer than data.vocab_size=5000" in capsys.readouterr().err
