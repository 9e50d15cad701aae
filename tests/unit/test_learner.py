"""A learner's own model driven by the toolkit (learner/model.py), checked against what their
own code computes: greedy decoding equals a loop written here from their encode, decode and
generator (or their forward), beam 1 equals greedy, the label-smoothed loss equals section
5.4's formula on their output (log-probabilities or logits), the attention the page shows
equals what their modules computed, their state_dict stays theirs, and a file without mask
functions gets the kit's masks in the encoding its attention reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_mt.common.errors import UserError
from transformer_mt.common.paper_equations import smoothed_distribution
from transformer_mt.common.specials import BOS_ID, EOS_ID, NEVER_EMITTED, PAD_ID
from transformer_mt.decoding.beam import beam_search
from transformer_mt.decoding.greedy import greedy_decode
from transformer_mt.learner.building import Sizes
from transformer_mt.learner.loading import load_file
from transformer_mt.learner.model import LearnerModel, LearnerSource, build_learner, output_fits, outputs_of
from transformer_mt.model.masks import padding_mask
from transformer_mt.training.learner import LearnerFile, check_before_training, untrainable

from check_cases.mistakes import BY_NAME
from transformer_mt.training.loss import LabelSmoothingLoss

CASES = Path(__file__).resolve().parents[1] / "check_cases"
SIZES = Sizes(src_vocab=23, tgt_vocab=19, N=2, d_model=32, d_ff=48, h=4, dropout=0.0, max_len=64)
LIMIT = 9


def learner(name: str, seed: int = 3) -> LearnerModel:
    path = CASES / f"{name}.py"
    return build_learner(load_file(path), LearnerSource(path), SIZES, seed).eval()


def sources() -> torch.Tensor:
    """Three sources of unequal lengths, padded, eos-ended: (3, 7)."""
    rows = [[5, 9, 4, 11, 7, 6, EOS_ID], [8, 12, 10, EOS_ID], [13, 4, 5, 9, EOS_ID]]
    return torch.tensor([row + [PAD_ID] * (7 - len(row)) for row in rows])


def next_log_probs(model: LearnerModel, namespace, src: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Their own code (`namespace`: their file, imported), called as the notes' greedy_decode
    calls it: (1, V) log-probabilities."""
    theirs = model.learner
    if model.convention.name == "annotated":
        src_mask, tgt_mask = namespace.create_masks(src, ys, PAD_ID)
        out = theirs.decode(theirs.encode(src, src_mask), src_mask, ys, tgt_mask)
        return theirs.generator(out[:, -1])
    src_mask, tgt_mask = namespace.create_masks(src, ys, type("opt", (), {"src_pad": PAD_ID, "trg_pad": PAD_ID}))
    return torch.log_softmax(theirs(src, ys, src_mask, tgt_mask)[:, -1], dim=-1)


def hand_greedy(model: LearnerModel, src: torch.Tensor) -> list[int]:
    """One unpadded source (1, S) decoded greedily by a loop over their own code; pad and bos
    are never chosen, as the toolkit's decoders ban them."""
    ys, out, namespace = torch.tensor([[BOS_ID]]), [], load_file(model.source.path)
    for _ in range(LIMIT + 1):
        log_probs = next_log_probs(model, namespace, src, ys)
        log_probs[:, list(NEVER_EMITTED)] = float("-inf")
        token = int(log_probs.argmax(-1))
        out.append(token)
        if token == EOS_ID:
            break
        ys = torch.cat([ys, torch.tensor([[token]])], dim=1)
    return out


@pytest.mark.parametrize("convention", ["annotated", "tutorial"])
def test_greedy_equals_a_loop_over_their_own_code_and_beam_1_equals_greedy(convention: str) -> None:
    model, src = learner(convention), sources()
    with torch.inference_mode():
        tokens, scores = greedy_decode(model, src, LIMIT, BOS_ID, EOS_ID, PAD_ID, banned=NEVER_EMITTED)
        beam_tokens, beam_scores = beam_search(model, src, 1, LIMIT, BOS_ID, EOS_ID, PAD_ID, length_penalty=0.0,
                                               banned=NEVER_EMITTED)
        for row, source in zip(tokens.tolist(), src):
            alone = source[source != PAD_ID][None]
            assert [t for t in row if t != PAD_ID] == hand_greedy(model, alone)
    assert torch.equal(beam_tokens[:, 0, : tokens.size(1)], tokens)
    assert torch.allclose(beam_scores[:, 0], scores, atol=1e-5)


