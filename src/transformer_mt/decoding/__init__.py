"""Search over a trained model: the output one token at a time, with the incremental cache.

    decoding/source.py    what every search shares: the source encoded once, its mask and the cache
    decoding/step.py      DecoderStep: the decoder's one-position step over its weights
    decoding/greedy.py    the most probable next token at every step
    decoding/beam.py      batched beam search with GNMT's length penalty (section 6.1)
    decoding/trace.py     beam search one step at a time, recorded for the learner's page
    decoding/sampling.py  a language model's generation: greedy or sampled (temperature, top-k, top-p)

A new decoding strategy is a module here, called from inference/translator.py's `Translator.search`.
"""
