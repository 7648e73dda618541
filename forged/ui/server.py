"""`forged ui`: the memory browser, a web page on loopback that talks to the daemon's socket.

Only who may use the socket may use the page: the server binds 127.0.0.1 alone, and the URL it
prints carries a random token (as Jupyter's does) that the first request trades for an HttpOnly,
SameSite=Strict cookie. Every request must name this server in its Host header (a page of
another site whose name resolves to 127.0.0.1, DNS rebinding, is refused); every change must
come from this origin and carry the page's CSRF token; no CORS header is ever sent. The page
escapes every value (it builds the DOM with textContent only) and the Content-Security-Policy
allows scripts from this server alone.

The server is the standard library's threading HTTP server: one person's browser at a time
needs no event loop, and nothing is added to the daemon. It forwards an allow-list of the
daemon's routes (`/api/v1/...`) over the socket and serves the page's files from
`forged/ui/static/`: plain HTML, CSS and JavaScript, with no build step and no CDN, because the
machine it runs on may have no internet and a memory browser must not load code from elsewhere.
"""

from __future__ import annotations

import contextlib
import hmac
import re
import secrets
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from forged.client.methods import BASE_URL, TIMEOUT

__all__ = [
    "ALLOWED",
    "COOKIE",
    "HOST",
    "MAX_BODY",
    "SECURITY_HEADERS",
    "STATIC",
    "Handler",
    "Page",
    "UiServer",
    "serve",
]

HOST = "127.0.0.1"  # loopback only: never another interface, whatever the flags
COOKIE = "forged_ui"  # the session cookie the token is traded for
MAX_BODY = 64 * 1024  # bytes a change may send: a fact or a correction, never more
STATIC = {  # the page's files: name -> content type
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_ID = r"[1-9]\d{0,17}"
# The daemon's routes the page may use, by method: nothing else is forwarded.
ALLOWED = {
    "GET": re.compile(
        r"/v1/(scopes|interactions|facts|summaries|search|context|status|dead-letters|edits"
        rf"|facts/{_ID})"
    ),
    "POST": re.compile(rf"/v1/(facts|facts/{_ID}/correct|dead-letters/redistill)"),
    "PUT": re.compile(rf"/v1/facts/{_ID}/pin"),
    "DELETE": re.compile(rf"/v1/(facts/{_ID}|facts/{_ID}/pin|summaries/{_ID}|interactions/{_ID})"),
}
# A data table, one row a line: the formatter would reflow its rows.
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self';"
     " img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none';"
     " frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),  # the token in the first URL goes nowhere
    ("Cache-Control", "no-store"),
)  # fmt: skip


class Page:
    """What the server knows: where the daemon listens, its own origin, and its secrets."""

    def __init__(self, socket: str, port: int) -> None:
        self.socket = socket
        self.port = port
        self.token = secrets.token_urlsafe(32)  # in the printed URL
        self.session = secrets.token_urlsafe(32)  # in the cookie
        self.csrf = secrets.token_urlsafe(32)  # in the page, sent back with every change
        self.hosts = {f"{HOST}:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def _cookie(header: str | None) -> str | None:
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return None


class Handler(BaseHTTPRequestHandler):
    """One request: the checks, then a file of the page or a call forwarded to the daemon."""

    server: UiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not every request."""

    def _send(self, status: int, body: bytes, content_type: str, *extra: tuple[str, str]) -> None:
        self.send_response(status)
        for name, value in (*SECURITY_HEADERS, *extra):
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, status: int, message: str) -> None:
        """Answer with the reason and close: the body of a refused request is never read."""
        self.close_connection = True
        body = message.encode() + b"\n"
        self._send(status, body, "text/plain; charset=utf-8", ("Connection", "close"))

    def _checked(self) -> bool:
        """The Host, the session (or the token) and, for a change, the origin and CSRF token."""
        page = self.server.page
        if self.headers.get("Host") not in page.hosts:
            self._refuse(
                HTTPStatus.MISDIRECTED_REQUEST, "wrong Host: open the URL forged ui printed"
            )
            return False
        query = parse_qs(urlsplit(self.path).query)
        if not (
            _same(_cookie(self.headers.get("Cookie")), page.session)
            or _same(next(iter(query.get("token", [])), None), page.token)
        ):
            self._refuse(HTTPStatus.FORBIDDEN, "no valid token: open the URL forged ui printed")
            return False
        if self.command not in ("GET", "HEAD"):
            if self.headers.get("Origin") not in page.origins:
                self._refuse(HTTPStatus.FORBIDDEN, "cross-origin request refused")
                return False
            if not _same(self.headers.get("X-Forged-CSRF"), page.csrf):
                self._refuse(HTTPStatus.FORBIDDEN, "missing or wrong CSRF token")
                return False
        return True

    def _handle(self) -> None:
        if not self._checked():
            return
        path = urlsplit(self.path).path
        if path.startswith("/api/"):
            self._forward(path.removeprefix("/api"), urlsplit(self.path).query)
        elif self.command in ("GET", "HEAD"):
            self._static(path)
        else:
            self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, "only the API takes changes")

    def _static(self, path: str) -> None:
        page = self.server.page
        name = "index.html" if path == "/" else path.lstrip("/")
        if name not in STATIC:
            self._refuse(HTTPStatus.NOT_FOUND, "no such page")
            return
        body = resources.files("forged.ui").joinpath("static", name).read_bytes()
        extra: list[tuple[str, str]] = []
        if name == "index.html":
            body = body.replace(b"{{csrf}}", page.csrf.encode())
            extra.append(
                ("Set-Cookie", f"{COOKIE}={page.session}; HttpOnly; SameSite=Strict; Path=/")
            )
        self._send(HTTPStatus.OK, body, STATIC[name], *extra)

    def _forward(self, path: str, query: str) -> None:
        pattern = ALLOWED.get(self.command)
        if pattern is None or not pattern.fullmatch(path):
            self._refuse(HTTPStatus.NOT_FOUND, f"the page does not use {self.command} {path}")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
            return
        body = self.rfile.read(length) if length else None
        params: list[tuple[str, str | int | float | bool | None]] = [
            (k, v) for k, vs in parse_qs(query).items() if k != "token" for v in vs
        ]
        try:
            answer = self.server.http.request(
                self.command,
                path,
                params=params,
                content=body,
                headers={"content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            message = (
                f'{{"error": {{"code": "unreachable", "message": "forged: {type(exc).__name__}"}}}}'
            )
            self._send(HTTPStatus.BAD_GATEWAY, message.encode(), "application/json")
            return
        self._send(answer.status_code, answer.content, "application/json")

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _handle  # the names the base calls

    def do_OPTIONS(self) -> None:
        """No CORS preflight is ever answered."""
        self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, "no CORS here")


class UiServer(ThreadingHTTPServer):
    """The page's server on loopback, with one client of the daemon's socket."""

    daemon_threads = True

    def __init__(self, socket: str, port: int = 0) -> None:
        super().__init__((HOST, port), Handler)
        self.page = Page(socket, self.server_address[1])
        transport = httpx.HTTPTransport(uds=socket, verify=False)
        self.http = httpx.Client(transport=transport, base_url=BASE_URL, timeout=TIMEOUT)

    def server_close(self) -> None:
        super().server_close()
        self.http.close()


def serve(socket: str, port: int = 0) -> None:
    """Serve the page until interrupted; print its URL first."""
    with UiServer(socket, port) as server:
        print(f"forged ui: open {server.page.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends it
            server.serve_forever()
