"""Language modelling as a training task (training/task.py): a text stream, its
sentencepiece vocabulary, a decoder-only model (model/language_model.py) predicting every
next token of fixed-length blocks, and validation by loss, perplexity and bits per
character of the validation text. The trainer, resume, DDP, budgets and logging are the
translation task's; only this module knows what a block is."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from transformer_mt.common.config import Config
from transformer_mt.data.blocks import BlockBatch, BlockStream
from transformer_mt.data.text_stream import (
    PreparedText, load_or_train_text_tokenizer, open_text, prepare_text, text_paths,
)
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.inference.language_model import stream_loss, stream_scores
from transformer_mt.model.language_model import DecoderOnly, build_language_model
from transformer_mt.runs.directory import RunDir, list_checkpoints
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.loss import LabelSmoothingLoss
from transformer_mt.training.task import Selection, prepare_on_rank_0, with_vocab_sizes

NO_PADDING = -100  # a text stream has no padding: no target is ignored


class NextTokenPrediction(nn.Module):
    """The decoder-only model as the trainer sees it: forward(batch) gives the logits
    (B * T, V) of every position and the next tokens (B * T,) they must predict."""

    def __init__(self, model: DecoderOnly) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: BlockBatch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model.logits(batch.inputs)  # (B, T, V)
        return logits.reshape(-1, logits.size(-1)), batch.targets.reshape(-1)


class LanguageModelTask:
    """Blocks of a text stream, predicted by a DecoderOnly model; the best model is the one
    of lowest validation loss (equivalently perplexity)."""

    selection = Selection("valid_loss", higher_is_better=False)

    def __init__(self, cfg: Config, tokenizer: Tokenizer, data: PreparedText) -> None:
        self.cfg, self.tokenizer, self.data = cfg, tokenizer, data

    @classmethod
    def prepare(cls, cfg: Config, run: RunDir, ctx: DistributedContext, progress: bool = False) -> "LanguageModelTask":
        """Text, vocabulary and the prepared stream: rank 0 makes them, the other ranks
        map the same files; config.yaml (with the vocabulary size) is written last."""
        def make() -> tuple[Tokenizer, PreparedText]:
            paths = text_paths(cfg.data, run.data, cfg.train.seed)
            tokenizer = load_or_train_text_tokenizer(cfg.data, paths.train, run.tokenizer_file, cfg.train.seed)
            return tokenizer, prepare_text(paths, run.tokenizer_file, tokenizer, run.prepared,
                                           may_rebuild=not list_checkpoints(run.checkpoints))

        tokenizer, data = prepare_on_rank_0(run, ctx, make, lambda: (run.read_tokenizer(), open_text(run.prepared)))
        cfg = with_vocab_sizes(cfg, run, ctx, len(tokenizer), len(tokenizer))
        return cls(cfg, tokenizer, data)

    @property
    def blocks_per_batch(self) -> int:
        """Blocks per batch: data.max_tokens // data.block_size (at least one)."""
        return max(1, self.cfg.data.max_tokens // self.cfg.data.block_size)

    def build_model(self) -> DecoderOnly:
        return build_language_model(self.cfg.model)

    def train_batches(self, seed: int, rank: int, world_size: int, accumulate: int) -> BlockStream:
        return BlockStream(self.data.train.tokens, self.cfg.data.block_size, self.blocks_per_batch, seed, rank,
                           world_size, accumulate)

    def loss_view(self, model: DecoderOnly) -> NextTokenPrediction:
        return NextTokenPrediction(model)

    def criterion(self, model: DecoderOnly) -> LabelSmoothingLoss:
        """Cross entropy (label-smoothed if train.label_smoothing > 0; language models
        usually train without)."""
        return LabelSmoothingLoss(len(self.tokenizer), NO_PADDING, self.cfg.train.label_smoothing)

    def summary(self, batches: BlockStream) -> str:
        return (f"training on {len(self.data.train):,} tokens ({self.data.train.lines:,} lines), blocks of "
                f"{self.cfg.data.block_size}, {len(batches) // self.cfg.train.accumulate} steps per epoch")

    def prepared_summary(self) -> str:
        """What `prepare` made, in a few words."""
        valid = self.data.valid
        return (f"{len(self.data.train):,} training tokens ({self.data.train.lines:,} lines), "
                f"{len(valid) if valid else 0:,} validation tokens")

    @torch.no_grad()
    def validate(self, model: DecoderOnly, device: torch.device, precision: str) -> dict[str, Any]:
        """Loss per token (nats), perplexity and bits per character of the validation text,
        every token predicted once from up to block_size tokens before it. {} without
        validation text."""
        valid = self.data.valid
        if valid is None or len(valid) < 2:
            return {}
        nats, tokens = stream_loss(model, valid.tokens, self.cfg.data.block_size, self.blocks_per_batch, device,
                                   precision)
        model.train()
        loss, ppl, bpc = stream_scores(nats, tokens, valid.characters)
        return {"valid_loss": loss, "valid_ppl": ppl, "valid_bpc": bpc}

