"""Translation as a training task (training/task.py): a parallel corpus, its joint (or
separate source and target) vocabulary and prepared arrays, the encoder-decoder, teacher forcing, and validation by
decoding the validation set with the same Translator call `evaluate` makes."""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_mt.common.config import Config
from transformer_mt.data.batching import Batch, BatchStream
from transformer_mt.data.corpus_files import bleu_tokenize_hint, corpus_paths
from transformer_mt.data.prepare import PairLimits, PreparedData, prepare_corpus, require_prepared
from transformer_mt.common.specials import PAD_ID
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.registry import vocab_sizes
from transformer_mt.data.vocabulary import load_or_train_tokenizer
from transformer_mt.common.device import autocast, resolve_precision
from transformer_mt.common.evaluation import bleu_metric, score
from transformer_mt.common.files import atomic_path
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import EncoderDecoder, build_model
from transformer_mt.runs.directory import RunDir, list_checkpoints
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.loss import LabelSmoothingLoss, perplexity
from transformer_mt.training.task import Selection, prepare_on_rank_0, with_vocab_sizes
from transformer_mt.inference.translator import Translator

log = logging.getLogger("transformer_mt")


class TeacherForcing(nn.Module):
    """The encoder-decoder as the trainer sees it: forward(batch) gives the logits (N, V)
    and reference ids (N,) of the batch's N real target tokens. Padding positions never
    reach the generator, whose V-wide projection is the largest matrix product of a
    small model."""

    def __init__(self, model: EncoderDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        states = self.model(batch.src, batch.tgt_in, padding_mask(batch.src, PAD_ID))  # (B, T, d_model)
        real = batch.tgt_out != PAD_ID
        return self.model.generator.logits(states[real]), batch.tgt_out[real]


def copy_tokenizer(source: RunDir, run: RunDir) -> None:
    """A fine-tuned run keeps the vocabulary of the run it starts from (its embeddings
    are rows of that vocabulary): every tokenizer file, copied atomically (the one that
    names the vocabulary last)."""
    for name in reversed(source.tokenizer_files()):
        with atomic_path(run.root / name.name) as tmp:
            shutil.copyfile(name, tmp)
    log.info("vocabulary copied from %s (data.vocab_* settings are not used)", source.root)


class TranslationTask:
    """Sentence pairs of a parallel corpus, translated by an EncoderDecoder."""

    def __init__(self, cfg: Config, tokenizer: Tokenizer, data: PreparedData) -> None:
        self.cfg, self.tokenizer, self.data = cfg, tokenizer, data
        metric = cfg.train.early_stop_metric
        self.selection = Selection("valid_loss", False) if metric == "loss" else Selection(metric, True)

    @classmethod
    def prepare(cls, cfg: Config, run: RunDir, ctx: DistributedContext, progress: bool = False) -> "TranslationTask":
        """Corpus, tokenizer and prepared (encoded, memory-mapped) data. Rank 0 creates the
        files, the other ranks wait and map the same ones. The task's config has the
        vocabulary sizes filled in; config.yaml is written last, once everything before
        it succeeded."""
        limits = PairLimits(cfg.data.max_len, cfg.data.max_len_ratio, cfg.model.max_positions - 1, cfg.data.train_pairs)
        bleu_metric(cfg.data.bleu_tokenize)  # a missing sacreBLEU extra stops the run now, not at its first validation
        if ctx.is_main and (hint := bleu_tokenize_hint(cfg.data)):
            log.warning(hint)

        def make() -> tuple[Tokenizer, PreparedData]:
            paths = corpus_paths(cfg.data, run.data, cfg.train.seed)
            if cfg.train.init_from and not run.tokenizer_file.is_file():
                copy_tokenizer(RunDir(Path(cfg.train.init_from)).require(), run)
            tokenizer = load_or_train_tokenizer(cfg.data, paths.train, run.tokenizer_file, cfg.train.seed)
            return tokenizer, prepare_corpus(paths, run.tokenizer_file, max(vocab_sizes(tokenizer)), run.prepared,
                                             limits, may_rebuild=not list_checkpoints(run.checkpoints),
                                             progress=progress)

        def read() -> tuple[Tokenizer, PreparedData]:
            paths = corpus_paths(cfg.data, run.data, cfg.train.seed)
            return run.read_tokenizer(), require_prepared(paths, run.tokenizer_file, run.prepared, limits)

        tokenizer, data = prepare_on_rank_0(run, ctx, make, read)
        cfg = with_vocab_sizes(cfg, run, ctx, *vocab_sizes(tokenizer))
        return cls(cfg, tokenizer, data)

    def build_model(self) -> EncoderDecoder:
        return build_model(self.cfg.model)

    def longest(self) -> int:
        """The longest sequence of the training and validation pairs as the model reads it
        (the ids, then eos; bos, then the ids)."""
        sides = (self.data.train_src, self.data.train_tgt, self.data.valid_src, self.data.valid_tgt)
        return max((int(side.lengths().max()) for side in sides if len(side)), default=0) + 1

    def train_batches(self, seed: int, rank: int, world_size: int, accumulate: int) -> BatchStream:
        return BatchStream(self.data.train_src, self.data.train_tgt, self.cfg.data.max_tokens, seed, rank,
                           world_size, accumulate, self.cfg.data.batch_sentences)

    def loss_view(self, model: EncoderDecoder) -> TeacherForcing:
        return TeacherForcing(model)

    def criterion(self, model: EncoderDecoder) -> LabelSmoothingLoss:
        """Label-smoothed cross entropy (section 5.4), leaving out outputs the model never emits."""
        return LabelSmoothingLoss(len(self.tokenizer), PAD_ID, self.cfg.train.label_smoothing,
                                  never=model.generator.never_emitted())

    def summary(self, batches: BatchStream) -> str:
        return (f"training on {len(self.data.train_src)} pairs ({self.data.filtered} filtered), "
                f"{len(batches) // self.cfg.train.accumulate} steps per epoch, "
                f"{100 * batches.padding_fraction():.1f}% padding")

    def prepared_summary(self) -> str:
        """What `prepare` made, in a few words."""
        return (f"{len(self.data.train_src)} training pairs ({self.data.filtered} filtered), "
                f"{len(self.data.valid_src)} validation pairs")

    # ---- validation ---------------------------------------------------------------
    @torch.no_grad()
    def validation_loss(self, model: EncoderDecoder, device: torch.device, precision: str) -> float:
        """Mean unsmoothed cross entropy per target token (nats) on the validation set."""
        model.eval()
        view, total, tokens = TeacherForcing(model), 0.0, 0
        valid = BatchStream(self.data.valid_src, self.data.valid_tgt, self.cfg.data.max_tokens, 0)
        for _ in range(len(valid)):
            batch = next(valid).to(device)
            with autocast(device, precision):
                logits, target = view(batch)
            total += nn.functional.cross_entropy(logits.float(), target, reduction="sum").item()
            tokens += batch.n_tokens
        return total / max(tokens, 1)

    def validate(self, model: EncoderDecoder, device: torch.device, precision: str) -> dict[str, Any]:
        """Validation loss (teacher forcing, in the training precision) and BLEU/chrF of
        the decoded validation set: decoded by the same Translator call, with the same
        settings (decode.*, decode.precision included), as `evaluate` decodes it, but for the
        output length limit, train.valid_max_len_a/b's. {} when the corpus has no validation set."""
        if self.data.valid is None:
            return {}
        loss = self.validation_loss(model, device, precision)
        train = self.cfg.train
        settings = replace(self.cfg.decode, max_len_a=train.valid_max_len_a, max_len_b=train.valid_max_len_b)
        hypotheses = Translator(model, self.tokenizer, settings, device).translate(self.data.valid.src)
        scores = score(hypotheses, self.data.valid.tgt, tokenize=self.cfg.data.bleu_tokenize)
        model.train()
        return {"valid_loss": loss, "valid_ppl": perplexity(loss), "bleu": scores.bleu,
                "chrf": scores.chrf, "exact_match": scores.exact_match,
                "precision": resolve_precision(self.cfg.decode.precision, device)}
