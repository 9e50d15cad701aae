"""A language-model run end to end: a tiny model learns the built-in text far below a
unigram model's loss, resumes bit-identically, trains on 2 processes as on 1 with twice
the accumulation, generates from the command line, and bad input gets one line."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_mt.cli import main
from transformer_mt.common.config import load_config
from transformer_mt.data.text_stream import open_text
from transformer_mt.runs.directory import read_events
from transformer_mt.training import fit

from run_helpers import assert_same_state, max_difference, one_process_run, resume_from, two_process_weights

FAST = ["--train.max_steps=20", "--train.valid_every=10", "--train.keep_last=5", "--data.task_size=500",
        "--model.dropout=0.1", "--train.precision=fp32"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("lm") / "run"
    fit(load_config("lm_tiny"), run, progress=False)
    return run


def unigram_loss(train: np.ndarray, valid: np.ndarray) -> float:
    """Cross entropy (nats per token) of the validation stream under the training stream's
    token frequencies (add-one smoothed): what a model that ignores context achieves."""
    counts = Counter(train.tolist())
    vocab = max(max(counts), int(valid.max())) + 1
    total = len(train) + vocab
    return -sum(math.log((counts.get(t, 0) + 1) / total) for t in valid[1:].tolist()) / (len(valid) - 1)


def test_a_tiny_model_learns_far_below_the_unigram_baseline(trained: Path) -> None:
    data = open_text(trained / "prepared")
    baseline = unigram_loss(np.asarray(data.train.tokens), np.asarray(data.valid.tokens))
    valid = [e for e in read_events(trained / "metrics.jsonl") if e["event"] == "valid"]
    assert valid[-1]["valid_loss"] < 0.4 * baseline, (valid[-1], baseline)
    assert valid[-1]["valid_ppl"] == pytest.approx(math.exp(valid[-1]["valid_loss"]))
    assert 0 < valid[-1]["valid_bpc"] < valid[0]["valid_bpc"] * 1.01
    assert (trained / "best.safetensors").is_file()


def test_generate_and_evaluate_from_the_command_line(trained: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["-q", "generate", str(trained), "--prompt", "four hundred", "--prompt", "seven"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("four hundred") and " = " in lines[0]
    sampled = [main(["-q", "generate", str(trained), "--prompt", "nine", "--temperature", "1.5", "--seed", "4"])
               for _ in range(2)]
    assert sampled == [0, 0]
    first, second = capsys.readouterr().out.splitlines()
    assert first == second  # the same seed, the same text
    assert main(["-q", "evaluate", str(trained), "--text", str(trained / "data" / "test.txt"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "perplexity =" in out and "bits per character" in out


@pytest.mark.parametrize("args, message", [
    (["--prompt", ""], "the prompt is empty"),
    (["--prompt", "one " * 300], "shorten it"),
    (["--prompt", "one", "--temperature", "0"], "temperature must be > 0"),
    (["--prompt", "one", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["--prompt", "one", "--top-k", "0"], "top-k must be at least 1"),
    (["--prompt", os.fsdecode(b"a\xffb")], "--prompt 1 is not valid UTF-8 (byte 0xff at character 2); give it as "
                                          "UTF-8 text"),  # how Python passes the bytes of argv that are not UTF-8
    (["--prompt", "one", "--temperature", "1", "--seed", "99999999999999999999999"],
     "--seed must be from 0 to 18446744073709551615 (2^64 - 1), got 99999999999999999999999"),
    (["--prompt", "one", "--seed", "-1"], "--seed must be from 0 to"),
])
def test_bad_generation_settings_get_one_line(trained: Path, capsys: pytest.CaptureFixture, args: list[str],
                                              message: str) -> None:
    assert main(["generate", str(trained), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_cap_on_the_length_is_stated(trained: Path, capsys: pytest.CaptureFixture) -> None:
    """--max-new-tokens beyond the model's positions: one warning line with the real
    bound, and the text is what that bound gives."""
    from transformer_mt.inference.language_model import LanguageModel

    assert main(["generate", str(trained), "--prompt", "seven", "--prompt", "one", "--max-new-tokens", "100000000",
                 "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    lm = LanguageModel.from_run(trained, device="cpu")
    room = min(lm.room("seven"), lm.room("one"))
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: --max-new-tokens 100000000 is more than this model can add: it sees "
                        f"{lm.model.positional.max_positions} positions (model.max_positions), the prompt included, "
                        f"so a continuation stops after at most {room} new tokens here"]
    assert out.splitlines() == lm.generate(["seven", "one"], room)
    assert main(["-q", "generate", str(trained), "--prompt", "seven", "--max-new-tokens", str(room)]) == 0
    assert capsys.readouterr().err == ""


def test_a_run_trained_here_continues_prompts_after_end_of_text(trained: Path, capsys: pytest.CaptureFixture) -> None:
    """Its training stream puts end-of-text before every line: prompts are fed after it
    (an imported GPT-2 is fed the prompt alone: test_gpt2_import.py), and generate says so."""
    from transformer_mt.decoding.sampling import generate
    from transformer_mt.inference.language_model import LanguageModel

    lm = LanguageModel.from_run(trained, device="cpu")
    assert lm.after_end_of_text and lm.prefix == [lm.eot]
    prompt = lm.tokenizer.encode(["three hundred and"])[0]
    new = generate(lm.model, torch.tensor([[lm.eot, *prompt]]), 20, lm.eot)[0].tolist()
    assert lm.generate(["three hundred and"], 20) == [lm.text_of(prompt + new)]
    assert main(["generate", str(trained), "--prompt", "three hundred and", "--max-new-tokens", "20"]) == 0
    out, err = capsys.readouterr()
    assert out == lm.text_of(prompt + new) + "\n" and "prompts continue after end-of-text" in err


@pytest.mark.parametrize("command", [["translate", "RUN", "-i", "RUN/data/test.txt"],
                                     ["export", "hf", "RUN", "--out", "OUT"],
                                     ["export", "ctranslate2", "RUN", "--out", "OUT"],
                                     ["plot", "attention", "RUN", "one", "--out", "OUT.png"]])
def test_translation_commands_refuse_a_language_model_in_one_line(trained: Path, tmp_path: Path, command: list[str],
                                                                  capsys: pytest.CaptureFixture) -> None:
    argv = [part.replace("RUN", str(trained)).replace("OUT", str(tmp_path / "out")) for part in command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "is a language model" in err and "transformer-mt generate" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_evaluate_asks_a_language_model_for_text_and_generate_refuses_a_translator(
        trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", str(trained), "--src", "a", "--ref", "b"]) == 2
    assert "give --text" in capsys.readouterr().err
    translator = tmp_path / "mt"
    fit(load_config("tiny", ["--train.max_steps=2", "--data.task_size=100"]), translator, progress=False)
    assert main(["generate", str(translator), "--prompt", "w1"]) == 2
    assert "is a translation model" in capsys.readouterr().err


def test_vocab_and_prepare_make_a_language_models_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["vocab", "lm_tiny", "--run", str(tmp_path / "vocab")]) == 0
    assert (tmp_path / "vocab" / "tokenizer.model").is_file()
    assert main(["prepare", "lm_tiny", "--run", str(tmp_path / "prepared"), "--no-progress"]) == 0
    assert "training tokens" in capsys.readouterr().err
    assert (tmp_path / "prepared" / "prepared" / "stream.json").is_file()


def test_a_missing_or_undecodable_text_gets_one_line_and_leaves_no_run(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert main(["train", "lm_tiny", "--run", str(run), "--data.task=", f"--data.train_text={tmp_path / 'no.txt'}"]) == 2
    assert "no.txt" in capsys.readouterr().err and not run.exists()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    assert main(["train", "lm_tiny", "--run", str(run), "--data.task=", f"--data.train_text={bad}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.txt" in err and "line 2" in err and len(err.splitlines()) == 1 and not run.exists()


def test_a_resumed_run_ends_bit_identical_to_an_uninterrupted_one(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    fit(load_config("lm_tiny", FAST), straight, progress=False)
    assert_same_state(resume_from(straight, 10, tmp_path / "resumed"))


def test_two_processes_train_as_one_with_twice_the_accumulation(ddp_launch, tmp_path: Path) -> None:
    """The suite's torchrun launch trained lm_tiny on two ranks."""
    two = two_process_weights(ddp_launch[0], "lm")
    assert max_difference(two, one_process_run("lm", tmp_path / "one").model.state_dict()) <= 1e-6