@pytest.mark.parametrize("convention", ["annotated", "tutorial"])
def test_the_smoothed_loss_of_their_output_is_section_5_4s(convention: str) -> None:
    model = learner(convention)
    src, tgt = sources(), torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, PAD_ID, PAD_ID], [BOS_ID, 9, 10, 11]])
    gold = torch.tensor([[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, EOS_ID]])
    with torch.no_grad():
        scores = model.generator.logits(model(src, tgt, padding_mask(src, PAD_ID)))  # (B, T, V)
        loss = LabelSmoothingLoss(SIZES.tgt_vocab, PAD_ID, 0.1)(scores, gold)
    # their output normalised once more: log-probabilities stay as they are, logits become them
    log_probs = torch.log_softmax(scores.double(), dim=-1)[gold != PAD_ID]  # (N, V)
    target = smoothed_distribution(gold[gold != PAD_ID], SIZES.tgt_vocab, 0.1).double()  # (N, V)
    assert float(loss) == pytest.approx(float(-(target * log_probs).sum()), rel=1e-5)


def test_the_attention_the_page_shows_is_what_their_modules_computed() -> None:
    model = learner("annotated")
    layers = model.attention_layers()
    assert [len(layers[kind]) for kind in ("encoder", "decoder", "cross")] == [2, 2, 2]
    assert layers["cross"][0] is model.learner.decoder.layers[0].src_attn
    src, tgt = sources()[:1], torch.tensor([[BOS_ID, 5, 6]])
    modules = [module for kind in ("encoder", "decoder", "cross") for module in layers[kind]]
    with torch.no_grad(), model.recorded_attention(modules) as recorded:
        model(src, tgt)
    for module in modules:  # the Annotated Transformer keeps its last weights in .attn
        assert torch.equal(recorded.weights(module), module.attn)
    assert recorded.weights(layers["cross"][1]).shape == (1, SIZES.h, 3, 7)


def test_their_state_dict_stays_theirs_key_for_key() -> None:
    model = learner("annotated")
    assert list(model.state_dict()) == list(model.learner.state_dict())
    other = learner("annotated", seed=4)
    other.load_state_dict(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))


def test_an_output_that_is_not_over_the_target_vocabulary_is_refused(tmp_path: Path) -> None:
    text = (CASES / "annotated.py").read_text().replace("Generator(d_model, tgt_vocab)", "Generator(d_model, d_model)")
    path = tmp_path / "wide.py"
    path.write_text(text)
    model = build_learner(load_file(path), LearnerSource(path), SIZES, 0)
    with pytest.raises(UserError, match=r"wide.py: the model's output .* shape \(3, 6, 32\), not \(3, 6, 19\)"):
        output_fits(model, path)


def test_without_mask_functions_their_model_gets_the_kit_masks_in_the_encoding_it_reads(tmp_path: Path) -> None:
    text = (CASES / "annotated.py").read_text(encoding="utf-8")
    for old, new in (("masked_fill(~mask.bool(), -1e9)", "masked_fill(mask.bool(), -1e9)"),  # True = hidden
                     ("def create_masks(", "def _create_masks("), ("def subsequent_mask(", "def _subsequent_mask(")):
        text = text.replace(old, new)
    path = tmp_path / "hidden.py"
    path.write_text(text, encoding="utf-8")
    module = load_file(path)
    encoding = check_before_training(LearnerFile(module, LearnerSource(path), path), SIZES, checks=True)
    assert encoding == "blocked"
    src, tgt = sources(), torch.tensor([[BOS_ID, 5, 6, 7, 8]] * 3)
    later = tgt.clone()
    later[:, 3:] = 9
    for source, sees_the_future in ((LearnerSource(path, None, encoding), False), (LearnerSource(path), True)):
        model = build_learner(module, source, SIZES, 0).eval()
        with torch.no_grad():
            first, second = model.generator.logits(model(src, tgt)), model.generator.logits(model(src, later))
        assert torch.equal(first[:, :3], second[:, :3]) is not sees_the_future


@pytest.mark.parametrize("generator, stops", [("self.proj(x)", False), ("F.softmax(self.proj(x), dim=-1)", True)])
def test_logits_from_the_generator_train_but_probabilities_stop_the_run(tmp_path: Path, generator: str,
                                                                       stops: bool) -> None:
    """A generator without its log_softmax fails check's `output` yet trains the same here (the
    loss and the decoders normalise); one giving probabilities would be trained through a second
    softmax, and stops the run."""
    text = (CASES / "annotated.py").read_text(encoding="utf-8")
    path = tmp_path / "generator.py"
    path.write_text(text.replace("return F.log_softmax(self.proj(x), dim=-1)", f"return {generator}"), encoding="utf-8")
    learner_file = LearnerFile(load_file(path), LearnerSource(path), path)
    if stops:
        with pytest.raises(UserError, match="fails check output"):
            check_before_training(learner_file, SIZES, checks=True)
    else:
        assert check_before_training(learner_file, SIZES, checks=True) is None  # their create_masks


