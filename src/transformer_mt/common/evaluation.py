"""Scores: sacreBLEU BLEU and chrF with their signatures, exact match.

All scoring goes through here so that training validation, `evaluate` and the
benchmarks compute BLEU the same way, with the run's data.bleu_tokenize."""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

from transformer_mt.common.config import BLEU_TOKENIZE
from transformer_mt.common.errors import UserError

# What a tokenization needs beyond sacreBLEU itself, said in one line where it is missing.
NEEDS = {"ja-mecab": "pip install 'sacrebleu[ja]'", "ko-mecab": "pip install 'sacrebleu[ko]'",
         **{flores: f"sacreBLEU's {flores} sentencepiece model, which it downloads at first use on a machine that "
                    "is online" for flores in ("flores101", "flores200")}}


@dataclass
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    exact_match: float
    bleu_lc_tok: float | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def bleu_metric(tokenize: str) -> BLEU:
    """sacreBLEU's cased BLEU with the tokenization `tokenize` (one of BLEU_TOKENIZE); one whose
    extra or model is missing is one UserError line that says what to install."""
    if tokenize not in BLEU_TOKENIZE:
        raise UserError(f"BLEU tokenization {tokenize!r}: must be one of {', '.join(BLEU_TOKENIZE)}")
    try:
        return BLEU(tokenize=tokenize)
    except (RuntimeError, OSError) as err:  # sacreBLEU's missing-extra error; a download that failed offline
        raise UserError(f"BLEU tokenization {tokenize} needs {NEEDS.get(tokenize, 'what sacreBLEU names')} "
                        f"({type(err).__name__}); or score with another data.bleu_tokenize") from None


def score(
    hypotheses: list[str], references: list[str], lowercase_tokenized: bool = False, tokenize: str = "13a"
) -> Scores:
    """Corpus BLEU (cased, `tokenize`, 13a by default) and chrF of detokenized hypotheses
    against one reference each; `lowercase_tokenized` adds BLEU --lowercase --tokenize 13a.

    `tokenize="char"` scores character n-grams: the right choice when outputs are single
    words, such as the German number phrases of the demo, where word 4-grams never exist."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu, chrf = bleu_metric(tokenize), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / max(len(references), 1)
    lc = None
    if lowercase_tokenized:
        lc = BLEU(lowercase=True, tokenize="13a").corpus_score(hypotheses, [references]).score
    return Scores(
        bleu=bleu_score.score,
        chrf=chrf_score.score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        exact_match=exact,
        bleu_lc_tok=lc,
    )

