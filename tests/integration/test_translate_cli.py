"""`transformer-mt translate` and `evaluate` end to end on the tiny copy-task run."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from transformer_mt.cli import main
from transformer_mt.common.device import has_fast_bf16
from transformer_mt.training import fit
from transformer_mt.inference.translator import Translator

LINES = ["w4 w3", "w7 w1 w9 w2", "", "w10 w5"]


def spawn(*args: str, stdin=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "transformer_mt", *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_line(process: subprocess.Popen, timeout: float = 120.0) -> str:
    """One stdout line, failing instead of hanging if none comes."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no output line although the input line was sent"
    return process.stdout.readline().decode("utf-8")


@pytest.fixture
def source_file(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def test_file_to_file_matches_the_python_api(tiny_run: Path, source_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert main(["translate", str(tiny_run), "-i", str(source_file), "-o", str(out), "--beam", "3",
                 "--device", "cpu"]) == 0
    expected = Translator.from_run(tiny_run, device="cpu", beam=3).translate(LINES)
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert not list(tmp_path.glob("*.tmp"))


def test_a_pipe_or_a_device_is_input_like_a_file(tiny_run: Path, tmp_path: Path, capsys) -> None:
    """-i reads what is readable, not only regular files: a pipe (as a shell's <(...) gives,
    /dev/fd/N) and /dev/null (no lines, no output)."""
    read_end, write_end = os.pipe()
    os.write(write_end, ("\n".join(LINES) + "\n").encode())
    os.close(write_end)
    try:
        assert main(["translate", str(tiny_run), "-i", f"/dev/fd/{read_end}", "--device", "cpu"]) == 0
    finally:
        os.close(read_end)
    assert capsys.readouterr().out.split("\n")[:-1] == Translator.from_run(tiny_run, device="cpu").translate(LINES)
    out = tmp_path / "none.txt"
    assert main(["translate", str(tiny_run), "-i", os.devnull, "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == ""


def test_nbest_lines_carry_index_text_and_score(tiny_run: Path, source_file: Path, capsys) -> None:
    assert main(["translate", str(tiny_run), "-i", str(source_file), "--nbest", "2", "--device", "cpu"]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(index) for index, _, _ in rows] == [0, 0, 1, 1, 2, 3, 3]  # the empty line has one
    for _, _, score in rows:
        float(score)
    assert main(["translate", str(tiny_run), "-i", str(source_file), "--nbest", "3", "--beam", "3", "--raw-nbest",
                 "--device", "cpu"]) == 0
    raw = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(index) for index, _, _ in raw] == [0, 0, 0, 1, 1, 1, 2, 3, 3, 3]  # every hypothesis of the beam
    assert main(["translate", str(tiny_run), "-i", str(source_file), "--nbest", "3", "--beam", "3", "--device", "cpu"]) == 0
    distinct = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    by_line = {index: [text for i, text, _ in raw if i == index] for index, _, _ in raw}
    assert [(i, text) for i, text, _ in distinct] == [(i, text) for i, texts in by_line.items()
                                                      for text in dict.fromkeys(texts)]


def test_stdin_is_answered_line_by_line(tiny_run: Path) -> None:
    process = spawn("translate", str(tiny_run), "--device", "cpu", "--beam", "2")
    try:
        expected = Translator.from_run(tiny_run, device="cpu", beam=2).translate(LINES)
        for line, translation in zip(LINES, expected):
            process.stdin.write(line.encode() + b"\n")
            process.stdin.flush()  # stdin stays open: the answer must not wait for more input
            assert read_line(process) == translation + "\n"
        process.stdin.close()
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()


def test_interactive_prompt_at_a_terminal(tiny_run: Path) -> None:
    pty = pytest.importorskip("pty")
    controller, terminal = pty.openpty()
    process = spawn("translate", str(tiny_run), "--device", "cpu", stdin=terminal)
    os.close(terminal)
    try:
        os.write(controller, b"w4 w3\n")
        expected = Translator.from_run(tiny_run, device="cpu").translate(["w4 w3"])[0]
        assert read_line(process) == expected + "\n"
        os.write(controller, b"\x04")  # Ctrl-D
        assert process.wait(timeout=60) == 0
        assert "> " in process.stderr.read().decode()
    finally:
        process.kill()
        os.close(controller)


@pytest.mark.parametrize("precision,tokenize", [("fp32", "char"), ("bf16", "13a")])
def test_evaluate_gives_the_bleu_of_training_validation(tmp_path: Path, capsys, precision: str, tokenize: str) -> None:
    """Validation and evaluate decode through one Translator call with the run's
    decode.precision and score with its data.bleu_tokenize: a bf16 run's validation BLEU is
    reproduced exactly too, and a char run's is char BLEU in both."""
    if precision == "bf16" and not has_fast_bf16(torch.device("cpu")):
        pytest.skip("no native bf16 on this CPU (emulated bf16 is very slow)")
    run = tmp_path / "run"
    fit(tiny_config(train__max_steps=80, train__valid_every=80, decode__beam=2, train__precision=precision,
                    decode__precision=precision, data__task_size=2000, data__bleu_tokenize=tokenize), run,
        progress=False)
    validation = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    validation = [event for event in validation if event["event"] == "valid"][-1]
    assert main(["evaluate", str(run), "--src", str(run / "data" / "valid.src"), "--ref",
                 str(run / "data" / "valid.tgt"), "--checkpoint", "last", "--device", "cpu", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert f"tok:{tokenize}" in result["bleu_signature"]
    assert result["beam"] == 2 and result["precision"] == validation["precision"] == precision
    assert result["bleu"] > 0 and result["chrf"] > 0
    assert result["bleu"] == pytest.approx(validation["bleu"], abs=1e-9)
    assert result["chrf"] == pytest.approx(validation["chrf"], abs=1e-9)


def test_evaluate_prints_scores_with_signatures(tiny_run: Path, capsys) -> None:
    data = tiny_run / "data"
    assert main(["evaluate", str(tiny_run), "--src", str(data / "test.src"), "--ref", str(data / "test.tgt"),
                 "--lowercase-tokenized", "--beam", "2", "--json", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("BLEU = ") and "tok:13a" in out[0]
    assert out[1].startswith("chrF = ") and "nc:6" in out[1]
    assert out[2].startswith("BLEU (lowercased, 13a-tokenized) = ")
    assert {"bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_lc_tok"} <= set(json.loads(out[-1]))
    assert main(["evaluate", str(tiny_run), "--src", str(data / "test.src"), "--ref", str(data / "test.tgt"),
                 "--tokenize", "char", "--device", "cpu"]) == 0
    assert "tok:char" in capsys.readouterr().out


def test_non_utf8_input_file_names_the_line(tiny_run: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"w1 w2\n\xff\xfe w3\n")
    assert main(["translate", str(tiny_run), "-i", str(bad)]) == 2
    assert f"{bad}, line 2: not valid UTF-8" in capsys.readouterr().err


def test_non_utf8_stdin_names_the_line(tiny_run: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    piped = tmp_path / "stdin"
    piped.write_bytes(b"w1 w2\nw3\n\xff w4\n")
    with piped.open() as stdin:  # a real file descriptor, as a pipe gives the command
        monkeypatch.setattr(sys, "stdin", stdin)
        assert main(["translate", str(tiny_run), "--device", "cpu"]) == 2
    assert "<stdin>, line 3: not valid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("option,message", [("--beam", "must be at least 1"), ("--nbest", "expected an integer >= 1"),
                                            ("--batch-tokens", "must be positive"),
                                            ("--precision", "must be 'auto', 'bf16' or 'fp32'")])
def test_zero_is_rejected_at_parse_time(option: str, message: str, capsys) -> None:
    """A flag that sets a config option is checked as the option is (config.py's message)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "no-such-run", option, "0"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_evaluate_with_misaligned_files_says_so(tiny_run: Path, source_file: Path, tmp_path: Path, capsys) -> None:
    ref = tmp_path / "ref.txt"
    ref.write_text("one\n", encoding="utf-8")
    assert main(["evaluate", str(tiny_run), "--src", str(source_file), "--ref", str(ref)]) == 2
    assert f"{source_file} has 4 lines but {ref} has 1" in capsys.readouterr().err


def test_run_without_tokenizer_is_named(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: {}\n")
    assert main(["translate", str(run)]) == 2
    assert f"{run / 'tokenizer.model'}: missing" in capsys.readouterr().err


def test_a_beam_wider_than_the_vocabulary_is_refused(tiny_run: Path, source_file: Path, capsys) -> None:
    """A beam cannot be filled with more hypotheses than there are target tokens; the
    message says so and names the bound (the width the vocabulary allows still runs)."""
    vocabulary = Translator.from_run(tiny_run, device="cpu").model.tgt_embed.lut.num_embeddings
    assert main(["translate", str(tiny_run), "--beam", "100000", "-i", str(source_file), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"transformer-mt translate: error: beam 100000 is wider than the target vocabulary "
                                f"({vocabulary} subwords): a beam cannot hold more hypotheses than there are tokens "
                                f"to choose from; use a beam of at most {vocabulary}"]
    assert main(["-q", "translate", str(tiny_run), "--beam", str(vocabulary + 1), "-i", str(source_file)]) == 2
    assert "wider than the target vocabulary" in capsys.readouterr().err
