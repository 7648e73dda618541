"""`forged ui` against a real daemon: the page's refusals (no token, a spent token, no session,
a wrong Host, another origin, no CORS), its one-time URL, its escaping, the forwarded routes."""

from __future__ import annotations

import re
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from forged.config import Config
from forged.ui.server import NO_SESSION, SESSION_HEADER, USED, UiServer
from tests.support.daemons import socket_client, wait_for_watermark

URL_LINE = re.compile(rb"forged ui: open (http://127\.0\.0\.1:(\d+)/\?token=([\w-]+))\n")
HOSTILE = "<script>window.pwned = 1</script><img src=x onerror=alert(1)>"


@dataclass
class Ui:
    """A running `forged ui`: the URL it printed, its origin and its token."""

    url: str
    origin: str
    token: str


@contextmanager
def ui_process(socket: str) -> Iterator[Ui]:
    """`forged ui` as a user starts it, in a child process; stopped by its pid at the end."""
    child = subprocess.Popen(
        [sys.executable, "-m", "forged", "ui", "--socket", socket],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        match = URL_LINE.fullmatch(line)
        assert match, (line, child.stderr.read() if child.poll() is not None else b"")  # type: ignore[union-attr]
        url, port, token = (g.decode() for g in match.groups())
        yield Ui(url, f"http://127.0.0.1:{port}", token)
    finally:
        child.terminate()
        child.wait(10)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def session_of(page: str) -> str:
    """The session secret the page carries ("" in a page opened without the token)."""
    match = re.search(r'<meta name="session" content="([\w-]*)">', page)
    assert match, page[:300]
    return match.group(1)


@asynccontextmanager
async def browser_session(ui: Ui) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client that opened the printed URL and sends its session, as the page does."""
    async with httpx.AsyncClient(base_url=ui.origin, timeout=30) as http:
        first = await http.get(ui.url)
        assert first.status_code == 200, first.text
        http.headers[SESSION_HEADER] = session_of(first.text)
        yield http


@pytest.fixture
async def ui(daemon: Config) -> AsyncIterator[Ui]:
    """A daemon holding a turn with markup in it, and `forged ui` in front of it."""
    async with socket_client(daemon.server.socket) as client:
        turn = {
            "scope": "web",
            "timestamp": "2023-05-08T13:56:00Z",
            "messages": [{"role": "user", "name": "Caroline", "text": HOSTILE}],
        }
        await client.post("/v1/interactions", json=turn)
        await wait_for_watermark(client, 1)
    with ui_process(daemon.server.socket) as running:
        yield running


async def test_the_printed_url_works_once_and_sets_no_cookie(ui: Ui) -> None:
    """The token opens the page with the session once, sets no cookie (every port of 127.0.0.1
    would get it), and a replay of the URL is refused; the page loads no outside code."""
    async with httpx.AsyncClient(timeout=30) as http:
        page = await http.get(ui.url)
        again = await http.get(ui.url)
    assert page.status_code == 200
    assert "set-cookie" not in page.headers and not http.cookies
    assert len(session_of(page.text)) >= 32 and session_of(page.text) not in ui.url
    assert (again.status_code, again.text) == (403, USED + "\n")
    assert "default-src 'none'; script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "http://" not in page.text.replace(ui.origin, "") and "https://" not in page.text
    assert "access-control-allow-origin" not in page.headers


async def test_without_the_session_no_memory_is_served(ui: Ui) -> None:
    """The page's files hold no secret; the API wants the session header (a cookie, the token
    or a wrong secret do not do), and a wrong token opens nothing and spends nothing."""
    async with httpx.AsyncClient(base_url=ui.origin, timeout=30) as http:
        wrong = await http.get("/?token=wrong")
        bare = await http.get("/")
        refused = [
            await http.get("/api/v1/scopes"),
            await http.get("/api/v1/scopes", params={"token": ui.token}),
            await http.get("/api/v1/scopes", headers={SESSION_HEADER: ui.token}),
            await http.get("/api/v1/scopes", headers={"Cookie": f"forged_ui={ui.token}"}),
        ]
        opened = await http.get(ui.url)
    assert (wrong.status_code, wrong.text) == (
        403,
        "no valid token: open the URL forged ui printed\n",
    )
    assert bare.status_code == 200 and session_of(bare.text) == ""
    assert [(r.status_code, r.text) for r in refused] == [(403, NO_SESSION + "\n")] * 4
    assert opened.status_code == 200 and session_of(opened.text)


async def test_a_wrong_host_is_refused(ui: Ui) -> None:
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) gets nothing,
    even with the token."""
    async with httpx.AsyncClient(base_url=ui.origin, timeout=30) as http:
        response = await http.get(ui.url, headers={"Host": "evil.example:80"})
    assert response.status_code == 421
    assert response.text == "wrong Host: open the URL forged ui printed\n"


async def test_a_cross_origin_change_is_refused(ui: Ui) -> None:
    """A change from another origin, or without the session, is refused before it reaches the
    daemon; from the page, with its session, it goes through."""
    async with browser_session(ui) as http:
        body = {"text": "Planted by another site.", "scope": "web"}
        other = await http.post(
            "/api/v1/facts", json=body, headers={"Origin": "http://evil.example"}
        )
        no_origin = await http.post("/api/v1/facts", json=body)
        no_session = await http.post(
            "/api/v1/facts", json=body, headers={"Origin": ui.origin, SESSION_HEADER: ""}
        )
        preflight = await http.options("/api/v1/facts", headers={"Origin": "http://evil.example"})
        facts = (await http.get("/api/v1/facts", params={"scope": "web"})).json()["facts"]
        ok = await http.post("/api/v1/facts", json=body, headers={"Origin": ui.origin})
    assert (other.status_code, other.text) == (403, "cross-origin request refused\n")
    assert no_origin.status_code == 403
    assert (no_session.status_code, no_session.text) == (403, NO_SESSION + "\n")
    assert preflight.status_code == 405
    assert "access-control-allow-origin" not in preflight.headers
    assert "Planted" not in str(facts)
    assert ok.status_code == 201, ok.text


