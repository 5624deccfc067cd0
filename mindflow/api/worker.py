"""The app of one `mindflow serve` worker process, built by uvicorn in each worker it starts."""

from __future__ import annotations

from fastapi import FastAPI


def create_worker_app() -> FastAPI:
    """uvicorn's app factory for `--workers N`: the settings come from the environment the
    server was started with (the CLI puts MINDFLOW_API_WORKERS there)."""
    from threadpoolctl import threadpool_limits

    from mindflow.api.app import create_app
    from mindflow.config import load_settings

    # One BLAS thread: a recall's vector search runs beside its full-text search, and the
    # other workers have the other cores.
    threadpool_limits(1, user_api="blas")
    return create_app(load_settings())
