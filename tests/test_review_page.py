"""The /review page over real HTTP and in a real browser: login, CSRF, escaping, deciding items.

A real uvicorn server on 127.0.0.1 over the reflection world of test_reflection (a merge, an
archive, a contradiction and a MEMORY.md rewrite pending for ada); headless Chromium through
selenium and the OS's chromedriver for the browser test, skipped when they are not installed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest
from test_reflection import BEING, _settings, _world

from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.loop.proposals import ProposalStore
from mindflow.reflection.apply import apply_approved
from mindflow.reflection.cycle import reflect

TOKEN = "token-of-lena-the-reviewer"
BRAM_TOKEN = "token-that-covers-only-bram"
SCOUT_TOKEN = "token-of-the-scout-sub-agent"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def _statuses(settings) -> dict[str, str]:
    return {p.kind: p.status for p in ProposalStore(settings.proposals).list(BEING)}


@pytest.fixture
def served(monkeypatch, con, embedder):
    """ada's four pending reflection proposals and a server started as `mindflow serve` starts it."""
    settings = _settings(
        monkeypatch,
        MINDFLOW_API_TOKENS=f"{TOKEN}={BEING};{BRAM_TOKEN}=bram;{SCOUT_TOKEN}={BEING}@subagent:scout",
    )
    refs = _world(con, settings, embedder)
    reflect(con, settings, BEING, run_id="run-1")
    with BackgroundServer(create_app(settings)) as server:
        yield settings, server, refs


@pytest.fixture
def client(served):
    """A client that keeps no cookie: each request sends exactly the Cookie header it is given."""
    with httpx.Client(base_url=served[1].url, follow_redirects=False, timeout=60) as http:
        http.event_hooks["response"] = [lambda response: http.cookies.clear()]
        yield http


def _login(client: httpx.Client, token: str = TOKEN) -> tuple[str, str]:
    """(the Cookie header of a fresh session, the CSRF token of its forms)."""
    response = client.post("/review/login", data={"token": token})
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"].split(";")[0]
    page = client.get(f"/review?being={BEING}", headers={"Cookie": cookie})
    assert page.status_code == 200, page.text
    return cookie, CSRF.search(page.text).group(1)


def _form(settings, **choices: str) -> dict[str, str]:
    """Decision fields for ada's proposals by kind, e.g. merge="approve"."""
    by_kind = {p.kind: p.proposal_id for p in ProposalStore(settings.proposals).list(BEING)}
    return {f"d:{by_kind[kind]}": value for kind, value in choices.items()}


def test_login_sets_a_strict_cookie_and_the_page_shows_the_evidence(served, client):
    settings, _, refs = served
    page = client.get("/review")
    assert page.status_code == 200 and 'name="token"' in page.text and "[MERGE]" not in page.text
    for name, value in {
        "content-security-policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        "x-frame-options": "DENY",
        "cache-control": "no-store",
    }.items():
        assert page.headers[name] == value

    wrong = client.post("/review/login", data={"token": "not-a-token"})
    assert wrong.status_code == 401 and "unknown token" in wrong.text and "set-cookie" not in wrong.headers
    # A sub-agent proposes; it never decides, not even for its own being.
    scout = client.post("/review/login", data={"token": SCOUT_TOKEN})
    assert scout.status_code == 403 and "sub-agent" in scout.text and "set-cookie" not in scout.headers

    response = client.post("/review/login", data={"token": TOKEN})
    assert response.status_code == 303 and response.headers["location"] == "/review"
    flags = [f.strip().lower() for f in response.headers["set-cookie"].split(";")]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/review" in flags
    assert "secure" not in flags  # plain http on loopback; https sets it
    assert TOKEN not in response.headers["set-cookie"]  # the cookie holds a session id, not the token
    cookie = response.headers["set-cookie"].split(";")[0]

    page = client.get(f"/review?being={BEING}", headers={"Cookie": cookie})
    assert page.status_code == 200
    text = page.text
    for tag in ("[MERGE]", "[ARCHIVE]", "[CONFLICT]", "[CORE]"):
        assert tag in text
    # Evidence: the memories merged, the facts in conflict, and MEMORY.md's diff coloured by line.
    assert refs["Lena's cat Miso is allergic to chicken"] in text and "allergic to chicken!" in text
    assert "f-old: &#x27;Lisbon&#x27;" in text and "f-new: &#x27;Porto&#x27;" in text
    assert '<pre class="diff"' in text and '<span class="add">+' in text
    assert 'class="item conflict"' in text
    numbers = re.findall(r'<fieldset class="item[^"]*" id="item-(\d+)"', text)
    assert numbers == ["1", "2", "3", "4"]
    assert TOKEN not in text

    # bram's token does not open ada's page.
    bram = client.post("/review/login", data={"token": BRAM_TOKEN}).headers["set-cookie"].split(";")[0]
    assert client.get(f"/review?being={BEING}", headers={"Cookie": bram}).status_code == 403


