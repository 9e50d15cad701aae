"""Prepare a corpus once: stream it, encode it in parallel, write the subword ids as flat
binary arrays that every training process memory-maps.

    RUN/prepared/
      manifest.json             what the arrays were made from and their counts (written last)
      train.src.ids             all source ids, one after the other (uint16, or uint32 for
      train.tgt.ids             vocabularies over 65,536 pieces)
      train.src.offsets.npy     (N + 1,) int64: pair i's source is ids[offsets[i]:offsets[i+1]]
      train.tgt.offsets.npy
      valid.*                   the same for the validation pairs

The text is never held in memory: chunks of lines go to worker processes (all cores),
which validate them (UTF-8, with the line number), skip pairs with an empty side, encode
and filter them (training) or truncate them (validation) exactly as before. Through the
page cache, every rank on a machine shares one copy of the arrays, and a resume re-reads
nothing. The manifest ties the arrays to the corpus files (size, mtime, sha256) and to
the tokenizer, and to the settings that decide which pairs are kept (PairLimits, data.train_pairs
among them): a changed input is re-prepared, or refused once training has started."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
from collections import deque
from dataclasses import asdict, dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from tqdm import tqdm

from transformer_mt.data.sequences import Sequences
from transformer_mt.data.corpus import Corpus, CorpusError, decode_line, iter_raw_pairs, no_pairs_left, open_lines
from transformer_mt.data.corpus import read_parallel, usable_pair, warn_skipped
from transformer_mt.data.corpus_files import CorpusPaths, PathPair
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.registry import encoding_files, load_tokenizer
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_open, atomic_write_text

log = logging.getLogger("transformer_mt")

FORMAT = 1
CHUNK_LINES = 20_000
PARALLEL_FROM = 200_000  # below this many training lines one process encodes: starting workers costs more
SIDES = ("src", "tgt")


@dataclass(frozen=True)
class PairLimits:
    """What decides which ids are kept: only the first `train_pairs` usable training pairs
    are read (0: all; data.train_pairs, the notes' select(range(N))), of which those longer
    than max_len or with a length ratio above max_ratio are dropped; validation sides are
    cut to `truncate` ids."""

    max_len: int
    max_ratio: float
    truncate: int
    train_pairs: int = 0


@dataclass
class PreparedData:
    """The memory-mapped training pairs (filtered) and validation pairs (not), plus the
    validation text that BLEU is computed against."""

    train_src: Sequences
    train_tgt: Sequences
    valid_src: Sequences
    valid_tgt: Sequences
    valid: Corpus | None
    filtered: int


@dataclass
class Chunk:
    """Lines first_line .. first_line + len(src) - 1 of a split, as bytes, for a worker."""

    split: str
    names: tuple[str, str]
    first_line: int
    src: list[bytes]
    tgt: list[bytes]


@dataclass
class EncodedChunk:
    src_ids: np.ndarray
    src_lens: np.ndarray
    tgt_ids: np.ndarray
    tgt_lens: np.ndarray
    lines: int
    skipped: int
    filtered: int
    truncated_src: int
    truncated_tgt: int


# ---- worker side ----------------------------------------------------------------------
_TOKENIZERS: dict[tuple[str, str], Tokenizer] = {}


def _tokenizer(model: str, digest: str) -> Tokenizer:
    """The tokenizer, loaded once per process (keyed by content, not name): a
    sentencepiece model, or an imported Marian vocab.json (source and target cut apart)."""
    if (model, digest) not in _TOKENIZERS:
        _TOKENIZERS[(model, digest)] = load_tokenizer(model)
    return _TOKENIZERS[(model, digest)]


def within_limits(src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int, max_ratio: float) -> np.ndarray:
    """Training pairs to keep: no side longer than max_len subwords and a longer/shorter
    length ratio of at most max_ratio (an empty side counts as length 1)."""
    longest, shortest = np.maximum(src_lens, tgt_lens), np.maximum(np.minimum(src_lens, tgt_lens), 1)
    return (longest <= max_len) & (longest <= max_ratio * shortest)


def flatten(seqs: list[list[int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    return np.fromiter(chain.from_iterable(seqs), dtype=dtype, count=int(lens.sum())), lens


def encode_chunk(chunk: Chunk, model: str, digest: str, limits: PairLimits, dtype: str) -> EncodedChunk:
    """Validate, encode and filter (train) or truncate (valid) one chunk of pairs."""
    src, tgt = [], []
    for number, (s, t) in enumerate(zip(chunk.src, chunk.tgt), start=chunk.first_line):
        s, t = decode_line(s, number, chunk.names[0]), decode_line(t, number, chunk.names[1])
        if usable_pair(s, t):
            src.append(s)
            tgt.append(t)
    tokenizer = _tokenizer(model, digest)
    src_ids, tgt_ids = tokenizer.encode(src), tokenizer.encode_target(tgt)
    filtered = truncated_src = truncated_tgt = 0
    if chunk.split == "train":
        keep = within_limits(np.fromiter(map(len, src_ids), int), np.fromiter(map(len, tgt_ids), int),
                         limits.max_len, limits.max_ratio)
        src_ids = [ids for ids, k in zip(src_ids, keep) if k]
        tgt_ids = [ids for ids, k in zip(tgt_ids, keep) if k]
        filtered = len(keep) - len(src_ids)
    else:
        truncated_src = sum(len(ids) > limits.truncate for ids in src_ids)
        truncated_tgt = sum(len(ids) > limits.truncate for ids in tgt_ids)
        src_ids = [ids[: limits.truncate] for ids in src_ids]
        tgt_ids = [ids[: limits.truncate] for ids in tgt_ids]
    (s_ids, s_lens), (t_ids, t_lens) = flatten(src_ids, np.dtype(dtype)), flatten(tgt_ids, np.dtype(dtype))
    return EncodedChunk(s_ids, s_lens, t_ids, t_lens, len(chunk.src), len(chunk.src) - len(src), filtered,
                        truncated_src, truncated_tgt)


# ---- main side ------------------------------------------------------------------------
def first_usable(pairs: Iterable[tuple[bytes, bytes]], count: int, pair: PathPair) -> Iterator[tuple[bytes, bytes]]:
    """The raw pairs up to and including the `count`-th usable one (neither side empty: the
    rule the workers and the vocabulary apply), so the workers keep exactly the first
    `count` usable pairs. The rest of the corpus is not read."""
    usable = 0
    for number, (src, tgt) in enumerate(pairs, start=1):
        yield src, tgt
        usable += usable_pair(decode_line(src, number, str(pair[0])), decode_line(tgt, number, str(pair[1])))
        if usable == count:
            return


def chunks(split: str, pair: PathPair, train_pairs: int = 0) -> Iterator[Chunk]:
    """The split's pairs in chunks of CHUNK_LINES lines (line counts checked as they stream);
    for training with `train_pairs`, only the lines that hold the first that many usable pairs."""
    pairs = iter_raw_pairs(*pair)
    if split == "train" and train_pairs:
        pairs = first_usable(pairs, train_pairs, pair)
    first = 1
    while batch := list(islice(pairs, CHUNK_LINES)):
        yield Chunk(split, (str(pair[0]), str(pair[1])), first, [s for s, _ in batch], [t for _, t in batch])
        first += len(batch)


def map_bounded(function: Callable[[Chunk], EncodedChunk], tasks: Iterable[Chunk], workers: int) -> Iterator[EncodedChunk]:
    """function(task) for each task, in order, on `workers` processes with at most two
    tasks per worker in flight (Pool.imap would read the whole corpus ahead into memory)."""
    if workers <= 1:
        yield from map(function, tasks)
        return
    # spawn: the workers start clean, whatever threads (torch, gloo) this process runs
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pending: deque = deque()
        for task in tasks:
            pending.append(pool.apply_async(function, (task,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def count_lines(path: Path) -> int:
    """Newlines in a file (for the progress bar's total), read in 1 MiB blocks."""
    with open_lines(path) as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def encode_split(split: str, pair: PathPair, out: Path, encode: Callable[[Chunk], EncodedChunk],
                 workers: int, progress: bool, train_pairs: int = 0) -> dict[str, int]:
    """Encode one split into out/{split}.{src,tgt}.ids + offsets; returns its counts."""
    totals = dict(lines=0, skipped=0, filtered=0, truncated_src=0, truncated_tgt=0)
    lens: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
    bar = tqdm(total=count_lines(pair[0]) if progress else None, disable=not progress, unit=" lines",
               unit_scale=True, desc=f"encoding {split}", dynamic_ncols=True)
    with atomic_open(out / f"{split}.src.ids") as src_out, atomic_open(out / f"{split}.tgt.ids") as tgt_out:
        for result in map_bounded(encode, chunks(split, pair, train_pairs), workers):
            src_out.write(result.src_ids.tobytes())
            tgt_out.write(result.tgt_ids.tobytes())
            lens["src"].append(result.src_lens)
            lens["tgt"].append(result.tgt_lens)
            for key in totals:
                totals[key] += getattr(result, key)
            bar.update(result.lines)
    bar.close()
    for side in SIDES:
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(lens[side]), dtype=np.int64)])
        with atomic_open(out / f"{split}.{side}.offsets.npy") as handle:
            np.save(handle, offsets)
        totals[f"{side}_tokens"] = int(offsets[-1])
    totals["pairs"] = totals["lines"] - totals["skipped"] - totals["filtered"]
    return totals


