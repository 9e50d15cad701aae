"""Checks of the text: against the vocabulary and the length limits (unknown_words,
truncation), and of the training pairs against each other (misaligned_pairs)."""

from __future__ import annotations

import json
import statistics
from itertools import islice
from pathlib import Path

from transformer_mt.common.errors import UserError
from transformer_mt.data.corpus import decode_line, iter_raw_pairs, usable_pair
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_mt.diagnosis import thresholds
from transformer_mt.diagnosis.case import Case, NotChecked
from transformer_mt.diagnosis.finding import Finding, cost


def unknown_share(ids: list[list[int]], unknown: tuple[int, ...]) -> float:
    """The share of the tokens (bos and eos aside) that are one of `unknown`."""
    tokens = [i for seq in ids for i in seq if i not in (BOS_ID, EOS_ID)]
    return sum(i in unknown for i in tokens) / max(len(tokens), 1)


def unknown_words(case: Case) -> Finding | None:
    """The share of source tokens the source vocabulary does not hold, and of reference
    tokens the target vocabulary cannot produce (<unk>, or the padding a word vocabulary
    without <unk> reads them as)."""
    case.need_pairs()
    source = unknown_share(case.tokenizer.encode(case.sources), (UNK_ID,))
    target = unknown_share(case.tokenizer.encode_target(case.references), (UNK_ID, PAD_ID))
    share = case.measured["unknown_words"] = max(source, target)
    if share <= thresholds.UNKNOWN_WORDS.value:
        return None
    hidden = ("padding that the source mask hides" if case.cfg.decode.unknown_words == "pad"
              else "<unk>, one vector for every unknown word")
    return Finding(
        "unknown_words", round(share, 4), thresholds.UNKNOWN_WORDS.value,
        f"{source:.1%} of the source tokens and {target:.1%} of the reference tokens of {case.pairs_from} are "
        f"outside the vocabulary: the encoder reads them as {hidden}, and the model can never write them",
        "a subword vocabulary, in which no word is unknown: --data.vocab_type=bpe --data.joint_vocab=true "
        "--model.share_vocab=true",
        cost("+bpe"))


def truncation(case: Case) -> Finding | None:
    """The share of the training pairs that data.max_len and data.max_len_ratio dropped,
    from the run's prepared data (what `train` counted when it encoded the corpus)."""
    manifest = case.run.prepared / "manifest.json" if case.run is not None else None
    if manifest is None or not manifest.is_file():
        raise NotChecked("no prepared training data (an imported run, or a config before training)")
    counts = json.loads(manifest.read_text(encoding="utf-8"))["counts"]["train"]
    usable = counts["lines"] - counts["skipped"]
    share = case.measured["truncation"] = counts["filtered"] / max(usable, 1)
    if share <= thresholds.TRUNCATION.value:
        return None
    data = case.cfg.data
    return Finding(
        "truncation", round(share, 4), thresholds.TRUNCATION.value,
        f"{counts['filtered']} of the {usable} training pairs ({share:.1%}) were dropped: a side longer than "
        f"data.max_len = {data.max_len} subwords, or a length ratio above data.max_len_ratio = {data.max_len_ratio:g}",
        "raise --data.max_len (and model.max_positions with it) or --data.max_len_ratio, or clean the corpus")


PAIRS_READ = 5000  # training pairs whose lengths are compared: enough for a correlation to two decimals


def length_correlation(sources: list[str], targets: list[str]) -> float:
    """Pearson's correlation of the two sides' lengths in characters, pair by pair: a sentence
    and its translation are long or short together, lines shifted or shuffled are not. Sides of
    one length throughout (nothing to correlate) count as aligned."""
    try:
        return statistics.correlation([len(s) for s in sources], [len(t) for t in targets])
    except statistics.StatisticsError:  # a constant side
        return 1.0


def first_pairs(src: Path, tgt: Path) -> tuple[list[str], list[str]]:
    """The first PAIRS_READ usable pairs of two training files, streamed (a corpus of millions
    of lines is not read whole)."""
    pairs = ((decode_line(s, n, str(src)), decode_line(t, n, str(tgt)))
             for n, (s, t) in enumerate(iter_raw_pairs(src, tgt), start=1))
    kept = list(islice((pair for pair in pairs if usable_pair(*pair)), PAIRS_READ))
    return [s for s, _ in kept], [t for _, t in kept]


def misaligned_pairs(case: Case) -> Finding | None:
    """Training lines that do not translate each other (a target file shifted by a line, a
    stray blank line, files sorted or shuffled apart): the lengths of the first PAIRS_READ
    training pairs barely correlate. Where the translations were checked too, the loss the
    right sources give against shifted ones is the model's evidence."""
    if case.run is None:
        raise NotChecked("no training text (a config before training)")
    try:
        sources, targets = first_pairs(*case.run.text_files(("train",)))
    except UserError as err:
        raise NotChecked(f"the training text cannot be read ({err})") from None
    if len(sources) < 20:
        raise NotChecked("fewer than 20 training pairs")
    r = case.measured["misaligned_pairs"] = length_correlation(sources, targets)
    if r >= thresholds.MISALIGNED.value:
        return None
    evidence = ""
    if case.tokenizer is not None and case.sources:  # the model's view: does its source matter to it?
        right, shifted = case.losses
        evidence = (f"; the model agrees: the right sources lower the loss by {(shifted - right) / shifted:.1%} "
                    "against shifted ones")
    return Finding(
        "misaligned_pairs", round(r, 3), thresholds.MISALIGNED.value,
        f"the lengths of the first {len(sources)} training pairs correlate at {r:.2f} (aligned translations: 0.6 "
        f"and above): line N of the target file does not translate line N of the source file{evidence}, so the "
        "model can only learn which target words are common",
        "check the line alignment of the training files: the same number of lines, no stray blank line or header "
        "in one of them, not sorted or shuffled apart (`paste src tgt | head`)")
