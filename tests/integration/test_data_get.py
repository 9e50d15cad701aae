"""`transformer-mt data get`, offline: the same parsing code as a real download, fed with
local files in the remote layouts (a Hub parquet dataset, a sacreBLEU cache, Multi30k .gz
files), and the one-line errors of a wrong name, a missing file and an unreachable server."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_mt.cli import main
from transformer_mt.data.corpus import read_parallel
from transformer_mt.data.sources import one_line

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

UNREACHABLE = "http://127.0.0.1:9"  # the discard port on this machine: nothing listens, the connection is refused

# (de, en) rows of the Hub's wmt/wmt14 de-en parquet files, and what the written files must hold.
TRAIN_SHARDS = [
    [("Guten Morgen.", "Good morning."), ("Größe und Maß", "size and measure")],
    [("Zeile eins\nZeile zwei", "line one\r\nline two"), ("Ünïcödé 東京 🙂", "unicode Tokyo"),
     ("Das ist gut.", "That is good.")],
]
TRAIN_EN = ["Good morning.", "size and measure", "line one line two", "unicode Tokyo", "That is good."]
TRAIN_DE = ["Guten Morgen.", "Größe und Maß", "Zeile eins Zeile zwei", "Ünïcödé 東京 🙂", "Das ist gut."]
VALID = [("Hallo Welt", "hello world"), ("Danke", "thanks")]
TEST_EN = ["Gutach: Increased safety for pedestrians", "They are not even 100 metres apart"]
TEST_DE = ["Gutach: Noch mehr Sicherheit für Fußgänger", "Sie stehen keine 100 Meter voneinander entfernt"]


def write_parquet(path: Path, rows: list[tuple[str, str]]) -> None:
    """A parquet file as the Hub stores wmt/wmt14: one column `translation`, struct<de, en>."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = pa.struct([("de", pa.string()), ("en", pa.string())])
    column = pa.array([{"de": de, "en": en} for de, en in rows], type=kind)
    pq.write_table(pa.table({"translation": column}), path)


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the internet: every remote base address is an unreachable local one,
    and sacreBLEU's test sets live in (and would download into) tmp_path/sacrebleu. sacreBLEU
    reads $SACREBLEU once, at import, so this process repoints its datasets; a fresh
    process (the first test) needs only the variable."""
    from sacrebleu.dataset import DATASETS

    monkeypatch.setenv("TRANSFORMER_MT_MULTI30K_URL", f"{UNREACHABLE}/raw")
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    for name in ("wmt14/full", "wmt16"):
        folder = tmp_path / "sacrebleu" / name
        monkeypatch.setattr(DATASETS[name], "_outdir", str(folder))
        monkeypatch.setattr(DATASETS[name], "_rawdir", str(folder / "raw"))
        monkeypatch.setattr(DATASETS[name], "data", [f"{UNREACHABLE}/{name}/test.tgz"])


@pytest.fixture
def hub_folder(tmp_path: Path) -> Path:
    """A local copy of the Hub dataset's de-en files, in the repository's layout."""
    local = tmp_path / "hub"
    for i, rows in enumerate(TRAIN_SHARDS):
        write_parquet(local / "de-en" / f"train-{i:05d}-of-00002.parquet", rows)
    write_parquet(local / "de-en" / "validation-00000-of-00001.parquet", VALID)
    write_parquet(local / "de-en" / "test-00000-of-00001.parquet", [("nicht benutzt", "not used")])
    return local


@pytest.fixture
def sacrebleu_cache(tmp_path: Path) -> Path:
    """A sacreBLEU cache holding wmt14/full en-de as sacreBLEU leaves it once processed:
    SACREBLEU/wmt14/full/wmt14_full.en-de.FIELD for the fields src, ref, docid, genre, origlang."""
    folder = tmp_path / "sacrebleu" / "wmt14" / "full"
    folder.mkdir(parents=True)
    fields = {"src": TEST_EN, "ref": TEST_DE, "docid": ["doc1", "doc1"], "genre": ["news"] * 2,
              "origlang": ["de", "de"]}
    for field, lines in fields.items():
        (folder / f"wmt14_full.en-de.{field}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path / "sacrebleu"


def lines_of(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8").split("\n")[:-1]


def leftovers(folder: Path) -> list[str]:
    """Temporary or partial files a failed run might leave."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.exists() else []


def run_cli(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """Exit code and stderr of the command, run in this process."""
    code = main(["-q", *args])
    return code, capsys.readouterr().err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("transformer-mt data: error:")]


