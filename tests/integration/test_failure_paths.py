"""Bad input and failure paths found by a hand sweep: each ends in one line naming the
file, line or key and what to do, a non-zero exit code, no traceback, nothing half-written."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from conftest import tiny_config
from transformer_mt.cli import main
from transformer_mt.common.errors import TrainingDiverged, UserError
from transformer_mt.model.transformer import build_model
from transformer_mt.runs.directory import RunDir, list_checkpoints, load_checkpoint, save_checkpoint, save_weights
from transformer_mt.training import fit
from transformer_mt.training.trainer import Trainer

QUICK = ["--train.max_steps=6", "--train.valid_every=3", "--data.task_size=200", "--train.log_every=1"]


def one_line_error(capsys: pytest.CaptureFixture, code: int, expected: str) -> str:
    """The command's stderr, checked: exit code 2, no traceback, and it ends with one
    error line (after any progress lines) that matches `expected`."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err and lines, err
    assert [line for line in lines if ": error: " in line] == [lines[-1]], err
    assert re.search(expected, lines[-1]), err
    return err


def write_corpus(folder: Path, src: list[str], tgt: list[str]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.src").write_text("".join(line + "\n" for line in src), encoding="utf-8")
    (folder / "train.tgt").write_text("".join(line + "\n" for line in tgt), encoding="utf-8")
    return ["--data.task=", f"--data.train_src={folder / 'train.src'}", f"--data.train_tgt={folder / 'train.tgt'}"]


@pytest.fixture
def small_run(tmp_path: Path) -> Path:
    """A run of 6 steps with checkpoints at steps 3 and 6."""
    run = tmp_path / "run"
    fit(tiny_config(train__max_steps=6, train__valid_every=3, data__task_size=200, train__log_every=1), run,
        progress=False)
    return run


def test_resuming_after_config_yaml_was_edited_is_one_line(small_run: Path, capsys) -> None:
    config = small_run / "config.yaml"
    config.write_text(config.read_text().replace("d_model: 64", "d_model: 32"))
    code = main(["train", "--run", str(small_run), "--train.max_steps=9"])
    one_line_error(capsys, code, r"step_6.pt: does not match the model in .*config.yaml .*restore the config.yaml")


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", None])
def test_damaged_best_weights_are_one_line(small_run: Path, capsys, content: bytes | None) -> None:
    best = small_run / "best.safetensors"
    best.write_bytes(best.read_bytes()[:100] if content is None else content)
    code = main(["translate", str(small_run), "-i", str(small_run / "data" / "test.src")])
    one_line_error(capsys, code, r"best.safetensors: damaged or not a safetensors file .*delete it")


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(small_run: Path, capsys) -> None:
    newest = small_run / "checkpoints" / "step_6.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    assert main(["translate", str(small_run), "--checkpoint", "last", "-i", str(small_run / "data" / "test.src"),
                 "-o", str(small_run / "out.txt")]) == 0
    assert re.search(r"step_6.pt: not a readable checkpoint .*; using step_3.pt, the newest readable one",
                     capsys.readouterr().err)
    assert main(["train", "--run", str(small_run), "--no-progress"]) == 0  # resumes from step 3
    err = capsys.readouterr().err
    assert "resumed" in err and "at step 3" in err
    assert load_checkpoint(small_run / "checkpoints" / "step_6.pt")["trainer"]["step"] == 6  # rewritten whole


def test_corpus_of_whitespace_only_sources_is_one_line_and_leaves_no_run(tmp_path: Path, capsys) -> None:
    data = write_corpus(tmp_path / "data", ["  ", "\t", " "], ["a", "b", "c"])
    run = tmp_path / "run"
    code = main(["train", "tiny", "--run", str(run), *data, *QUICK])
    one_line_error(capsys, code, "every one of the 3 pairs has an empty or whitespace-only side")
    assert not run.exists()


def test_run_naming_a_regular_file_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "file"
    path.write_text("not a run")
    one_line_error(capsys, main(["train", "tiny", "--run", str(path), *QUICK]), "exists and is not a folder")
    one_line_error(capsys, main(["vocab", "tiny", "--run", str(path)]), "exists and is not a folder")


def test_a_bad_override_is_named_instead_of_the_preset(tmp_path: Path, capsys) -> None:
    """The preset file is fine, the override is not: the line names the override as typed."""
    run = tmp_path / "run"
    one_line_error(capsys, main(["train", "tiny", "--run", str(run), "--train.budget_minutes=-1"]),
                   r": error: --train\.budget_minutes=-1: must be >= 0 \(0 = no budget")
    one_line_error(capsys, main(["vocab", "tiny", "--run", str(run), "--data.vocab_size=-5"]),
                   r": error: --data\.vocab_size=-5: must be at least 8$")
    assert not run.exists()


