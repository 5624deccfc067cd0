"""The client installs light: the wheel, with its base dependencies only, in a fresh virtual
environment (no torch, DuckDB, Dagster or FastAPI), runs the README's client example against a
live server on 127.0.0.1."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings

ROOT = Path(__file__).resolve().parent.parent
README_URL = "http://127.0.0.1:8765"
README_TOKEN = "tokA"
SERVER_ONLY = (
    "torch",
    "duckdb",
    "dagster",
    "fastapi",
    "lancedb",
    "sentence-transformers",
    "onnxruntime",
    "mcp",
)


def readme_client_example() -> str:
    """The fenced Python block after the README's `<!-- client example -->` marker."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- client example -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert found, "README.md has no client example marked <!-- client example -->"
    return found.group(1)


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def light_env(tmp_path_factory) -> Path:
    """A fresh virtual environment holding the mindflow wheel and its base dependencies only."""
    work = tmp_path_factory.mktemp("light")
    source = work / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", "data", ".git", "__pycache__", "*.egg-info", "build", ".pytest_cache", "bench"
        ),
    )
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(work / "dist"), str(source))
    (wheel,) = (work / "dist").glob("mindflow-*.whl")
    venv = work / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    run(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel))
    return venv


def test_the_base_install_holds_the_client_and_nothing_of_the_server(light_env):
    python = str(light_env / "bin" / "python")
    installed = run(python, "-m", "pip", "list", "--format=freeze").stdout.lower()
    names = {line.split("==")[0] for line in installed.splitlines()}
    assert {"mindflow", "httpx", "pydantic"} <= names
    assert not names & set(SERVER_ONLY), names & set(SERVER_ONLY)
    typed = run(
        python, "-c", "import mindflow, pathlib; print(pathlib.Path(mindflow.__file__).parent)"
    ).stdout
    assert (Path(typed.strip()) / "py.typed").is_file()
    # The command needs the server: it says how to install it instead of a traceback.
    command = subprocess.run([str(light_env / "bin" / "mindflow"), "--help"], capture_output=True, text=True)
    assert command.returncode == 2 and "pip install 'mindflow[server]'" in command.stderr
    assert "Traceback" not in command.stderr


def test_the_readme_client_example_runs_in_the_light_install(light_env, tmp_path):
    settings = Settings(home=tmp_path / "home", _env_file=None)
    token = "light-client-token"
    app = create_app(settings, tokens={token: ["ada"]})
    example = readme_client_example()
    assert README_URL in example and f'token="{README_TOKEN}"' in example
    with BackgroundServer(app) as server:
        script = example.replace(README_URL, server.url).replace(
            f'token="{README_TOKEN}"', f'token="{token}"'
        )
        done = run(str(light_env / "bin" / "python"), "-c", script, cwd=str(tmp_path))
    # The example remembers a sentence, then recalls it: written, read back at once.
    remembered = re.search(r'memory\.remember\("ada", "([^"]+)"\)', example).group(1)
    assert remembered in done.stdout, done.stdout
