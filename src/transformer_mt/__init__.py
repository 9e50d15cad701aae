"""transformer-mt: the Transformer of "Attention Is All You Need" for machine translation."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """Lazy top-level API, so `import transformer_mt` stays cheap for the CLI."""
    if name == "Translator":
        from transformer_mt.inference.translator import Translator

        return Translator
    if name == "LanguageModel":
        from transformer_mt.inference.language_model import LanguageModel

        return LanguageModel
    if name == "build_model":
        from transformer_mt.model import build_model

        return build_model
    if name == "load_config":
        from transformer_mt.common.config import load_config

        return load_config
    raise AttributeError(f"module 'transformer_mt' has no attribute {name!r}")