def test_a_failed_start_leaves_nothing_and_a_corrected_one_starts_afresh(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    data = write_corpus(tmp_path / "data", ["w1 w2"] * 20, ["w1 w2"] * 20)
    missing = [*data[:2], f"--data.train_tgt={tmp_path / 'missing.tgt'}"]
    one_line_error(capsys, main(["train", "tiny", "--run", str(run), *missing, *QUICK]), "missing.tgt: no such file")
    assert not run.exists()
    run.mkdir()  # an existing empty folder is kept, and stays empty
    one_line_error(capsys, main(["train", "tiny", "--run", str(run), *missing, *QUICK]), "missing.tgt: no such file")
    assert run.is_dir() and not any(run.iterdir())
    assert main(["train", "tiny", "--run", str(run), *data, *QUICK, "--no-progress"]) == 0
    assert "resuming with its saved config.yaml" not in capsys.readouterr().err


def test_a_folder_given_as_corpus_is_named_as_a_folder(tmp_path: Path, capsys) -> None:
    data = write_corpus(tmp_path / "data", ["w1"] * 5, ["w1"] * 5)
    args = [data[0], f"--data.train_src={tmp_path}", data[2]]
    one_line_error(capsys, main(["train", "tiny", "--run", str(tmp_path / "run"), *args, *QUICK]), "is a folder")


def test_metrics_logged_after_the_last_checkpoint_are_not_doubled_by_a_resume(small_run: Path) -> None:
    (small_run / "checkpoints" / "step_6.pt").unlink()  # as if killed after logging steps 4-6
    assert main(["train", "--run", str(small_run), "--no-progress"]) == 0
    events = [json.loads(line) for line in (small_run / "metrics.jsonl").read_text().splitlines()]
    keys = [(e["event"], e["step"]) for e in events]
    assert len(keys) == len(set(keys)), keys
    assert ("train", 6) in keys and ("valid", 6) in keys


@pytest.mark.parametrize("poison", ["loss", "weights"])
def test_a_nan_never_reaches_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, poison: str) -> None:
    """Step 5 makes the loss NaN (or, at the checkpoint step 6, a weight): training stops
    with TrainingDiverged and the newest checkpoint is the good one of step 3."""
    original = Trainer.train_step

    def poisoned(self: Trainer) -> dict:
        stats = original(self)
        if poison == "loss" and self.state.step + 1 == 5:
            stats["loss"] = float("nan")
        if poison == "weights" and self.state.step + 1 == 6:
            with torch.no_grad():
                next(self.model.parameters()).view(-1)[0] = float("inf")
        return stats

    monkeypatch.setattr(Trainer, "train_step", poisoned)
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"at step [56]; nothing of that step was saved. Lower train.lr_scale"):
        fit(tiny_config(train__max_steps=9, train__valid_every=3, data__task_size=200), run, progress=False)
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["step_3.pt"]
    state = load_checkpoint(run / "checkpoints" / "step_3.pt")
    assert all(t.isfinite().all() for t in state["model"].values())


def test_validation_lines_longer_than_the_model_takes_are_truncated(tmp_path: Path, caplog) -> None:
    data = write_corpus(tmp_path / "data", [f"w{i % 10} w{i % 7}" for i in range(60)],
                        [f"w{i % 10} w{i % 7}" for i in range(60)])
    long_line = " ".join(f"w{i % 10}" for i in range(80))
    (tmp_path / "data" / "valid.src").write_text(f"w1 w2\n{long_line}\n")
    (tmp_path / "data" / "valid.tgt").write_text(f"w1 w2\n{long_line}\n")
    cfg = tiny_config(**{"data__task": "", "data__train_src": data[1].split("=")[1],
                         "data__train_tgt": data[2].split("=")[1],
                         "data__valid_src": tmp_path / "data" / "valid.src",
                         "data__valid_tgt": tmp_path / "data" / "valid.tgt",
                         "model__max_positions": 32, "data__max_len": 20, "train__max_steps": 3,
                         "train__valid_every": 3})
    with caplog.at_level("WARNING", logger="transformer_mt"):
        fit(cfg, tmp_path / "run", progress=False)
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e for e in events if e["event"] == "valid" and "valid_loss" in e]
    assert "valid.src: 1 line(s) longer than 31 subwords" in caplog.text


def test_unwritable_output_fails_before_translating(tiny_run: Path, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["translate", str(tiny_run), "-i", str(tiny_run / "data" / "test.src"), "-o", str(blocker / "out")])
    err = one_line_error(capsys, code, r"-o .*file/out: .*file is a file, not a folder; give a path in a folder")
    assert "translated" not in err
    one_line_error(capsys, main(["translate", str(tiny_run), "-o", str(tmp_path)]), "is a folder")


def test_nbest_larger_than_a_given_beam_is_refused_as_by_the_server(tiny_run: Path, capsys) -> None:
    code = main(["translate", str(tiny_run), "--nbest", "5", "--beam", "2", "-i", str(tiny_run / "data" / "test.src")])
    one_line_error(capsys, code, r"nbest \(5\) cannot exceed beam \(2\)")


