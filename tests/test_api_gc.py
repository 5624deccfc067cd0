"""A running server leaves the objects alive at its start out of the garbage collector's full
passes (`gc.freeze`), and gives them back when it stops."""

from __future__ import annotations

import gc

import httpx

from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings


def test_objects_alive_at_start_are_frozen_while_the_server_runs(tmp_path):
    settings = Settings(home=tmp_path / "home", _env_file=None)
    with BackgroundServer(create_app(settings, tokens={"gc-token": "*"})) as running:
        # The imports, the app and the model's session: well over what a bare interpreter holds.
        assert gc.get_freeze_count() > 50_000
        with httpx.Client(base_url=running.url, timeout=30) as http:
            assert http.get("/readyz").status_code == 200
        gc.collect()  # a full pass still runs; it leaves the frozen objects alone
        assert gc.get_freeze_count() > 50_000
    assert gc.get_freeze_count() == 0
