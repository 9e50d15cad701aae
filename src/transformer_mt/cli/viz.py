"""Sub-commands that show the model: plot, serve."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Filled in by the plotting and web-page work."""
