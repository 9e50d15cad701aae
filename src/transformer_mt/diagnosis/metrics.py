"""Checks of the training record (metrics.jsonl; an imported checkpoint's saved loss):
memorization, schedule, undertrained."""

from __future__ import annotations

import math
from collections import Counter

from transformer_mt.diagnosis import thresholds
from transformer_mt.diagnosis.case import Case, NotChecked
from transformer_mt.diagnosis.finding import Finding, cost

RECENT = 50  # training steps whose mean loss is "the training loss"


def train_losses(case: Case) -> list[float]:
    """The loss of every logged training step, in order."""
    return [e["loss"] for e in case.events if e.get("event") == "train" and "loss" in e]


def training_loss(case: Case) -> float | None:
    """The mean loss of the last RECENT logged steps, or the loss an imported checkpoint
    carried (the notes save their last epoch's mean)."""
    losses = train_losses(case)
    if losses:
        return sum(losses[-RECENT:]) / len(losses[-RECENT:])
    loss = case.imported.get("loss")
    return float(loss) if isinstance(loss, (int, float)) else None


def validations(case: Case) -> list[dict]:
    return [e for e in case.events if e.get("event") == "valid" and "valid_loss" in e]


def memorization(case: Case) -> Finding | None:
    """The training loss far below the validation loss: training pairs recited, not
    translated. The validation loss is the run's last, else computed on the sentences."""
    train = training_loss(case)
    if train is None:
        raise NotChecked("no training loss (a config before training, or a run with no metrics)")
    found = validations(case)
    if found:
        valid, where = found[-1]["valid_loss"], "the validation loss"
    else:
        valid, where = case.losses[0], f"the loss on {case.pairs_from}"
    gap = valid - train
    if gap <= thresholds.MEMORIZATION.value:
        return None
    bleu = f" (validation BLEU {found[-1]['bleu']:.1f})" if found and "bleu" in found[-1] else ""
    smoothed = " (smoothed: the gap is larger still)" if case.cfg.train.label_smoothing and case.events else ""
    return Finding(
        "memorization", round(gap, 3), thresholds.MEMORIZATION.value,
        f"the training loss is {train:.2f}{smoothed} but {where} is {valid:.2f}{bleu}: {gap:.2f} nats apart, the "
        "model recites its training pairs rather than translating",
        "train on more pairs (--data.train_pairs=0: all of them) and keep dropout (--model.dropout=0.1 or more); "
        "choose the model by validation BLEU, not by the training loss",
        cost("+all_pairs", "+no_dropout"))


def unigram_entropy(case: Case) -> float:
    """The entropy (nats) of the target tokens' frequencies in the references, eos included:
    the loss of a model that predicts frequencies and reads nothing."""
    counts = Counter(i for seq in case.tokenizer.encode_target(case.references) for i in [*seq, -1])
    total = sum(counts.values())
    return -sum(n / total * math.log(n / total) for n in counts.values())


def schedule(case: Case) -> Finding | None:
    """A post-norm model at a constant rate without warmup (from the config); a loss that
    diverged or stopped at the target unigram entropy (from the metrics)."""
    cfg = case.cfg
    if not cfg.model.norm_first and cfg.train.schedule == "constant":
        return Finding("schedule", "post-norm, constant rate", "a warmup",
                       f"a post-norm model (model.norm_first false) at a constant rate of {cfg.train.lr:g} from the "
                       "first step: post-norm layers need the warmup of section 5.3, or diverge",
                       "--train.schedule=paper (warmup, then inverse square root), or --model.norm_first=true")
    losses = train_losses(case)
    if losses and (not all(map(math.isfinite, losses)) or losses[-1] > 1.5 * min(losses)):
        return Finding("schedule", round(losses[-1], 3), round(1.5 * min(losses), 3),
                       f"the training loss rose from {min(losses):.2f} to {losses[-1]:.2f}: training diverged",
                       "a lower rate (--train.lr_scale=0.5, or a lower --train.lr), a warmup, --train.clip_norm=1")
    train = training_loss(case)
    if train is None or case.tokenizer is None or not case.references:
        return None
    entropy = unigram_entropy(case)
    if train < thresholds.UNIGRAM.value * entropy:
        return None
    return Finding("schedule", round(train / entropy, 3), thresholds.UNIGRAM.value,
                   f"the training loss ({train:.2f}) stopped near the entropy of the target words' frequencies "
                   f"({entropy:.2f} nats): the model learnt which words are common, not what they translate",
                   "a warmup to a lower peak (--train.schedule=paper), and check embedding_scale and source_ignored")


def undertrained(case: Case) -> Finding | None:
    """Validation still improving at the last validation: the run stopped too early."""
    found = validations(case)
    if len(found) < 2:
        raise NotChecked("fewer than two validations")
    before, last = found[-2], found[-1]
    bleu_gain = last.get("bleu", 0.0) - before.get("bleu", 0.0)
    loss_drop = (before["valid_loss"] - last["valid_loss"]) / max(before["valid_loss"], 1e-9)
    if bleu_gain <= thresholds.UNDERTRAINED_BLEU.value and loss_drop <= thresholds.UNDERTRAINED_LOSS.value:
        return None
    value, limit = ((round(bleu_gain, 2), thresholds.UNDERTRAINED_BLEU.value) if bleu_gain > thresholds.UNDERTRAINED_BLEU.value
                    else (round(loss_drop, 4), thresholds.UNDERTRAINED_LOSS.value))
    return Finding(
        "undertrained", value, limit,
        f"between steps {before['step']} and {last['step']} validation BLEU rose by {bleu_gain:.1f} and the "
        f"validation loss fell by {loss_drop:.1%}: the model was still learning when training stopped",
        "train longer: a higher --train.max_steps or --train.budget_minutes")
