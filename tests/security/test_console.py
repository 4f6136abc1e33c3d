"""Issue 9, findings 7, 8 and the console parts of 9, against `agentq up` with its defaults.

Before: a page on another port of the same host framed a review page and a click in it claimed
the escalation (no `X-Frame-Options`, no CSP); the stateless session cookie, replayed after
sign-out, still read the inbox and released a claim until its 12 h expiry; a new token with a
revoked token's name decided its claim, and `rita`, `Rita` and `RITA` were all live; U+202E
made the console and the CLI show a string that is not there; `/docs` loaded Swagger UI from a
CDN; console pages had no CSP, `nosniff`, `Referrer-Policy` or `Cache-Control: no-store`.
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import httpx
import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlmodel import col, select

from models.settings import Settings
from models.tables import ConsoleSession, Escalation, Run
from tests.support.console import (
    AGENTQ,
    Console,
    csrf_of,
    escalate_run,
    submitted_id,
    wait_for_status,
)
from tests.support.net import free_port

pytestmark = pytest.mark.security
MakeToken = Callable[..., tuple[int, str]]
SignIn = Callable[[str], httpx.Client]
CLICK_TIMEOUT_MS = 5_000
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
IDLE_DEFAULT_S = Settings.model_fields["ui_session_idle_s"].default


def _site(console: Console) -> str:
    return console.ui_url.removesuffix("/ui")


def _escalation(console: Console, esc_id: int) -> Escalation:
    with console.db() as session:
        esc: Escalation | None = session.get(Escalation, esc_id)
        assert esc is not None
        return esc


@contextmanager
def _attacker_page(framed_url: str) -> Iterator[str]:
    """A page on another port of the same host that frames `framed_url` full size; its URL."""
    html = (
        "<!doctype html><title>win a prize</title><p>Click the button!</p>"
        f'<iframe id="victim" src="{framed_url}" width="1200" height="900"></iframe>'
    ).encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_page_on_another_port_cannot_frame_the_console(
    console: Console, make_token: MakeToken, browser: Browser
) -> None:
    _, raw = make_token("reviewer", "framed")
    _, esc_id = escalate_run(console, user="framed", goal="framing test")
    review_url = f"{console.ui_url}/reviews/{esc_id}"
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.goto(f"{console.ui_url}/login")
    page.get_by_label("API token").fill(raw)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Review inbox")).to_be_visible()
    page.goto(review_url)  # the session works: at the top level the page has its Claim button
    expect(page.get_by_role("button", name="Claim")).to_be_visible()
    with _attacker_page(review_url) as attacker:
        assert urlparse(attacker).port != urlparse(console.ui_url).port
        page.goto(attacker)
        claim = page.frame_locator("#victim").get_by_role("button", name="Claim")
        with pytest.raises(PlaywrightTimeout):
            claim.click(timeout=CLICK_TIMEOUT_MS)
        framed = [f for f in page.frames if f != page.main_frame]
        assert framed and all("Why it escalated" not in f.content() for f in framed)
    context.close()
    esc = _escalation(console, esc_id)
    assert (esc.status, esc.claimed_by) == ("open", None)


def test_the_console_runs_under_its_csp_and_its_live_refresh_still_works(
    console: Console, make_token: MakeToken, browser: Browser
) -> None:
    _, raw = make_token("reviewer", "csp-check")
    context = browser.new_context()
    page = context.new_page()
    messages: list[str] = []
    page.on("console", lambda message: messages.append(message.text))
    page.goto(f"{console.ui_url}/login")
    page.get_by_label("API token").fill(raw)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Review inbox")).to_be_visible()
    _, esc_id = escalate_run(console, user="csp", goal="live refresh under the CSP")
    # only the page's own script (static/console.js) can bring the new row in
    expect(page.locator(f'tr[data-escalation="{esc_id}"]')).to_be_visible(timeout=20_000)
    page.goto(f"{console.ui_url}/reviews/{esc_id}")
    bar = page.locator(".meter .bar").first  # the stylesheet applies (a bar is 8 px high)
    assert bar.evaluate("e => getComputedStyle(e).height") == "8px"
    assert not [m for m in messages if "Content Security Policy" in m], messages
    context.close()


def _session_cookie(http: httpx.Client) -> str:
    value = http.cookies.get("agentq_ui")
    assert value
    return value


def test_a_cookie_replayed_after_sign_out_gets_the_sign_in_page_and_changes_nothing(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    _, esc_id = escalate_run(console, user="replay", goal="replay test")
    http = sign_in(make_token("reviewer", "replayed")[1])
    csrf = csrf_of(http.get(f"/ui/reviews/{esc_id}").text)
    assert http.post(f"/ui/reviews/{esc_id}/claim", data={"csrf_token": csrf}).status_code == 303
    copied = _session_cookie(http)
    assert http.post("/ui/logout", data={"csrf_token": csrf}).status_code == 303

    with httpx.Client(base_url=_site(console), trust_env=False) as replay:
        replay.cookies.set("agentq_ui", copied, path="/ui")
        inbox = replay.get("/ui/reviews")
        assert inbox.status_code == 303 and inbox.headers["location"].startswith("/ui/login")
        assert "Review inbox" not in replay.get("/ui/reviews", follow_redirects=True).text
        released = replay.post(f"/ui/reviews/{esc_id}/release", data={"csrf_token": csrf})
        assert released.status_code in (303, 403)
        assert replay.get(f"/ui/reviews/{esc_id}").status_code == 303
    esc = _escalation(console, esc_id)
    assert (esc.status, esc.claimed_by) == ("claimed", "replayed")


def test_revoking_a_token_deletes_its_sessions_and_releases_its_claims(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    _, esc_id = escalate_run(console, user="revoked", goal="revoke test")
    token_id, raw = make_token("reviewer", "revokee")
    http = sign_in(raw)
    csrf = csrf_of(http.get(f"/ui/reviews/{esc_id}").text)
    assert http.post(f"/ui/reviews/{esc_id}/claim", data={"csrf_token": csrf}).status_code == 303
    copied = _session_cookie(http)

    said = console.agentq("token", "revoke", str(token_id)).stdout
    assert "console sessions ended: 1" in said and f"claims released: escalation {esc_id}" in said
    with console.db() as session:
        left = session.exec(select(ConsoleSession).where(ConsoleSession.token_id == token_id))
        assert left.all() == []
    with httpx.Client(base_url=_site(console), trust_env=False) as replay:
        replay.cookies.set("agentq_ui", copied, path="/ui")
        assert replay.get("/ui/reviews").status_code == 303
    esc = _escalation(console, esc_id)
    assert (esc.status, esc.claimed_by, esc.claimed_by_token_id) == ("open", None, None)


def test_an_idle_session_is_signed_out(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    token_id, raw = make_token("reviewer", "idler")
    http = sign_in(raw)
    assert http.get("/ui/reviews").status_code == 200
    idle = timedelta(seconds=IDLE_DEFAULT_S + 5)
    with console.db() as session:  # as if its last request were that long ago
        session.execute(
            sa.update(ConsoleSession)
            .where(col(ConsoleSession.token_id) == token_id)
            .values(last_seen_at=sa.func.now() - idle)
        )
    gone = http.get("/ui/reviews")
    assert gone.status_code == 303 and gone.headers["location"].startswith("/ui/login")
    with console.db() as session:
        stmt = select(ConsoleSession).where(ConsoleSession.token_id == token_id)
        assert session.exec(stmt).all() == []


def _agentq_refused(console: Console, *args: str) -> str:
    done = subprocess.run(
        [AGENTQ, *args],
        env=console.env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr


def test_token_names_that_differ_only_in_case_are_refused(console: Console) -> None:
    made = console.agentq("token", "create", "--name", "casey", "--role", "reviewer").stdout
    first = re.search(r"token (\d+) created", made)
    assert first, made
    for variant in ("Casey", "CASEY", "cAsEy"):
        said = _agentq_refused(console, "token", "create", "--name", variant, "--role", "admin")
        assert f"name: token {first.group(1)} is named 'casey' already" in said, said
    listed = console.agentq("token", "list").stdout
    assert "Casey" not in listed and "CASEY" not in listed


def test_a_token_with_a_revoked_claimers_name_cannot_decide_its_claim(
    console: Console, make_token: MakeToken
) -> None:
    _, esc_id = escalate_run(console, user="tied", goal="claims are tied to tokens")
    old_id, old = make_token("reviewer", "tied")
    api = httpx.Client(base_url=f"{_site(console)}/api/v1", trust_env=False, timeout=60)
    claimed = api.post(f"/reviews/{esc_id}/claim", headers={"Authorization": f"Bearer {old}"})
    assert claimed.status_code == 200, claimed.text
    with console.db() as session:  # revoked behind agentq's back: the claim is not given back
        session.execute(
            sa.text("UPDATE api_tokens SET revoked_at = now() WHERE id = :id"), {"id": old_id}
        )
    new_id, new = make_token("reviewer", "tied")  # the name is free again
    as_new = {"Authorization": f"Bearer {new}"}
    decided = api.post(f"/reviews/{esc_id}/reject", json={"comment": "mine"}, headers=as_new)
    assert decided.status_code == 409, decided.text
    assert f"through API token {old_id}; only that token can decide it" in decided.json()["detail"]
    assert api.post(f"/reviews/{esc_id}/release", headers=as_new).status_code == 409
    api.close()
    esc = _escalation(console, esc_id)
    assert (esc.status, esc.claimed_by_token_id, esc.decision) == ("claimed", old_id, None)
    assert new_id != old_id


def test_console_pages_and_api_answers_carry_the_security_headers(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    token_id, raw = make_token("reviewer", "headers")
    http = sign_in(raw)
    anonymous = httpx.get(f"{console.ui_url}/login", trust_env=False)
    for page in (anonymous, http.get("/ui/reviews"), http.get("/ui/runs")):
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, csp
        assert "unsafe-inline" not in csp
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "same-origin"
        assert page.headers["cache-control"] == "no-store"
    me = httpx.get(
        f"{_site(console)}/api/v1/me", headers={"Authorization": f"Bearer {raw}"}, trust_env=False
    )
    assert me.json()["token_id"] == token_id
    assert me.headers["x-content-type-options"] == "nosniff"
    assert me.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in me.headers["content-security-policy"]


def test_a_right_to_left_override_is_shown_as_a_marker_in_the_console_and_the_cli(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    goal = f"Pay EUR 1000.00{RLO}1 to the vendor"  # reads as "EUR 1000.001 ..." reversed
    run_id = submitted_id(console.agentq("run", "submit", goal, "--user", "bidi").stdout)
    wait_for_status(console, run_id, ("succeeded", "failed", "waiting_review"))
    with console.db() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.goal == goal  # stored as sent: display only
    page = sign_in(make_token("reviewer", "bidi-reader")[1]).get(f"/ui/runs/{run_id}").text
    assert "EUR 1000.00⟨U+202E⟩1" in page and RLO not in page
    listed = sign_in(make_token("reviewer", "bidi-lister")[1]).get("/ui/runs").text
    assert "1000.00⟨U+202E⟩1" in listed and RLO not in listed
    for args in (("run", "show", str(run_id)), ("run", "list", "--user", "bidi")):
        shown = console.agentq(*args).stdout
        assert "⟨U+202E⟩" in shown and RLO not in shown, shown


def test_docs_are_off_and_nothing_is_loaded_from_a_cdn(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    site = _site(console)
    assert httpx.get(f"{site}/docs", trust_env=False).status_code == 404
    spec = httpx.get(f"{site}/openapi.json", trust_env=False)
    assert spec.status_code == 200 and "/api/v1/runs" in spec.json()["paths"]
    http = sign_in(make_token("reviewer", "no-cdn")[1])
    for path in ("/ui/login", "/ui/reviews", "/ui/runs"):
        html = http.get(path).text
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), path
