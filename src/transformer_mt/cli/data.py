"""Sub-command that fetches corpora: data get, data list.

    transformer-mt data get NAME --out DIR [--src LANG] [--tgt LANG] [--from LOCAL]
    transformer-mt data list
"""

from __future__ import annotations

import argparse

from transformer_mt.cli import path_arg
from transformer_mt.data import sources


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser(
        "data", help="download a named corpus as plain parallel text (data get NAME --out DIR)",
        description="Fetch named corpora from maintained sources (Hugging Face datasets, sacreBLEU, "
                    "the Multi30k repository) and write them in the format `train` reads.",
    )
    actions = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = actions.add_parser(
        "get", help="download NAME into DIR",
        description="Write DIR/{train,valid,test}.{SRC,TGT} (UTF-8, one sentence per line), DIR/README.md "
                    "and DIR/manifest.json (sources, licence pointer, line counts).",
        epilog=f"Names: {', '.join(sources.CATALOGUE)}. Without network: --from LOCAL reads the files a download "
               "would fetch (the Hub dataset's parquet files or Multi30k's .gz files, in their remote layout), and "
               "sacreBLEU reads its test sets from its cache ($SACREBLEU, else ~/.sacrebleu). Hub downloads honour "
               f"HF_ENDPOINT and HF_HOME; Multi30k's base URL can be changed with {sources.MULTI30K_URL_ENV}. "
               f"The WMT datasets need the data extra: {sources.INSTALL_HINT}.",
    )
    get.add_argument("name", help="dataset name (see `transformer-mt data list`)")
    get.add_argument("--out", required=True, type=path_arg, help="folder to write (created if missing)")
    get.add_argument("--src", help="source language (default: the dataset's, e.g. en for wmt14-en-de)")
    get.add_argument("--tgt", help="target language (default: the dataset's)")
    get.add_argument("--from", dest="local", metavar="LOCAL",
                     help="read the remote files from this folder instead of downloading them")
    get.add_argument("--no-progress", action="store_true", help="no progress bar")
    get.set_defaults(func=run_get)

    listing = actions.add_parser("list", help="the dataset names with one line each",
                                 description="Print every dataset `data get` knows, with a one-line description.")
    listing.set_defaults(func=run_list)


def run_get(args: argparse.Namespace) -> int:
    manifest = sources.get(args.name, args.out, args.src, args.tgt, args.local, progress=not args.no_progress)
    counts = ", ".join(f"{split} {entry['lines']:,}" for split, entry in manifest["splits"].items())
    print(f"{manifest['name']} {manifest['src']}-{manifest['tgt']} -> {args.out} ({counts} lines)")
    return 0


def run_list(args: argparse.Namespace) -> int:
    width = max(len(name) for name in sources.CATALOGUE)
    for name, dataset in sources.CATALOGUE.items():
        print(f"{name:<{width}}  {dataset.description}")
    return 0
