"""Built-in toy corpora (config `data.task`): parallel corpora the toolkit generates
itself, so that training and translating work on a fresh machine without downloading anything.

- `numbers`: English number phrases -> German ones, made with num2words:
  "three hundred and twenty-one" -> "dreihunderteinundzwanzig". Integers from
  0..999,999, their number of digits drawn uniformly and zeros frequent (so "seven" and
  "forty-two thousand and seven" are as much part of the task as "six hundred and
  twelve thousand three hundred and four"); train, validation and test are disjoint.
- `copy`: random sequences of the symbols w0 ... w9, target = source (the Annotated
  Transformer's first example).

Both are written as plain parallel text files, the format real corpora use."""

from __future__ import annotations

import random
from pathlib import Path

from num2words import num2words

from transformer_mt.common.files import atomic_write_text

SPLITS = ("train", "valid", "test")
Pairs = list[tuple[str, str]]


def held_out_size(size: int) -> int:
    """Validation and test sentences for `size` training sentences (100 to 1000)."""
    return max(100, min(1000, size // 20))


def number_pair(n: int) -> tuple[str, str]:
    """(English, German) words for the integer n."""
    english = num2words(n, lang="en").replace(",", "")
    return english, num2words(n, lang="de")


def _split(items: list, size: int) -> dict[str, list]:
    held = held_out_size(size)
    return {"train": items[:size], "valid": items[size : size + held], "test": items[size + held :]}


def _sample_number(rng: random.Random, zero: float = 0.3) -> int:
    """An integer below 1,000,000: 1 to 6 digits (uniformly), each digit after the first
    0 with probability `zero`, so that "forty-two thousand and seven" is common too."""
    digits = rng.randint(1, 6)
    n = rng.randrange(0, 10) if digits == 1 else rng.randrange(1, 10)
    for _ in range(digits - 1):
        n = 10 * n + (0 if rng.random() < zero else rng.randrange(1, 10))
    return n


def drawn_numbers(size: int, seed: int = 1) -> dict[str, list[int]]:
    """`size` training integers plus disjoint validation and test ones. Every number is
    distinct, except that training repeats 0..99 a few times (up to 5, one per 4000
    numbers): drawn once each, "seven" would be seen once in 20,000 sentences."""
    rng = random.Random(seed)
    small = list(range(100)) * min(5, size // 4000)
    seen: set[int] = set(small)
    numbers: list[int] = []
    while len(numbers) < size - len(small) + 2 * held_out_size(size):
        n = _sample_number(rng)
        if n not in seen:
            seen.add(n)
            numbers.append(n)
    return _split(small + numbers, size)


def numbers_corpus(size: int, seed: int = 1) -> dict[str, Pairs]:
    """`size` training pairs plus disjoint validation and test pairs (drawn_numbers)."""
    return {split: [number_pair(n) for n in numbers] for split, numbers in drawn_numbers(size, seed).items()}


def copy_corpus(size: int, seed: int = 1, symbols: int = 10, max_len: int = 10) -> dict[str, Pairs]:
    """Random symbol sequences of 1..max_len symbols that translate to themselves."""
    rng = random.Random(seed)
    lines = [
        " ".join(f"w{rng.randrange(symbols)}" for _ in range(rng.randint(1, max_len)))
        for _ in range(size + 2 * held_out_size(size))
    ]
    return _split([(line, line) for line in lines], size)


TOY_CORPORA = {"numbers": numbers_corpus, "copy": copy_corpus}  # names listed in config.TASK_NAMES too


def toy_corpus_paths(directory: str | Path) -> dict[str, tuple[Path, Path]]:
    """Where a toy corpus's splits live: DIR/{train,valid,test}.{src,tgt}."""
    directory = Path(directory)
    return {split: (directory / f"{split}.src", directory / f"{split}.tgt") for split in SPLITS}


def write_toy_corpus(name: str, directory: str | Path, size: int, seed: int = 1) -> dict[str, tuple[Path, Path]]:
    """Generate toy corpus `name` and write its splits; returns {split: (src_path, tgt_path)}."""
    if name not in TOY_CORPORA:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(TOY_CORPORA)}")
    splits = TOY_CORPORA[name](size, seed)
    paths = toy_corpus_paths(directory)
    Path(directory).mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        src_path, tgt_path = paths[split]
        atomic_write_text(src_path, "".join(src + "\n" for src, _ in pairs))
        atomic_write_text(tgt_path, "".join(tgt + "\n" for _, tgt in pairs))
    return paths


# ---- built-in text for a language model (data.task with model.arch: decoder_only) ----------
TOY_TEXTS = ("number_lines",)  # names listed in config.TASK_NAMES too


def number_line(n: int) -> str:
    """One line of the `number_lines` text: an English number phrase, then its digits:
    "three hundred and twenty-one = 321". A language model that writes well-formed lines
    has learned, from next-token prediction alone, to translate words into digits."""
    return f"{number_pair(n)[0]} = {n}"


def is_well_formed(line: str) -> bool:
    """Whether `line` is a true `number_lines` line (words = digits, the digits below 10^6)."""
    words, sep, digits = line.strip().rpartition(" = ")
    if not sep or not digits.isdigit() or len(digits) > 6 or (len(digits) > 1 and digits[0] == "0"):
        return False
    return number_pair(int(digits))[0] == words


def number_lines(size: int, seed: int = 1) -> dict[str, list[str]]:
    """`size` training lines and disjoint validation and test lines of `number_lines`,
    the numbers drawn as the `numbers` corpus draws them."""
    return {split: [number_line(n) for n in numbers] for split, numbers in drawn_numbers(size, seed).items()}


def write_toy_text(name: str, directory: str | Path, size: int, seed: int = 1) -> tuple[Path, Path]:
    """Generate the built-in text `name` into DIR/train.txt and DIR/valid.txt (and
    DIR/test.txt) once; later calls (resume, other ranks) reuse the files."""
    if name not in TOY_TEXTS:
        raise ValueError(f"unknown text {name!r}; texts: {', '.join(TOY_TEXTS)}")
    directory = Path(directory)
    paths = {split: directory / f"{split}.txt" for split in SPLITS}
    if not all(path.is_file() for path in paths.values()):
        directory.mkdir(parents=True, exist_ok=True)
        for split, lines in number_lines(size, seed).items():
            atomic_write_text(paths[split], "".join(line + "\n" for line in lines))
    return paths["train"], paths["valid"]
