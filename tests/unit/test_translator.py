"""Translator: batching and order, empty and too-long inputs, n-best, attention, loading."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

from conftest import TINY_RUN_STEPS
from transformer_mt.errors import UserError
from transformer_mt.translator import Translator

LINES = ["w4 w3", "w7 w1 w9 w2 w5", "", "w10", "w2 w2 w8 w6", "   ", "w9 w1"]


@pytest.fixture(scope="module")
def translator(tiny_run: Path) -> Translator:
    return Translator.from_run(tiny_run, device="cpu", beam=3, batch_tokens=12)


def test_batched_results_come_back_in_input_order(translator: Translator) -> None:
    together = translator.translate_nbest(LINES, 2)
    alone = [translator.translate_nbest([line], 2)[0] for line in LINES]
    assert [[text for text, _ in row] for row in together] == [[text for text, _ in row] for row in alone]
    for row, single in zip(together, alone):
        assert [s for _, s in row] == pytest.approx([s for _, s in single], abs=1e-5)
    assert len(translator._batches(translator._encode(LINES))) > 1  # really several batches


def test_empty_lines_give_empty_outputs(translator: Translator) -> None:
    out = translator.translate(LINES)
    assert len(out) == len(LINES)
    assert out[2] == "" and out[5] == ""
    nbest = translator.translate_nbest(LINES, 3)
    assert nbest[2] == [("", 0.0)]
    assert translator.translate([]) == []


def test_nbest_is_sorted_and_first_equals_translate(translator: Translator) -> None:
    nbest = translator.translate_nbest(LINES, 3)
    assert [row[0][0] for row in nbest] == translator.translate(LINES)
    for row in nbest:
        scores = [score for _, score in row]
        assert scores == sorted(scores, reverse=True)


def test_too_long_input_is_truncated_with_a_warning(translator: Translator, caplog) -> None:
    long_line = " ".join(["w3"] * (translator.max_source + 40))
    with caplog.at_level(logging.WARNING, logger="transformer_mt"):
        out = translator.translate(["w1", long_line])
    assert len(out) == 2
    assert "input 2 has" in caplog.text and "truncated" in caplog.text


def test_beam_one_translates_as_greedy(tiny_run: Path) -> None:
    greedy = Translator.from_run(tiny_run, device="cpu", beam=1)
    # translate() runs greedy_decode; translate_nbest(..., 1) runs beam_search with beam 1
    assert [row[0][0] for row in greedy.translate_nbest(LINES, 1)] == greedy.translate(LINES)


def test_translate_under_bf16_autocast_and_with_bf16_weights(tiny_run: Path, translator: Translator) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert len(translator.translate(LINES)) == len(LINES)
    bf16 = Translator.from_run(tiny_run, device="cpu", dtype="bfloat16", beam=2)
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    assert len(bf16.translate(LINES)) == len(LINES)


def test_attention_has_every_layer_and_head(translator: Translator) -> None:
    maps = translator.attention("w7 w1 w9")
    layers, heads = len(translator.model.encoder.layers), translator.model.encoder.layers[0].self_attn.n_heads
    source, target = len(maps["source"]), len(maps["target"])
    assert maps["source"][-1] == "</s>" and maps["target_in"][0] == "<s>"
    assert len(maps["target_in"]) == target
    assert maps["encoder"].shape == (layers, heads, source, source)
    assert maps["decoder"].shape == (layers, heads, target, target)
    assert maps["cross"].shape == (layers, heads, target, source)
    for kind in ("encoder", "decoder", "cross"):
        torch.testing.assert_close(maps[kind].sum(-1), torch.ones(layers, heads, maps[kind].size(2)))
    assert maps["decoder"][..., 0, 1:].eq(0).all()  # the first position sees only itself
    assert maps["translation"] == translator.translate(["w7 w1 w9"])[0]
    with pytest.raises(UserError, match="empty"):
        translator.attention("  ")


def test_run_without_tokenizer_names_the_file(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "tokenizer.model").unlink()
    with pytest.raises(UserError, match="tokenizer.model: missing"):
        Translator.from_run(run, device="cpu")


def test_run_without_weights_names_the_folder(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("*.pt", "*.safetensors"))
    with pytest.raises(UserError, match="checkpoints: no step_N.pt checkpoint"):
        Translator.from_run(run, device="cpu")
    with pytest.raises(UserError, match="average.safetensors: missing"):
        Translator.from_run(run, device="cpu", checkpoint="average")


@pytest.mark.parametrize("checkpoint,name", [("best", "best.safetensors"), ("last", f"step_{TINY_RUN_STEPS}.pt")])
def test_checkpoint_that_does_not_match_the_config_names_the_file(
    tiny_run: Path, tmp_path: Path, checkpoint: str, name: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    config = run / "config.yaml"
    config.write_text(re.sub(r"d_ff: \d+", "d_ff: 40", config.read_text()))
    with pytest.raises(UserError, match=f"{name}: does not match the model in config.yaml"):
        Translator.from_run(run, device="cpu", checkpoint=checkpoint)


def test_unknown_decoding_setting_is_a_user_error(tiny_run: Path) -> None:
    with pytest.raises(UserError, match="unknown decoding setting"):
        Translator.from_run(tiny_run, device="cpu", bean=4)
    with pytest.raises(UserError, match="decode.beam"):
        Translator.from_run(tiny_run, device="cpu", beam=0)
