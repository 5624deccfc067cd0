"""The `mindflow` command's entry point: a clear message where only the client is installed."""

from __future__ import annotations

import sys

SERVER_EXTRA = "pip install 'mindflow[server]'"


def main() -> None:
    try:
        from mindflow.cli import main as run
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == "mindflow":
            raise
        # The base install is the client library; the command needs the server's dependencies.
        print(
            f"error: the mindflow command needs the server dependencies ({exc.name} is missing); "
            f"install them with: {SERVER_EXTRA}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    run()