def test_the_language_model_demo_trains_generates_and_draws(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from transformer_mt.viz.figure import DPI

    out = tmp_path / "lm_demo"
    assert main(["-q", "demo", "--lm", "--out", str(out), "--train.max_seconds=0", "--train.max_steps=30",
                 "--data.task_size=500", "--train.valid_every=15", "--model.n_layers=1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 30 and 0 <= result["completed_correctly"] <= 1 and 0 <= result["well_formed"] <= 1
    assert result["unigram_ppl"] > 1
    from PIL import Image

    with Image.open(out / "learned.png") as image:
        assert image.size == (11 * DPI, round(4.2 * DPI))


def test_completion_prompts_cut_lines_at_the_equals_sign() -> None:
    from transformer_mt.demo import completion_prompts

    assert completion_prompts(["forty-two = 42", "one = 1"]) == (["forty-two =", "one ="], ["42", "1"])


def test_a_budget_paces_a_language_model_too(tmp_path: Path) -> None:
    """train.budget_minutes serves every task: the run stops within its budget, the averaged
    snapshots are compared with the best checkpoint on the validation loss."""
    cfg = load_config("lm_tiny", ["--train.budget_minutes=0.05", "--train.warmup_steps=10", "--data.task_size=500"])
    trainer = fit(cfg, tmp_path / "run", progress=False)
    assert trainer.state.step >= 10 and trainer.state.elapsed < 0.05 * 60
    assert (tmp_path / "run" / "average.safetensors").is_file() and (tmp_path / "run" / "best.safetensors").is_file()


def test_perplexity_is_the_exponential_of_the_mean_next_token_loss(trained: Path) -> None:
    """LanguageModel.perplexity of a short text equals exp of the cross entropy of every next
    token, computed here in one forward pass over [eot, line 1, eot, line 2, eot]."""
    from transformer_mt.inference.language_model import LanguageModel

    lm = LanguageModel.from_run(trained, device="cpu")
    lines = ["four hundred = 400", "twelve = 12"]
    ids = [lm.eot] + [t for row in lm.tokenizer.encode(lines) for t in (*row, lm.eot)]
    tokens = torch.tensor([ids])
    with torch.no_grad():
        logits = lm.model.logits(tokens[:, :-1])[0]
    loss = torch.nn.functional.cross_entropy(logits, tokens[0, 1:]).item()
    result = lm.perplexity(lines)
    assert result["tokens"] == len(ids) - 1
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
    assert result["bits_per_character"] == pytest.approx(loss * (len(ids) - 1) / math.log(2) / (18 + 1 + 11 + 1))
