"""BLEU with the run's tokenization (data.bleu_tokenize): sacreBLEU's own numbers, a one-line
refusal where a tokenizer's extra is missing, and the hint for a Chinese target."""

from __future__ import annotations

import importlib.util
import re

import pytest
import sacrebleu

from transformer_mt.common.config import DataConfig
from transformer_mt.common.errors import UserError
from transformer_mt.common.evaluation import score
from transformer_mt.data.corpus_files import bleu_tokenize_hint
from transformer_mt.inference.translator import Hypothesis, distinct

GERMAN_NUMBERS = (["dreihunderteinundzwanzig", "siebzehn", "zweiundvierzig"],
                  ["dreihundertzweiundzwanzig", "siebzehn", "zweiundneunzig"])
CHINESE = (["今天天气很好。", "我们去公园散步吧。"], ["今天的天气很好。", "我们去公园走走吧。"])


def test_char_scores_one_word_outputs_that_13a_scores_zero() -> None:
    """The demo's case: one word per output has no word 4-gram, so 13a BLEU is 0 whatever the
    outputs; character n-grams see how close they are."""
    hypotheses, references = GERMAN_NUMBERS
    assert score(hypotheses, references, tokenize="13a").bleu == 0.0
    char = score(hypotheses, references, tokenize="char")
    assert char.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references], tokenize="char").score)
    assert char.bleu > 50 and "tok:char" in char.bleu_signature


def test_zh_is_sacrebleus_chinese_bleu() -> None:
    hypotheses, references = CHINESE
    zh = score(hypotheses, references, tokenize="zh")
    assert zh.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references], tokenize="zh").score)
    assert "tok:zh" in zh.bleu_signature
    assert zh.bleu > 20 > score(hypotheses, references, tokenize="13a").bleu  # 13a sees one "word" a sentence


@pytest.mark.parametrize("tokenize,module,extra", [("ja-mecab", "MeCab", "sacrebleu[ja]"),
                                                   ("ko-mecab", "mecab_ko", "sacrebleu[ko]")])
def test_a_tokenizer_without_its_extra_is_one_line_saying_what_to_install(tokenize: str, module: str,
                                                                           extra: str) -> None:
    if importlib.util.find_spec(module) is not None:
        assert score(["a"], ["a"], tokenize=tokenize).bleu == pytest.approx(100.0)
        return
    with pytest.raises(UserError, match=re.escape(f"BLEU tokenization {tokenize} needs pip install '{extra}'")) as err:
        score(["a"], ["a"], tokenize=tokenize)
    assert "\n" not in str(err.value)


def test_an_unknown_tokenization_is_refused() -> None:
    with pytest.raises(UserError, match="must be one of 13a, intl, zh, char"):
        score(["a"], ["a"], tokenize="moses")


@pytest.mark.parametrize("target,tokenize,hint", [
    ("train.zh", "13a", "--data.bleu_tokenize=zh"), ("corpus/train.zh-CN.gz", "13a", "--data.bleu_tokenize=zh"),
    ("train.ja", "13a", "--data.bleu_tokenize=ja-mecab"), ("train.zh", "zh", None), ("train.de", "13a", None),
    ("train.txt", "13a", None)])
def test_a_chinese_target_gets_a_hint_to_score_it_with_zh(target: str, tokenize: str, hint: str | None) -> None:
    said = bleu_tokenize_hint(DataConfig(train_src="train.en", train_tgt=target, bleu_tokenize=tokenize))
    assert said == hint if hint is None else hint in said and "\n" not in said


def hypothesis(text: str, score: float) -> Hypothesis:
    return Hypothesis(text, text.split(), [], score, True)


def test_distinct_keeps_the_best_scored_of_each_text_in_order() -> None:
    """A beam that finished 'ab' as a+b and as ab lists it once, with its better score."""
    found = [hypothesis("ab", -0.007), hypothesis("ab", -4.26), hypothesis("ac", -5.0), hypothesis("ad", -6.0)]
    assert [(h.text, h.score) for h in distinct(found, 4)] == [("ab", -0.007), ("ac", -5.0), ("ad", -6.0)]
    assert [h.text for h in distinct(found, 2)] == ["ab", "ac"]
