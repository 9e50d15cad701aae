"""Sub-command that serves a run: the web page and its JSON API.

    transformer-mt serve RUN [--host 127.0.0.1] [--port 8000]   the web page (translate, or generate
                                                                for a language model)
"""

from __future__ import annotations

import argparse

from transformer_mt.cli import add_checkpoint_flag, add_device_flag, add_dtype_flag, path_arg, positive_int
from transformer_mt.common.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve", help="a web page that translates (or, for a language model, generates) and shows the attention",
        description="Serve RUN at http://HOST:PORT/ (the page) and its JSON API (docs/plots.md): /api/translate, "
                    "/api/steps, /api/explain, /api/doctor, /api/health, /openapi.json; a language-model run "
                    "gets the generate view and /api/generate, /api/generate/step, /api/generate/explain, "
                    "/api/health, /openapi.json.",
    )
    serve.add_argument("run", type=path_arg, help="run directory")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    add_device_flag(serve)
    add_checkpoint_flag(serve)
    add_dtype_flag(serve)
    serve.add_argument("--max-chars", type=positive_int, default=2000, help="characters per request (default: 2000)")
    serve.add_argument("--max-sentences", type=positive_int, default=32, help="sentences per request (default: 32)")
    serve.add_argument("--max-beam", type=positive_int, default=8, help="largest beam a request may ask (default: 8)")
    serve.add_argument("--max-new-tokens", type=positive_int, default=256,
                       help="a language model: most tokens one generate request may ask (default: 256)")
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from transformer_mt.server import serve
    from transformer_mt.server.translation_service import TranslateLimits

    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {args.port}")
    limits = TranslateLimits(args.max_chars, args.max_sentences, args.max_beam)
    serve(args.run, args.host, args.port, args.device, args.checkpoint, limits, args.dtype, args.max_new_tokens)
    return 0
