"""`transformer-mt export hf`: runs loaded by transformers itself (AutoModelForSeq2SeqLM,
AutoTokenizer: the reference), whose generate gives our greedy and beam (length penalty
0) outputs token for token: a post-norm run as MarianMTModel, the pre-norm tiny run as
PegasusForConditionalGeneration, both in the paper's interleaved positional layout;
`import marian` of the export gives back the same run; the model card; what is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

transformers = pytest.importorskip("transformers", reason="the reference needs transformers (the interop extra)")
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

from conftest import tiny_config  # noqa: E402

from transformer_mt.cli import main  # noqa: E402
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from transformer_mt.model.transformer import build_model  # noqa: E402
from transformer_mt.runs.directory import RunDir, load_run_model, save_weights  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

MAX_NEW = 14  # Hugging Face's max_new_tokens; ours: max_len_b = MAX_NEW - 1 (+ eos)
LINES = ["w1 w2 w3", "w4 w4 w5 w6 w7 w8", "w9", "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w0 w1 w2 w3 w4 w5",
         "w3 w3 w3 w3 w3 w2", "w7 w0", "w5 w6 w5 w6 w5 w6 w1", "w2 w8 w8 w1 w0 w0 w9 w4"]


@pytest.fixture(scope="module")
def post_norm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A post-norm (the paper's) tiny run, interleaved positions, trained briefly."""
    from transformer_mt.training import fit

    run = tmp_path_factory.mktemp("post_norm") / "run"
    fit(tiny_config(model__norm_first="false", train__max_steps=100, train__valid_every=100,
                    train__warmup_steps=50, train__lr_scale=0.5, data__task_size=2000), run, progress=False)
    return run


@pytest.fixture(scope="module")
def exports(post_norm_run: Path, tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """{"post"|"pre": (run, exported folder)} written through the command line."""
    root = tmp_path_factory.mktemp("hf")
    found = {}
    for name, run in (("post", post_norm_run), ("pre", tiny_run)):
        assert main(["-q", "export", "hf", str(run), "--out", str(root / name), "--languages", "en", "de"]) == 0
        found[name] = (run, root / name)
    return found


def reference(folder: Path):
    """The model and tokenizer as transformers' Auto classes load the folder."""
    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def generate(folder: Path, lines: list[str], **kw) -> list[tuple[list[int], bool, float]]:
    model, tok = reference(folder)
    batch = tok(lines, padding=True, return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=MAX_NEW, do_sample=False, return_dict_in_generate=True,
                         output_scores=True, **kw)
    scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else [0.0] * len(lines)
    found = []
    for row, score in zip(out.sequences[:, 1:].tolist(), scores):
        finished = EOS_ID in row
        found.append((row[: row.index(EOS_ID)] if finished else [i for i in row if i != PAD_ID], finished, score))
    return found


def our_search(run: Path, lines: list[str], beam: int) -> list[tuple[list[int], bool, float]]:
    translator = Translator.from_run(run, device="cpu")
    settings = translator.settings(beam=beam, length_penalty=0.0, max_len_a=0.0, max_len_b=MAX_NEW - 1)
    return [(h.ids, h.finished, h.score) for h in (row[0] for row in translator.search(lines, settings))]


@pytest.mark.parametrize("name, architecture", [("post", "MarianMTModel"), ("pre", "PegasusForConditionalGeneration")])
def test_auto_classes_load_stock_classes(exports, name: str, architecture: str) -> None:
    run, folder = exports[name]
    model, tok = reference(folder)
    assert type(model).__name__ == architecture and type(tok).__name__ == "MarianTokenizer"
    assert not list(folder.glob("*.py"))  # no custom code, nothing for trust_remote_code
    ours = RunDir(run).read_tokenizer()
    assert tok(LINES).input_ids == [ids + [EOS_ID] for ids in ours.encode(LINES)]


@pytest.mark.parametrize("name", ["post", "pre"])
def test_greedy_equals_generate(exports, name: str) -> None:
    run, folder = exports[name]
    ours, theirs = our_search(run, LINES, beam=1), generate(folder, LINES, num_beams=1)
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in theirs]
    assert {done for _, done, _ in ours} == {True, False} or len({len(ids) for ids, _, _ in ours}) > 3


@pytest.mark.parametrize("name", ["post", "pre"])
def test_beam_equals_generate_with_length_penalty_zero(exports, name: str) -> None:
    run, folder = exports[name]
    ours = our_search(run, LINES, beam=4)
    theirs = generate(folder, LINES, num_beams=4, length_penalty=0.0, early_stopping="never")
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in theirs]
    assert [s for *_, s in ours] == pytest.approx([s for *_, s in theirs], abs=1e-4)  # pad and bos banned alike
    assert len({len(ids) for ids, _, _ in ours}) > 3


@pytest.mark.parametrize("name", ["post", "pre"])
def test_texts_equal_translate(exports, name: str) -> None:
    """What pipeline("translation") does (transformers 4; version 5 removed the task):
    the generation config's defaults, then decode without special tokens."""
    run, folder = exports[name]
    model, tok = reference(folder)
    translator = Translator.from_run(run, device="cpu")
    expected = translator.translate(LINES, beam=1, max_len_a=0.0, max_len_b=MAX_NEW - 1)
    if "translation" in getattr(transformers.pipelines, "REMOVED_TASKS", {}):
        out = model.generate(**tok(LINES, padding=True, return_tensors="pt"), num_beams=1, max_new_tokens=MAX_NEW)
        assert tok.batch_decode(out, skip_special_tokens=True) == expected
    else:
        translate = transformers.pipeline("translation", model=str(folder))
        assert [r["translation_text"] for r in translate(LINES, num_beams=1, max_new_tokens=MAX_NEW)] == expected
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["num_beams"] == translator.defaults.beam
    assert generation["bad_words_ids"] == [[PAD_ID], [BOS_ID]] and generation["decoder_start_token_id"] == BOS_ID