def test_forged_and_foreign_posts_decide_nothing(served, client):
    settings, server, _ = served
    cookie, csrf = _login(client)
    fields = {"being": BEING, **_form(settings, merge="approve", contradiction="reject")}
    pending = {"merge": "pending", "archive": "pending", "contradiction": "pending", "core": "pending"}

    no_cookie = client.post("/review/decide", data={**fields, "csrf": csrf})
    assert no_cookie.status_code == 401 and 'name="token"' in no_cookie.text
    no_csrf = client.post("/review/decide", data=fields, headers={"Cookie": cookie})
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    wrong = client.post("/review/decide", data={**fields, "csrf": "0" * 64}, headers={"Cookie": cookie})
    assert wrong.status_code == 403
    # Another session's CSRF token is no good for this one.
    _, other_csrf = _login(client)
    assert (
        client.post(
            "/review/decide", data={**fields, "csrf": other_csrf}, headers={"Cookie": cookie}
        ).status_code
        == 403
    )
    for header in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/x"},
    ):
        foreign = client.post(
            "/review/decide", data={**fields, "csrf": csrf}, headers={"Cookie": cookie, **header}
        )
        assert foreign.status_code == 403, header
    # A JSON body is no form: refused as carrying no CSRF token.
    as_json = client.post("/review/decide", json={**fields, "csrf": csrf}, headers={"Cookie": cookie})
    assert as_json.status_code == 403
    # bram's login cannot decide ada's items, whatever it posts.
    bram_cookie = client.post("/review/login", data={"token": BRAM_TOKEN}).headers["set-cookie"].split(";")[0]
    bram_csrf = CSRF.search(client.get("/review", headers={"Cookie": bram_cookie}).text).group(1)
    as_bram = client.post(
        "/review/decide", data={**fields, "csrf": bram_csrf}, headers={"Cookie": bram_cookie}
    )
    assert as_bram.status_code == 403 and "does not cover being" in as_bram.text
    assert _statuses(settings) == pending

    # The same post from the page itself goes through.
    origin = {"Origin": server.url}
    done = client.post("/review/decide", data={**fields, "csrf": csrf}, headers={"Cookie": cookie, **origin})
    assert done.status_code == 303 and done.headers["location"] == f"/review?being={BEING}&decided=2"
    assert _statuses(settings) == {**pending, "merge": "approved", "contradiction": "rejected"}
    store = ProposalStore(settings.proposals)
    merged = store.list(BEING, kind="merge")[0]
    assert merged.decided_by == "review" and merged.payload["approval"] == "partial"
    page = client.get(done.headers["location"], headers={"Cookie": cookie}).text
    assert "2 decision(s) recorded" in page and "not yet: the approvals run applies it" in page

    out = client.post("/review/logout", data={"csrf": csrf}, headers={"Cookie": cookie})
    assert out.status_code == 303
    assert client.get(f"/review?being={BEING}", headers={"Cookie": cookie}).text.count('name="token"') == 1


