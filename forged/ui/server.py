"""`forged ui`: the memory browser, a web page on loopback that talks to the daemon's socket.

Only who may use the socket may use the page: the server binds 127.0.0.1 alone, and the URL it
prints carries a random token that works once: the page it opens carries this run's session
secret, which the page keeps in its tab (sessionStorage: this origin, port included, and this
tab alone) and sends in a header with every call of the API. No cookie: a browser sends a
cookie of 127.0.0.1 to every server on 127.0.0.1 whatever its port, where another local user
could read it. Every request must name this server in its Host header (a page of another site
whose name resolves to 127.0.0.1, DNS rebinding, is refused); every change must come from this
origin; no CORS header is ever sent, so no other origin can send the header. The page escapes
every value (it builds the DOM with textContent only) and the Content-Security-Policy allows
scripts from this server alone.

The server is the standard library's threading HTTP server: one person's browser at a time
needs no event loop, and nothing is added to the daemon. forged.ui.limits caps its connections
and the time each request may take to arrive. It forwards an allow-list of the
daemon's routes (`/api/v1/...`) over the socket and serves the page's files from
`forged/ui/static/`: plain HTML, CSS and JavaScript, with no build step and no CDN, because the
machine it runs on may have no internet and a memory browser must not load code from elsewhere.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import threading
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from forged.client.methods import BASE_URL, TIMEOUT
from forged.http.routes import ROUTES
from forged.http.table import allowed
from forged.ui.limits import MAX_CONNECTIONS, REQUEST_TIMEOUT, CappedServer, TimedRequests

__all__ = [
    "ALLOWED",
    "HOST",
    "MAX_BODY",
    "SECURITY_HEADERS",
    "SESSION_HEADER",
    "STATIC",
    "Handler",
    "Page",
    "UiServer",
    "serve",
]

HOST = "127.0.0.1"  # loopback only: never another interface, whatever the flags
SESSION_HEADER = "X-Forged-Session"  # carries the session secret on every call of the API
NO_SESSION = "no valid session: open the URL forged ui printed"  # the API without the secret
USED = "this link worked once and is spent: run forged ui again for a new one"  # a replayed URL
MAX_BODY = 64 * 1024  # bytes a change may send: a fact or a correction, never more
STATIC = {  # the page's files: name -> content type
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# What the page puts where a route names an item: an id, or a scope percent-encoded into one
# segment; never `.` or `..`, which the client would fold into the path before it (the page
# encodes a dot as %2E).
ITEMS = {"id": r"[1-9]\d{0,17}", "scope": r"(?!\.\.?$)[^/]+"}
# The daemon's routes the page may use, by method, from the rows of its route table marked for
# the browser: nothing else is forwarded.
ALLOWED = allowed(ROUTES, ITEMS)
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
        self.token = secrets.token_urlsafe(32)  # in the printed URL, good for one page
        self.session = secrets.token_urlsafe(32)  # given with that page, then sent in a header
        self.hosts = {f"{HOST}:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}
        self._spent = False
        self._lock = threading.Lock()  # requests come on threads: the token is spent once

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def spend(self, token: str) -> str | None:
        """The refusal for `token`, or None once it is spent here: it works once."""
        with self._lock:
            if not _same(token, self.token):
                return "no valid token: open the URL forged ui printed"
            if self._spent:
                return USED
            self._spent = True
            return None


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


class Handler(TimedRequests):
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

    def _authorised(self) -> bool:
        """A call of the API: the session secret and, for a change, the origin."""
        page = self.server.page
        if not _same(self.headers.get(SESSION_HEADER), page.session):
            self._refuse(HTTPStatus.FORBIDDEN, NO_SESSION)
            return False
        if self.command not in ("GET", "HEAD") and self.headers.get("Origin") not in page.origins:
            self._refuse(HTTPStatus.FORBIDDEN, "cross-origin request refused")
            return False
        return True

    def _handle(self) -> None:
        if self.headers.get("Host") not in self.server.page.hosts:
            self._refuse(
                HTTPStatus.MISDIRECTED_REQUEST, "wrong Host: open the URL forged ui printed"
            )
            return
        path = urlsplit(self.path).path
        if path.startswith("/api/"):
            if self._authorised():
                self._forward(path.removeprefix("/api"), urlsplit(self.path).query)
        elif self.command in ("GET", "HEAD"):
            self._static(path)
        else:
            self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, "only the API takes changes")

    def _static(self, path: str) -> None:
        """A file of the page, which holds no secret; the page the printed URL opens carries the
        session, once."""
        name = "index.html" if path == "/" else path.lstrip("/")
        if name not in STATIC:
            self._refuse(HTTPStatus.NOT_FOUND, "no such page")
            return
        body = resources.files("forged.ui").joinpath("static", name).read_bytes()
        session = ""
        tokens = parse_qs(urlsplit(self.path).query).get("token")
        if name == "index.html" and self.command == "GET" and tokens:
            refusal = self.server.page.spend(tokens[0])
            if refusal is not None:
                self._refuse(HTTPStatus.FORBIDDEN, refusal)
                return
            session = self.server.page.session
        body = body.replace(b"{{session}}", session.encode())
        self._send(HTTPStatus.OK, body, STATIC[name])

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
            (k, v) for k, vs in parse_qs(query).items() for v in vs
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


class UiServer(CappedServer):
    """The page's server on loopback, with one client of the daemon's socket."""

    daemon_threads = True

    def __init__(
        self,
        socket: str,
        port: int = 0,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        super().__init__(
            (HOST, port),
            Handler,
            max_connections=max_connections,
            request_timeout=request_timeout,
        )
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
