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
    interop/gpt2.py          import a Hugging Face GPT-2 model as a decoder-only run (`transformer-mt import gpt2`)
    interop/hub_folder.py    a Hugging Face model folder as the importers read it (local, or downloaded by name)
    interop/imported.py      what every import writes: the run folder, whole or not at all, with imported.json
    interop/folders.py       an export's output folder: checked first, written whole or not at all

A new import format is a module here (read the source, build the config and the model, hand them
to imported.write_imported_run), its tokenizer in data/tokenizers/ and one row of cli/interop.py's
IMPORTS.

Each module imports its third-party package (the `interop` extra) only when called, so
the core package never needs it."""
