"""`transformer-mt export ctranslate2`: CTranslate2 runs the exported model as we do.

Tiny copy-task runs are trained here for a few seconds (so that outputs end with </s> at
varied lengths, as a trained model's do; a random model's are empty or hit the length
limit), every parameter is then perturbed (so that no bias, LayerNorm or unused
embedding row keeps a value that would hide a mapping mistake), and the run is exported
and compared with our model on the CPU in float32: CTranslate2's `score_batch`
log-probabilities with our teacher-forced log-softmax, and its greedy and beam (length
penalty 0) outputs with `Translator.search`, for pre- and post-norm, tied and untied
embeddings, sinusoidal and learned positions."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import tiny_config
from transformer_mt.cli import main
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.common.errors import UserError
from transformer_mt.model import build_model
from transformer_mt.model.masks import padding_mask
from transformer_mt.runs.directory import RunDir, load_run_model, save_weights
from transformer_mt.training import fit
from transformer_mt.inference.translator import Translator

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="ctranslate2 is not installed (pip install 'transformer-mt[interop]')")
from transformer_mt.interop.ctranslate2 import METADATA, build_spec, export_ctranslate2  # noqa: E402

MAX_POSITIONS = 64
TRAIN_STEPS = 60  # about 2 s a run on 2 cores (at 40 a variant's outputs may all run to the limit)
SOURCES = [
    "w4 w3", "w7", "w1 w9 w2 w5 w0 w8 w8 w3", "w6 w6 w6", "w2 w4 w1 w0 w9 w9 w7 w3 w5 w6",
    "w5 ç w1",  # ç is outside the vocabulary: <unk> for both
    "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w0 w1 w2 w3 w4",
]
TARGETS = ["w4 w3", "w1 w1 w1 w1 w1", "w9", "", "w2 w4 w1 w0 w9 w9 w7 w3 w5 w6 w0", "w5 ç w1", "w8 w0"]

# name: (model.norm_first, model.tie_embeddings, model.share_vocab, model.positional, model.decoder_layers)
VARIANTS = {
    "pre-norm, tied, shared": (True, True, True, "sinusoidal", 0),
    "post-norm, untied, own source embeddings": (False, False, False, "sinusoidal", 0),
    "pre-norm, untied, shared": (True, False, True, "sinusoidal", 0),
    "post-norm, tied, own source embeddings": (False, True, False, "sinusoidal", 0),
    "post-norm, tied, shared, learned positions": (False, True, True, "learned", 0),
    "pre-norm, tied, shared, a one-layer decoder": (True, True, True, "sinusoidal", 1),
}


@dataclass
class Exported:
    run: Path
    out: Path
    ours: Translator
    theirs: "ctranslate2.Translator"

    def pieces(self, lines: list[str]) -> list[list[str]]:
        return [self.ours.tokenizer.pieces(line) for line in lines]


def make_run(run: Path, norm_first: bool, tie: bool, share: bool, positional: str, decoder_layers: int,
             seed: int) -> Path:
    """A copy-task run trained for TRAIN_STEPS steps whose best.safetensors holds the
    trained weights with noise added to every parameter."""
    flag = {True: "true", False: "false"}
    fit(tiny_config(model__norm_first=flag[norm_first], model__tie_embeddings=flag[tie],
                    model__share_vocab=flag[share], model__positional=positional, model__decoder_layers=decoder_layers,
                    model__max_positions=MAX_POSITIONS,
                    data__max_len=MAX_POSITIONS - 4, data__task_size=1000, train__max_steps=TRAIN_STEPS,
                    train__valid_every=TRAIN_STEPS, train__warmup_steps=50, train__lr_scale=0.5, train__schedule="paper",
                    decode__max_len_b=200),  # every output limit is then the table's: max_positions - 1
        run, progress=False)
    _, _, model = load_run_model(RunDir(run))
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():  # weights, biases, LayerNorm gains and shifts, tied ones once
            parameter.add_(torch.randn_like(parameter) * 0.03)
    save_weights(model, RunDir(run).best)
    return run


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Exported]:
    """Each variant trained TRAIN_STEPS steps and exported: the suite's slowest setup (~6 s a
    variant), one variant for each way the export maps our weights (layer order, tying, a source
    embedding of its own, learned positions, a shallower decoder)."""
    found = {}
    for seed, (name, variant) in enumerate(VARIANTS.items(), start=1):
        root = tmp_path_factory.mktemp(f"variant{seed}")
        run = make_run(root / "run", *variant, seed)
        out = export_ctranslate2(run, root / "ct2")
        theirs = ctranslate2.Translator(str(out), device="cpu", compute_type="float32",
                                        intra_threads=torch.get_num_threads())
        found[name] = Exported(run, out, Translator.from_run(run, device="cpu"), theirs)
    return found


def teacher_forced(model: nn.Module, src: list[int], tgt: list[int], eos: bool = True) -> torch.Tensor:
    """Our log P(y_t | y_<t, x) of each token of tgt (+ </s> with `eos`), from one teacher-forced pass."""
    target_out = tgt + [EOS_ID] if eos else tgt
    source = torch.tensor([src + [EOS_ID]])
    target_in = torch.tensor([[BOS_ID] + target_out[:-1]])
    with torch.no_grad():
        log_probs = model.generator(model(source, target_in, padding_mask(source, PAD_ID)))[0]
    return log_probs.gather(1, torch.tensor(target_out)[:, None])[:, 0]


def search_options(exp: Exported, beam: int, alpha: float) -> dict:
    """CTranslate2 options that search as `Translator.search` does: no minimum length (its
    default is 1), our length limit (max_source subwords + </s>), scores returned."""
    return dict(beam_size=beam, length_penalty=alpha, min_decoding_length=0,
                max_decoding_length=exp.ours.max_source + 1, return_scores=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_scores_equal_our_log_probs(exported: dict[str, Exported], variant: str) -> None:
    exp = exported[variant]
    sources, targets = exp.pieces(SOURCES), exp.pieces(TARGETS)
    results = exp.theirs.score_batch(sources, targets)  # one padded batch
    for source, target, result in zip(SOURCES, TARGETS, results):
        src, tgt = exp.ours.tokenizer.encode([source, target])
        assert result.tokens == exp.ours.tokenizer.id_to_piece(tgt + [EOS_ID])
        ours = teacher_forced(exp.ours.model, src, tgt)
        assert torch.tensor(result.log_probs) == pytest.approx(ours, abs=1e-4, rel=0)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_and_beam_outputs_equal_ours(exported: dict[str, Exported], variant: str, beam: int) -> None:
    exp = exported[variant]
    ours = exp.ours.search(SOURCES, exp.ours.settings(beam=beam, length_penalty=0.0))
    theirs = exp.theirs.translate_batch(exp.pieces(SOURCES), **search_options(exp, beam, 0.0))
    assert [result.hypotheses[0] for result in theirs] == [row[0].tokens for row in ours]
    assert [result.scores[0] for result in theirs] == pytest.approx([row[0].score for row in ours], abs=1e-3)
    assert any(row[0].finished and row[0].ids for row in ours), "no output ended with </s> before the limit"


@pytest.mark.parametrize("variant", list(VARIANTS)[:2])
def test_length_penalty_divides_by_length_not_gnmt(exported: dict[str, Exported], variant: str) -> None:
    """CTranslate2 scores log P(Y | X) / |Y| ** alpha (|Y| with </s>); we divide by the
    GNMT ((5 + |Y|) / 6) ** alpha. The same alpha therefore ranks hypotheses of different
    lengths differently, and beam outputs with alpha > 0 may differ (documented)."""
    exp, alpha = exported[variant], 0.6
    theirs = exp.theirs.translate_batch(exp.pieces(SOURCES), return_end_token=True,
                                        **search_options(exp, 4, alpha))
    for source, result in zip(SOURCES, theirs):
        tokens = result.hypotheses[0]
        finished = bool(tokens) and tokens[-1] == "</s>"
        ids = [exp.ours.tokenizer.sp.PieceToId(piece) for piece in tokens[: len(tokens) - finished]]
        log_prob = float(teacher_forced(exp.ours.model, exp.ours.tokenizer.encode([source])[0], ids, finished).sum())
        assert result.scores[0] == pytest.approx(log_prob / len(tokens) ** alpha, abs=1e-3)


def test_too_long_input_is_refused_or_truncated_as_documented(exported: dict[str, Exported]) -> None:
    exp = next(iter(exported.values()))
    line = " ".join(SOURCES[-1:] * 6)
    (pieces,) = exp.pieces([line])
    assert len(pieces) > exp.ours.max_source
    greedy = search_options(exp, 1, 0.0)
    with pytest.raises(RuntimeError, match=f"No position encodings are defined for positions >= {MAX_POSITIONS}"):
        exp.theirs.translate_batch([pieces], **greedy)
    # max_input_length counts </s>: max_positions keeps max_positions - 1 subwords, our Translator's truncation
    max_positions = json.loads((exp.out / METADATA).read_text())["max_positions"]
    assert max_positions == MAX_POSITIONS
    (result,) = exp.theirs.translate_batch([pieces], max_input_length=max_positions, **greedy)
    (ours,) = exp.ours.search([line], exp.ours.settings(beam=1, length_penalty=0.0))
    assert result.hypotheses[0] == ours[0].tokens
    assert result.scores[0] == pytest.approx(ours[0].score, abs=5e-4)
    with pytest.raises(RuntimeError, match="No position encodings"):  # the decoder has the same table
        exp.theirs.translate_batch([pieces[:5]], beam_size=1, min_decoding_length=max_positions + 1,
                                   max_decoding_length=max_positions + 2)


def test_int8_export_loads_and_translates(exported: dict[str, Exported], tmp_path: Path) -> None:
    exp = next(iter(exported.values()))
    out = export_ctranslate2(exp.run, tmp_path / "int8", quantization="int8")
    assert (out / "model.bin").stat().st_size < 0.5 * (exp.out / "model.bin").stat().st_size
    theirs = ctranslate2.Translator(str(out), device="cpu", intra_threads=torch.get_num_threads())
    results = theirs.translate_batch(exp.pieces(SOURCES), beam_size=2, max_input_length=MAX_POSITIONS,
                                     max_decoding_length=MAX_POSITIONS)
    assert len(results) == len(SOURCES)
    vocabulary = set(exp.ours.tokenizer.id_to_piece(list(range(len(exp.ours.tokenizer)))))
    assert all(set(result.hypotheses[0]) <= vocabulary for result in results)


def test_cli_writes_the_folder_atomically_and_refuses_in_one_line(
    exported: dict[str, Exported], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = next(iter(exported.values())).run
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(run), "--out", str(out), "--quantization", "int8_float32"]) == 0
    assert {p.name for p in out.iterdir()} == {"model.bin", "config.json", "shared_vocabulary.json",
                                             "tokenizer.model", "tokenizer.vocab", METADATA}
    config = json.loads((out / "config.json").read_text())
    assert (config["add_source_eos"], config["add_source_bos"], config["decoder_start_token"]) == (True, False, "<s>")
    assert json.loads((out / METADATA).read_text())["quantization"] == "int8_float32"
    capsys.readouterr()
    refusals = [
        (["--out", str(out)], "not empty"),  # exists: --force needed
        (["--out", str(run)], "holds the run"),
        (["--out", str(run / "config.yaml")], "not a folder"),
        (["--out", str(tmp_path / "x"), "--checkpoint", "average"], "average.safetensors: missing"),
    ]
    for extra, message in refusals:
        assert main(["export", "ctranslate2", str(run), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and err.startswith("transformer-mt export: error:")
    assert main(["export", "ctranslate2", str(tmp_path / "nothing"), "--out", str(tmp_path / "y")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    (out / "stale.txt").write_text("old")
    assert main(["-q", "export", "ctranslate2", str(run), "--out", str(out), "--force"]) == 0
    assert not (out / "stale.txt").exists() and (out / "model.bin").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]  # no temporary folders left


def test_unsupported_models_are_refused(exported: dict[str, Exported], monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    exp = next(iter(exported.values()))
    with pytest.raises(UserError, match="model.activation='tanh' has no CTranslate2 equivalent"):
        build_spec(exp.ours.model, exp.ours.tokenizer, activation="tanh")
    model = build_model(RunDir(exp.run).read_config().model)
    model.extra = nn.Linear(2, 2)  # a model option the export does not know
    with pytest.raises(UserError, match=r"parameters the CTranslate2 export does not map \(extra.weight, extra.bias\)"):
        build_spec(model, exp.ours.tokenizer)
    del model.extra
    model.decoder.layers[1].sublayer[2].norm_first = not model.decoder.layers[1].sublayer[2].norm_first
    with pytest.raises(UserError, match="mix pre- and post-norm"):
        build_spec(model, exp.ours.tokenizer)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if not installed
    with pytest.raises(UserError, match=r"pip install 'transformer-mt\[interop\]'"):
        export_ctranslate2(exp.run, tmp_path / "out")
    with pytest.raises(UserError, match="quantization must be one of"):
        export_ctranslate2(exp.run, tmp_path / "out", quantization="int4")


def test_the_core_package_does_not_import_ctranslate2() -> None:
    code = ("import sys; from transformer_mt.cli import build_parser; import transformer_mt.inference.translator; "
            "build_parser(); print('ctranslate2' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
