"""decode.engine: CTranslate2 behind Translator.search gives torch's outputs token for token
where the settings map, is exported once into the run and again when the weights change,
and auto says once why it searches with torch where they do not."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from transformer_mt.cli import main
from transformer_mt.data.corpus import read_parallel
from transformer_mt.common.specials import PAD_ID
from transformer_mt.common.errors import UserError
from transformer_mt.runs.directory import RunDir, load_run_model, save_weights
from transformer_mt.inference.translator import Translator

ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install 'transformer-mt[interop]')")
from transformer_mt.interop.ctranslate2 import METADATA  # noqa: E402

# settings that map exactly: greedy (any length penalty) and beam 4 with length penalty 0,
# with output limits that cut some outputs (a fixed one, and one per source length)
EXACT = {
    "greedy": dict(beam=1),
    "greedy, alpha 0.6, 3 subwords at most": dict(beam=1, length_penalty=0.6, max_len_a=0.0, max_len_b=3),
    "beam 4, alpha 0": dict(beam=4, length_penalty=0.0),
    "beam 4, alpha 0, half the source + 1": dict(beam=4, length_penalty=0.0, max_len_a=0.5, max_len_b=1),
}


@pytest.fixture(scope="module")
def run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared tiny run, which the engine writes its export into."""
    copy = tmp_path_factory.mktemp("engine") / "run"
    shutil.copytree(tiny_run, copy)
    return copy


@pytest.fixture(scope="module")
def sources(run: Path) -> list[str]:
    """Held-out copy-task sources, with a line that has no text."""
    return read_parallel(RunDir(run).data / "test.src", RunDir(run).data / "test.tgt").src[:200] + [""]


def searched(run: Path, engine: str, lines: list[str], **settings) -> list:
    translator = Translator.from_run(run, device="cpu", engine=engine)
    return [row[0] for row in translator.search(lines, translator.settings(**settings))]


def assert_same(ours: list, theirs: list) -> None:
    assert [(h.ids, h.finished, h.text) for h in theirs] == [(h.ids, h.finished, h.text) for h in ours]
    assert [h.score for h in theirs] == pytest.approx([h.score for h in ours], abs=1e-4)


@pytest.mark.parametrize("name", EXACT)
def test_ctranslate2_gives_torchs_outputs(run: Path, sources: list[str], name: str) -> None:
    torch_out, threads = searched(run, "torch", sources, **EXACT[name]), torch.get_num_threads()
    assert_same(torch_out, searched(run, "ctranslate2", sources, **EXACT[name]))
    assert torch.get_num_threads() == threads, "CTranslate2 changed torch's thread count"
    assert (run / "ctranslate2" / "best" / "model.bin").is_file()
    if "subwords" in name or "half" in name:
        assert any(not h.finished for h in torch_out), "no output reached its limit"


def test_new_weights_are_exported_again_and_pad_is_never_chosen(run: Path, sources: list[str]) -> None:
    """Weights changed under the export (here: the generator made to prefer pad, which
    CTranslate2 would choose and torch's search bans) make a new export, whose batches
    that chose pad are searched by torch: the outputs stay torch's."""
    searched(run, "ctranslate2", sources[:4], beam=1)
    metadata = run / "ctranslate2" / "best" / METADATA
    before = json.loads(metadata.read_text())["weights_sha256"]
    changed = run.parent / "changed"
    shutil.copytree(run, changed)
    _, _, model = load_run_model(RunDir(changed))
    with torch.no_grad():
        model.generator.proj.bias[PAD_ID] += 30.0
    save_weights(model, RunDir(changed).best)
    assert_same(searched(changed, "torch", sources, beam=1), searched(changed, "ctranslate2", sources, beam=1))
    assert json.loads((changed / "ctranslate2" / "best" / METADATA).read_text())["weights_sha256"] != before
    pieces = RunDir(changed).read_tokenizer().pieces(sources[0])
    (raw,) = ctranslate2.Translator(str(changed / "ctranslate2" / "best"), device="cpu").translate_batch([pieces])
    assert "<pad>" in raw.hypotheses[0], "CTranslate2 did not choose pad: the test shows nothing"


def test_auto_says_once_why_it_searches_with_torch(run: Path, sources: list[str], caplog) -> None:
    translator = Translator.from_run(run, device="cpu")  # decode.engine: auto, the default
    caplog.set_level(logging.INFO, logger="transformer_mt")
    for _ in range(2):
        translator.search(sources[:3], translator.settings(beam=4, length_penalty=0.6))
    translator.search(sources[:3], translator.settings(nbest=2), nbest=2)
    said = [r.getMessage() for r in caplog.records if "not CTranslate2" in r.getMessage()]
    assert len(said) == 2 and "length penalty 0.6" in said[0] and "n-best list of 2" in said[1], said
    with pytest.raises(UserError, match="decode.engine is ctranslate2, but beam 4 with length penalty 0.6"):
        translator.search(sources[:3], translator.settings(beam=4, length_penalty=0.6, engine="ctranslate2"))


def test_a_model_ctranslate2_cannot_compute_is_refused_or_left_to_torch(run: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    shutil.copytree(run, theirs, ignore=shutil.ignore_patterns("ctranslate2"))
    config = (theirs / "config.yaml").read_text()
    (theirs / "config.yaml").write_text(config.replace("layer_norm: pytorch", "layer_norm: annotated"))
    assert Translator.from_run(theirs, device="cpu").engine is None
    with pytest.raises(UserError, match="decode.engine is ctranslate2, but model.layer_norm is annotated"):
        Translator.from_run(theirs, device="cpu", engine="ctranslate2")
    with pytest.raises(UserError, match="decode.engine is ctranslate2, but the weights are int8"):
        Translator.from_run(run, device="cpu", dtype="int8", engine="ctranslate2")


def test_translate_and_evaluate_take_engine(run: Path, sources: list[str], tmp_path: Path, capsys) -> None:
    source = tmp_path / "src.txt"
    source.write_text("\n".join(sources[:20]) + "\n")
    outputs = {}
    for engine in ("torch", "ctranslate2"):
        outputs[engine] = tmp_path / f"{engine}.txt"
        assert main(["translate", str(run), "-i", str(source), "-o", str(outputs[engine]), "--beam", "1",
                     "--engine", engine]) == 0
    assert outputs["torch"].read_text() == outputs["ctranslate2"].read_text()
    assert main(["evaluate", str(run), "--src", str(source), "--ref", str(source), "--beam", "1",
                 "--engine", "ctranslate2", "--json"]) == 0
    with pytest.raises(SystemExit):
        main(["translate", str(run), "--engine", "onnx"])
    assert "argument --engine: must be one of auto, torch, ctranslate2" in capsys.readouterr().err


def test_the_page_translates_with_it(run: Path, sources: list[str], tmp_path: Path) -> None:
    """The server's /api/translate searches as translate does: through CTranslate2 where auto allows."""
    from fastapi.testclient import TestClient

    from transformer_mt.server import TranslateLimits, create_app
    from transformer_mt.server.app import load_service

    served = tmp_path / "served"
    shutil.copytree(run, served, ignore=shutil.ignore_patterns("ctranslate2"))
    service = load_service(served, "cpu", "best", TranslateLimits(max_chars=200, max_sentences=4, max_beam=4), "float32", 20)
    response = TestClient(create_app(service)).post("/api/translate", json={"text": "\n".join(sources[:4]), "beam": 1})
    assert response.status_code == 200
    assert response.json()["translations"] == [h.text for h in searched(run, "torch", sources[:4], beam=1)]
    assert (served / "ctranslate2" / "best" / "model.bin").is_file()
