"""Plots: every `plot` command writes an image of the expected size; attention weights are
distributions over the keys that masks allow."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_mt.cli import main
from transformer_mt.common.specials import PAD_ID
from transformer_mt.common.errors import UserError
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.recording import record_attention
from transformer_mt.inference.translator import Translator
from transformer_mt.viz.curves import TRAIN_KEYS, VALID_KEYS, Series
from transformer_mt.viz import (
    DPI,
    KINDS,
    attention_grid_figure,
    attention_head_figure,
    attention_maps,
    encoding_similarity,
    curves_figure,
    principal_components,
    read_metrics,
)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def pixels_at_100_per_inch(fig) -> tuple[int, int]:
    """The (width, height) docs/plots.md promises a PNG of `fig`: its size in inches, as
    matplotlib holds it, at 100 pixels per inch (not viz's DPI or pixel_size, which the PNGs
    under test are made with)."""
    width, height = fig.get_size_inches()
    return round(width * 100), round(height * 100)


def plot(tmp_path: Path, *args: str, name: str = "out.png") -> Path:
    out = tmp_path / name
    assert main(["-q", "plot", *args, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def translator(tiny_run: Path) -> Translator:
    return Translator.from_run(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def maps(translator: Translator):
    return attention_maps(translator, "w3 w1 w4 w1 w5")


@pytest.mark.parametrize(
    "args, size",
    [
        (["encodings"], (12, 4.8)),
        (["encodings", "--d-model", "16", "--positions", "20"], (12, 4.8)),
        (["masks"], (15, 5)),
        (["schedule"], (10, 5)),
        (["schedule", "--config", "tiny", "--steps", "500"], (14, 5)),
        (["smoothing", "--epsilon", "0.2", "--vocab-size", "5"], (15, 4.8)),
    ],
)
def test_mechanism_plots_write_png_of_figure_size(tmp_path: Path, args: list[str], size: tuple[float, float]) -> None:
    out = plot(tmp_path, *args)
    assert out.stat().st_size > 10_000
    assert png_size(out) == (round(size[0] * DPI), round(size[1] * DPI))


def test_svg_output_has_figure_size_in_points(tmp_path: Path) -> None:
    out = plot(tmp_path, "smoothing", name="smoothing.svg")
    head = out.read_text(encoding="utf-8")[:2000]
    assert re.search(r'width="1080pt"', head) and re.search(r'height="345.6pt"', head)
    assert "Label smoothing" in out.read_text(encoding="utf-8")


def test_masks_from_a_run_batch(tmp_path: Path, tiny_run: Path) -> None:
    out = plot(tmp_path, "masks", "--run", str(tiny_run), "--batch-size", "3")
    assert png_size(out) == (1500, 500)


@pytest.mark.parametrize("smoothing,title", [(0.0, "Loss"), (0.1, "Loss (label-smoothed, epsilon 0.1)")])
def test_curves_say_what_the_loss_and_bleu_are(smoothing: float, title: str) -> None:
    """The loss panel says label-smoothed only where it was; BLEU names its tokenization."""
    series = {key: Series([1, 2], [1.0, 0.5]) for key in TRAIN_KEYS + VALID_KEYS}
    figure = curves_figure(series, "run", label_smoothing=smoothing, bleu_tokenize="char")
    loss, _, scores, _ = figure.axes
    assert loss.get_title() == title
    assert [text.get_text() for text in scores.get_legend().get_texts()] == ["BLEU (tok:char)", "chrF"]


def test_curves_of_a_run(tmp_path: Path, tiny_run: Path) -> None:
    out = plot(tmp_path, "curves", str(tiny_run))
    assert png_size(out) == (1200, 800)
    assert out.stat().st_size > 20_000


def test_curves_while_training_skip_half_written_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    events = [
        {"event": "train", "step": 10, "loss": 5.0, "ppl": 148.4, "lr": 1e-4},
        {"event": "train", "step": 20, "loss": 4.0, "ppl": 54.6, "lr": 2e-4},
        {"event": "valid", "step": 20, "valid_loss": 4.5, "valid_ppl": 90.0, "bleu": 1.5, "chrf": 10.0},
        {"event": "train", "step": 20, "loss": 3.9, "ppl": 49.4, "lr": 2e-4},
    ]
    text = "".join(json.dumps(e) + "\n" for e in events) + '{"event": "train", "step": 30, "lo'
    (run / "metrics.jsonl").write_text(text, encoding="utf-8")
    series = read_metrics(run)
    assert series["loss"].steps == [10, 20] and series["loss"].values == [5.0, 3.9]
    assert series["bleu"].values == [1.5]
    assert png_size(plot(tmp_path, "curves", str(run))) == (1200, 800)


def test_curves_without_events_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"event": "start"}\n', encoding="utf-8")
    with pytest.raises(UserError, match="no training or validation events"):
        read_metrics(tmp_path)
    assert main(["plot", "curves", str(tmp_path), "--out", str(tmp_path / "c.png")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_attention_command_writes_one_grid_per_kind(tmp_path: Path, tiny_run: Path, maps) -> None:
    out = tmp_path / "attn.png"
    assert main(["-q", "plot", "attention", str(tiny_run), "w3 w1 w4 w1 w5", "--out", str(out)]) == 0
    for kind in KINDS:
        path = tmp_path / f"attn-{kind}.png"
        assert png_size(path) == pixels_at_100_per_inch(attention_grid_figure(maps, kind))
        assert path.stat().st_size > 20_000


def test_attention_single_layer_and_head(tmp_path: Path, tiny_run: Path, maps) -> None:
    out = tmp_path / "cross.svg"
    args = ["-q", "plot", "attention", str(tiny_run), "w3 w1 w4 w1 w5", "--kind", "cross",
            "--layer", "2", "--head", "1", "--out", str(out)]
    assert main(args) == 0
    assert "layer 2, head 1" in out.read_text(encoding="utf-8")
    assert png_size(plot(tmp_path, "attention", str(tiny_run), "w3 w1 w4 w1 w5", "--kind", "encoder", "--layer", "1",
                         "--head", "2")) == pixels_at_100_per_inch(attention_head_figure(maps, "encoder", 1, 2))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--layer", "1"], "--layer and --head together"),
        (["--layer", "99", "--head", "1"], "--layer must be between 1 and "),
        (["--layer", "1", "--head", "99"], "--head must be between 1 and "),
        (["--out", "attn.pdf"], "must end in .png or .svg"),
    ],
)
def test_attention_mistakes_are_one_line_errors(
    tiny_run: Path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    assert main(["plot", "attention", str(tiny_run), "w1 w2", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.fixture(scope="module")
def shallow_decoder_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy-task run with 2 encoder layers and 1 decoder layer (model.decoder_layers)."""
    from conftest import tiny_config
    from transformer_mt.training import fit

    run = tmp_path_factory.mktemp("shallow_decoder") / "run"
    fit(tiny_config(model__decoder_layers=1, train__max_steps=30, train__valid_every=30, data__task_size=300),
        run, progress=False)
    return run


