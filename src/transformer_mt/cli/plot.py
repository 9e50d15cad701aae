"""Sub-command that draws the model: plot.

    transformer-mt plot encodings | masks | schedule | smoothing      the mechanisms
    transformer-mt plot curves RUN                                      training curves
    transformer-mt plot attention RUN "sentence" [--layer L --head H]   attention heatmaps
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from transformer_mt.cli import add_checkpoint_flag, add_device_flag, add_option_flag, add_tokenize_flag, path_arg, positive_int
from transformer_mt.common.errors import UserError

log = logging.getLogger("transformer_mt")

ATTENTION_CHOICES = ("all", "encoder", "decoder", "cross")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `plot`, with one sub-command per figure."""
    plot = subparsers.add_parser(
        "plot", help="draw a mechanism of the model or a trained run (PNG or SVG)",
        description="Draw a figure; --out chooses the file, its extension the format (.png or .svg).",
    )
    figures = plot.add_subparsers(dest="figure", required=True, metavar="FIGURE")

    def figure(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = figures.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--out", default=f"{name}.png", type=path_arg,
                            help=f"output .png or .svg (default: {name}.png)")
        return parser

    enc = figure("encodings", "sinusoidal positional encodings: heatmap and a few dimensions as curves")
    enc.add_argument("--d-model", type=positive_int, default=64, help="encoding width (default: 64)")
    enc.add_argument("--positions", type=positive_int, default=100, help="positions shown (default: 100)")
    enc.add_argument("--similarity", action="store_true",
                     help="draw the dot product of the encodings of every pair of positions instead")
    enc.set_defaults(func=plot_encodings)
    embeddings = figure("embeddings", "the joint subword embeddings of a run, projected to 2-D (PCA)")
    embeddings.add_argument("run", type=path_arg, help="run directory")
    embeddings.add_argument("--labels", type=positive_int, default=60, help="pieces labelled (default: 60)")
    add_checkpoint_flag(embeddings)
    embeddings.set_defaults(func=plot_embeddings)
    heads = figure("heads", "per head: attention entropy over the validation set; --ablate: BLEU change without it")
    heads.add_argument("run", type=path_arg, help="run directory")
    heads.add_argument("--sentences", type=positive_int, default=200,
                       help="validation sentences used (default: 200)")
    heads.add_argument("--ablate", action="store_true",
                       help="also translate them once per head with that head silenced (slower)")
    add_tokenize_flag(heads, "--ablate's BLEU")
    add_device_flag(heads, default="cpu")
    heads.set_defaults(func=plot_heads)
    masks = figure("masks", "the subsequent mask and the padding mask of a real batch")
    masks.add_argument("--run", type=path_arg, help="take the batch from this run's validation text and tokenizer")
    masks.add_argument("--batch-size", type=positive_int, default=4, help="sentences in the batch (default: 4)")
    masks.set_defaults(func=plot_masks)
    schedule = figure("schedule", "the learning-rate schedule for several (d_model, warmup) pairs")
    schedule.add_argument("--config", type=path_arg,
                          help="also draw the schedule of this config (file or preset, e.g. base)")
    schedule.add_argument("--steps", type=positive_int, default=20000, help="steps on the x axis (default: 20000)")
    schedule.set_defaults(func=plot_schedule)
    smoothing = figure("smoothing", "the label-smoothed target distribution")
    smoothing.add_argument("--epsilon", type=float, default=0.1, help="label smoothing (default: 0.1)")
    smoothing.add_argument("--vocab-size", type=positive_int, default=8, help="vocabulary shown (default: 8)")
    smoothing.set_defaults(func=plot_smoothing)
    curves = figure("curves", "loss, perplexity, BLEU/chrF and learning rate over steps of a run")
    curves.add_argument("run", type=path_arg, help="run directory (may still be training)")
    curves.set_defaults(func=plot_curves)
    attention = figure("attention", "encoder, decoder and cross-attention of one sentence, every layer and head")
    attention.add_argument("run", type=path_arg, help="run directory")
    attention.add_argument("sentence", help="source sentence (quoted)")
    attention.add_argument("--kind", choices=ATTENTION_CHOICES, default="all",
                           help="which attention (default: all, one file each, named OUT-KIND.EXT)")
    attention.add_argument("--layer", type=positive_int, help="only this layer (from 1; needs --head)")
    attention.add_argument("--head", type=positive_int, help="only this head (from 1; needs --layer)")
    add_option_flag(attention, "decode.beam", "--beam")
    add_device_flag(attention, default="cpu")
    attention.set_defaults(func=plot_attention)


