"""What every figure of this package shares: the Agg backend, a fixed size, and saving.

Figures are made at a fixed size (inches x DPI, no tight bounding box), so a PNG of a
figure made with `figsize=(w, h)` is exactly `w * DPI` by `h * DPI` pixels and an SVG is
`w * 72` by `h * 72` points. Tests and docs rely on that."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402  (after choosing the backend)

from transformer_mt.errors import UserError  # noqa: E402

DPI = 100
FORMATS = (".png", ".svg")


def new_figure(width: float, height: float, title: str) -> Figure:
    """A figure of `width` x `height` inches with a bold title and constrained layout."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.suptitle(title, fontsize=13, fontweight="bold")
    return fig


def check_output(path: str | Path) -> Path:
    """The path as a Path, after checking its extension and its folder (UserError if not)."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise UserError(f"{out}: the output must end in .png or .svg")
    if not out.parent.is_dir():
        raise UserError(f"{out.parent}: no such folder for the output")
    return out


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG or SVG (chosen by the extension) and return the path."""
    out = check_output(path)
    fig.savefig(out, dpi=DPI, format=out.suffix.lower().lstrip("."))
    return out


def pixel_size(fig: Figure) -> tuple[int, int]:
    """The (width, height) in pixels that a PNG of `fig` will have."""
    width, height = fig.get_size_inches()
    return round(width * DPI), round(height * DPI)
