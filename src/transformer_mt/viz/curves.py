"""Training curves from a run's metrics.jsonl: loss, perplexity, BLEU/chrF and learning
rate over steps. Reading tolerates a run that is still training (a half-written last line
is skipped), so the plot can be redrawn at any moment."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from transformer_mt.common.errors import UserError
from transformer_mt.runs.directory import RunDir, read_events
from transformer_mt.viz.figure import new_figure


@dataclass
class Series:
    """One metric over steps."""

    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def add(self, step: int, value: float) -> None:
        self.steps.append(step)
        self.values.append(value)


# The keys plotted from "train" and from "valid" events.
TRAIN_KEYS = ("loss", "ppl", "lr")
VALID_KEYS = ("valid_loss", "valid_ppl", "bleu", "chrf")


def read_metrics(path: str | Path) -> dict[str, Series]:
    """Series by key ('loss', 'ppl', 'lr', 'valid_loss', 'valid_ppl', 'bleu', 'chrf') from
    a metrics.jsonl file or a run directory. Lines that are not complete JSON objects
    (a run writing its next line) are skipped; a resumed run's repeated steps keep the
    latest value."""
    source = Path(path)
    if source.is_dir():
        source = RunDir(source).metrics
    if not source.is_file():
        raise UserError(f"{source}: no metrics file; has this run logged a training step yet?")
    latest: dict[str, dict[int, float]] = {key: {} for key in TRAIN_KEYS + VALID_KEYS}
    for event in read_events(source):
        for key in {"train": TRAIN_KEYS, "valid": VALID_KEYS}.get(event.get("event"), ()):
            value = event.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                latest[key][event["step"]] = float(value)
    series = {key: Series() for key in latest}
    for key, by_step in latest.items():
        for step in sorted(by_step):
            series[key].add(step, by_step[step])
    if not series["loss"].steps and not series["valid_loss"].steps:
        raise UserError(f"{source}: no training or validation events yet")
    return series


def _panel(ax: Axes, series: dict[str, Series], keys: list[tuple[str, str]], title: str, ylabel: str) -> None:
    drawn = False
    for key, label in keys:
        data = series[key]
        if data.steps:
            marker = "o" if key in VALID_KEYS else None
            ax.plot(data.steps, data.values, marker=marker, markersize=4, label=label)
            drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "not logged yet", ha="center", va="center", transform=ax.transAxes, color="gray")
    else:
        ax.legend(fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def curves_figure(series: dict[str, Series], name: str = "run", label_smoothing: float = 0.0,
                  bleu_tokenize: str | None = None) -> Figure:
    """A 2 x 2 grid: loss, perplexity (log scale), BLEU and chrF, learning rate. The loss panel
    says when the training loss is label-smoothed (train.label_smoothing > 0), the scores panel
    which tokenization BLEU used (data.bleu_tokenize)."""
    last = max((s.steps[-1] for s in series.values() if s.steps), default=0)
    fig = new_figure(12, 8, f"Training curves of {name} (up to step {last})")
    (loss, ppl), (bleu, lr) = fig.subplots(2, 2)
    loss_title = f"Loss (label-smoothed, epsilon {label_smoothing:g})" if label_smoothing > 0 else "Loss"
    _panel(loss, series, [("loss", "train"), ("valid_loss", "validation")], loss_title, "cross entropy per token")
    _panel(ppl, series, [("ppl", "train"), ("valid_ppl", "validation")], "Perplexity", "perplexity")
    if series["ppl"].steps or series["valid_ppl"].steps:
        ppl.set_yscale("log")
    bleu_label = f"BLEU (tok:{bleu_tokenize})" if bleu_tokenize else "BLEU"
    _panel(bleu, series, [("bleu", bleu_label), ("chrf", "chrF")], "Validation scores", "score (0-100)")
    _panel(lr, series, [("lr", "learning rate")], "Learning rate", "learning rate")
    return fig
