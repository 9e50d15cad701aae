"""Named corpora fetched from maintained sources and written as plain parallel text.

`transformer-mt data get NAME --out DIR` writes DIR/{train,valid,test}.{SRC,TGT} (UTF-8, one
sentence per line: what `train` reads), DIR/README.md and, last, DIR/manifest.json (where
each split came from, line counts). The sources: WMT training and validation data from the
parquet files of the Hugging Face datasets wmt/wmt14 and wmt/wmt16 (CONFIG/SPLIT-*.parquet, a
column `translation` holding a struct with one string per language), fetched with
`huggingface_hub.snapshot_download` and read one record batch at a time with pyarrow, so
4.5M pairs never sit in memory; official test sets through sacreBLEU's own download and cache
($SACREBLEU, else ~/.sacrebleu); Multi30k from the .gz files of github.com/multi30k/dataset.

Every remote step has a local stand-in that runs the same parsing code: `local` (--from DIR)
holds the Hub repository's parquet files, or Multi30k's .gz files, in the remote layout; a
filled sacreBLEU cache serves the test sets. All is fetched before anything is written; a
failed fetch is one UserError line (what, from where, how to place the files by hand); each
output file is written under a temporary name and renamed when complete."""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tqdm import tqdm

from transformer_mt import __version__
from transformer_mt.data.corpus import read_lines
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_open, atomic_write_text

log = logging.getLogger("transformer_mt")

INSTALL_HINT = "pip install 'transformer-mt[data]'"
MULTI30K_REPOSITORY = "https://github.com/multi30k/dataset"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_URL_ENV = "TRANSFORMER_MT_MULTI30K_URL"  # another base URL (a mirror; tests use an unreachable one)
BATCH_ROWS = 10_000  # parquet rows decoded at a time
LINE_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # where str.splitlines breaks


@dataclass(frozen=True)
class HubSplit:
    """One split of a Hugging Face dataset stored as parquet: REPO/CONFIG/SPLIT-*.parquet."""

    repo_id: str
    config: str
    split: str
    note: str

    @property
    def pattern(self) -> str:
        return f"{self.config}/{self.split}-*.parquet"


@dataclass(frozen=True)
class SacrebleuSet:
    """An official test set under its sacreBLEU name (e.g. wmt14/full)."""

    test_set: str
    note: str


@dataclass(frozen=True)
class Multi30kSplit:
    """One split of Multi30k task 1: STEM.LANG.gz in data/task1/raw."""

    stem: str
    note: str


@dataclass(frozen=True)
class Dataset:
    """A named corpus: its languages and, for a language pair, where each split comes from."""

    name: str
    description: str
    languages: tuple[str, ...]
    default_pair: tuple[str, str]
    splits: Callable[[str, str], dict[str, HubSplit | SacrebleuSet | Multi30kSplit]]
    homepage: str
    licence: str
    citation: str


def _wmt_splits(year: str, train: str, valid: str, test_set: str, test: str) -> Callable[[str, str], dict]:
    """The splits of a wmt/wmtYY Hub dataset (config de-en, either direction) and its sacreBLEU test set."""
    return lambda src, tgt: {"train": HubSplit(f"wmt/wmt{year}", "de-en", "train", train),
                             "valid": HubSplit(f"wmt/wmt{year}", "de-en", "validation", valid),
                             "test": SacrebleuSet(test_set, test)}


MULTI30K_SPLITS = {"train": ("train", "training set"), "valid": ("val", "validation set"),  # split: (stem, note)
                   "test": ("test_2016_flickr", "test 2016 (Flickr)"),
                   "test2017": ("test_2017_flickr", "test 2017 (Flickr)")}


def _multi30k_splits(src: str, tgt: str) -> dict[str, Multi30kSplit]:
    """The splits of MULTI30K_SPLITS that the pair has: Czech has no 2017 test set."""
    return {split: Multi30kSplit(*entry) for split, entry in MULTI30K_SPLITS.items()
            if split != "test2017" or "cs" not in (src, tgt)}


