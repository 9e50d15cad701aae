"""The ids of the special symbols, fixed for every vocabulary of this package:

    pad 0 (<pad>)    unk 1 (<unk>)    bos 2 (<s>)    eos 3 (</s>)

Every model, batch, tokenizer and decoder relies on these four ids, so they live in one
module that imports nothing: a trained sentencepiece vocabulary is made with them
(data/tokenizers/sentencepiece.py) and an imported Marian vocabulary is reordered into
them (data/tokenizers/marian.py)."""

from __future__ import annotations

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_NAMES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
SPECIAL_IDS = frozenset({PAD_ID, BOS_ID, EOS_ID})  # never part of a translation's text
NEVER_EMITTED = (PAD_ID, BOS_ID)  # the decoders never choose these (Hugging Face bans pad too)
