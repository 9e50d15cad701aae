"""Every threshold the doctor's checks use, in one place, each with the reason for its value.

A finding is reported when a measured value crosses its threshold. The values are chosen from
what docs/ablations.md measured on the study notes' model and the toolkit's own recipes:
far enough from a healthy run that it never fires there, near enough to the notes' model
that it fires on its causes."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_mt.model.measures import EMBEDDING_TO_POSITION_LIMIT


@dataclass(frozen=True)
class Threshold:
    """A threshold and why it has that value."""

    value: float
    reason: str


EMBEDDING_SCALE = Threshold(EMBEDDING_TO_POSITION_LIMIT, "a scaled token embedding 4 times the positional encoding's RMS leaves the positions "
                             "1/17 of the sum's energy; the notes' N(0, 1) x sqrt(128) is 16 times (11.3 against "
                             "0.71), Xavier 0.25, N(0, 1/d_model) 1.4")
CLONED = Threshold(0.9, "independently drawn matrices correlate near 0 (|r| < 0.05 for d_model 32 and up) and stay far "
                    "below 0.9 in training; copy.deepcopy without a re-draw gives exactly 1")
MEMORIZATION = Threshold(1.0, "validation loss more than 1 nat above the training loss: the model gives its training "
                          "targets e = 2.7 times the probability it gives unseen ones")
UNKNOWN_WORDS = Threshold(0.01, "1% of tokens unknown puts an unknown word in about one sentence of eight (13 words a "
                            "sentence); a subword vocabulary has none")
SOURCE_IGNORED_SHARE = Threshold(0.5, "half the hypotheses identical to the hypothesis of another, different source")
SOURCE_IGNORED_GAIN = Threshold(0.05, "the right source lowers the loss by less than 5% against a shuffled one; a model "
                                  "that reads its source lowers it by half or more")
LENGTH_LOW = Threshold(0.8, "hypotheses 20% shorter than the references: BLEU's brevity penalty alone costs 22%")
LENGTH_HIGH = Threshold(1.25, "hypotheses 25% longer than the references")
REPETITION = Threshold(0.05, "more than 5% of hypotheses repeat a word pair 3 times; captions and news sentences "
                             "almost never do")
CUT = Threshold(0.05, "more than 5% of hypotheses end at the decoding length limit (decode.max_len_a x source + "
                      "decode.max_len_b) instead of at eos: the limit, not the model, decided their length")
TRUNCATION = Threshold(0.01, "more than 1% of the training pairs dropped by data.max_len or data.max_len_ratio")
TIED_SCALE = Threshold(3.0, "logits of a tied output layer with a standard deviation above 3 at the start (sqrt(d_model) "
                        "x the embedding's RMS): the first softmax puts almost all mass on a few random tokens; "
                        "N(0, 1) embeddings at d_model 128 give 11.3, Xavier 0.2, N(0, 1/d_model) 1")
DIVERGED = Threshold(0.5, "the training loss, smoothed over SMOOTHING logged steps, ended more than 0.5 nats above "
                          "its lowest: the model now gives the right tokens 40% less probability than it once did; a "
                          "margin in nats, so a loss near 0 that wobbles (0.00 to 0.01) is not a divergence")
DIVERGED_SHARE = Threshold(0.25, "and by more than a quarter of its lowest: a healthy Multi30k run's smoothed loss "
                                  "ends up to 0.33 nats (14%) above its lowest from batch to batch (the doctor's zoo)")
MISALIGNED = Threshold(0.3, "the character lengths of the training pairs' two sides correlate below 0.3; aligned "
                            "parallel text correlates at 0.6 and above (Multi30k en-de 0.8, the numbers task 0.9, "
                            "the copy task 1.0), lines shifted or shuffled against each other near 0")
UNIGRAM = Threshold(0.9, "a final training loss above 90% of the target unigram entropy: the model predicts word "
                     "frequencies and little else")
UNDERTRAINED_BLEU = Threshold(0.5, "validation BLEU rose by more than 0.5 points over the last validation interval: "
                                   "more than seed-to-seed noise of one validation set")
UNDERTRAINED_LOSS = Threshold(0.02, "validation loss fell by more than 0.02 nats over the last validation interval "
                                    "(in nats, not a share: near 0, a share of a tiny loss is noise)")
CEILING = Threshold(0.95, "a model whose validation output matches 95% of its references exactly (or scores chrF "
                          "95) is at its task's ceiling: more training cannot measurably help it")

# What the doctor's zoo (benchmarks/doctor_zoo.py, docs/doctor.md) measured on its healthy runs,
# by check: a finding's message quotes it beside its value, so a value near its limit reads as
# the weaker evidence it is.
HEALTHY: dict[str, str] = {
    "embedding_scale": "0.35 to 1.58",
    "cloned_init": "no pair of matrices near the limit",
    "tied_scale": "0.25 to 1.12",
    "misaligned_pairs": "0.89 to 1.00",
    "unknown_words": "0",
    "truncation": "0",
    "schedule": "a rise of at most 0.33 nats, a loss at most 0.69 of the unigram entropy",
    "memorization": "a gap of at most 0.45 nats",
    "undertrained": "0 on the demo and the copy task (at their ceiling); +2.0 BLEU in the last interval of a "
                    "900-step Multi30k run, which more training helps",
    "source_ignored": "at most 3.5% shared translations, the right sources at least 56% lower in loss",
    "length": "0.89 to 1.00 of the references' words, none cut at the limit",
    "repetition": "at most 2% looping",
}