def report(split: str, pair: PathPair, counts: dict[str, int], limits: PairLimits) -> None:
    """Stop on a split with nothing left; warn about what was skipped, dropped or cut."""
    if counts["lines"] == counts["skipped"]:
        raise no_pairs_left(*pair, counts["lines"])
    warn_skipped(*pair, counts["skipped"])
    if counts["pairs"] == 0:
        raise CorpusError(f"{pair[0]}: every training pair was dropped by data.max_len={limits.max_len} "
                          f"or data.max_len_ratio={limits.max_ratio}; raise them")
    usable = counts["lines"] - counts["skipped"]
    if split == "train" and 0 < usable < limits.train_pairs:
        log.warning("%s: data.train_pairs is %d but the corpus has only %d usable pairs; training on all of them",
                    pair[0], limits.train_pairs, usable)
    if counts["filtered"]:
        log.warning("dropped %d training pair(s) longer than %d subwords or with a length ratio above %g",
                    counts["filtered"], limits.max_len, limits.max_ratio)
    for path, side in zip(pair, SIDES):
        if counts[f"truncated_{side}"]:
            log.warning("%s: %d line(s) longer than %d subwords (model.max_positions - 1) truncated for validation",
                        path, counts[f"truncated_{side}"], limits.truncate)


# ---- the manifest: what the arrays were made from -------------------------------------
def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}


