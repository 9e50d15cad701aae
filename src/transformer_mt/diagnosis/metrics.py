"""Checks of the training record (metrics.jsonl; an imported checkpoint's saved loss):
memorization, schedule, undertrained."""

from __future__ import annotations

import math
import statistics
from collections import Counter

from transformer_mt.diagnosis import thresholds
from transformer_mt.diagnosis.case import Case, NotChecked
from transformer_mt.diagnosis.finding import Finding, cost

RECENT = 50  # training steps whose mean loss is "the training loss"
SMOOTHING = 5  # logged training losses whose median is judged for divergence: one noisy batch is not a trend
SMALL_MODEL = 256  # d_model up to which equation 3's peak is too high (docs/ablations.md: `+warmup` at 128)


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


def logged_rates(case: Case) -> list[float]:
    """The learning rate of every logged training step, in order."""
    return [e["lr"] for e in case.events if e.get("event") == "train" and "lr" in e]


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
    gap = case.measured["memorization"] = valid - train
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


def smoothed(losses: list[float]) -> list[float]:
    """The median of each SMOOTHING consecutive logged losses (all of them where there are fewer):
    a batch of long or rare sentences moves it less than a mean."""
    window = min(SMOOTHING, len(losses))
    return [statistics.median(losses[i:i + window]) for i in range(len(losses) - window + 1)]


def diverged(case: Case) -> Finding | None:
    """A training loss that became NaN, or whose smoothed value ended more than
    thresholds.DIVERGED nats, and more than thresholds.DIVERGED_SHARE of its lowest, above its
    lowest: both, so that neither a loss near 0 that wobbles nor the batch-to-batch noise of a
    loss near 3 reads as a divergence."""
    losses = train_losses(case)
    if not losses:
        return None
    if not all(map(math.isfinite, losses)):
        rise, low, last = math.inf, min(filter(math.isfinite, losses), default=math.nan), math.nan
    else:
        curve = smoothed(losses)
        low, last = min(curve), curve[-1]
        rise = last - low
    case.measured["schedule/diverged"] = rise
    if rise <= max(thresholds.DIVERGED.value, thresholds.DIVERGED_SHARE.value * low):
        return None
    peak = max(logged_rates(case), default=None)
    at = f" at a peak learning rate of {peak:.2e}" if peak else ""
    return Finding("schedule", round(rise, 3) if math.isfinite(rise) else "not finite", thresholds.DIVERGED.value,
                   f"the training loss (the median of {SMOOTHING} logged steps) rose from {low:.2f} to {last:.2f} "
                   f"nats{at}: training diverged",
                   "a lower rate (--train.lr_scale=0.5, or a lower --train.lr), --train.clip_norm=1, a warmup")


def plateau_fix(case: Case) -> str:
    """What to change for a loss stuck at the unigram entropy, from the rates the run logged and
    its width: a small model at a high peak needs a lower one (docs/ablations.md measured
    equation 3's peak cost 2.1 BLEU at d_model 128); a tiny rate needs a higher one."""
    rates = logged_rates(case)
    if rates and max(rates) < 1e-4:
        return (f"a higher rate: the peak was {max(rates):.1e} (--train.lr_scale=1 with the paper's schedule, or "
                "--train.lr=1e-3); and check embedding_scale and source_ignored")
    if case.cfg.model.d_model <= SMALL_MODEL:
        return ("a lower peak for a model this small (--train.lr_scale=0.5, or --train.lr=5e-4 with "
                "--train.schedule=constant): equation 3 as is peaks too high at this width (docs/ablations.md, "
                "`+warmup`); and check embedding_scale and source_ignored")
    return "a warmup to a lower peak (--train.lr_scale=0.5); and check embedding_scale and source_ignored"


def schedule(case: Case) -> Finding | None:
    """A post-norm model at a constant rate without warmup (from the config); a loss that
    diverged or stopped at the target unigram entropy (from the metrics)."""
    cfg = case.cfg
    if not cfg.model.norm_first and cfg.train.schedule == "constant" and not cfg.model.file:
        return Finding("schedule", "post-norm, constant rate", "a warmup",
                       f"a post-norm model (model.norm_first false) at a constant rate of {cfg.train.lr:g} from the "
                       "first step: post-norm layers need the warmup of section 5.3, or diverge",
                       "--train.schedule=warmup_constant (the same rate after a warmup), or --model.norm_first=true")
    if found := diverged(case):
        return found
    train = training_loss(case)
    if train is None or case.tokenizer is None or not case.references:
        return None
    if cut_short(case):  # still near the start of its plan: undertrained says so
        return None
    entropy = unigram_entropy(case)
    case.measured["schedule/unigram"] = train / entropy
    if train < thresholds.UNIGRAM.value * entropy:
        return None
    return Finding("schedule", round(train / entropy, 3), thresholds.UNIGRAM.value,
                   f"the training loss ({train:.2f}) stopped near the entropy of the target words' frequencies "
                   f"({entropy:.2f} nats): the model learnt which words are common, not what they translate",
                   plateau_fix(case))


def at_ceiling(validation: dict) -> bool:
    """Whether a validation shows the task done: (nearly) every output exactly the reference."""
    return (validation.get("exact_match", 0.0) >= thresholds.CEILING.value
            or validation.get("chrf", 0.0) >= 100 * thresholds.CEILING.value)


def cut_short(case: Case) -> bool:
    """Whether the run stopped before its plan's end (train.max_seconds, or a crash): not a
    budget, which plans its own end, nor early stopping on train.patience."""
    steps = [e["step"] for e in case.events if "step" in e]
    return bool(steps) and bool(stopped_early(case, max(steps))) and case.cfg.train.patience == 0


def stopped_early(case: Case, step: int) -> str:
    """Why the run ended before its plan's end, or "" where it ran its plan (or its plan is a budget)."""
    train = case.cfg.train
    if train.budget_minutes > 0 or step >= train.max_steps:
        return ""
    if train.max_seconds > 0:
        return f" It stopped at step {step} of its plan's {train.max_steps}: train.max_seconds={train.max_seconds:g} cut it."
    return f" It stopped at step {step} of its plan's {train.max_steps}."


def undertrained(case: Case) -> Finding | None:
    """Validation still improving by a margin that matters (BLEU points, loss in nats) at the
    last validation of a model below its task's ceiling: the run stopped too early."""
    found = validations(case)
    if len(found) < 2:
        raise NotChecked("fewer than two validations")
    before, last = found[-2], found[-1]
    if at_ceiling(last):
        return None
    bleu_gain = last.get("bleu", 0.0) - before.get("bleu", 0.0)
    loss_drop = before["valid_loss"] - last["valid_loss"]
    case.measured["undertrained/bleu"], case.measured["undertrained/loss"] = bleu_gain, loss_drop
    if bleu_gain <= thresholds.UNDERTRAINED_BLEU.value and loss_drop <= thresholds.UNDERTRAINED_LOSS.value:
        return None
    value, limit = ((round(bleu_gain, 2), thresholds.UNDERTRAINED_BLEU.value) if bleu_gain > thresholds.UNDERTRAINED_BLEU.value
                    else (round(loss_drop, 4), thresholds.UNDERTRAINED_LOSS.value))
    early = stopped_early(case, last["step"])
    return Finding(
        "undertrained", value, limit,
        f"between steps {before['step']} and {last['step']} validation BLEU rose by {bleu_gain:.1f} points and the "
        f"validation loss fell by {loss_drop:.3f} nats: the model was still learning when training stopped.{early}",
        "train longer: a higher --train.max_steps or --train.budget_minutes (resume the run with it)")
