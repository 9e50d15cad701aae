"""`train --model` on the mistakes learners make (tests/check_cases/mistakes.py, issue 105's
sweep): each is refused before the first step in one line that names the cause, with exit code
2 and no run left behind, or trained with a line that says what the toolkit did, translating
deterministically with only translations on stdout, each sentence as it would be alone. The
correct nn.Transformer file (batch_first=True) trains and translates the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from check_cases.cases import HERE as CHECK_CASES
from check_cases.mistakes import MISTAKES, REFUSED, TRAINED, Mistake
from transformer_mt.cli import main

STEPS = ["--train.max_steps=4", "--train.valid_every=4", "--data.task_size=300", "--no-progress"]
SENTENCES = ["w1 w2 w3", "w7 w5", "w3 w9 w4 w2 w8"]


def their_file(folder: Path, mistake: Mistake) -> Path:
    (folder / "mine").mkdir(parents=True)
    return mistake.case.write(folder / "mine")


def one_line(err: str, path: Path, says: tuple[str, ...]) -> None:
    lines = [line for line in err.strip().splitlines() if "UserWarning" not in line and "self.encoder =" not in line]
    assert len(lines) == 1 and str(path) in lines[0], err
    for part in says:
        assert part in lines[0], lines[0]


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if m.outcome == REFUSED and m.case.name != "one_vocabulary"],
                         ids=lambda m: m.case.name)
def test_a_mistake_that_would_train_wrong_is_refused_in_one_line_and_leaves_no_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mistake: Mistake) -> None:
    path = their_file(tmp_path, mistake)
    run = tmp_path / "run"
    assert main(["-q", "train", "tiny", "--run", str(run), "--model", str(path), *STEPS]) == 2
    one_line(capsys.readouterr().err, path, mistake.says)
    assert not run.exists()


def translate(run: Path, lines: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`transformer-mt translate RUN` on `lines` through stdin-like input: what stdout holds."""
    source = run.parent / f"in{len(lines)}.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["-q", "translate", str(run), "-i", str(source)]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("name", [m.case.name for m in MISTAKES if m.outcome == TRAINED] + ["torch_transformer"])
def test_a_mistake_the_toolkit_can_take_trains_says_so_and_translates_deterministically(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, name: str) -> None:
    mistake = next((m for m in MISTAKES if m.case.name == name), None)
    path = their_file(tmp_path, mistake) if mistake else CHECK_CASES / "torch_transformer.py"
    run = tmp_path / "run"
    assert main(["-q", "train", "tiny", "--run", str(run), "--model", str(path), *STEPS]) == 0
    said = capsys.readouterr().err + "\n".join(record.getMessage() for record in caplog.records)
    for part in mistake.says if mistake else ():
        assert part in said, said
    together = translate(run, SENTENCES, capsys)
    assert len(together) == len(SENTENCES)  # translations only: nothing of theirs on stdout
    assert translate(run, SENTENCES, capsys) == together
    assert [translate(run, [sentence], capsys)[0] for sentence in SENTENCES] == together