def test_a_shallower_decoder_has_its_own_layers_in_every_view(shallow_decoder_run: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    """Encoder attention has the encoder's 2 layers, decoder and cross attention the
    decoder's 1: in the maps, the grid figure, the layer check and the web payload."""
    from transformer_mt.server.translation_service import attention_payload

    maps = attention_maps(Translator.from_run(shallow_decoder_run, device="cpu"), "w3 w1 w4")
    assert (maps.layers("encoder"), maps.layers("decoder"), maps.layers("cross")) == (2, 1, 1)
    assert maps.cross.shape[:2] == (1, maps.n_heads) and maps.encoder.shape[:2] == (2, maps.n_heads)
    heads = maps.n_heads
    assert len(attention_grid_figure(maps, "encoder").axes) == 2 * heads + 1  # + the colour bar
    assert len(attention_grid_figure(maps, "cross").axes) == 1 * heads + 1
    maps.check_layer_head(2, 1, kind="encoder")
    with pytest.raises(UserError, match="--layer must be between 1 and 1"):
        maps.check_layer_head(2, 1, kind="cross")
    payload = attention_payload(maps)
    assert (payload["layers"], payload["decoder_layers"], len(payload["decoder"])) == (2, 1, 1)
    args = ["plot", "attention", str(shallow_decoder_run), "w1 w2", "--layer", "2", "--head", "1",
            "--out", str(tmp_path / "a.png")]
    assert main(args) == 2  # every kind: the decoder's has no layer 2
    err = capsys.readouterr().err
    assert "--layer must be between 1 and 1" in err and err.count("\n") == 1
    assert main([*args[:-4], "--kind", "encoder", "--layer", "2", "--head", "1", "--out", str(tmp_path / "e.png")]) == 0


def test_empty_sentence_is_a_user_error(translator: Translator) -> None:
    with pytest.raises(UserError, match="empty"):
        attention_maps(translator, "   ")


def test_attention_maps_follow_the_translation(translator: Translator, maps) -> None:
    assert maps.translation == translator.translate(["w3 w1 w4 w1 w5"])[0]
    assert maps.source[-1] == "</s>" and maps.target_in[0] == "<s>"
    assert maps.target_in[1:] == maps.target[:-1]
    layers, heads = maps.n_layers, maps.n_heads
    assert maps.encoder.shape == (layers, heads, len(maps.source), len(maps.source))
    assert maps.decoder.shape == (layers, heads, len(maps.target), len(maps.target))
    assert maps.cross.shape == (layers, heads, len(maps.target), len(maps.source))


def test_forced_attention_along_the_translation_equals_the_translators(translator: Translator, maps) -> None:
    best = translator.search(["w3 w1 w4 w1 w5"])[0][0]
    forced = translator.attention("w3 w1 w4 w1 w5", best)
    assert (forced.source, forced.target_in) == (maps.source, maps.target_in)
    for kind in KINDS:
        torch.testing.assert_close(forced.weights(kind), maps.weights(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_attention_rows_sum_to_one(maps, kind: str) -> None:
    weights = maps.weights(kind)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_decoder_never_attends_to_later_positions(maps) -> None:
    length = maps.decoder.size(-1)
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    assert (maps.decoder[..., future] == 0).all()
    assert (maps.decoder[..., ~future] > 0).any()


def test_padded_keys_get_zero_weight(translator: Translator) -> None:
    """In a padded batch no query (encoder or cross-attention) looks at a padding position."""
    model = translator.model
    ids = translator.tokenizer.encode(["w1 w2 w3 w4 w5 w6", "w7"])
    width = max(len(s) for s in ids) + 1
    src = torch.tensor([s + [3] + [PAD_ID] * (width - len(s) - 1) for s in ids])
    tgt = torch.tensor([[2, 5, 6], [2, 7, PAD_ID]])
    with record_attention(model) as recorded:
        with torch.inference_mode():
            model(src, tgt, padding_mask(src, PAD_ID))
        stored = [recorded.weights(layer.self_attn) for layer in model.encoder.layers]
        stored += [recorded.weights(layer.src_attn) for layer in model.decoder.layers]
    pad = src == PAD_ID  # (B, S)
    assert pad.any()
    for weights in stored:  # (B, H, Tq, S)
        assert (weights.masked_select(pad[:, None, None, :].expand_as(weights)) == 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_encoding_dot_products_depend_on_the_distance_alone() -> None:
    """PE(p) . PE(q) = sum_i cos(w_i (p - q)), w_i = 10000^(-2i / d): computed here from
    the formula, not from the table."""
    d_model, positions = 16, 40
    similarity = encoding_similarity(d_model, positions)
    frequencies = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    for p, q in [(0, 0), (3, 9), (17, 2), (39, 0), (20, 21)]:
        assert similarity[p, q] == pytest.approx(np.cos(frequencies * (p - q)).sum(), abs=1e-5)
    for k in range(positions):  # constant along every diagonal, the largest on the main one
        diagonal = np.diagonal(similarity, offset=k)
        assert np.ptp(diagonal) < 1e-5
    assert similarity[5, 5] == pytest.approx(d_model / 2) and (similarity <= d_model / 2 + 1e-6).all()


def test_encodings_similarity_plot(tmp_path: Path) -> None:
    out = plot(tmp_path, "encodings", "--similarity", "--d-model", "32", "--positions", "50")
    assert png_size(out) == (round(12 * DPI), round(4.8 * DPI))


def test_principal_components_match_numpy() -> None:
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(300, 8, generator=generator) * torch.tensor([5.0, 3.0, 1, 1, 1, 1, 1, 0.5])
    points, explained = principal_components(weights)
    centered = weights.double().numpy() - weights.double().numpy().mean(axis=0)
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(centered, rowvar=False))
    top = eigenvectors[:, ::-1][:, :2]  # largest first
    for j in range(2):  # each component up to its sign
        assert min(np.abs(points[:, j] - centered @ top[:, j]).max(),
                   np.abs(points[:, j] + centered @ top[:, j]).max()) < 1e-8
    np.testing.assert_allclose(explained, eigenvalues[::-1][:2] / eigenvalues.sum(), rtol=1e-8)


def test_embeddings_plot_of_a_run(tmp_path: Path, tiny_run: Path) -> None:
    out = plot(tmp_path, "embeddings", str(tiny_run), "--labels", "10")
    assert png_size(out) == (10 * DPI, 8 * DPI) and out.stat().st_size > 10_000


def test_head_entropy_is_the_mean_over_rows_of_each_heads_attention(translator: Translator) -> None:
    from transformer_mt.inference.translator import Hypothesis
    from transformer_mt.viz import head_entropies

    pairs = [("w3 w1 w4", "w3 w1 w4"), ("w2 w2 w9 w8 w7", "w2 w2 w9 w8 w7")]
    entropy = head_entropies(translator, [s for s, _ in pairs], [t for _, t in pairs])
    expected: dict[str, list[np.ndarray]] = {kind: [] for kind in KINDS}
    for source, reference in pairs:
        ids = translator.tokenizer.encode([reference])[0]
        forced = translator.attention(source, Hypothesis(reference, [], ids, 0.0, finished=True))
        for kind in KINDS:
            weights = forced.weights(kind).double().numpy()  # (L, H, Tq, Tk)
            with np.errstate(divide="ignore", invalid="ignore"):
                rows = -np.nansum(np.where(weights > 0, weights * np.log(weights), 0.0), axis=-1)
            expected[kind].append(rows)
    for kind in KINDS:
        rows = np.concatenate(expected[kind], axis=-1)  # (L, H, all query rows)
        np.testing.assert_allclose(entropy[kind], rows.mean(-1), rtol=1e-4, atol=1e-5)
    assert (entropy["encoder"] >= 0).all()


def test_heads_plot_with_ablation(tmp_path: Path, tiny_run: Path) -> None:
    out = plot(tmp_path, "heads", str(tiny_run), "--sentences", "12", "--ablate")
    assert png_size(out) == (15 * DPI, 9 * DPI)
    assert png_size(plot(tmp_path, "heads", str(tiny_run), "--sentences", "5", name="e.png")) == (15 * DPI, 4.5 * DPI)


def test_plots_of_a_run_without_its_text_name_where_they_looked(tmp_path: Path, tiny_run: Path, capsys) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("data"))
    assert main(["plot", "masks", "--run", str(run), "--out", str(tmp_path / "m.png")]) == 2
    assert f"no valid or train text found (looked for {run / 'data' / 'valid.src'}" in capsys.readouterr().err
    assert main(["plot", "heads", str(run), "--out", str(tmp_path / "h.png")]) == 2
    assert "no valid text found" in capsys.readouterr().err


@pytest.mark.parametrize("figure", [["encodings"], ["embeddings", "RUN"]])
@pytest.mark.parametrize("where, message", [
    ("/proc/transformer-mt.png", r"--out /proc/transformer-mt.png: cannot write in /proc \("),
    ("FILE/x.png", r"--out .*afile/x.png: .*afile is a file, not a folder"),
])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path: Path, tiny_run: Path, capsys, figure: list[str],
                                                   where: str, message: str) -> None:
    """/proc exists but takes no file (root passes os.access there); a path under a file
    names the file. Both before any drawing, and nothing is written."""
    (tmp_path / "afile").write_text("mine")
    out = where.replace("FILE", str(tmp_path / "afile"))
    args = [str(tiny_run) if arg == "RUN" else arg for arg in figure]
    assert main(["-q", "plot", *args, "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err
    assert (tmp_path / "afile").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
