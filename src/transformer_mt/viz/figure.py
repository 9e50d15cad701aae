"""What every figure of this package shares: the Agg backend, a fixed size, and saving.

Figures are made at a fixed size (inches x DPI, no tight bounding box), so a PNG of a
figure made with `figsize=(w, h)` is exactly `w * DPI` by `h * DPI` pixels and an SVG is
`w * 72` by `h * 72` points. Tests and docs rely on that."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402  (after choosing the backend)

from transformer_mt.common.errors import UserError  # noqa: E402
from transformer_mt.common.files import atomic_path, check_writable_file  # noqa: E402

DPI = 100
FORMATS = (".png", ".svg")


def new_figure(width: float, height: float, title: str) -> Figure:
    """A figure of `width` x `height` inches with a bold title and constrained layout."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.suptitle(title, fontsize=13, fontweight="bold")
    return fig


def check_output(path: str | Path) -> Path:
    """The path as a Path, after checking its extension and that it can be written
    (files.check_writable_file; UserError naming --out if not)."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise UserError(f"{out}: the output must end in .png or .svg")
    return check_writable_file(out, "--out")


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG or SVG (chosen by the extension), atomically, and return the path."""
    out = check_output(path)
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, dpi=DPI, format=out.suffix.lower().lstrip("."))
    except OSError as err:
        raise UserError(f"--out {out}: cannot be written ({err.strerror}); give a path in a folder you can "
                        "write") from None
    return out


def pixel_size(fig: Figure) -> tuple[int, int]:
    """The (width, height) in pixels that a PNG of `fig` will have."""
    width, height = fig.get_size_inches()
    return round(width * DPI), round(height * DPI)
