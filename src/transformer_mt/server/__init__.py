"""The web page and JSON API: `create_app(TranslationService(translator))` for a translation
run, `create_app(LanguageModelService(lm))` for a language model (the generate view), or `serve(run)`."""

from transformer_mt.server.app import create_app, serve
from transformer_mt.server.language_model_service import GenerateLimits, LanguageModelService
from transformer_mt.server.translation_service import TranslateLimits, TranslationService

__all__ = ["GenerateLimits", "LanguageModelService", "TranslateLimits", "TranslationService", "create_app", "serve"]