WMT_TERMS = ("the Hugging Face card gives the licence as unknown; each WMT corpus (Europarl, Common Crawl, "
             "News Commentary) has its own terms, listed on the task page")
CATALOGUE: dict[str, Dataset] = {d.name: d for d in (
    Dataset("wmt14-en-de", "WMT14 English-German, the paper's corpus: 4.5M training pairs, newstest2013, "
            "newstest2014 (full)", ("en", "de"), ("en", "de"),
            _wmt_splits("14", "Europarl v7, Common Crawl and News Commentary v9", "newstest2013", "wmt14/full",
                        "newstest2014, the full 3,003-line set the paper used (sacreBLEU's `wmt14` is the "
                        "filtered 2,737-line set; not used here)"),
            "https://www.statmt.org/wmt14/translation-task.html", WMT_TERMS,
            "Bojar et al. (2014), Findings of the 2014 Workshop on Statistical Machine Translation, "
            "https://aclanthology.org/W14-3302"),
    Dataset("wmt16-de-en", "WMT16 German-English: 4.5M training pairs, newstest2015, newstest2016",
            ("de", "en"), ("de", "en"),
            _wmt_splits("16", "the parallel training data of the WMT16 news task", "newstest2015", "wmt16",
                        "newstest2016"),
            "https://www.statmt.org/wmt16/translation-task.html", WMT_TERMS,
            "Bojar et al. (2016), Findings of the 2016 Conference on Machine Translation, "
            "https://aclanthology.org/W16-2301"),
    Dataset("multi30k", "Multi30k task 1, image captions: 29,000 training pairs, val, test 2016 and 2017 "
            "(--src/--tgt from en, de, fr, cs)", ("en", "de", "fr", "cs"), ("en", "de"), _multi30k_splits,
            MULTI30K_REPOSITORY, "no licence file in the repository; see its README",
            "Elliott et al. (2016), Multi30K: Multilingual English-German Image Descriptions, "
            "https://aclanthology.org/W16-3210"),
)}


def find(name: str) -> Dataset:
    """The catalogue entry NAME; an unknown name lists the known ones."""
    if name not in CATALOGUE:
        raise UserError(f"no dataset named {name!r}; choose one of: {', '.join(CATALOGUE)} "
                        "(`transformer-mt data list` describes them)")
    return CATALOGUE[name]


def choose_pair(dataset: Dataset, src: str | None, tgt: str | None) -> tuple[str, str]:
    """The (source, target) languages: the dataset's default direction unless given."""
    src, tgt = src or dataset.default_pair[0], tgt or dataset.default_pair[1]
    for lang in (src, tgt):
        if lang not in dataset.languages:
            raise UserError(f"{dataset.name} has no language {lang!r}; it has {', '.join(dataset.languages)}")
    if src == tgt:
        raise UserError(f"--src and --tgt are both {src!r}; choose two different languages")
    return src, tgt


@dataclass
class Fetched:
    """A split ready to stream: a fresh iterator over its pairs, and where they came from."""

    pairs: Callable[[], Iterator[tuple[str, str]]]
    source: dict


def fetch(dataset: Dataset, src: str, tgt: str, local: Path | None, scratch: Path) -> dict[str, Fetched]:
    """Locate or download the input of every split (downloads of Multi30k go to `scratch`)."""
    sources = dataset.splits(src, tgt)
    hub = [s for s in sources.values() if isinstance(s, HubSplit)]
    roots = {repo: (local, None) if local else _snapshot(repo, [s.pattern for s in hub if s.repo_id == repo])
             for repo in {s.repo_id for s in hub}}
    fetched = {}
    for split, source in sources.items():
        if isinstance(source, HubSplit):
            fetched[split] = _fetch_hub(source, *roots[source.repo_id], src, tgt)
        elif isinstance(source, SacrebleuSet):
            fetched[split] = _fetch_sacrebleu(source, src, tgt)
        else:
            fetched[split] = _fetch_multi30k(source, src, tgt, local, scratch)
    return fetched


