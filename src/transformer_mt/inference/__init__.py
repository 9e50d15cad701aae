"""A run as a function, and looked inside: the two front doors a user calls.

    inference/translator.py                 Translator: sentences -> hypotheses (translate, evaluate, serve)
    inference/translation_inspection.py     its attention and equation 1 on one query of one head
    inference/language_model.py             LanguageModel: prompts -> text, text -> perplexity
    inference/language_model_inspection.py  its next-token scores, causal attention and equation 1

Nothing here imports training/: validation calls the Translator, never the other way.
"""