def test_vocab_on_a_bad_corpus_leaves_no_run(tmp_path: Path, capsys) -> None:
    data = write_corpus(tmp_path / "data", ["a", "b"], ["a"])
    run = tmp_path / "run"
    one_line_error(capsys, main(["vocab", "tiny", "--run", str(run), *data]), "has 2 lines but")
    assert not run.exists()


@pytest.fixture
def run_copy(tiny_run: Path, tmp_path: Path) -> Path:
    """A copy of the shared tiny run that a test may damage."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("tensorboard", "prepared"))
    return run


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_output_that_is_an_input_is_refused(run_copy: Path, tmp_path: Path, capsys) -> None:
    """--hyp naming --src or --ref (by another path to the same file), -o naming -i, or an
    output naming a file of the run: refused before any work, every file as it was."""
    src, ref = run_copy / "data" / "test.src", run_copy / "data" / "test.tgt"
    os.symlink(src, tmp_path / "link.src")
    before = files_of(tmp_path)
    evaluate = ["evaluate", str(run_copy), "--src", str(src), "--ref", str(ref), "--hyp"]
    one_line_error(capsys, main([*evaluate, str(tmp_path / "link.src")]), r"--hyp .*link.src: is the --src file, "
                   "which this command reads; writing the output there would overwrite it: choose another file")
    one_line_error(capsys, main([*evaluate, f"{run_copy}/data/../data/test.tgt"]), r"is the --ref file")
    one_line_error(capsys, main([*evaluate, str(run_copy / "config.yaml")]), r"is a file of the run")
    one_line_error(capsys, main(["translate", str(run_copy), "-i", str(src), "-o", str(src)]), r"-o .*is the -i file")
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("command", [["train", "tiny", "--run", "", "--train.max_steps=1"],
                                     ["generate", "", "--prompt", "a"], ["import", "gpt2", "DIR", "--run", ""],
                                     ["translate", "", "-i", "x"]])
def test_an_empty_path_is_refused(tmp_path: Path, monkeypatch, capsys, command: list[str]) -> None:
    """"" would be the current folder: train would write a whole run there. Like every
    mistake in the arguments, one line (argparse's usage block is not printed)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path) if arg == "DIR" else arg for arg in command])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    assert "an empty path ('') would mean the current folder; give a name" in lines[0]
    assert "argument" in lines[0] and lines[0].endswith("--help)") and not list(tmp_path.iterdir())


def test_non_finite_weights_are_refused_when_loaded(run_copy: Path, capsys) -> None:
    """best.safetensors with a valid header and 0xFF bytes (NaN) in its data: one line
    naming the file and the tensor, before any translation."""
    best = run_copy / "best.safetensors"
    data = bytearray(best.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")  # after the header
    data[start + 4000 : start + 8000] = b"\xff" * 4000
    best.write_bytes(bytes(data))
    code = main(["translate", str(run_copy), "-i", str(run_copy / "data" / "test.src")])
    err = one_line_error(capsys, code, r"best.safetensors: the weight \S+ holds NaN or infinite values .*; delete it")
    assert "translated" not in err


def test_non_finite_weights_are_never_written(run_copy: Path, tmp_path: Path) -> None:
    """save_weights and save_checkpoint check before the atomic write: the old file stays."""
    model = build_model(RunDir(run_copy).read_config().model)
    with torch.no_grad():
        model.generator.proj.bias[3] = float("nan")
    best = run_copy / "best.safetensors"
    before = best.read_bytes()
    with pytest.raises(UserError, match=r"best.safetensors: not written: the weight generator.proj.bias holds NaN"):
        save_weights(model, best)
    assert best.read_bytes() == before and not list(run_copy.glob(".*.tmp"))
    with pytest.raises(UserError, match=r"step_9.pt: not written"):
        save_checkpoint({"model": model.state_dict()}, tmp_path / "step_9.pt")
    assert not (tmp_path / "step_9.pt").exists()


def test_last_with_only_a_damaged_checkpoint_says_what_it_did(run_copy: Path, capsys) -> None:
    """The one step_N.pt is random bytes (best.safetensors is there): no fallback is
    claimed, the cure is --checkpoint best, and PyTorch's advice to load it unsafely
    (weights_only=False) is not passed on."""
    shutil.rmtree(run_copy / "checkpoints", ignore_errors=True)
    (run_copy / "checkpoints").mkdir()
    (run_copy / "checkpoints" / "step_7.pt").write_bytes(bytes(range(256)) * 20)
    code = main(["translate", str(run_copy), "--checkpoint", "last", "-i", str(run_copy / "data" / "test.src")])
    err = one_line_error(capsys, code, r"step_7.pt: not a readable checkpoint \(not a file of tensors that loads "
                         r"without running code.*\); no older checkpoint can be read; use --checkpoint best$")
    assert "weights_only" not in err and "before it" not in err and len(err.strip().splitlines()) == 1
