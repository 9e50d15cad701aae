"""Tokenizers: text <-> ids in the fixed special ids of common/specials.py.

    data/tokenizers/protocol.py       the Tokenizer protocol every tokenizer follows, and what they share
    data/tokenizers/registry.py       TOKENIZERS: picks the class from a run's files (load, list, find)
    data/tokenizers/sentencepiece.py  one joint sentencepiece vocabulary, trained by `train`
    data/tokenizers/separate.py       separate source and target sentencepiece vocabularies
    data/tokenizers/marian.py         an imported Marian (OPUS-MT) vocabulary: vocab.json + source/target.spm
    data/tokenizers/gpt2.py           an imported GPT-2's byte-level BPE
    data/tokenizers/word_vocab.py     an imported Annotated Transformer's word vocabularies

A new tokenizer is one module here and one entry in registry.TOKENIZERS.
"""
