"""Scores: sacreBLEU BLEU and chrF with their signatures, exact match.

All scoring goes through here so that training validation, `evaluate` and the
benchmarks compute BLEU the same way."""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF


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


BLEU_TOKENIZERS = ("13a", "intl", "char", "none")  # sacreBLEU tokenizations BLEU may be computed with

def score(
    hypotheses: list[str], references: list[str], lowercase_tokenized: bool = False, tokenize: str = "13a"
) -> Scores:
    """Corpus BLEU (cased, `tokenize`, 13a by default) and chrF of detokenized hypotheses
    against one reference each; `lowercase_tokenized` adds BLEU --lowercase --tokenize 13a.

    `tokenize="char"` scores character n-grams: the right choice when outputs are single
    words, such as the German number phrases of the demo, where word 4-grams never exist."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
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

