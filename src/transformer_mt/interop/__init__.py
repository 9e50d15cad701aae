"""Other formats and engines: runs exported to (and, later, imported from) outside tools.

    interop/ctranslate2.py   export a run to a CTranslate2 model folder (`transformer-mt export ctranslate2`)
    interop/marian.py        import a Hugging Face Marian (OPUS-MT) model as a run (`transformer-mt import marian`)

Each module imports its third-party package (the `interop` extra) only when called, so
the core package never needs it."""
