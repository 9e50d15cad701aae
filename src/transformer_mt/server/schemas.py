"""What the translation API (app.py) and the generate API (lm_api.py) share: the answer of
an explain request (equation 1 for one cell of an attention map: one implementation,
inspection.equation_1, behind both) and the check of a one-line text field."""

from __future__ import annotations

from pydantic import BaseModel, Field

from transformer_mt.errors import UserError
from transformer_mt.server.limits import TooLarge


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