def test_a_soft_forget_reads_applied_at_its_confirm_and_a_permanent_one_waits_for_the_forget_run(
    served, client
):
    """A soft forget holds once confirmed (its mark), so the proposal is applied then, whether
    confirmed through the API or on the page; a permanent one is applied by the forget run."""
    from mindflow.status import proposal_lines

    settings, server, _ = served
    api = {"Authorization": f"Bearer {TOKEN}"}
    said = [
        ("2026-02-25T09:00:00Z", "The spare key is under the blue pot."),
        ("2026-02-25T09:05:00Z", "My locker code at the gym is 4471."),
        ("2026-02-25T09:10:00Z", "The bike lock opens with 1234."),
    ]
    posted = client.post(
        f"/v1/beings/{BEING}/episodes",
        json={"episodes": [{"ts": ts, "speaker": "Lena", "text": text} for ts, text in said]},
        headers=api,
    )
    assert posted.status_code == 200, posted.text

    def found(query: str) -> str:
        response = client.post(f"/v1/beings/{BEING}/forget", json={"query": query}, headers=api)
        assert response.status_code == 200 and response.json()["candidates"], response.text
        return response.json()["proposal_id"]

    soft, permanent, on_page = found("spare key blue pot"), found("gym locker code"), found("bike lock")
    for proposal_id, forever in ((soft, False), (permanent, True)):
        body = {"proposal_id": proposal_id, "confirm": True, "permanent": forever}
        assert client.post(f"/v1/beings/{BEING}/forget", json=body, headers=api).status_code == 200
    cookie, csrf = _login(client)
    done = client.post(
        "/review/decide",
        data={"being": BEING, "csrf": csrf, f"d:{on_page}": "approve"},
        headers={"Cookie": cookie, "Origin": server.url},
    )
    assert done.status_code == 303, done.text

    listed = client.get(f"/v1/beings/{BEING}/proposals", params={"kind": "forget"}, headers=api).json()
    applied = {p["proposal_id"]: (p["status"], p["applied_at"] is not None) for p in listed["proposals"]}
    assert applied == {soft: ("approved", True), permanent: ("approved", False), on_page: ("approved", True)}
    page = client.get(done.headers["location"], headers={"Cookie": cookie}).text
    rows = dict(re.findall(r'<tr data-proposal="(p-[0-9a-f]+)">(.*?)</tr>', page, re.S))
    for proposal_id in (soft, on_page):
        assert re.search(r"<td>applied \d{4}-\d\d-\d\d \d\d:\d\d UTC</td>$", rows[proposal_id])
    assert rows[permanent].endswith("<td>not yet: the forget run erases it</td>")
    assert "approvals run" not in "".join(rows[p] for p in (soft, permanent, on_page))
    # `mindflow status` counts only what waits for a decision: no forget is left there.
    assert "forget" not in proposal_lines(settings)


def test_an_edit_is_taken_and_a_bad_one_loses_nothing(served, client):
    settings, _, refs = served
    cookie, csrf = _login(client)
    store = ProposalStore(settings.proposals)
    archive = store.list(BEING, kind="archive")[0]
    merge = store.list(BEING, kind="merge")[0]
    fields = {
        "being": BEING,
        "csrf": csrf,
        f"d:{archive.proposal_id}": "approve",
        f"target:{archive.proposal_id}": "n-nope",
        f"d:{merge.proposal_id}": "approve",
    }
    bad = client.post("/review/decide", data=fields, headers={"Cookie": cookie})
    assert bad.status_code == 422 and "archive only memories the proposal names" in bad.text
    assert 'value="n-nope"' in bad.text  # what the person typed is still there
    assert all(p.status == "pending" for p in store.list(BEING))  # the merge was not decided either

    other = merge.payload["absorbed"][0]
    fields.pop(f"d:{archive.proposal_id}")
    fields[f"target:{merge.proposal_id}"] = other
    assert client.post("/review/decide", data=fields, headers={"Cookie": cookie}).status_code == 303
    decided = store.get(BEING, merge.proposal_id)
    assert decided.status == "approved" and decided.payload["survivor"] == other
    assert decided.payload["edited"] and decided.payload["approval"] == "user"
    # Deciding it again (a second tab) says so, and the page still renders.
    again = client.post("/review/decide", data=fields, headers={"Cookie": cookie})
    assert again.status_code == 409 and "no longer pending" in again.text


def test_hostile_texts_are_escaped_and_an_open_server_still_checks_csrf(settings):
    hostile = "<script>alert('mindflow')</script><img src=x onerror=alert(1)>"
    store = ProposalStore(settings.proposals)
    memory = store.create(
        "ada",
        "memory",
        {"agent": "scout", "type": "fact", "content": hostile, "confidence": 0.5, "reason": hostile},
        created_by="subagent:scout</td><script>x()</script>",
    )
    store.create("ada", "core", {"diff": f"+{hostile}\n-{hostile}", "text": hostile}, created_by="reflection")
    # No tokens: the loopback server needs no login, and still puts a CSRF token in every form.
    with (
        BackgroundServer(create_app(settings, tokens="", mcp=False)) as server,
        httpx.Client(base_url=server.url, follow_redirects=False, timeout=60) as http,
    ):
        page = http.get("/review?being=ada")
        assert page.status_code == 200 and "httponly" in page.headers["set-cookie"].lower()
        text = page.text
        assert "<script" not in text and "<img" not in text
        assert "&lt;script&gt;alert(&#x27;mindflow&#x27;)&lt;/script&gt;" in text
        assert '<span class="add">+&lt;script&gt;' in text and '<span class="del">-&lt;script&gt;' in text

        fields = {"being": "ada", f"d:{memory.proposal_id}": "reject"}
        assert http.post("/review/decide", data=fields).status_code == 403  # the cookie alone
        assert store.get("ada", memory.proposal_id).status == "pending"
        fields["csrf"] = CSRF.search(text).group(1)
        assert http.post("/review/decide", data=fields).status_code == 303
        assert store.get("ada", memory.proposal_id).status == "rejected"

        # Another site's name made to resolve to 127.0.0.1 (DNS rebinding) gets no page, no form.
        rebound = httpx.get(f"{server.url}/review?being=ada", headers={"Host": "evil.example"}, timeout=60)
        assert rebound.status_code == 403 and not CSRF.search(rebound.text)
        assert "set-cookie" not in rebound.headers
        assert httpx.get(f"http://localhost:{server.port}/review", timeout=60).status_code == 200