def _snapshot(repo_id: str, patterns: list[str]) -> tuple[Path, str]:
    """Download (or find in the cache, $HF_HOME) a Hub dataset's files; their folder and commit."""
    hub = _optional_import("huggingface_hub")
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        folder = Path(hub.snapshot_download(repo_id, repo_type="dataset", allow_patterns=patterns, endpoint=endpoint))
    except Exception as err:  # every failure of the download is the same message to the user
        raise UserError(f"could not download {', '.join(patterns)} of the Hugging Face dataset {repo_id} from "
                        f"{endpoint} ({_reason(err)}); check the connection and retry, or on a connected machine run "
                        f"`hf download {repo_id} --repo-type dataset --include '{Path(patterns[0]).parent}/*' "
                        "--local-dir DIR` and pass --from DIR") from None
    return folder, folder.name


def _fetch_hub(source: HubSplit, root: Path, revision: str | None, src: str, tgt: str) -> Fetched:
    _optional_import("pyarrow.parquet")  # missing, it stops the command before anything is written
    files = sorted(root.glob(source.pattern))
    if not files:
        raise UserError(f"{root / source.pattern}: no such file; put the parquet files of the Hugging Face dataset "
                        f"{source.repo_id} there in its layout (`hf download {source.repo_id} --repo-type dataset "
                        f"--include '{source.config}/*' --local-dir DIR` on a connected machine)")
    described = {"kind": "huggingface", "dataset": source.repo_id, "config": source.config, "split": source.split,
                 "url": f"https://huggingface.co/datasets/{source.repo_id}", "revision": revision,
                 "files": [f.relative_to(root).as_posix() for f in files], "note": source.note}
    return Fetched(lambda: parquet_pairs(files, src, tgt), described)


def parquet_pairs(files: list[Path], src: str, tgt: str) -> Iterator[tuple[str, str]]:
    """The (src, tgt) strings of the `translation` column of parquet files, one record
    batch at a time (memory stays flat whatever the number of rows)."""
    pq = _optional_import("pyarrow.parquet")
    import pyarrow as pa

    for path in files:
        try:
            reader = pq.ParquetFile(path)
            _check_columns(reader.schema_arrow, path, src, tgt)
            for batch in reader.iter_batches(batch_size=BATCH_ROWS, columns=["translation"]):
                column = batch.column(0)
                yield from zip(column.field(src).to_pylist(), column.field(tgt).to_pylist())
        except (OSError, pa.ArrowException) as err:
            raise UserError(f"{path}: not a readable parquet file ({_reason(err)}); download it again") from None


def _check_columns(schema, path: Path, src: str, tgt: str) -> None:
    """A `translation` struct column with a field per language, or a UserError naming the file."""
    import pyarrow as pa

    column = schema.field("translation").type if "translation" in schema.names else None
    fields = {field.name for field in column} if column is not None and pa.types.is_struct(column) else set()
    if not {src, tgt} <= fields:
        raise UserError(f"{path}: expected a column 'translation' holding a struct with fields {src!r} and {tgt!r} "
                        f"(the layout of the wmt/* Hub datasets); found columns {', '.join(schema.names)}")