def changed(saved: dict[str, Any], path: Path) -> str | None:
    """Why `path` is not the file `saved` describes, or None. Same size and mtime count as
    the same file; otherwise the content decides (a copied or touched file is still the same)."""
    if not path.is_file():
        return f"{path}: no such file"
    stat = path.stat()
    if stat.st_size == saved["size"] and stat.st_mtime_ns == saved["mtime_ns"]:
        return None
    if stat.st_size != saved["size"] or file_sha256(path) != saved["sha256"]:
        return f"{path} differs from the file it was prepared from ({saved['path']}, {saved['size']} bytes)"
    return None


def inputs(paths: CorpusPaths, tokenizer: Path) -> dict[str, Path]:
    """The files the prepared data is made from, by manifest key. Besides its naming file,
    a tokenizer adds the files its ids depend on (an imported run's source_spm, target_spm)."""
    model, *cutters = encoding_files(tokenizer)
    files = {"tokenizer": model, "train_src": paths.train[0], "train_tgt": paths.train[1]}
    files.update((path.name.replace(".", "_"), path) for path in cutters)
    if paths.valid:
        files.update(valid_src=paths.valid[0], valid_tgt=paths.valid[1])
    return files


def stale(out: Path, files: dict[str, Path], limits: PairLimits) -> str | None:
    """Why the prepared data in `out` does not serve these inputs, or None if it does."""
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "not prepared yet"
    except (OSError, ValueError) as err:
        return f"{out / 'manifest.json'}: unreadable ({err})"
    if manifest.get("format") != FORMAT or manifest.get("limits") != asdict(limits):
        return f"prepared with other settings ({manifest.get('limits')})"
    if set(manifest["files"]) != set(files):
        return f"prepared from the files {sorted(manifest['files'])}, now given {sorted(files)}"
    reasons = [changed(manifest["files"][key], path) for key, path in files.items()]
    return next((reason for reason in reasons if reason), None)


