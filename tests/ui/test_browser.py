"""The memory browser in headless Chromium: a person's way through it, and the refusals a
hostile page meets, against a real daemon and `forged ui` in a child process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trio

from forged.config import Config
from forged.ui.server import NO_SESSION, SESSION_HEADER
from tests.support.browser import REBOUND_HOST, chromium
from tests.support.daemons import socket_client, wait_for_watermark
from tests.ui.test_server import HOSTILE, Ui, ui_process

WAIT = 20.0  # seconds an element may take to appear
SCOPE = "caroline"
TURNS = [  # two days, three turns; the fake model keeps one fact per turn
    (
        "2023-05-08T13:56:00Z",
        "Caroline",
        "I went to a LGBTQ support group yesterday and it was powerful.",
    ),
    ("2023-05-08T14:01:00Z", "Melanie", "Painting a lake sunrise helped me relax last weekend."),
    ("2023-05-25T10:30:00Z", "Caroline", HOSTILE),
]
CORRECTED = "Caroline went to an LGBTQ support group on 7 May 2023."


def _scenario(driver: Any, ui: Ui) -> dict[str, Any]:
    """Open the URL, find the scope, search, open a fact and its sources, correct it, delete a
    turn, see the timeline change. Blocking: run in a thread while the daemon serves."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT)
    seen: dict[str, Any] = {}

    def css(selector: str) -> Any:
        return wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, selector)))

    driver.get(ui.url)
    css(f'[data-scope="{SCOPE}"]').click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".daybox")) == 2)
    seen["turns_before"] = len(driver.find_elements(By.CSS_SELECTOR, "[data-turn]"))
    seen["hostile"] = driver.find_element(By.CSS_SELECTOR, '[data-turn="3"] .text').text
    seen["pwned"] = driver.execute_script("return window.pwned !== undefined")
    css("#tab-search").click()
    css("#query").send_keys("support group")
    css("#search").click()
    css('[data-result^="fact-"]').click()
    sources = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#sources [data-turn]")))
    seen["source"] = sources.text
    css("#correct").click()
    box = css("#correct-text")
    box.clear()
    box.send_keys(CORRECTED)
    css("#correct-save").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "fact-text"), CORRECTED))
    seen["history"] = css("#history").text
    css("#tab-timeline").click()
    css('[data-delete-turn="2"]').click()
    wait.until(ec.alert_is_present()).accept()
    wait.until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "[data-turn]")) == seen["turns_before"] - 1
    )
    seen["timeline"] = css("#timeline").text
    css("#nav-status").click()
    wait.until(ec.presence_of_element_located((By.ID, "observers")))
    seen["status"] = driver.find_element(By.ID, "main").text
    return seen


def _refusals(driver: Any, ui: Ui) -> dict[str, str]:
    """Before the URL is opened: no token, then the URL under a rebound host name."""
    from selenium.webdriver.common.by import By

    driver.get(ui.origin + "/")
    no_token = driver.find_element(By.TAG_NAME, "body").text
    port = ui.origin.rsplit(":", 1)[1]
    driver.get(ui.url.replace(f"127.0.0.1:{port}", f"{REBOUND_HOST}:{port}"))
    return {"no_token": no_token, "wrong_host": driver.find_element(By.TAG_NAME, "body").text}