def _written(path: Path) -> int:
    print(path)
    return 0


def plot_encodings(args: argparse.Namespace) -> int:
    from transformer_mt.viz import encoding_similarity_figure, encodings_figure, save_figure
    from transformer_mt.viz.figure import check_output

    out = check_output(args.out)
    draw = encoding_similarity_figure if args.similarity else encodings_figure
    return _written(save_figure(draw(args.d_model, args.positions), out))


def plot_heads(args: argparse.Namespace) -> int:
    from transformer_mt.viz import head_stats, heads_figure, save_figure
    from transformer_mt.viz.figure import check_output

    out = check_output(args.out)
    stats = head_stats(args.run, args.sentences, args.ablate, args.device, args.tokenize)
    return _written(save_figure(heads_figure(stats, Path(args.run).resolve().name), out))


def plot_embeddings(args: argparse.Namespace) -> int:
    from transformer_mt.viz import embeddings_figure, save_figure
    from transformer_mt.viz.figure import check_output

    out = check_output(args.out)
    return _written(save_figure(embeddings_figure(args.run, args.labels, args.checkpoint), out))


def plot_masks(args: argparse.Namespace) -> int:
    from transformer_mt.viz import mask_batch, masks_figure, save_figure
    from transformer_mt.viz.figure import check_output

    out = check_output(args.out)
    return _written(save_figure(masks_figure(mask_batch(args.run, args.batch_size)), out))


def plot_schedule(args: argparse.Namespace) -> int:
    from transformer_mt.viz import save_figure, schedule_figure
    from transformer_mt.viz.figure import check_output

    out = check_output(args.out)
    config = None
    if args.config:
        from transformer_mt.common.config import load_config

        cfg = load_config(args.config)
        config = (cfg.model.d_model, cfg.train.warmup_steps, cfg.train.lr_scale, Path(args.config).stem)
    return _written(save_figure(schedule_figure(config=config, steps=args.steps), out))


def plot_smoothing(args: argparse.Namespace) -> int:
    from transformer_mt.viz import save_figure, smoothing_figure
    from transformer_mt.viz.figure import check_output

    if not 0.0 <= args.epsilon < 1.0:
        raise UserError(f"--epsilon must be in [0, 1), got {args.epsilon}")
    if args.vocab_size < 2:
        raise UserError("--vocab-size must be at least 2")
    out = check_output(args.out)
    return _written(save_figure(smoothing_figure(args.epsilon, args.vocab_size), out))


def plot_curves(args: argparse.Namespace) -> int:
    from transformer_mt.runs.directory import RunDir
    from transformer_mt.viz import curves_figure, read_metrics, save_figure
    from transformer_mt.viz.figure import check_output

    out = check_output(args.out)
    if not Path(args.run).is_dir():
        raise UserError(f"{args.run}: no such run directory")
    series = read_metrics(args.run)
    run = RunDir(Path(args.run))
    cfg = run.read_config() if run.config.is_file() else None
    figure = curves_figure(series, run.root.resolve().name, cfg.train.label_smoothing if cfg else 0.0,
                           cfg.data.bleu_tokenize if cfg else None)
    return _written(save_figure(figure, out))


def attention_outputs(out: Path, kinds: list[str]) -> dict[str, Path]:
    """One file per kind: OUT itself for a single kind, OUT-KIND.EXT for several."""
    if len(kinds) == 1:
        return {kinds[0]: out}
    return {kind: out.with_name(f"{out.stem}-{kind}{out.suffix}") for kind in kinds}


def plot_attention(args: argparse.Namespace) -> int:
    from transformer_mt.inference.translator import Translator
    from transformer_mt.viz import KINDS, attention_grid_figure, attention_head_figure, attention_maps, save_figure
    from transformer_mt.viz.figure import check_output

    if (args.layer is None) != (args.head is None):
        raise UserError("give --layer and --head together (or neither for every layer and head)")
    out = check_output(args.out)
    kinds = list(KINDS) if args.kind == "all" else [args.kind]
    overrides = {"beam": args.beam} if args.beam else {}
    maps = attention_maps(Translator.from_run(args.run, device=args.device), args.sentence, **overrides)
    if args.layer is not None:
        for kind in kinds:
            maps.check_layer_head(args.layer, args.head, kind=kind)
    log.info("translation: %s", maps.translation)
    for kind, path in attention_outputs(out, kinds).items():
        if args.layer is None:
            fig = attention_grid_figure(maps, kind)
        else:
            fig = attention_head_figure(maps, kind, args.layer, args.head)
        _written(save_figure(fig, path))
    return 0