def test_wmt14_from_local_hub_files_and_sacrebleu_cache(tmp_path: Path, hub_folder: Path,
                                                         sacrebleu_cache: Path) -> None:
    out = tmp_path / "wmt14"
    env = {**os.environ, "SACREBLEU": str(sacrebleu_cache), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "transformer_mt", "data", "get", "wmt14-en-de", "--out", str(out),
                             "--from", str(hub_folder)], env=env, text=True, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert lines_of(out / "train.en") == TRAIN_EN
    assert lines_of(out / "train.de") == TRAIN_DE
    assert lines_of(out / "valid.en") == ["hello world", "thanks"]
    assert lines_of(out / "valid.de") == ["Hallo Welt", "Danke"]
    assert lines_of(out / "test.en") == TEST_EN
    assert lines_of(out / "test.de") == TEST_DE
    assert "train: 2 sentence(s) had line breaks inside" in result.stderr

    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["files"] == {"train.en": 5, "train.de": 5, "valid.en": 2, "valid.de": 2, "test.en": 2, "test.de": 2}
    assert manifest["splits"]["train"]["source"]["dataset"] == "wmt/wmt14"
    assert manifest["splits"]["train"]["source"]["files"] == ["de-en/train-00000-of-00002.parquet",
                                                              "de-en/train-00001-of-00002.parquet"]
    assert manifest["splits"]["valid"]["source"]["split"] == "validation"
    assert manifest["splits"]["test"]["source"]["test_set"] == "wmt14/full"
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "wmt14/full" in readme and "2,737" in readme and "| train | train.en, train.de | 5 |" in readme
    assert leftovers(out) == []

    corpus = read_parallel(out / "train.en", out / "train.de")  # what `train` reads
    assert corpus.src == TRAIN_EN and corpus.tgt == TRAIN_DE


