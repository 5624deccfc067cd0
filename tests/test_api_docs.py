"""/docs and /redoc work offline: every asset the pages load is served by the API itself, and the
OpenAPI document declares the bearer scheme so a token can be entered on the page."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from readme import table

from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.config import Settings

# src="...", href="...", and the spec URL the page's script is given (url: '/openapi.json').
_ASSET = re.compile(
    r"""(?:src|href)\s*=\s*["']([^"']+)["']|\burl\s*:\s*["']([^"']+)["']|spec-url=["']([^"']+)["']"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = Settings(home=tmp_path_factory.mktemp("docs") / "home", _env_file=None)
    with BackgroundServer(create_app(settings, tokens={"docs-token": ["ada"]})) as running:
        yield running


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_page_and_every_asset_it_loads_come_from_the_server(server, page):
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answer = http.get(page)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
        assert not re.findall(r"https?://", answer.text), "the page names an outside URL"
        assets = {next(g for g in m.groups() if g) for m in _ASSET.finditer(answer.text)}
        scripts = [a for a in assets if a.endswith(".js")]
        assert scripts and "/openapi.json" in assets, assets
        for asset in assets:
            url = urljoin(f"{server.url}{page}", asset)
            assert urlsplit(url).netloc == urlsplit(server.url).netloc, asset  # no outside request
            loaded = http.get(url)
            assert loaded.status_code == 200 and loaded.content, asset
        for script in scripts:
            # The bundled scripts themselves fetch nothing from a CDN to render the page.
            body = http.get(urljoin(f"{server.url}{page}", script)).text
            assert "cdn.jsdelivr.net" not in body and "unpkg.com" not in body


def test_the_openapi_document_declares_the_bearer_scheme(server):
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearer"]["description"],
    }
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if path.startswith("/v1/"):
                assert op.get("security") == [{"bearer": []}], (method, path)
    assert "/mcp" not in spec["paths"]  # the MCP endpoint speaks JSON-RPC, not this API


def _documented_routes() -> set[tuple[str, str]]:
    """(method, path with its parameters as {}) of each route the README's endpoint table names:
    `.../unpin` is the row's previous path with its last segment swapped, `[/{id}]` optional."""
    routes = set()
    for line in table("| method and path | body / query | returns |"):
        previous = None
        for entry in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
            if entry.startswith(".../"):
                method, path = previous[0], previous[1].rsplit("/", 1)[0] + entry[3:]
            else:
                method, path = entry.split(" ", 1)
            previous = (method, path)
            for variant in {re.sub(r"\[[^\]]*\]", "", path), re.sub(r"[\[\]]", "", path)}:
                routes.add((method, re.sub(r"\{[^}]*\}", "{}", variant)))
    assert routes, "the README has no endpoint table"
    return routes


def test_the_readme_endpoint_table_names_every_route_the_api_serves(server):
    spec = httpx.get(f"{server.url}/openapi.json").json()
    served = {
        (method.upper(), re.sub(r"\{[^}]*\}", "{}", path))
        for path, ops in spec["paths"].items()
        for method in ops
    }
    documented = _documented_routes()
    assert sorted(served - documented) == []  # a route an agent cannot find
    assert sorted(documented - served) == []  # a row that sends it to a 404
