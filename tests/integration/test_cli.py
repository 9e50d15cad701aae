"""The command line: user mistakes give one line and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from transformer_mt.cli import main


@pytest.mark.parametrize(
    "args,message",
    [
        (["train", "tiny", "--run", "RUN", "--model.d_model=31"], "--model.d_model=31: must be divisible"),
        (["train", "tiny", "--run", "RUN", "--model.dropout=1.5"], "--model.dropout=1.5: must be in [0, 1)"),
        (["train", "tiny", "--run", "RUN", "--model.colour=red"], "--model.colour=red: unknown key"),
        (["train", "nonexistent", "--run", "RUN"], "no such config file or preset"),
        (["translate", "NOWHERE"], "none: no such run directory"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    args = [a.replace("RUN", str(tmp_path / "run")).replace("NOWHERE", str(tmp_path / "none")) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_config_file_names_file_and_key(tmp_path: Path, capsys) -> None:
    config = tmp_path / "my.yaml"
    config.write_text("model:\n  n_heads: 3\ndata:\n  task: copy\n")
    assert main(["train", str(config), "--run", str(tmp_path / "run")]) == 2
    assert "my.yaml: model.d_model: must be divisible by model.n_heads" in capsys.readouterr().err


def test_unknown_option_is_an_argparse_error(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "run", "--colour"])
    assert exit_info.value.code == 2


def test_only_batch_commands_set_the_training_allocator(tiny_run: Path, tmp_path: Path, monkeypatch) -> None:
    """`reuse_freed_memory` (glibc keeps freed memory) is for training and batch decoding;
    `plot` and `serve` must not inherit it."""
    import transformer_mt.cli.translate as cli_translate

    calls: list[str] = []
    monkeypatch.setattr(cli_translate, "reuse_freed_memory", lambda: calls.append("set"))
    assert main(["plot", "encodings", "--out", str(tmp_path / "pe.png")]) == 0
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert calls == []
    assert main(["translate", str(tiny_run), "-i", str(tiny_run / "data" / "test.src"),
                 "-o", str(tmp_path / "out.txt")]) == 0
    assert calls == ["set"]


def test_fit_from_python_sets_the_training_allocator_as_the_train_command_does(tmp_path: Path, monkeypatch) -> None:
    """`fit()` called from Python (a notebook, benchmarks/time_to_quality.py) trains with the
    memory settings of `transformer-mt train`: time_to_quality's runs once trained without."""
    import importlib

    from conftest import tiny_config

    fit_module = importlib.import_module("transformer_mt.training.fit")  # the package's `fit` is the function

    calls: list[str] = []
    monkeypatch.setattr(fit_module, "reuse_freed_memory", lambda: calls.append("set"))
    fit_module.fit(tiny_config(train__max_steps=1, train__valid_every=1, data__task_size=50), tmp_path / "run",
                   progress=False)
    assert calls == ["set"]


def test_average_of_more_checkpoints_than_the_run_keeps_says_so(tmp_path: Path, capsys) -> None:
    """`average --last 20` on a run that keeps 2 averages those 2 and says so in one warning line."""
    from transformer_mt.training import fit
    from conftest import tiny_config

    run = tmp_path / "run"
    fit(tiny_config(train__max_steps=6, train__valid_every=2, train__keep_last=2, data__task_size=100), run,
        progress=False)
    kept = len(list((run / "checkpoints").glob("step_*.pt")))
    assert kept == 2
    assert main(["average", str(run), "--last", "20"]) == 0 and (run / "average.safetensors").is_file()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "asked for" in line]
    assert len(warnings) == 1 and f"the {kept} checkpoints" in warnings[0] and "last 20" in warnings[0]
    assert "train.keep_last" in warnings[0]
    assert main(["average", str(run), "--last", str(kept)]) == 0 and "asked for" not in capsys.readouterr().err


def test_demo_names_the_script_it_was_started_as_when_it_is_not_on_the_path(monkeypatch, tmp_path: Path) -> None:
    """Under `make demo` the virtual environment is not activated: the commands the demo
    prints must be runnable as printed."""
    import transformer_mt.demo as demo

    script = tmp_path / ".venv" / "bin" / "transformer-mt"
    script.parent.mkdir(parents=True)
    script.write_text("")
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setattr(demo.shutil, "which", lambda name: None)
    assert demo.program_name() == str(script)
    monkeypatch.setattr(demo.shutil, "which", lambda name: str(script))
    assert demo.program_name() == "transformer-mt"
