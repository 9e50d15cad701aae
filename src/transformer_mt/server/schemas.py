"""What the translation API (app.py) and the generate API (language_model_api.py) share: the fields of
/api/health that describe any served model, the answer of an explain request (equation 1 for one cell of an attention map: one implementation,
inspection.equation_1, behind both) and the check of a one-line text field."""

from __future__ import annotations

from pydantic import BaseModel, Field

from transformer_mt.common.errors import UserError
from transformer_mt.server.request_guards import TooLarge


class HealthBase(BaseModel):
    """/api/health fields of every server; each page's answer adds its own."""

    status: str
    kind: str = Field(description="translation (the translation page) or language_model (the generate view)")
    run: str
    device: str
    n_layers: int
    n_heads: int
    d_model: int
    vocab_size: int
    example: str = Field(description="a sentence or prompt of the run's validation data the page opens with; '' for none")
    limits: dict[str, int]
    requests: int


class ExplainResponse(BaseModel):
    d_k: int
    sqrt_d_k: float
    query_token: str
    key_tokens: list[str]
    dot: list[float] = Field(description="q . k_j for every key j")
    scaled: list[float] = Field(description="q . k_j / sqrt(d_k)")
    mask: list[bool] = Field(description="True = may attend")
    weights: list[float] = Field(description="softmax of the masked, scaled row: the attention weights")


def one_line(text: str, max_chars: int, empty: str, unit: str = "line") -> str:
    """`text` stripped: TooLarge (413) beyond `max_chars` characters, UserError (422) with the
    message `empty` when nothing is left, or when it spans several lines (one `unit` expected)."""
    line = text.strip()
    if len(line) > max_chars:
        raise TooLarge(f"{len(line)} characters; at most {max_chars} per request")
    if not line:
        raise UserError(empty)
    if "\n" in line:
        raise UserError(f"give one {unit} (no line breaks)")
    return line