def _cross_origin(driver: Any, ui: Ui) -> str:
    """With the page open, a form of another origin posts a fact to the page's API."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    form = (
        f'<form method="post" enctype="text/plain" action="{ui.origin}/api/v1/facts">'
        '<input name=\'{"text": "Planted", "scope": "caroline", "x": "\' value=\'"}\'>'
        "</form><script>document.forms[0].submit()</script>"
    )
    driver.get("data:text/html;charset=utf-8," + form)
    WebDriverWait(driver, WAIT).until(lambda d: d.current_url.startswith(ui.origin))
    return str(driver.find_element(By.TAG_NAME, "body").text)


class Neighbour:
    """Another server on another loopback port, as any local user may run: it keeps every
    request the browser sends it, and its page calls the memory page's API from the browser."""

    def __init__(self, ui: Ui) -> None:
        self.received: list[str] = []  # request lines and headers, as sent
        self.done = threading.Event()  # its page's call of the API has ended
        received, done = self.received, self.done
        page = (
            f"<script>fetch('{ui.origin}/api/v1/scopes', {{mode: 'no-cors',"
            " credentials: 'include'}).finally(() => fetch('/done'))</script>"
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_GET(self) -> None:
                received.append(f"{self.requestline}\n{self.headers}")
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                if self.path == "/done":
                    done.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"


@contextmanager
def neighbour(ui: Ui) -> Iterator[Neighbour]:
    """The neighbour's server, serving on a thread until the end."""
    other = Neighbour(ui)
    thread = threading.Thread(target=other.server.serve_forever)
    thread.start()
    try:
        yield other
    finally:
        other.server.shutdown()
        other.server.server_close()
        thread.join()


def _visit_neighbour(driver: Any, ui: Ui, other: Neighbour) -> dict[str, Any]:
    """After using the page, the same browser visits the neighbour, then comes back to the page
    in the same tab: its session is still there, and no cookie of 127.0.0.1 exists."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    cookies = driver.get_cookies()
    driver.get(other.url)
    assert other.done.wait(WAIT)
    driver.get(ui.origin + "/")
    scope = WebDriverWait(driver, WAIT).until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, f'[data-scope="{SCOPE}"]'))
    )
    return {
        "cookies": cookies,
        "back": scope.text,
        "session": driver.execute_script("return sessionStorage.getItem('forged-session')"),
    }


@pytest.mark.slow
async def test_a_neighbouring_server_gets_nothing_usable_from_the_browser(daemon: Config) -> None:
    """No cookie, token or session reaches a server on another port the browser visits; what it
    received, replayed, opens nothing; the page's tab keeps its session across the visit."""
    with ui_process(daemon.server.socket) as ui, neighbour(ui) as other, chromium() as driver:
        async with socket_client(daemon.server.socket) as client:
            await client.post(
                "/v1/interactions",
                json={"scope": SCOPE, "messages": [{"role": "user", "text": "I keep bees."}]},
            )
        await trio.to_thread.run_sync(driver.get, ui.url)
        seen = await trio.to_thread.run_sync(_visit_neighbour, driver, ui, other)
        async with httpx.AsyncClient(base_url=ui.origin, timeout=30) as http:
            replays = []
            for request in other.received:
                headers = dict(
                    line.split(": ", 1) for line in request.splitlines()[1:] if ": " in line
                )
                headers.pop("Host", None)
                replays.append(await http.get("/api/v1/scopes", headers=headers))
            spent = await http.get(ui.url)
    assert seen["cookies"] == [] and seen["session"] and SCOPE in seen["back"]
    assert len(other.received) >= 2  # its page and the report that its call of the API ended
    everything = "\n".join(other.received)
    assert seen["session"] not in everything and ui.token not in everything
    assert "cookie" not in everything.lower() and SESSION_HEADER.lower() not in everything.lower()
    assert [r.status_code for r in replays] == [403] * len(replays)
    assert spent.status_code == 403


@pytest.mark.slow
async def test_a_person_corrects_a_fact_and_deletes_a_turn_in_the_browser(daemon: Config) -> None:
    async with socket_client(daemon.server.socket) as client:
        pushed = [
            {
                "scope": SCOPE,
                "timestamp": at,
                "session": "s1",
                "messages": [{"role": "user", "name": who, "text": text}],
            }
            for at, who, text in TURNS
        ]
        await client.post("/v1/interactions", json=pushed)
        await wait_for_watermark(client, 3)
        with ui_process(daemon.server.socket) as ui, chromium() as driver:
            refused = await trio.to_thread.run_sync(_refusals, driver, ui)
            seen = await trio.to_thread.run_sync(_scenario, driver, ui)
            cross = await trio.to_thread.run_sync(_cross_origin, driver, ui)
        facts = (await client.get("/v1/facts", params={"scope": SCOPE})).json()["facts"]
        turns = (await client.get("/v1/interactions", params={"scope": SCOPE})).json()
    assert seen["turns_before"] == 3
    assert HOSTILE in seen["hostile"] and seen["pwned"] is False
    assert "LGBTQ support group" in seen["source"]
    assert "support group" in seen["history"] and "user" in seen["history"]
    assert "Painting a lake" not in seen["timeline"] and CORRECTED in seen["timeline"]
    assert [i["seq"] for i in turns["interactions"]] == [1, 3]
    assert CORRECTED in {f["text"] for f in facts}
    assert "Dead letters (0)" in seen["status"] and "null" not in seen["status"]
    assert "Planted" not in str(facts)
    assert refused["no_token"] == NO_SESSION
    assert refused["wrong_host"] == "wrong Host: open the URL forged ui printed"
    assert cross == NO_SESSION  # a form cannot send the session header; its Origin is wrong too
