"""Other formats and engines: runs exported to outside tools, models imported from them.

    interop/ctranslate2.py   export a run to a CTranslate2 model folder (`transformer-mt export ctranslate2`)
    interop/ctranslate2_engine.py  CTranslate2 behind Translator.search where it gives torch's outputs (decode.engine)
    interop/huggingface.py   export a run as a Hugging Face transformers folder (`transformer-mt export hf`)
    interop/hf_card.py       the model card (README.md) of that folder
    interop/positions.py     an interleaved-sinusoid model as the equal halves one (a permutation)
    interop/marian.py        import a Hugging Face Marian (OPUS-MT) model as a run (`transformer-mt import marian`)
    interop/joint.py         import back a Marian folder in our own id layout (an `export hf`)
    interop/annotated.py     import an Annotated-Transformer checkpoint, the study notes' own model
                             (`transformer-mt import annotated`)
    interop/folders.py       an export's output folder: checked first, written whole or not at all

Each module imports its third-party package (the `interop` extra) only when called, so
the core package never needs it."""
