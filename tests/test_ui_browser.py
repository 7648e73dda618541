"""The memory browser in headless Chromium: a person's way through it, and the refusals a
hostile page meets, against a real daemon and `forged ui` in a child process."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from forged.config import Config
from tests.browser import REBOUND_HOST, chromium
from tests.daemons import socket_client, wait_for_watermark
from tests.test_ui import HOSTILE, Ui, ui_process

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
    """With the session cookie held, a form of another origin posts a fact to the page's API."""
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
    assert "Planted" not in str(facts)
    assert refused["no_token"] == "no valid token: open the URL forged ui printed"
    assert refused["wrong_host"] == "wrong Host: open the URL forged ui printed"
    # SameSite=Strict keeps the cookie home, so the post has no session; its Origin is refused too
    assert cross in (
        "no valid token: open the URL forged ui printed",
        "cross-origin request refused",
    )
