"""Data: generated toy corpora, parallel corpora and text streams, the tokenizers and batching.

    data/toy_corpora.py    built-in corpora the toolkit makes itself (numbers en->de, copy)
    data/sources.py        named corpora fetched from maintained sources, written as plain parallel text
    data/corpus.py         read and validate parallel text (plain or .gz), errors name file and line
    data/corpus_files.py   config -> the corpus files of each split
    data/tokenizers/       the Tokenizer protocol, its implementations and the registry
    data/vocabulary.py     the run's tokenizer, trained on a sample of the training text
    data/sequences.py      variable-length id sequences in one flat array (numpy only)
    data/prepare.py        encode once on all cores into memory-mapped arrays
    data/batching.py       batches of about N tokens grouped by length, deterministic and resumable
    data/text_stream.py    a language model's text, encoded once into one token stream
    data/blocks.py         a language model's batches: fixed-length blocks of that stream
"""