async def test_only_the_pages_routes_are_forwarded(ui: Ui) -> None:
    """Pushing turns, or forgetting a path below a scope, is not what the page does: 404."""
    async with browser_session(ui) as http:
        headers = {"Origin": ui.origin}
        push = await http.post("/api/v1/interactions", json={}, headers=headers)
        nested = await http.delete("/api/v1/scopes/web/x", headers=headers)
        scopes = (await http.get("/api/v1/scopes")).json()["scopes"]
    assert (push.status_code, nested.status_code) == (404, 404)
    assert nested.text == "the page does not use DELETE /v1/scopes/web/x\n"
    assert [s["scope"] for s in scopes] == ["web"]


class _Recorder(BaseHTTPRequestHandler):
    """A stand-in daemon on a Unix socket that answers every DELETE 200 and keeps its path."""

    server: _RecordingServer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_DELETE(self) -> None:
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


class _RecordingServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    paths: list[str]


@contextmanager
def _page_before_a_recorder(tmp: Path) -> Iterator[tuple[UiServer, list[str]]]:
    """The page's server in this process, forwarding to a recorder: both on threads."""
    recorder = _RecordingServer(str(tmp / "daemon.sock"), _Recorder)
    recorder.paths = []
    with recorder, UiServer(str(tmp / "daemon.sock")) as page:
        threads = [threading.Thread(target=s.serve_forever) for s in (recorder, page)]
        for thread in threads:
            thread.start()
        try:
            yield page, recorder.paths
        finally:
            page.shutdown()
            recorder.shutdown()
            for thread in threads:
                thread.join()


def _delete_status(server: UiServer, segment: str) -> bytes:
    """The status the page's server answers a DELETE of /api/v1/scopes/`segment`, sent as it
    stands (an HTTP client would fold `..` into the path before it)."""
    port = server.server_address[1]
    request = (
        f"DELETE /api/v1/scopes/{segment} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Origin: http://127.0.0.1:{port}\r\n{SESSION_HEADER}: {server.page.session}\r\n"
        "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), 30) as sock:
        sock.sendall(request.encode())
        with sock.makefile("rb") as answer:
            return answer.readline().split(b" ")[1]


def test_a_scope_of_dots_is_never_forwarded(tmp_path: Path) -> None:
    """`.` and `..` would reach the daemon as another path, so they stop at the page's server;
    the page sends a dot of a scope's name as %2E, which is forwarded as it is."""
    with _page_before_a_recorder(tmp_path) as (page, paths):
        statuses = [_delete_status(page, s) for s in ("..", ".", "%2E%2E", "a.b")]
    assert statuses == [b"404", b"404", b"200", b"200"]
    assert paths == ["/v1/scopes/%2E%2E", "/v1/scopes/a.b"]


async def test_forgetting_a_scope_needs_the_session_and_this_origin(ui: Ui, daemon: Config) -> None:
    """DELETE of a scope is refused without the session or from another origin, and nothing
    is erased; from the page it forgets that scope alone, its name percent-encoded whole."""
    odd = "team/a b:%2E"  # a slash, a space, a colon and what looks like an escape
    async with socket_client(daemon.server.socket) as client:
        turn = {"scope": odd, "messages": [{"role": "user", "text": "I keep bees."}]}
        await client.post("/v1/interactions", json=turn)
    async with browser_session(ui) as http:
        page = {"Origin": ui.origin}
        no_session = await http.delete("/api/v1/scopes/web", headers={**page, SESSION_HEADER: ""})
        other = await http.delete("/api/v1/scopes/web", headers={"Origin": "http://evil.example"})
        no_origin = await http.delete("/api/v1/scopes/web")
        kept = [s["scope"] for s in (await http.get("/api/v1/scopes")).json()["scopes"]]
        forgot = await http.delete(f"/api/v1/scopes/{quote(odd, safe='')}", headers=page)
        left = [s["scope"] for s in (await http.get("/api/v1/scopes")).json()["scopes"]]
    assert (no_session.status_code, no_session.text) == (403, NO_SESSION + "\n")
    assert (other.status_code, other.text) == (403, "cross-origin request refused\n")
    assert no_origin.status_code == 403
    assert sorted(kept) == sorted(["web", odd])
    assert forgot.status_code == 200, forgot.text
    assert forgot.json()["deleted"]["interactions"] == 1
    assert left == ["web"]


async def test_hostile_text_reaches_the_page_only_as_data(ui: Ui) -> None:
    """The turn's markup arrives as a JSON string and the script never builds HTML from it."""
    async with browser_session(ui) as http:
        turns = (await http.get("/api/v1/interactions", params={"scope": "web"})).json()
        script = (await http.get("/app.js")).text
    assert turns["interactions"][0]["messages"][0]["text"] == HOSTILE
    assert "innerHTML" not in script.replace("never innerHTML", "")
    assert "insertAdjacentHTML" not in script and "document.write" not in script