def open_sequences(out: Path, split: str, side: str, dtype: str) -> Sequences:
    offsets = np.load(out / f"{split}.{side}.offsets.npy", mmap_mode="r")
    path = out / f"{split}.{side}.ids"
    ids = np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype=dtype)
    return Sequences(ids, offsets)


def open_prepared(out: Path, paths: CorpusPaths) -> PreparedData:
    """Map the prepared arrays (no copy: pages are read, and shared, on demand)."""
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    dtype = manifest["dtype"]
    train = [open_sequences(out, "train", side, dtype) for side in SIDES]
    if paths.valid:
        valid = [open_sequences(out, "valid", side, dtype) for side in SIDES]
    else:
        valid = [Sequences(np.zeros(0, dtype=dtype), np.zeros(1, dtype=np.int64)) for _ in SIDES]
    text = read_parallel(*paths.valid) if paths.valid else None
    return PreparedData(*train, *valid, text, manifest["counts"]["train"]["filtered"])


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def build(out: Path, paths: CorpusPaths, files: dict[str, Path], limits: PairLimits, vocab_size: int,
          workers: int, progress: bool) -> None:
    """Encode the splits into `out`; the manifest is removed first and written last, so
    arrays without a valid manifest are never used."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)
    dtype = "uint16" if vocab_size <= 2**16 else "uint32"
    digest = file_sha256(files["tokenizer"])
    encode = _Encoder(str(files["tokenizer"]), digest, limits, dtype)
    counts = {}
    for split in ("train", "valid"):
        pair = getattr(paths, split)
        if pair:
            counts[split] = encode_split(split, pair, out, encode, workers if split == "train" else 1, progress,
                                         limits.train_pairs)
            report(split, pair, counts[split], limits)
    manifest = {"format": FORMAT, "dtype": dtype, "limits": asdict(limits), "counts": counts,
                "files": {key: fingerprint(path) for key, path in files.items()}}
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1) + "\n")


@dataclass(frozen=True)
class _Encoder:
    """encode_chunk with its fixed arguments; a picklable callable for the workers."""

    model: str
    digest: str
    limits: PairLimits
    dtype: str

    def __call__(self, chunk: Chunk) -> EncodedChunk:
        return encode_chunk(chunk, self.model, self.digest, self.limits, self.dtype)


def prepare_corpus(paths: CorpusPaths, tokenizer: Path, vocab_size: int, out: Path, limits: PairLimits,
                   may_rebuild: bool = True, workers: int | None = None, progress: bool = False) -> PreparedData:
    """The prepared data for these corpus files and this tokenizer: mapped from `out`
    when it was prepared from them, else encoded now. With may_rebuild False (a run that
    has started training) data prepared from other inputs is refused, not replaced."""
    files = inputs(paths, tokenizer)
    reason = stale(out, files, limits)
    if reason is not None:
        if not may_rebuild and reason != "not prepared yet":
            raise UserError(f"{out}: {reason}; a run resumes only on the data it started with: restore the "
                            "file or train into a new --run")
        if reason != "not prepared yet":
            log.warning("%s: %s; preparing the data again", out, reason)
        log.info("preparing the data into %s", out)
        workers = workers or default_workers()
        build(out, paths, files, limits, vocab_size, workers if _is_large(paths.train[0]) else 1, progress)
    return open_prepared(out, paths)


def require_prepared(paths: CorpusPaths, tokenizer: Path, out: Path, limits: PairLimits) -> PreparedData:
    """Map data another process prepared (DDP ranks > 0): it must match these inputs."""
    reason = stale(out, inputs(paths, tokenizer), limits)
    if reason is not None:
        raise UserError(f"{out}: {reason}; rank 0 should have prepared it (is the folder shared?)")
    return open_prepared(out, paths)


def _is_large(path: Path) -> bool:
    """More than PARALLEL_FROM lines, judged from the size (about 100 bytes a line)."""
    return path.stat().st_size > PARALLEL_FROM * (30 if path.suffix == ".gz" else 100)
