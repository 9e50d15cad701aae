"""Translator: batching and order, empty and too-long inputs, n-best, attention, loading."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

from conftest import TINY_RUN_STEPS
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.common.device import has_fast_bf16
from transformer_mt.common.errors import UserError
from transformer_mt.common.evaluation import score
from transformer_mt.model.masks import padding_mask
from transformer_mt.inference.translator import Hypothesis, Translator

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
    assert len(translator._batches(translator.encode_sources(LINES), translator.defaults.batch_tokens)) > 1


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


def teacher_forced_log_prob(translator: Translator, line: str, hypothesis: Hypothesis) -> float:
    """log P(Y | X) of a hypothesis, summed over its tokens (eos included when it finished),
    computed by one teacher-forced pass: independent of the search code."""
    model = translator.model
    src = torch.tensor([translator.tokenizer.encode([line])[0] + [EOS_ID]])
    output = hypothesis.ids + ([EOS_ID] if hypothesis.finished else [])
    tgt_in = torch.tensor([[BOS_ID] + output[:-1]])
    with torch.no_grad():
        log_probs = model.generator(model(src, tgt_in, padding_mask(src, PAD_ID)))[0]  # (T, V)
    return float(log_probs.gather(1, torch.tensor(output)[:, None]).sum())


@pytest.mark.parametrize("beam,alpha", [(1, 0.6), (1, 0.0), (3, 0.6), (3, 1.5)])
def test_scores_mean_the_same_whatever_the_beam(translator: Translator, beam: int, alpha: float) -> None:
    lines = [line for line in LINES if line.strip()]
    found = translator.search(lines, translator.settings(beam=beam, length_penalty=alpha), nbest=1)
    for line, (best,) in zip(lines, found):
        emitted = len(best.ids) + best.finished
        expected = teacher_forced_log_prob(translator, line, best) / ((5 + emitted) / 6) ** alpha
        assert best.score == pytest.approx(expected, abs=1e-4)


def test_nbest_widens_the_default_beam_but_not_a_given_one(translator: Translator) -> None:
    assert translator.settings(nbest=5).beam == 5  # the default (3) widened
    assert translator.settings(nbest=2).beam == 3
    with pytest.raises(UserError, match=r"nbest \(5\) cannot exceed beam \(2\)"):
        translator.settings(beam=2, nbest=5)


def test_a_call_never_changes_the_defaults(translator: Translator) -> None:
    before = translator.defaults
    translator.translate(LINES, beam=1, length_penalty=2.0)
    translator.translate_nbest(LINES, 4)
    assert translator.defaults == before


@pytest.mark.skipif(not has_fast_bf16(torch.device("cpu")), reason="no native bf16 on this CPU (emulated: very slow)")
def test_bf16_decoding_agrees_with_fp32(tiny_run: Path) -> None:
    fp32 = Translator.from_run(tiny_run, device="cpu", beam=2, precision="fp32")
    lines = [" ".join(f"w{(7 * i + j) % 10}" for j in range(1 + i % 6)) for i in range(60)]
    reference = fp32.translate(lines)
    bf16 = fp32.translate(lines, precision="bf16")
    same = sum(a == b for a, b in zip(reference, bf16))
    assert same >= 0.8 * len(lines), f"only {same} of {len(lines)} equal"
    assert score(bf16, reference).bleu > 80
    weights = Translator.from_run(tiny_run, device="cpu", dtype="bfloat16", beam=2)
    assert next(weights.model.parameters()).dtype == torch.bfloat16
    assert score(weights.translate(lines), reference).bleu > 80


def test_attention_is_shown_on_the_decoded_ids(translator: Translator) -> None:
    """A hypothesis whose pieces re-tokenise differently (▁w + 1 -> ▁w1) keeps its own pieces."""
    piece = translator.tokenizer.sp.PieceToId
    ids = [piece("▁w"), piece("1"), piece("▁w"), piece("2")]
    if 1 in ids:  # UNK: this vocabulary has no such pieces
        pytest.skip("the tiny vocabulary has no separate '▁w' and digit pieces")
    text = translator.tokenizer.decode([ids])[0]
    assert translator.tokenizer.encode([text])[0] != ids  # the precondition: text alone would lose them
    hypothesis = Hypothesis(text, translator.tokenizer.id_to_piece(ids), ids, 0.0, finished=True)
    maps = translator.attention("w1 w2", hypothesis)
    assert maps.target == ["▁w", "1", "▁w", "2", "</s>"]
    assert maps.cross.shape[2] == 5


@pytest.mark.parametrize("line", ["\x00", "\u00ad", " \u200b\t", "\x00\x01"])
def test_a_line_without_text_translates_to_an_empty_line(translator: Translator, line: str) -> None:
    assert translator.translate(["w1 w2", line]) == [translator.translate(["w1 w2"])[0], ""]


def test_text_that_is_not_unicode_is_a_user_error(translator: Translator) -> None:
    with pytest.raises(UserError, match="input 2: not valid Unicode"):
        translator.translate(["w1", "w2 \ud800"])
    with pytest.raises(UserError, match="input 1: expected text"):
        translator.translate([b"w1"])


def test_attention_has_every_layer_and_head(translator: Translator) -> None:
    maps = translator.attention("w7 w1 w9")
    layers, heads = len(translator.model.encoder.layers), translator.model.encoder.layers[0].self_attn.n_heads
    source, target = len(maps.source), len(maps.target)
    assert maps.source[-1] == "</s>" and maps.target_in[0] == "<s>"
    assert len(maps.target_in) == target
    assert maps.encoder.shape == (layers, heads, source, source)
    assert maps.decoder.shape == (layers, heads, target, target)
    assert maps.cross.shape == (layers, heads, target, source)
    for kind in ("encoder", "decoder", "cross"):
        weights = maps.weights(kind)
        torch.testing.assert_close(weights.sum(-1), torch.ones(layers, heads, weights.size(2)))
    assert maps.decoder[..., 0, 1:].eq(0).all()  # the first position sees only itself
    assert maps.translation == translator.translate(["w7 w1 w9"])[0]
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
    with pytest.raises(UserError, match="checkpoints: no readable step_N.pt checkpoint"):
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
    with pytest.raises(UserError, match=f"{name}: does not match the model in .*config.yaml .*d_ff|size mismatch"):
        Translator.from_run(run, device="cpu", checkpoint=checkpoint)


def test_unknown_decoding_setting_is_a_user_error(tiny_run: Path) -> None:
    with pytest.raises(UserError, match="unknown decoding setting"):
        Translator.from_run(tiny_run, device="cpu", bean=4)
    with pytest.raises(UserError, match="decode.beam"):
        Translator.from_run(tiny_run, device="cpu", beam=0)
