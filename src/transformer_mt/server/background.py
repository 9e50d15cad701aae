"""A server in a background thread, on 127.0.0.1 and a free port: for tests, the browser
test and benchmarks/serve_load.py.

    with BackgroundServer(create_app(service)) as url:
        ...  # url is "http://127.0.0.1:PORT"
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn

from transformer_mt.server.app import is_loopback


class BackgroundServer:
    """Runs an ASGI app with uvicorn in a daemon thread until the `with` block ends."""

    def __init__(self, app: object, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 20.0) -> None:
        if not is_loopback(host):
            raise ValueError(f"BackgroundServer binds loopback addresses only, not {host!r}")
        self.app = app
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.sock: socket.socket | None = None

    def __enter__(self) -> str:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.host, self.port))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", backlog=256)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"the server did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        return f"http://{self.host}:{self.port}"

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)
        if self.sock is not None:
            self.sock.close()