def test_a_decoder_shallower_than_the_encoder_exports(tmp_path: Path) -> None:
    """model.decoder_layers 1 under 3 encoder layers: config.json says 3 and 1, and
    transformers' greedy search on the export gives ours token for token."""
    from transformer_mt.training import fit

    run = tmp_path / "run"
    fit(tiny_config(model__n_layers=3, model__decoder_layers=1, train__max_steps=60, train__valid_every=60,
                    train__warmup_steps=50, train__lr_scale=0.5, data__task_size=1000), run, progress=False)
    assert main(["-q", "export", "hf", str(run), "--out", str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["encoder_layers"], config["decoder_layers"]) == (3, 1)
    ours, theirs = our_search(run, LINES, beam=1), generate(tmp_path / "hf", LINES, num_beams=1)
    assert [(ids, done) for ids, done, _ in ours] == [(ids, done) for ids, done, _ in theirs]


def test_import_marian_gives_back_the_same_run(exports, tmp_path: Path) -> None:
    run, folder = exports["post"]
    back = tmp_path / "back"
    assert main(["-q", "import", "marian", str(folder), "--run", str(back)]) == 0
    (cfg, _, model), (cfg_back, _, model_back) = load_run_model(RunDir(run)), load_run_model(RunDir(back))
    assert cfg_back.model == cfg.model and cfg_back.decode == cfg.decode
    assert cfg.model.positional_layout == "interleaved"  # permuted for Marian, permuted back
    state, state_back = model.state_dict(), model_back.state_dict()
    assert state.keys() == state_back.keys() and all(torch.equal(state[k], state_back[k]) for k in state)
    for name in ("tokenizer.model", "tokenizer.vocab"):
        assert (back / name).read_bytes() == (run / name).read_bytes()
    assert our_search(back, LINES, beam=3) == our_search(run, LINES, beam=3)


def test_model_card(exports) -> None:
    run, folder = exports["post"]
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["language"] == ["en", "de"] and meta["license"] and meta["pipeline_tag"] == "translation"
    assert set(meta["metrics"]) == {"bleu", "chrf"} and meta["datasets"] and "marian" in meta["tags"]
    valid = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [e for e in valid if e.get("event") == "valid"]
    assert valid and f"| {valid[-1]['step']} (exported) | {valid[-1]['valid_loss']:.3f} |" in text
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in text and "nrefs:1|case:mixed|eff:yes|nc:6" in text
    assert f"transformer-mt export hf {run} --out {folder} --checkpoint best --languages en de" in text
    assert yaml.safe_load((folder / "transformer_mt_config.yaml").read_text())["model"]["norm_first"] is False


def test_evaluate_output_in_the_card_and_force(exports, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(exports["pre"][0], run)
    (tmp_path / "src").write_text("w1 w2\nw3\n")
    assert main(["-q", "evaluate", str(run), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "src")]) == 0
    (run / "evaluate.txt").write_text(capsys.readouterr().out)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "old.txt").write_text("mine")
    assert main(["-q", "export", "hf", str(run), "--out", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err and (out / "old.txt").is_file()
    assert main(["-q", "export", "hf", str(run), "--out", str(out), "--force"]) == 0
    assert not (out / "old.txt").exists() and "BLEU = " in (out / "README.md").read_text()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".hf.")]


def test_a_run_with_two_embeddings_is_refused_in_one_line(tiny_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"]["share_vocab"] = False
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    save_weights(build_model(RunDir(run).read_config().model), run / "best.safetensors")  # two embeddings
    assert main(["-q", "export", "hf", str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.share_vocab is false" in err and "share_vocab: true" in err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("target", ["hf", "ctranslate2"])
def test_an_out_that_cannot_be_written_is_one_line(tiny_run: Path, target: str, capsys) -> None:
    if target == "ctranslate2":
        pytest.importorskip("ctranslate2")
    assert main(["-q", "export", target, str(tiny_run), "--out", "/proc/transformer-mt-export"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/proc/transformer-mt-export: cannot be written" in err, err


@pytest.mark.parametrize("languages, bad", [(["", "../x"], "''"), (["en", "../x"], "'../x'"),
                                            (["de\n", "en"], "'de\\n'"), (["en US", "de"], "'en US'")])
def test_language_codes_are_validated(tiny_run: Path, tmp_path: Path, capsys, languages: list[str], bad: str) -> None:
    """They go into the model card's metadata and tokenizer_config.json: a code that is
    not BCP 47-like (empty, a path, a space) is refused before anything is written."""
    out = tmp_path / "parent" / "hf"
    assert main(["-q", "export", "hf", str(tiny_run), "--out", str(out), "--languages", *languages]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"transformer-mt export: error: --languages {bad}: not a language code; give codes "
                                "such as de, en or pt-BR (letters, digits and hyphens, BCP 47)"]
    assert not (tmp_path / "parent").exists()


def test_an_out_inside_the_run_is_refused(tiny_run: Path, tmp_path: Path, capsys) -> None:
    """--force on a folder of the run would replace the run's own files."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("tensorboard", "prepared"))
    before = sorted(p.name for p in (run / "data").iterdir())
    assert main(["-q", "export", "hf", str(run), "--out", str(run / "data"), "--force"]) == 2
    assert "is part of the run" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "data").iterdir()) == before