def _fetch_sacrebleu(source: SacrebleuSet, src: str, tgt: str) -> Fetched:
    """A sacreBLEU test set's source and reference, downloaded into (or found in) its cache by sacreBLEU."""
    from sacrebleu import __version__ as sacrebleu_version
    from sacrebleu.dataset import DATASETS
    from sacrebleu.utils import SACREBLEU_DIR

    langpair = f"{src}-{tgt}"
    test_set = DATASETS.get(source.test_set)
    if test_set is None or langpair not in test_set.langpairs:
        raise UserError(f"sacreBLEU {sacrebleu_version} has no test set {source.test_set} for {langpair}; "
                        "pip install -U sacrebleu")
    try:
        paths = Path(test_set.get_source_file(langpair)), Path(test_set.get_reference_files(langpair)[0])
    except (Exception, SystemExit) as err:  # sacreBLEU exits on a bad checksum
        raise UserError(f"could not get the sacreBLEU test set {source.test_set} {langpair} from "
                        f"{', '.join(test_set.data)} into {SACREBLEU_DIR} ({_reason(err)}); retry, or on a connected "
                        f"machine run `sacrebleu -t {source.test_set} -l {langpair} --echo src > /dev/null`, copy "
                        "its ~/.sacrebleu folder here and set SACREBLEU to it") from None
    described = {"kind": "sacrebleu", "test_set": source.test_set, "langpair": langpair,
                 "url": ", ".join(test_set.data), "sacrebleu_version": sacrebleu_version,
                 "files": [p.name for p in paths], "note": source.note}
    return Fetched(lambda: text_pairs(*paths), described)


def _fetch_multi30k(source: Multi30kSplit, src: str, tgt: str, local: Path | None, scratch: Path) -> Fetched:
    base = os.environ.get(MULTI30K_URL_ENV) or MULTI30K_URL
    paths = []
    for lang in (src, tgt):
        name = f"{source.stem}.{lang}.gz"
        if local is None:
            paths.append(_download(f"{base}/{name}", scratch / name))
        elif (local / name).is_file():
            paths.append(local / name)
        else:
            raise UserError(f"{local / name}: no such file; put Multi30k's {name} there (from "
                            f"{MULTI30K_REPOSITORY}, folder data/task1/raw) or leave out --from to download it")
    described = {"kind": "url", "dataset": "multi30k task 1", "url": f"{base}/{source.stem}.{{{src},{tgt}}}.gz",
                 "files": [p.name for p in paths], "note": source.note}
    return Fetched(lambda: text_pairs(*paths), described)


def _download(url: str, path: Path) -> Path:
    """Fetch `url` into `path` (a scratch folder that is removed afterwards)."""
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(path, "wb") as out:
            shutil.copyfileobj(response, out)
    except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors
        raise UserError(f"could not download {url} ({_reason(err)}); check the connection and retry, or download "
                        f"the files of {MULTI30K_REPOSITORY} (folder data/task1/raw) on a connected machine "
                        "and pass --from DIR") from None
    return path


def text_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Line N of one small text file (plain or .gz) with line N of the other, validated as corpora are."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; they must be parallel")
    return zip(src, tgt)


def one_line(text: str | None) -> tuple[str, bool]:
    """`text` on one line (each line break becomes a space; None becomes ""), and whether it changed."""
    if text is None:
        return "", False
    flat, count = LINE_BREAKS.subn(" ", text)
    return flat, count > 0


def write_split(pairs: Iterable[tuple[str, str]], src_path: Path, tgt_path: Path) -> tuple[int, int]:
    """Write pairs line by line to two files, each renamed into place only when complete;
    the number of lines, and of sentences whose line breaks became spaces."""
    lines = flattened = 0
    with atomic_open(src_path, "w", encoding="utf-8") as src_out, \
            atomic_open(tgt_path, "w", encoding="utf-8") as tgt_out:
        for src, tgt in pairs:
            (src, src_changed), (tgt, tgt_changed) = one_line(src), one_line(tgt)
            src_out.write(src + "\n")
            tgt_out.write(tgt + "\n")
            lines += 1
            flattened += src_changed + tgt_changed
        if lines == 0:
            raise UserError(f"{src_path.name}, {tgt_path.name}: the source has no sentences; nothing was written")
    return lines, flattened


