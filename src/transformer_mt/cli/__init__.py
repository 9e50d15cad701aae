"""The `transformer-mt` command line: one sub-command per job.

    transformer-mt demo | train | prepare | vocab | average | translate | evaluate | generate | plot | serve
                   | data | export | import | doctor

Each sub-command lives in a module of this package with a `register(subparsers)`
function. User mistakes (`UserError`) print one line and exit with code 2; no traceback."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn, Sequence

from transformer_mt import __version__
from transformer_mt.errors import USER_ERRORS

COMMAND_MODULES = ("train", "translate", "generate", "viz", "data", "interop", "doctor")


class OneLineLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return prefix + record.getMessage()


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a mistake in the arguments is one line, as every other user error: what
    is wrong and where to look, exit code 2 (argparse prints the whole usage block first).
    Sub-command parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="transformer-mt",
        description="The Transformer of 'Attention Is All You Need' for machine translation.",
    )
    parser.add_argument("--version", action="version", version=f"transformer-mt {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"transformer_mt.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not hasattr(args, "overrides"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if hasattr(args, "overrides"):
        args.overrides = list(args.overrides) + extra
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineLogFormatter())
    logger = logging.getLogger("transformer_mt")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    logger.propagate = False
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as err:
        print(f"transformer-mt {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"transformer-mt {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 1


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (so `--beam 0` fails at parse time)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def path_arg(text: str) -> str:
    """argparse type: a file or folder name that is not empty (`--run ""` would otherwise
    mean the current folder, and a whole run would be written there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty path ({text!r}) would mean the current folder; give a name")
    return text
