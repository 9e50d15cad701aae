"""The `transformer-mt` command line: one sub-command per job.

    transformer-mt demo | train | prepare | vocab | average | translate | evaluate | generate | plot | serve
                   | data | export | import | doctor | check

Each sub-command lives in a module of this package with a `register(subparsers)`
function: train.py (train, prepare, vocab, average, demo), translate.py (translate, evaluate),
generate.py, plot.py, serve.py, data.py, interop.py (export, import), doctor.py, check.py. The flags
several commands share are built here (add_option_flag, add_checkpoint_flag, ...). User mistakes
(`UserError`) print one line and exit with code 2; no traceback."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import typing
from typing import Any, Callable, NoReturn, Sequence

from transformer_mt import __version__
from transformer_mt.common.config import CHECKPOINT_CHOICES, SECTIONS, ConfigError, config_from_dict, parse_override
from transformer_mt.common.errors import USER_ERRORS

COMMAND_MODULES = ("train", "translate", "generate", "plot", "serve", "data", "interop", "doctor", "check")


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


def option_value(key: str) -> Callable[[str], Any]:
    """argparse type for the config option `key` (section.name): the value as an override
    `--key=TEXT` would read it (a text option takes TEXT as it is), checked by the option's own
    checks (`--beam 0` fails at parse time with the message decode.beam gives)."""
    section, name = key.split(".")
    is_text = typing.get_type_hints(SECTIONS[section])[name] is str

    def value(text: str) -> Any:
        try:
            parsed = text if is_text else parse_override(f"--{key}={text}")[1]
            return getattr(getattr(config_from_dict({section: {name: parsed}}), section), name)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{key}: ")) from None

    return value


def add_option_flag(parser: argparse.ArgumentParser, key: str, flag: str, default: str = "the run's") -> None:
    """A flag that sets the config option `key` for one command: its help and its checks are
    the option's (common/config.py), so the two cannot disagree; unset (None), `default` applies."""
    section, name = key.split(".")
    help_text = next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == name).metadata["help"]
    parser.add_argument(flag, dest=name, type=option_value(key), metavar=name.upper(),
                        help=f"{help_text} Default: {default} {key}.")



# ---- the flags several commands share: one definition each -----------------------------
def add_checkpoint_flag(parser: argparse.ArgumentParser) -> None:
    """--checkpoint: which weights of a run a command loads (best by default, everywhere)."""
    parser.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="best",
                        help="best (default), last step checkpoint, or average.safetensors")


def add_device_flag(parser: argparse.ArgumentParser, default: str = "auto") -> None:
    """--device: where the model runs. Commands that serve or translate use the fastest device
    (auto); the figures' commands draw one sentence or a sample, and default to the CPU."""
    parser.add_argument("--device", default=default, help=f"{default} (default), auto, cpu, cuda, cuda:1 ...")


def add_dtype_flag(parser: argparse.ArgumentParser) -> None:
    """--dtype: the weights a run decodes with (runs/quantize.py)."""
    from transformer_mt.runs.quantize import DTYPES

    parser.add_argument("--dtype", default="float32", metavar="{" + ",".join(DTYPES) + "}",
                        help="weights in float32 (default), bfloat16, or int8: int8 Linear layers with "
                             "float32 activations, on the CPU")


def add_tokenize_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """--tokenize: sacreBLEU's tokenization for BLEU (`what` says which BLEU); unset, the run's
    data.bleu_tokenize, as its validation scored."""
    from transformer_mt.common.config import BLEU_TOKENIZE

    parser.add_argument("--tokenize", choices=BLEU_TOKENIZE, metavar="{" + ",".join(BLEU_TOKENIZE) + "}",
                        help=f"sacreBLEU tokenization for {what} (default: the run's data.bleu_tokenize, as its "
                             "validation used; zh for Chinese, char for one-word outputs such as the demo's)")
