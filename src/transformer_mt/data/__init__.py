"""Data: generated toy corpora, parallel corpora, the tokenizers and batching.

    toy_corpora.py    built-in corpora the toolkit makes itself (numbers en->de, copy)
    corpus.py         read and validate parallel text (plain or .gz), errors name file and line
    corpus_files.py   config -> the corpus files of each split
    specials.py       the fixed special ids pad 0, unk 1, bos 2, eos 3
    tokenizer.py      the Tokenizer protocol every tokenizer follows
    sentencepiece_tokenizer.py  one joint sentencepiece vocabulary, trained in those ids
    marian_tokenizer.py  an imported Marian (OPUS-MT) vocabulary in those ids: vocab.json + source/target.spm
    tokenizers.py     picks the tokenizer class from a run's files: load, list, find
    vocabulary.py     the run's tokenizer, trained on a sample of the training text
    prepare.py        encode once on all cores into memory-mapped arrays
    batching.py       batches of about N tokens grouped by length, deterministic and resumable
"""