def get(name: str, out: str | Path, src: str | None = None, tgt: str | None = None,
        local: str | Path | None = None, progress: bool = True) -> dict:
    """Fetch dataset NAME and write it into OUT as plain parallel text, a README and a
    manifest; returns the manifest. `local` replaces every download by a local folder."""
    dataset = find(name)
    src, tgt = choose_pair(dataset, src, tgt)
    out, local = Path(out), Path(local) if local is not None else None
    if local is not None and not local.is_dir():
        raise UserError(f"{local}: no such folder (--from)")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is a file; --out takes a folder")
    with tempfile.TemporaryDirectory(prefix="transformer-mt-data-") as scratch:
        fetched = fetch(dataset, src, tgt, local, Path(scratch))
        out.mkdir(parents=True, exist_ok=True)
        (out / "manifest.json").unlink(missing_ok=True)  # written again last, once every file is complete
        manifest = {"name": dataset.name, "description": dataset.description, "src": src, "tgt": tgt,
                    "homepage": dataset.homepage, "licence": dataset.licence, "citation": dataset.citation,
                    "from": str(local) if local is not None else None, "transformer_mt_version": __version__,
                    "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "splits": {}, "files": {}}
        for split, item in fetched.items():
            files = (out / f"{split}.{src}", out / f"{split}.{tgt}")
            pairs = tqdm(item.pairs(), desc=split, unit=" pairs", disable=None if progress else True, mininterval=1)
            lines, flattened = write_split(pairs, *files)
            if flattened:
                log.warning("%s: %d sentence(s) had line breaks inside; replaced them with spaces", split, flattened)
            log.info("%s: %d pairs -> %s, %s", split, lines, *files)
            manifest["splits"][split] = {"files": [f.name for f in files], "lines": lines,
                                         "line_breaks_replaced": flattened, "source": item.source}
            manifest["files"].update({f.name: lines for f in files})
    atomic_write_text(out / "README.md", render_readme(manifest))
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def render_readme(manifest: dict) -> str:
    """The manifest as a page a person reads: files, line counts, sources, terms."""
    origin = f" from the local folder {manifest['from']}" if manifest["from"] else ""
    lines = [f"# {manifest['name']} ({manifest['src']} -> {manifest['tgt']})", "", manifest["description"] + ".", "",
             f"Written by `transformer-mt data get` {manifest['transformer_mt_version']} on {manifest['created']}"
             f"{origin}. Plain UTF-8 text, one sentence per line; line N of a source file translates line N of its "
             "target file. manifest.json holds the same facts for programs and is written last: if it is missing, "
             "the download did not finish.", "", "| split | files | lines | source |", "| --- | --- | ---: | --- |"]
    for split, entry in manifest["splits"].items():
        lines.append(f"| {split} | {', '.join(entry['files'])} | {entry['lines']:,} | {_describe(entry['source'])} |")
    replaced = [f"{split} {e['line_breaks_replaced']:,}" for split, e in manifest["splits"].items()
                if e["line_breaks_replaced"]]
    if replaced:
        lines += ["", f"Sentences with line breaks inside, replaced by spaces: {', '.join(replaced)}."]
    lines += ["", f"- Homepage: {manifest['homepage']}", f"- Licence and terms: {manifest['licence']}",
              f"- Cite: {manifest['citation']}", ""]
    return "\n".join(lines)


def _describe(source: dict) -> str:
    """One table cell: which dataset, version, split and note."""
    if source["kind"] == "huggingface":
        at = f" at {source['revision']}" if source["revision"] else ""
        return (f"Hugging Face dataset `{source['dataset']}` config `{source['config']}` split `{source['split']}`"
                f"{at} ({source['url']}): {source['note']}")
    if source["kind"] == "sacrebleu":
        return (f"sacreBLEU {source['sacrebleu_version']} test set `{source['test_set']}` {source['langpair']} "
                f"({source['url']}): {source['note']}")
    return f"{source['dataset']}, {source['url']}: {source['note']}"


def _optional_import(module: str):
    """Import a package of the `data` extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"{module.split('.')[0]} is needed to fetch this dataset: {INSTALL_HINT}") from None


def _reason(err: BaseException) -> str:
    """The first line of an exception's message, with its type: enough to see what failed."""
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__
