"""data.joint_vocab: false: a run with separate source and target vocabularies trains,
translates, resumes, and the commands that write one vocabulary refuse it in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from transformer_mt.cli import main
from transformer_mt.common.config import ConfigError
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.errors import UserError
from transformer_mt.interop.ctranslate2 import export_ctranslate2
from transformer_mt.interop.huggingface import export_hf
from transformer_mt.runs.directory import RunDir
from transformer_mt.training import fit
from transformer_mt.inference.translator import Translator

from run_helpers import assert_same_state, resume_from

# The numbers task: English number words -> German ones, so the two vocabularies differ.
SEPARATE = dict(data__task="numbers", data__task_size=300, data__vocab_size=60, data__joint_vocab="false",
                model__share_vocab="false")
STEPS = 30
LINES = ["three hundred and twelve", "seven", "forty-one"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    run = tmp_path_factory.mktemp("separate") / "run"
    trainer = fit(tiny_config(train__max_steps=STEPS, train__valid_every=STEPS // 2, **SEPARATE), run, progress=False)
    return run, trainer


def test_each_side_has_its_own_vocabulary(trained) -> None:
    run, trainer = trained
    assert not (run / "tokenizer.model").exists()
    source, target = SentencePieceTokenizer.load(run / "source.model"), SentencePieceTokenizer.load(run / "target.model")
    assert (trainer.cfg.model.src_vocab_size, trainer.cfg.model.tgt_vocab_size) == (len(source), len(target))
    assert RunDir(run).read_config().model.src_vocab_size == len(source)
    source_pieces = set(source.id_to_piece(list(range(len(source)))))
    target_pieces = set(target.id_to_piece(list(range(len(target)))))
    assert "\u2581hundred" in source_pieces and "\u2581hundred" not in target_pieces
    model = trainer.model
    assert model.src_embed is not model.tgt_embed
    assert model.src_embed.lut.weight.shape[0] == len(source) and model.generator.proj.out_features == len(target)


def test_translate_equals_the_trained_model(trained, tmp_path: Path) -> None:
    run, trainer = trained
    source, target = SentencePieceTokenizer.load(run / "source.model"), SentencePieceTokenizer.load(run / "target.model")
    inputs, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inputs.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert main(["translate", str(run), "-i", str(inputs), "-o", str(out), "--checkpoint", "last", "--beam", "2",
                 "--device", "cpu"]) == 0
    loaded = Translator.from_run(run, device="cpu", checkpoint="last", beam=2)
    in_memory = Translator(trainer.model, loaded.tokenizer, trainer.cfg.decode, torch.device("cpu"))
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == in_memory.translate(LINES, beam=2)
    german = ["dreihundertzwölf", "sieben"]
    assert loaded.tokenizer.encode(LINES) == source.encode(LINES)  # the encoder reads source ids
    assert loaded.tokenizer.encode_target(german) == target.encode(german)  # the decoder target ids
    ids = target.encode(german)
    assert loaded.tokenizer.decode(ids) == german and loaded.tokenizer.id_to_piece(ids[0]) == target.id_to_piece(ids[0])


def test_attention_labels_the_source_with_source_pieces(trained) -> None:
    """The attention maps label encoder rows and columns with the source model's pieces (the
    ids the encoder read), the decoder's with the target model's."""
    run, _ = trained
    source, target = SentencePieceTokenizer.load(run / "source.model"), SentencePieceTokenizer.load(run / "target.model")
    translator = Translator.from_run(run, checkpoint="last", device="cpu")
    maps = translator.attention(LINES[0])
    assert maps.source == source.pieces(LINES[0]) + ["</s>"]
    assert set(maps.target) <= set(target.id_to_piece(list(range(len(target)))))


def test_the_exports_refuse_separate_vocabularies_in_one_line(trained, tmp_path: Path) -> None:
    run, _ = trained
    for export in (export_ctranslate2, export_hf):
        with pytest.raises(UserError, match="data.joint_vocab: false") as err:
            export(run, tmp_path / export.__name__, checkpoint="last")
        assert "\n" not in str(err.value)
        assert not (tmp_path / export.__name__).exists()


def test_separate_vocabularies_need_unshared_embeddings() -> None:
    with pytest.raises(ConfigError, match=r"^--data\.joint_vocab=false: false .* needs model\.share_vocab: false$") as err:
        tiny_config(data__joint_vocab="false")
    assert "\n" not in str(err.value)


def test_a_stopped_run_resumes_bit_identically(trained, tmp_path: Path) -> None:
    run, _ = trained
    assert_same_state(resume_from(run, STEPS // 2, tmp_path / "resumed"))