"""A language model's data: plain text files (one sentence or document per line, .gz
allowed), encoded once into one token stream, each line's ids followed by the end-of-text
id, and kept as a memory-mapped array beside a manifest of what it was made from.

Training cuts the stream into blocks of `block_size` + 1 tokens (inputs are the first
block_size, targets the last block_size: every position predicts the next token),
batches of whole blocks drawn in an order that depends on (seed, epoch) alone, so a
resumed run sees exactly the blocks it would have seen (data/blocks.py)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from transformer_mt.common.config import ConfigError, DataConfig
from transformer_mt.data.corpus import CorpusError, decode_line, iter_raw_lines
from transformer_mt.data.prepare import changed, fingerprint
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import EOS_ID
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.registry import encoding_files, load_tokenizer
from transformer_mt.data.toy_corpora import write_toy_text
from transformer_mt.data.vocabulary import say_if_smaller
from transformer_mt.common.files import atomic_open, atomic_write_text

log = logging.getLogger("transformer_mt")

STREAM_FORMAT = 1
CHUNK_LINES = 10_000  # lines encoded at a time: memory stays bounded for any corpus size


@dataclass(frozen=True)
class TextPaths:
    """The training text and, optionally, the validation text."""

    train: Path
    valid: Path | None


def text_paths(cfg: DataConfig, task_dir: Path, seed: int) -> TextPaths:
    """data.train_text / data.valid_text, or a built-in text (data.task) generated into
    `task_dir` once."""
    if cfg.task:
        return TextPaths(*write_toy_text(cfg.task, task_dir, cfg.task_size, seed))
    if not cfg.train_text:
        raise ConfigError("data.train_text: set it to a text file (or data.task to a built-in text: number_lines)")
    return TextPaths(Path(cfg.train_text), Path(cfg.valid_text) if cfg.valid_text else None)


def end_of_text(tokenizer: Tokenizer) -> int:
    """The id that ends every line of the stream: the tokenizer's own end-of-text id
    (GPT-2's <|endoftext|>), else eos."""
    return getattr(tokenizer, "end_of_text_id", EOS_ID)


def text_lines(path: Path) -> Iterator[str]:
    """The lines of `path` as text (UTF-8 checked line by line; empty lines kept)."""
    for number, raw in enumerate(iter_raw_lines(path), start=1):
        yield decode_line(raw, number, str(path))


def load_or_train_text_tokenizer(cfg: DataConfig, train: Path, path: Path, seed: int) -> Tokenizer:
    """The run's tokenizer: loaded if it exists (an imported GPT-2's), else a sentencepiece
    vocabulary trained on up to data.vocab_sample lines of the training text (drawn from the seed)."""
    if path.is_file():
        return load_tokenizer(path)
    count = sum(1 for _ in text_lines(train))  # checks every line is UTF-8 before any work
    if count == 0:
        raise CorpusError(f"{train}: empty; a language model needs training text")
    chosen = None
    if count > cfg.vocab_sample:
        chosen = set(np.random.default_rng(seed).choice(count, size=cfg.vocab_sample, replace=False).tolist())
    lines = (line for index, line in enumerate(text_lines(train)) if chosen is None or index in chosen)
    log.info("training a %d-piece %s vocabulary on %d of %d lines", cfg.vocab_size, cfg.vocab_type,
             len(chosen) if chosen else count, count)
    tokenizer = SentencePieceTokenizer.train((line for line in lines if line.strip()), path, cfg.vocab_size,
                                             cfg.vocab_type, seed)
    say_if_smaller(tokenizer, cfg.vocab_size)
    return tokenizer


@dataclass
class TokenStream:
    """One split as a stream: `tokens` (N,) ids (memory-mapped), and the characters and
    lines of the text it encodes (bits per character divide by these)."""

    tokens: np.ndarray
    characters: int
    lines: int

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class PreparedText:
    train: TokenStream
    valid: TokenStream | None


def encode_stream(text: Path, tokenizer: Tokenizer, out: Path, dtype: str) -> dict[str, int]:
    """Encode `text` into `out` (raw ids of `dtype`), CHUNK_LINES lines at a time, written
    atomically; returns the counts of tokens, characters (each line + its newline) and lines."""
    eot = end_of_text(tokenizer)
    counts = {"tokens": 0, "characters": 0, "lines": 0}
    with atomic_open(out, "wb") as handle:
        for chunk in chunked(text_lines(text), CHUNK_LINES):
            ids = [token for line in tokenizer.encode(chunk) for token in (*line, eot)]
            np.asarray(ids, dtype=dtype).tofile(handle)
            counts["tokens"] += len(ids)
            counts["characters"] += sum(len(line) + 1 for line in chunk)
            counts["lines"] += len(chunk)
    return counts


def chunked(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def stream_inputs(paths: TextPaths, tokenizer_file: Path) -> dict[str, Path]:
    files = {"tokenizer": encoding_files(tokenizer_file)[0], "train": paths.train}
    if paths.valid:
        files["valid"] = paths.valid
    return files


def stale_stream(out: Path, files: dict[str, Path]) -> str | None:
    """Why the prepared stream in `out` does not serve these inputs, or None."""
    try:
        manifest = json.loads((out / "stream.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "not prepared yet"
    except (OSError, ValueError) as err:
        return f"{out / 'stream.json'}: unreadable ({err})"
    if manifest.get("format") != STREAM_FORMAT or set(manifest["files"]) != set(files):
        return "prepared from other files or settings"
    return next((r for r in (changed(manifest["files"][k], p) for k, p in files.items()) if r), None)


def prepare_text(paths: TextPaths, tokenizer_file: Path, tokenizer: Tokenizer, out: Path,
                 may_rebuild: bool = True) -> PreparedText:
    """Encode the training (and validation) text once into `out`, or map what is there
    when it was made from the same files. The manifest is written last."""
    files = stream_inputs(paths, tokenizer_file)
    reason = stale_stream(out, files)
    if reason and not may_rebuild:
        raise CorpusError(f"{out}: the prepared text no longer matches its inputs ({reason}); "
                          "start a new run, or restore the files it was trained on")
    if reason:
        out.mkdir(parents=True, exist_ok=True)
        (out / "stream.json").unlink(missing_ok=True)
        dtype = "uint16" if len(tokenizer) <= 65536 else "uint32"
        counts = {split: encode_stream(path, tokenizer, out / f"{split}.tokens", dtype)
                  for split, path in (("train", paths.train), ("valid", paths.valid)) if path}
        manifest = {"format": STREAM_FORMAT, "dtype": dtype, "counts": counts,
                    "files": {key: fingerprint(path) for key, path in files.items()}}
        atomic_write_text(out / "stream.json", json.dumps(manifest, indent=1))
        log.info("prepared %s training tokens in %s", f"{counts['train']['tokens']:,}", out)
    return open_text(out)


def open_text(out: Path) -> PreparedText:
    """Map the prepared streams of `out` (no copy)."""
    manifest = json.loads((out / "stream.json").read_text(encoding="utf-8"))
    streams = {}
    for split, counts in manifest["counts"].items():
        tokens = np.memmap(out / f"{split}.tokens", dtype=manifest["dtype"], mode="r") if counts["tokens"] \
            else np.zeros(0, dtype=manifest["dtype"])
        streams[split] = TokenStream(tokens, counts["characters"], counts["lines"])
    if len(streams["train"]) < 2:
        raise CorpusError(f"{out}: the training text has fewer than 2 tokens; a language model needs more text")
    return PreparedText(streams["train"], streams.get("valid"))


def unigram_loss(train: np.ndarray, valid: np.ndarray, vocab_size: int) -> float:
    """Cross entropy (nats per token) of `valid` under the token frequencies of `train`,
    add-one smoothed over `vocab_size`: the loss of a model that ignores all context, the
    baseline a language model must beat."""
    counts = np.bincount(np.asarray(train, dtype=np.int64), minlength=vocab_size) + 1.0
    log_probs = np.log(counts / counts.sum())
    return float(-log_probs[np.asarray(valid[1:], dtype=np.int64)].mean())
