"""Checks of the text against the vocabulary and the length limits: unknown_words, truncation."""

from __future__ import annotations

import json

from transformer_mt.data.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
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
    share = max(source, target)
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
    share = counts["filtered"] / max(usable, 1)
    if share <= thresholds.TRUNCATION.value:
        return None
    data = case.cfg.data
    return Finding(
        "truncation", round(share, 4), thresholds.TRUNCATION.value,
        f"{counts['filtered']} of the {usable} training pairs ({share:.1%}) were dropped: a side longer than "
        f"data.max_len = {data.max_len} subwords, or a length ratio above data.max_len_ratio = {data.max_len_ratio:g}",
        f"raise --data.max_len (and model.max_positions with it) or --data.max_len_ratio, or clean the corpus")
