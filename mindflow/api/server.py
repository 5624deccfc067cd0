"""Run the app under uvicorn in a background thread: for tests, benchmarks and embedding in an agent."""

from __future__ import annotations

import threading
import time

import uvicorn
from fastapi import FastAPI


class BackgroundServer:
    """`with BackgroundServer(app, port=0) as server: ... server.url` — started and stopped cleanly."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.app = app
        self.host = host
        self.port = port
        self.log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> BackgroundServer:
        config = uvicorn.Config(
            self.app, host=self.host, port=self.port, log_level=self.log_level, lifespan="on"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name=f"mindflow-api-{self.port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"the API server on {self.host}:{self.port} did not start")
            if time.monotonic() > deadline:
                server.should_exit = True
                raise TimeoutError(
                    f"the API server on {self.host}:{self.port} took over {timeout} s to start"
                )
            time.sleep(0.01)
        if self.port == 0:
            # The OS picked a port: keep it, so a restart binds the same one.
            self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server, self._thread = server, thread
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout)
        self._server = self._thread = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
