"""/docs and /redoc work offline: every asset the pages load is served by the API itself, and the
OpenAPI document declares the bearer scheme so a token can be entered on the page."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

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