# ---------------------------------------------------------------- a real browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture
def chromium() -> tuple[str, str]:
    """(browser, driver) paths, or a skip that says what to install (before any world is built)."""
    how = "install it with `apt-get install chromium chromium-driver` (or run `make browser` as root)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed: pip install -e '.[test]'")
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip(f"no Chromium ({', '.join(BROWSERS)}) on PATH: {how}")
    driver = shutil.which("chromedriver")
    if driver is None:
        pytest.skip(f"no chromedriver on PATH: {how}")
    return browser, driver


def test_a_person_decides_in_a_real_browser(chromium, served, con):
    browser, driver_path = chromium
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings, server, refs = served
    store = ProposalStore(settings.proposals)
    merge = store.list(BEING, kind="merge")[0]
    contradiction = store.list(BEING, kind="contradiction")[0]
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,2400"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        chrome.set_page_load_timeout(60)
        chrome.get(f"{server.url}/review")
        chrome.find_element(By.NAME, "token").send_keys(TOKEN)
        # A click only starts the form post: wait for the page it leads to, asking the new page
        # only (Chromium's driver may fail on a question about a node of the page left behind).
        wait = WebDriverWait(chrome, 60, ignored_exceptions=(WebDriverException,))
        chrome.find_element(By.CSS_SELECTOR, "form[action='/review/login'] button").click()
        wait.until(lambda page: not page.find_elements(By.NAME, "token"))
        chrome.get(f"{server.url}/review?being={BEING}")
        assert len(chrome.find_elements(By.CSS_SELECTOR, "fieldset.item")) == 4
        assert chrome.find_element(By.CSS_SELECTOR, "fieldset.conflict .tag").text == "[CONFLICT]"
        assert chrome.find_elements(By.CSS_SELECTOR, "pre.diff span.add")
        Path(settings.resolved_home / "review.png").write_bytes(chrome.get_screenshot_as_png())
        chrome.find_element(By.CSS_SELECTOR, f"input[name='d:{merge.proposal_id}'][value='approve']").click()
        chrome.find_element(
            By.CSS_SELECTOR, f"input[name='d:{contradiction.proposal_id}'][value='reject']"
        ).click()
        chrome.find_element(By.ID, "submit").click()
        note = wait.until(lambda page: page.find_element(By.CSS_SELECTOR, ".note"))
        assert "2 decision(s) recorded" in note.text
        assert len(chrome.find_elements(By.CSS_SELECTOR, "fieldset.item")) == 2
        statuses = {
            row.get_attribute("data-proposal"): row.find_element(By.CSS_SELECTOR, ".status").text
            for row in chrome.find_elements(By.CSS_SELECTOR, "tr[data-proposal]")
        }
        assert statuses == {merge.proposal_id: "approved", contradiction.proposal_id: "rejected"}
        # The session cookie is out of the page's reach.
        assert chrome.execute_script("return document.cookie") in ("", None)
    finally:
        chrome.quit()

    assert _statuses(settings) == {
        "merge": "approved",
        "contradiction": "rejected",
        "archive": "pending",
        "core": "pending",
    }
    facts_before = con.execute("SELECT fact_id, value, invalid_at FROM facts ORDER BY fact_id").fetchall()
    report = apply_approved(con, settings, BEING, run_id="approvals-1")
    assert report.applied == {"merge": 1} and not report.failed
    dead = con.execute("SELECT node_id, absorbed_into FROM nodes WHERE status = 'dead'").fetchall()
    assert dead == [(merge.payload["absorbed"][0], merge.payload["survivor"])]
    assert (
        con.execute("SELECT fact_id, value, invalid_at FROM facts ORDER BY fact_id").fetchall()
        == facts_before
    )
    assert store.get(BEING, merge.proposal_id).applied_at is not None