@pytest.mark.parametrize("flattened", [False, True], ids=["as_written", "flattened"])
def test_decoding_feeds_the_tutorials_output_layer_the_last_position_where_that_gives_the_same(
        tmp_path: Path, flattened: bool) -> None:
    """Their `self.out` gets one position per sentence at each step (the greedy test above shows
    the tokens are those of their forward on the whole prefix), unless their forward flattens the
    positions into the batch before it: a slice would then be wrong, and it gets the whole prefix."""
    text = (CASES / "tutorial.py").read_text(encoding="utf-8")
    if flattened:
        text = text.replace("return self.out(self.decoder(trg, e_outputs, src_mask, trg_mask))",
                            "x = self.decoder(trg, e_outputs, src_mask, trg_mask)\n"
                            "        return self.out(x.reshape(-1, x.size(-1))).reshape(*x.shape[:2], -1)")
    path = tmp_path / "mine.py"
    path.write_text(text, encoding="utf-8")
    model = build_learner(load_file(path), LearnerSource(path), SIZES, 3).eval()
    calls: list[tuple[torch.Size, int]] = []  # (the prefix (B, T), the positions `out` got)
    prefix = model.learner.register_forward_pre_hook(lambda _m, args: calls.append((args[1].shape, 0)))
    fed = model.learner.out.register_forward_hook(
        lambda _m, args, _out: calls.append((calls.pop()[0], args[0].numel() // SIZES.d_model)))
    with torch.inference_mode():
        tokens, _ = greedy_decode(model, sources(), LIMIT, BOS_ID, EOS_ID, PAD_ID, banned=NEVER_EMITTED)
    prefix.remove()
    fed.remove()
    assert len(calls) > 6
    for (batch, length), positions in calls[5:]:  # after encoding (its pass and the comparison's), the
        # first step and the comparison's two passes
        assert positions == batch * (length if flattened else 1)
    if flattened:
        with torch.inference_mode():
            for row, source in zip(tokens.tolist(), sources()):
                assert [t for t in row if t != PAD_ID] == hand_greedy(model, source[source != PAD_ID][None])


@pytest.mark.parametrize("reads_src", [False, True], ids=["as_written", "source_read_outside_the_encoder"])
def test_decoding_runs_the_tutorials_encoder_once_per_source_where_that_gives_the_same(
        tmp_path: Path, reads_src: bool) -> None:
    """Their encoder's output is kept from one pass and given back at every step, unless their
    forward reads the source ids outside it too: the ids decoding would then give it (1 at real
    tokens) would change its scores, so it encodes the source again at every step, as written."""
    text = (CASES / "tutorial.py").read_text(encoding="utf-8")
    if reads_src:
        text = text.replace("e_outputs = self.encoder(src, src_mask)",
                            "e_outputs = self.encoder(src, src_mask) + self.encoder.embed(src)")
    path = tmp_path / "mine.py"
    path.write_text(text, encoding="utf-8")
    model = build_learner(load_file(path), LearnerSource(path), SIZES, 3).eval()
    with torch.inference_mode(), outputs_of(model.learner.encoder.layers[0]) as encoded:
        tokens, _ = greedy_decode(model, sources(), LIMIT, BOS_ID, EOS_ID, PAD_ID, banned=NEVER_EMITTED)
    assert len(encoded) == 1 if not reads_src else len(encoded) > tokens.size(1)
    with torch.inference_mode():
        for row, source in zip(tokens.tolist(), sources()):
            assert [t for t in row if t != PAD_ID] == hand_greedy(model, source[source != PAD_ID][None])


def test_a_builder_with_one_vocabulary_size_is_refused_for_a_run_with_two(tmp_path: Path) -> None:
    """make_model(vocab, ...) built for a run whose tokenizer has 23 source and 19 target tokens:
    one line naming both, not a model silently built with 23 on both sides."""
    mistake = BY_NAME["one_vocabulary"]
    path = mistake.case.write(tmp_path)
    model = build_learner(load_file(path), LearnerSource(path), SIZES, 0)
    assert (model.sizes.src_vocab, model.sizes.tgt_vocab) == (23, 23)
    problem = untrainable(model, path, SIZES)
    assert problem is not None and "23 source and 19 target tokens" in problem
    assert all(part in problem for part in mistake.says), problem
    assert untrainable(learner("annotated"), CASES / "annotated.py", SIZES) is None
