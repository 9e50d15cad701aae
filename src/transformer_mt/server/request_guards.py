"""Request guards of the web API: a cap on body size read before any parsing, and JSON
error answers ({"error": message}) for every way a request can be wrong."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from transformer_mt.common.config import ConfigError
from transformer_mt.common.errors import UserError

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class TooLarge(Exception):
    """A request asks for more than the server allows (answered with 413)."""


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    """ASGI middleware: a request body over `max_bytes` is answered 413 without being
    parsed, whether it declares its length or streams in chunks."""

    def __init__(self, app: Callable, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        too_large = {"error": f"request body larger than {self.max_bytes} bytes"}
        declared = dict(scope.get("headers", [])).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _send_json(send, 413, too_large)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_json(send, 413, too_large)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _validation_message(err: RequestValidationError) -> str:
    """One readable line from pydantic's list of errors."""
    parts = []
    for item in err.errors():
        if item.get("type") == "json_invalid":
            return "the request body is not valid JSON"
        where = ".".join(str(p) for p in item.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Every error the API returns is JSON with an `error` message."""

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _validation_message(err)}, status_code=422)

    @app.exception_handler(UserError)
    @app.exception_handler(ConfigError)
    async def user_error(_: Request, err: ValueError) -> JSONResponse:
        return JSONResponse({"error": str(err)}, status_code=422)

    @app.exception_handler(TooLarge)
    async def too_large(_: Request, err: TooLarge) -> JSONResponse:
        return JSONResponse({"error": str(err)}, status_code=413)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(err.detail)}, status_code=err.status_code)
