"""A Marian folder in this package's own id layout, as `export hf` writes one from a
post-norm run: `import marian` gives back the run it came from.

Such a folder has one joint sentencepiece model (source.spm and target.spm the same
file) whose pieces, in id order, are vocab.json (pad 0, unk 1, <s> 2, </s> 3), and its
decoder starts from <s> (decoder_start_token_id 2). Its ids are then ours, row for row:
no reordering and no extra bos row as for OPUS-MT models (data/tokenizers/marian.py), and
the run gets back its tokenizer.model. Our decoders ban pad and bos after the softmax
over all outputs, as the folder's bad_words_ids [[0], [2]] do in transformers, so no
output needs NEVER_LOGIT (unless renormalize_logits asks transformers to normalise again
after banning them). transformer_mt.json, when present, gives back the positional
layout (interop/positions.py undoes the export's permutation: the very same weights)
and the decoding defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from transformer_mt.common.config import Config
from transformer_mt.data.tokenizers.marian import read_vocab
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import BOS_ID, PAD_ID
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_path, atomic_write_text
from transformer_mt.interop.positions import to_interleaved
from transformer_mt.model.transformer import EncoderDecoder, build_model

METADATA = "transformer_mt.json"  # written by interop/huggingface.py
START_PIECE = "<s>"


def is_joint(folder: Path) -> bool:
    """Whether `folder` holds one joint sentencepiece model whose own ids vocab.json lists."""
    source, target = folder / "source.spm", folder / "target.spm"
    if not (source.is_file() and target.is_file() and (folder / "vocab.json").is_file()):
        return False
    if source.read_bytes() != target.read_bytes():
        return False
    vocab = read_vocab(folder / "vocab.json")
    try:
        tokenizer = SentencePieceTokenizer.load(source)
    except UserError:  # not our special ids: an ordinary Marian vocabulary
        return False
    return vocab == {piece: i for i, piece in enumerate(tokenizer.id_to_piece(list(range(len(tokenizer)))))}


def never_emitted(generation: dict[str, Any]) -> list[int]:
    """Outputs that get NEVER_LOGIT: pad and bos only where transformers renormalises
    after banning them (then they take no part in the softmax)."""
    return [PAD_ID, BOS_ID] if generation.get("renormalize_logits") else []


def restore(cfg: Config, model: EncoderDecoder, folder: Path) -> tuple[Config, EncoderDecoder]:
    """The run as exported: its positional layout (the weights permuted back) and its
    decoding defaults, from transformer_mt.json; `cfg` and `model` as they are without it."""
    path = folder / METADATA
    if not path.is_file():
        return cfg, model
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        layout, decode = record.get("positional_layout", "halves"), record.get("decode", {})
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, positional_layout=layout),
                                  decode=dataclasses.replace(cfg.decode, **decode))
        cfg.validate()
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise UserError(f"{path}: not a transformer-mt export record ({str(err).splitlines()[0]}); "
                        "remove it to import the folder as a plain Marian model") from None
    if layout == "halves":
        return cfg, model
    restored = build_model(cfg.model)
    state = to_interleaved(dict(model.state_dict()), cfg.model.d_model, str(folder))
    restored.load_state_dict(state)
    return cfg, restored


def write_tokenizer(folder: Path, run_root: Path) -> None:
    """The run's tokenizer.model (source.spm as it is) and its readable tokenizer.vocab
    (piece, tab, score: sentencepiece's own format)."""
    with atomic_path(run_root / SentencePieceTokenizer.file_name) as out:
        out.write_bytes((folder / "source.spm").read_bytes())
    processor = SentencePieceTokenizer.load(folder / "source.spm").sp
    lines = [f"{processor.IdToPiece(i)}\t{processor.GetScore(i):g}\n" for i in range(processor.GetPieceSize())]
    atomic_write_text(run_root / "tokenizer.vocab", "".join(lines))

