"""The paper's WMT14 recipe, end to end on a small synthetic corpus with a tiny model:
`data get wmt14-en-de` (from local files in the Hub's and sacreBLEU's layouts), `prepare`,
`train`, `average`, `evaluate`, with the presets' paths as printed in their headers."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_mt.cli import main
from transformer_mt.common.config import load_config

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

WORDS = {"house": "Haus", "dog": "Hund", "cat": "Katze", "tree": "Baum", "red": "rot", "small": "klein",
         "the": "das", "big": "groß", "man": "Mann", "water": "Wasser"}
TINY = ["--model.n_layers=1", "--model.d_model=32", "--model.d_ff=64", "--model.n_heads=2", "--data.vocab_size=60",
        "--train.max_steps=4", "--train.valid_every=2", "--train.warmup_steps=2", "--train.device=cpu",
        "--train.precision=fp32", "--data.max_tokens=400", "--decode.max_len_b=5"]


def synthetic(n: int, seed: int) -> list[tuple[str, str]]:
    """(de, en) word-for-word pairs, as the Hub's translation column holds them."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(list(WORDS)) for _ in range(rng.randint(2, 8))]
        rows.append((" ".join(WORDS[w] for w in words), " ".join(words)))
    return rows


def write_parquet(path: Path, rows: list[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = pa.struct([("de", pa.string()), ("en", pa.string())])
    pq.write_table(pa.table({"translation": pa.array([{"de": d, "en": e} for d, e in rows], type=kind)}), path)


def test_the_wmt14_base_recipe_gets_prepares_trains_and_evaluates(tmp_path: Path, monkeypatch, capsys) -> None:
    hub = tmp_path / "hub" / "de-en"
    write_parquet(hub / "train-00000-of-00002.parquet", synthetic(300, 1))
    write_parquet(hub / "train-00001-of-00002.parquet", synthetic(300, 2))
    write_parquet(hub / "validation-00000-of-00001.parquet", synthetic(20, 3))
    test = synthetic(10, 4)
    cache = tmp_path / "sacrebleu" / "wmt14" / "full"
    cache.mkdir(parents=True)
    fields = {"src": [e for _, e in test], "ref": [d for d, _ in test], "docid": ["d"] * 10, "genre": ["news"] * 10,
              "origlang": ["en"] * 10}
    for field, lines in fields.items():
        (cache / f"wmt14_full.en-de.{field}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "SACREBLEU": str(tmp_path / "sacrebleu"), "HF_HUB_OFFLINE": "1"}
    got = subprocess.run([sys.executable, "-m", "transformer_mt", "data", "get", "wmt14-en-de", "--out",
                          "data/wmt14-en-de", "--from", str(tmp_path / "hub"), "--no-progress"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr

    run = "runs/wmt14_base"
    assert main(["-q", "prepare", "wmt14_en_de_base", "--run", run, "--no-progress", *TINY]) == 0
    manifest = json.loads(Path(run, "prepared", "manifest.json").read_text())
    assert manifest["counts"]["train"]["lines"] == 600 and manifest["counts"]["valid"]["lines"] == 20
    assert main(["-q", "train", "--run", run, "--no-progress"]) == 0
    assert main(["-q", "average", run, "--last", "2"]) == 0
    capsys.readouterr()
    assert main(["-q", "evaluate", run, "--checkpoint", "average", "--src", "data/wmt14-en-de/test.en",
                 "--ref", "data/wmt14-en-de/test.de", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 <= scores["bleu"] <= 100.0

    saved = load_config(Path(run, "config.yaml"))  # the recipe, with only the tiny overrides changed
    recipe = load_config("wmt14_en_de_base")
    assert saved.data.train_src == recipe.data.train_src == "data/wmt14-en-de/train.en"
    assert saved.train.label_smoothing == 0.1 and saved.train.adam_betas == (0.9, 0.98)
    assert (saved.decode.beam, saved.decode.length_penalty) == (4, 0.6)
    assert saved.model.norm_first is False and saved.model.d_model == 32


def test_the_paper_settings_of_both_recipes() -> None:
    """Table 3 and section 5 of the paper, as the presets must state them."""
    base, big = load_config("wmt14_en_de_base"), load_config("wmt14_en_de_big")
    assert (base.model.n_layers, base.model.d_model, base.model.d_ff, base.model.n_heads) == (6, 512, 2048, 8)
    assert (big.model.n_layers, big.model.d_model, big.model.d_ff, big.model.n_heads) == (6, 1024, 4096, 16)
    assert (base.model.dropout, big.model.dropout) == (0.1, 0.3)
    assert (base.train.max_steps, big.train.max_steps) == (100_000, 300_000)
    for cfg in (base, big):
        assert cfg.train.warmup_steps == 4000 and cfg.train.label_smoothing == 0.1
        assert 36_000 <= cfg.data.vocab_size <= 38_000 and cfg.data.vocab_type == "bpe"
        assert 24_000 <= cfg.data.max_tokens * cfg.train.accumulate * 8 <= 26_000  # one 8-GPU node
        assert cfg.decode.beam == 4 and cfg.decode.length_penalty == 0.6
    assert (base.train.keep_last, big.train.keep_last) == (5, 20)
