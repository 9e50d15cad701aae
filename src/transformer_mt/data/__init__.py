"""Data: generated tasks, parallel corpora, the sentencepiece tokenizer and batching.

    tasks.py      built-in corpora the toolkit makes itself (numbers en->de, copy)
    corpus.py     read and validate parallel text (plain or .gz), errors name file and line
    tokenizer.py  one joint sentencepiece vocabulary; fixed ids pad 0, unk 1, bos 2, eos 3
    marian_tokenizer.py  an imported Marian (OPUS-MT) vocabulary in those ids: vocab.json + source/target.spm
    batching.py   batches of about N tokens grouped by length, deterministic and resumable
    dataset.py    config -> corpus files -> tokenizer -> encoded, filtered training data
"""
