"""The web page and JSON API: `create_app(TranslationService(translator))`, or `serve(run)`."""

from transformer_mt.server.app import create_app, serve
from transformer_mt.server.service import Limits, TranslationService

__all__ = ["Limits", "TranslationService", "create_app", "serve"]
