"""Checks of the translations themselves (--src/--ref, else the run's validation set):
source_ignored, length (and outputs cut at the length limit), repetition."""

from __future__ import annotations

from collections import Counter

from transformer_mt.diagnosis import thresholds
from transformer_mt.diagnosis.case import Case
from transformer_mt.diagnosis.finding import Finding

REPEATS = 3  # a word pair this many times in one hypothesis is a loop


def source_ignored(case: Case) -> Finding | None:
    """Translations that barely depend on their source: the share of hypotheses equal to
    the hypothesis of another, different source, and how much lower the loss is with the
    right sources than with every source moved to the next pair."""
    hypotheses = case.hypotheses
    by_source = {source: h.text for source, h in zip(case.sources, hypotheses)}
    counts = Counter(by_source.values())
    shared = sum(n for n in counts.values() if n > 1) / max(len(by_source), 1)
    right, shuffled = case.losses
    gain = (shuffled - right) / max(shuffled, 1e-9)
    case.measured["source_ignored/shared"], case.measured["source_ignored/gain"] = shared, gain
    if shared <= thresholds.SOURCE_IGNORED_SHARE.value and gain >= thresholds.SOURCE_IGNORED_GAIN.value:
        return None
    common, n = counts.most_common(1)[0]
    value, limit = ((round(shared, 3), thresholds.SOURCE_IGNORED_SHARE.value) if shared > thresholds.SOURCE_IGNORED_SHARE.value
                    else (round(gain, 4), thresholds.SOURCE_IGNORED_GAIN.value))
    return Finding(
        "source_ignored", value, limit,
        f"{shared:.0%} of {len(by_source)} different sources get a translation that another source gets too "
        f"({n} times: {common[:60]!r}), and the right sources lower the loss by {gain:.1%} against shuffled ones: "
        "the decoder writes likely sentences without reading the encoder",
        "check embedding_scale and memorization first; then that the source mask lets the decoder attend "
        "(True = may attend) and that it trains on all the pairs you have")


def cut_at_limit(case: Case) -> Finding | None:
    """Hypotheses that ended at the decoding length limit, not at eos: a `length` finding that
    names decode.max_len_a and decode.max_len_b, which cut them."""
    hypotheses = case.hypotheses
    cut = sum(not h.finished for h in hypotheses)
    share = case.measured["length/cut"] = cut / max(len(hypotheses), 1)
    if share <= thresholds.CUT.value:
        return None
    decode = case.cfg.decode
    return Finding(
        "length", round(share, 3), thresholds.CUT.value,
        f"{cut} of {len(hypotheses)} translations end at the decoding length limit (decode.max_len_a = "
        f"{decode.max_len_a:g} x the source length + decode.max_len_b = {decode.max_len_b}), not at eos: the limit "
        "cut them",
        "raise the limit (the defaults: --decode.max_len_a=1 --decode.max_len_b=50); if outputs still run to it, "
        "check repetition")


def length(case: Case) -> Finding | None:
    """Hypotheses cut at the decoding length limit (cut_at_limit), else the hypotheses' length
    (white-space words) over the references'."""
    if found := cut_at_limit(case):
        return found
    words = sum(len(h.text.split()) for h in case.hypotheses)
    ratio = case.measured["length/ratio"] = words / max(sum(len(r.split()) for r in case.references), 1)
    if thresholds.LENGTH_LOW.value <= ratio <= thresholds.LENGTH_HIGH.value:
        return None
    short = ratio < thresholds.LENGTH_LOW.value
    return Finding(
        "length", round(ratio, 3), thresholds.LENGTH_LOW.value if short else thresholds.LENGTH_HIGH.value,
        f"the translations have {ratio:.2f} times the words of the references: "
        + ("too short, and BLEU's brevity penalty takes its share" if short else "too long"),
        ("a length penalty that favours longer outputs (--decode.length_penalty=1.0 with --decode.beam=4)" if short
         else "a beam with a length penalty (--decode.beam=4 --decode.length_penalty=0.6); see repetition"))


def loops(text: str) -> bool:
    """Whether a word pair occurs REPEATS times or more in `text`."""
    words = text.split()
    pairs = Counter(zip(words, words[1:]))
    return bool(pairs) and max(pairs.values()) >= REPEATS


def repetition(case: Case) -> Finding | None:
    """The share of hypotheses that loop: a word pair REPEATS times or more. An output cut at the
    length limit without a loop is a `length` finding, not a loop."""
    hypotheses = case.hypotheses
    looping = [h for h in hypotheses if loops(h.text)]
    share = case.measured["repetition"] = len(looping) / max(len(hypotheses), 1)
    if share <= thresholds.REPETITION.value:
        return None
    unfinished = sum(not h.finished for h in looping)
    return Finding(
        "repetition", round(share, 3), thresholds.REPETITION.value,
        f"{len(looping)} of {len(hypotheses)} translations loop ({unfinished} of them run to the length limit), "
        f"for example {looping[0].text[:80]!r}",
        "check source_ignored and memorization; a beam (--decode.beam=4) ends fewer outputs in a loop")