def write_gz(folder: Path, name: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / name, "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


@pytest.fixture
def multi30k_folder(tmp_path: Path) -> Path:
    """Multi30k's data/task1/raw files for en, de, cs (cs has no 2017 test set)."""
    local = tmp_path / "multi30k"
    texts = {
        "en": {"train": ["Two dogs play.", "A man rides a bike."], "val": ["A cat sleeps."],
               "test_2016_flickr": ["A girl runs."], "test_2017_flickr": ["Kids swim."]},
        "de": {"train": ["Zwei Hunde spielen.", "Ein Mann fährt Fahrrad."], "val": ["Eine Katze schläft."],
               "test_2016_flickr": ["Ein Mädchen rennt."], "test_2017_flickr": ["Kinder schwimmen."]},
        "cs": {"train": ["Dva psi si hrají.", "Muž jede na kole."], "val": ["Kočka spí."],
               "test_2016_flickr": ["Dívka běží."]},
    }
    for lang, splits in texts.items():
        for stem, lines in splits.items():
            write_gz(local, f"{stem}.{lang}.gz", lines)
    return local


def test_multi30k_from_local_gz_files(tmp_path: Path, multi30k_folder: Path, capsys) -> None:
    out = tmp_path / "m30k"
    code, err = run_cli(["data", "get", "multi30k", "--out", str(out), "--from", str(multi30k_folder)], capsys)
    assert code == 0, err
    assert lines_of(out / "train.en") == ["Two dogs play.", "A man rides a bike."]
    assert lines_of(out / "train.de") == ["Zwei Hunde spielen.", "Ein Mann fährt Fahrrad."]
    assert lines_of(out / "valid.de") == ["Eine Katze schläft."]
    assert lines_of(out / "test.de") == ["Ein Mädchen rennt."]
    assert lines_of(out / "test2017.en") == ["Kids swim."]
    assert lines_of(out / "test2017.de") == ["Kinder schwimmen."]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["files"] == {"train.en": 2, "train.de": 2, "valid.en": 1, "valid.de": 1, "test.en": 1,
                                 "test.de": 1, "test2017.en": 1, "test2017.de": 1}

    czech = tmp_path / "m30k-cs"
    code, err = run_cli(["data", "get", "multi30k", "--src", "cs", "--tgt", "en", "--out", str(czech),
                         "--from", str(multi30k_folder)], capsys)
    assert code == 0, err
    assert lines_of(czech / "train.cs") == ["Dva psi si hrají.", "Muž jede na kole."]
    assert sorted(p.name for p in czech.iterdir()) == ["README.md", "manifest.json", "test.cs", "test.en",
                                                        "train.cs", "train.en", "valid.cs", "valid.en"]


def test_unknown_name_is_one_line_listing_the_names(tmp_path: Path, capsys) -> None:
    code, err = run_cli(["data", "get", "wmt15-en-de", "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "'wmt15-en-de'" in err
    for name in ("wmt14-en-de", "wmt16-de-en", "multi30k"):
        assert name in err
    assert not (tmp_path / "out").exists()


def test_data_list_names_every_dataset(capsys) -> None:
    assert main(["data", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["wmt14-en-de", "wmt16-de-en", "multi30k"]


def test_missing_local_file_is_named_and_nothing_is_written(tmp_path: Path, multi30k_folder: Path,
                                                            hub_folder: Path, capsys) -> None:
    (multi30k_folder / "val.de.gz").unlink()
    out = tmp_path / "out"
    code, err = run_cli(["data", "get", "multi30k", "--out", str(out), "--from", str(multi30k_folder)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert f"{multi30k_folder / 'val.de.gz'}: no such file" in err and "--from" in err
    assert not out.exists()

    (hub_folder / "de-en" / "validation-00000-of-00001.parquet").unlink()
    code, err = run_cli(["data", "get", "wmt14-en-de", "--out", str(out), "--from", str(hub_folder)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "de-en/validation-*.parquet: no such file" in err and "hf download wmt/wmt14" in err
    assert not out.exists()


def test_unreadable_parquet_leaves_no_partial_file(tmp_path: Path, hub_folder: Path, sacrebleu_cache: Path,
                                                   capsys) -> None:
    (hub_folder / "de-en" / "validation-00000-of-00001.parquet").write_bytes(b"not a parquet file")
    out = tmp_path / "out"
    code, err = run_cli(["data", "get", "wmt14-en-de", "--out", str(out), "--from", str(hub_folder)], capsys)
    assert code == 2, err
    assert len(error_lines(err)) == 1 and err.strip().splitlines()[-1] == error_lines(err)[0]
    assert "validation-00000-of-00001.parquet: not a readable parquet file" in err
    assert lines_of(out / "train.de") == TRAIN_DE  # complete splits stay, the broken one is absent
    assert not (out / "valid.en").exists() and not (out / "valid.de").exists()
    assert not (out / "manifest.json").exists() and leftovers(out) == []


def test_wrong_parquet_columns_name_the_file(tmp_path: Path, hub_folder: Path, sacrebleu_cache: Path,
                                             capsys) -> None:
    table = pa.table({"de": ["a"], "en": ["b"]})
    pq.write_table(table, hub_folder / "de-en" / "train-00000-of-00002.parquet")
    code, err = run_cli(["data", "get", "wmt14-en-de", "--out", str(tmp_path / "out"), "--from", str(hub_folder)],
                        capsys)
    assert code == 2
    assert "train-00000-of-00002.parquet: expected a column 'translation'" in err
    assert "found columns de, en" in err


def test_missing_data_extra_says_how_to_install(tmp_path: Path, hub_folder: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    code, err = run_cli(["data", "get", "wmt14-en-de", "--out", str(tmp_path / "out"), "--from", str(hub_folder)],
                        capsys)
    assert code == 2
    assert "pip install 'transformer-mt[data]'" in err
    assert not (tmp_path / "out").exists()


def test_unreachable_servers_give_one_line_and_leave_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, err = run_cli(["data", "get", "multi30k", "--out", str(out)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert f"could not download {UNREACHABLE}/raw/train.en.gz" in err and "--from DIR" in err
    assert not out.exists()

    pytest.importorskip("huggingface_hub")
    code, err = run_cli(["data", "get", "wmt16-de-en", "--out", str(out)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert f"of the Hugging Face dataset wmt/wmt16 from {UNREACHABLE}" in err
    assert "hf download wmt/wmt16 --repo-type dataset" in err
    assert not out.exists()


def test_unreachable_sacrebleu_server(tmp_path: Path, hub_folder: Path, capsys) -> None:
    out = tmp_path / "out"
    code, err = run_cli(["data", "get", "wmt14-en-de", "--out", str(out), "--from", str(hub_folder)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert f"could not get the sacreBLEU test set wmt14/full en-de from {UNREACHABLE}/wmt14/full/test.tgz" in err
    assert "SACREBLEU" in err
    assert not out.exists()  # the test set is fetched before the training data is written


@pytest.mark.parametrize("text,expected", [
    ("a\nb", ("a b", True)), ("a\r\nb", ("a b", True)), ("a\u2028b\rc", ("a b c", True)),
    ("plain ü", ("plain ü", False)), (None, ("", False)),
])
def test_one_line_replaces_every_line_break(text: str | None, expected: tuple[str, bool]) -> None:
    assert one_line(text) == expected
