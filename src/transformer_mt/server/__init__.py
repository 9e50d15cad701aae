"""The web page and JSON API: `create_app(TranslationService(translator))` for a translation
run, `create_app(LanguageModelService(lm))` for a language model (the generate view), or `serve(run)`.

    server/app.py                     the FastAPI app: the page, /api/translate, /api/steps, /api/explain, ...
    server/translation_service.py     the work behind a translation run's API (one shared Translator)
    server/language_model_service.py  the work behind the generate view (one shared LanguageModel)
    server/language_model_api.py      the generate view's routes (/api/generate, .../step, .../explain)
    server/schemas.py                 what the two APIs share: /api/health's fields, an explained cell
    server/request_guards.py          a cap on body size, JSON error answers
    server/background.py              a server in a background thread (tests, benchmarks)
    server/static/                    the page (HTML, JS, CSS)
"""

from transformer_mt.server.app import create_app, serve
from transformer_mt.server.language_model_service import GenerateLimits, LanguageModelService
from transformer_mt.server.translation_service import TranslateLimits, TranslationService

__all__ = ["GenerateLimits", "LanguageModelService", "TranslateLimits", "TranslationService", "create_app", "serve"]
