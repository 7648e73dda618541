"""The memory browser's ways to narrow what it shows, in headless Chromium against a real
daemon: the box that finds a scope, the filters by kind and date, forgetting a scope after a
confirmation, and a window 400 pixels wide."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from forged.config import Config
from tests.support.browser import chromium
from tests.support.daemons import socket_client, wait_for_watermark
from tests.ui.test_browser import SCOPE, TURNS, WAIT
from tests.ui.test_server import Ui, ui_process

OTHER = "carla/notes"  # a second scope whose name also holds "car", with a slash
PREFERENCE = "Caroline prefers oolong tea to coffee."  # the one fact not of kind state
NARROW = 400  # the narrow window's width in CSS pixels
MORE_DAYS = 12  # days of turns the narrow test adds: at 16 px a day, their labels overlap
# The controls a person needs at any width, once a scope is open.
CONTROLS = ("#find-scope", "#nav-status", "#filter-kind", "#filter-since", "#filter-until",
            "#forget-scope", "#tab-timeline", "#tab-search")  # fmt: skip


async def _two_scopes(client: httpx.AsyncClient) -> None:
    """SCOPE with its three turns over two days and a preference written by hand; OTHER with
    one turn. The preference is written first, so that it is listed before the distilled
    facts of its day: written after the push, it raced the distiller's commit for the smaller
    id, and the order of the day's facts changed from run to run."""
    fact = {"scope": SCOPE, "kind": "preference", "text": PREFERENCE, "at": "2023-05-25T11:00:00Z"}
    assert (await client.post("/v1/facts", json=fact)).status_code == 201
    pushed = [
        {"scope": SCOPE, "timestamp": at, "messages": [{"role": "user", "name": who, "text": t}]}
        for at, who, t in TURNS
    ]
    pushed.append({"scope": OTHER, "messages": [{"role": "user", "text": "I keep bees."}]})
    await client.post("/v1/interactions", json=pushed)
    await wait_for_watermark(client, 4)


def _waiter(driver: Any) -> Any:
    """A wait that looks again when the page has just replaced what it found."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT, ignored_exceptions=(StaleElementReferenceException,))


def _click(driver: Any, selector: str) -> Any:
    """Click what `selector` finds once it can be clicked; the element."""
    from selenium.webdriver.common.by import By

    def click(d: Any) -> Any:
        found = d.find_element(By.CSS_SELECTOR, selector)
        if not (found.is_displayed() and found.is_enabled()):
            return False
        found.click()
        return found

    return _waiter(driver).until(click)


def _all(driver: Any, selector: str, attribute: str | None = None) -> list[str]:
    """The text (or `attribute`) of every element `selector` finds now."""
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((e) => arguments[1] ? e.getAttribute(arguments[1]) : e.innerText)"
    )  # at once, in the page: a render between two calls would leave stale elements
    return list(driver.execute_script(script, selector, attribute))


def _toast(driver: Any) -> str:
    """The message the page shows in its toast, once shown."""
    from selenium.webdriver.common.by import By

    _waiter(driver).until(lambda d: d.find_element(By.ID, "toast").is_displayed())
    text = str(driver.find_element(By.ID, "toast").text)
    driver.execute_script("document.getElementById('toast').hidden = true")
    return text


def _days(driver: Any, count: int) -> list[str]:
    """The days of the timeline, once there are `count` of them."""
    _waiter(driver).until(lambda d: len(_all(d, ".daybox")) == count)
    return _all(driver, ".daybox", "data-day")


def _type_date(driver: Any, selector: str, date: str) -> None:
    """Type `date` (2023-05-09) into a date field as a person would, in the browser's order."""
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.CSS_SELECTOR, selector)  # focused on its first part: no click
    order = driver.execute_script(
        "return new Intl.DateTimeFormat().formatToParts(new Date(2023, 4, 9))"
        ".filter((p) => p.type !== 'literal').map((p) => p.type)"
    )
    year, month, day = date.split("-")
    field.send_keys("".join({"year": year, "month": month, "day": day}[p] for p in order))


def _find_scope(driver: Any, ui: Ui) -> dict[str, Any]:
    """Type into the scope box: the list narrows; a miss says so; Enter opens the scope."""
    from selenium.webdriver.common.keys import Keys

    seen: dict[str, Any] = {}
    driver.get(ui.url)
    _waiter(driver).until(lambda d: len(_all(d, "[data-scope]")) == 2)
    box = _click(driver, "#find-scope")
    box.send_keys("CAR")
    seen["car"] = sorted(_all(driver, "[data-scope]", "data-scope"))
    box.send_keys("OL")
    seen["carol"] = _all(driver, "[data-scope]", "data-scope")
    box.send_keys("x")
    seen["miss"] = _all(driver, "#scopes li")
    box.send_keys(Keys.ENTER)
    seen["miss_toast"] = _toast(driver)
    box.send_keys(Keys.BACKSPACE * 3)
    box.send_keys(Keys.ENTER)
    seen["two_toast"] = _toast(driver)
    box.send_keys("ol", Keys.ENTER)
    _waiter(driver).until(lambda d: _all(d, "#scope-title") == [SCOPE])
    seen["days"] = _days(driver, 2)
    return seen


def _filter(driver: Any) -> dict[str, Any]:
    """With the scope open: a kind, then dates, then a wrong span, then clear."""
    from selenium.webdriver.support.ui import Select

    seen: dict[str, Any] = {}
    Select(_click(driver, "#filter-kind")).select_by_visible_text("preference facts")
    seen["kind_days"] = _days(driver, 1)
    seen["kind_facts"] = _all(driver, ".card.fact")
    seen["kind_turns"] = _all(driver, "[data-turn]")
    seen["kind_counts"] = _all(driver, "#scope-counts")
    _click(driver, "#tab-search")
    _click(driver, "#query").send_keys("Caroline")
    _click(driver, "#search")
    _waiter(driver).until(lambda d: _all(d, "[data-result]"))
    seen["kind_results"] = _all(driver, "[data-result]")
    _click(driver, "#tab-timeline")
    Select(_click(driver, "#filter-kind")).select_by_visible_text("everything")
    _days(driver, 2)
    _type_date(driver, "#filter-since", "2023-05-09")
    _waiter(driver).until(lambda d: _all(d, "[data-turn]", "data-turn") == ["3"])
    seen["since_facts"] = _all(driver, ".card.fact")
    _type_date(driver, "#filter-until", "2023-05-08")
    seen["wrong_span"] = _toast(driver)
    _click(driver, "#filter-clear")
    seen["cleared_days"] = _days(driver, 2)

    def fields(d: Any) -> list[str]:
        return [
            d.execute_script("return document.querySelector(arguments[0]).value", field)
            for field in CONTROLS[2:5]
        ]

    # a date field may still be taking the last keystroke typed into it when clear is clicked
    _waiter(driver).until(lambda d: fields(d) == ["", "", ""])
    seen["cleared_fields"] = fields(driver)
    return seen


@pytest.mark.slow
async def test_a_person_finds_a_scope_and_filters_its_memory(daemon: Config) -> None:
    """The box narrows the scopes as one types and Enter opens the one meant; a kind shows
    that kind alone (in search too), a date range the days in it, and a range that ends before
    it starts is told in the daemon's words; clearing brings everything back."""
    async with socket_client(daemon.server.socket) as client:
        await _two_scopes(client)
    with ui_process(daemon.server.socket) as ui, chromium() as driver:
        found = await trio.to_thread.run_sync(_find_scope, driver, ui)
        seen = await trio.to_thread.run_sync(_filter, driver)
    assert found["car"] == sorted([SCOPE, OTHER]) and found["carol"] == [SCOPE]
    assert found["miss"] == ["No scope holds “CAROLx”."]
    assert found["miss_toast"] == "No scope holds “CAROLx”"
    assert found["two_toast"] == "2 scopes hold “CAR”: pick one"
    assert found["days"] == ["2023-05-08", "2023-05-25"]
    assert seen["kind_days"] == ["2023-05-25"] and seen["kind_turns"] == []
    assert len(seen["kind_facts"]) == 1 and PREFERENCE in seen["kind_facts"][0]
    assert seen["kind_counts"] == ["0 turns · 1 current facts · 0 summaries shown"]
    assert len(seen["kind_results"]) == 1 and PREFERENCE in seen["kind_results"][0]
    assert len(seen["since_facts"]) == 2 and PREFERENCE in seen["since_facts"][0]
    assert "Painting" not in str(seen["since_facts"]) and "LGBTQ" not in str(seen["since_facts"])
    assert seen["wrong_span"] == "`since` (2023-05-09) is after `until` (2023-05-08)"
    assert seen["cleared_days"] == ["2023-05-08", "2023-05-25"]
    assert seen["cleared_fields"] == ["", "", ""]


def _forget(driver: Any, ui: Ui, accept: bool) -> dict[str, Any]:
    """Open OTHER, ask to forget it, and dismiss or accept the confirmation."""
    from selenium.webdriver.support import expected_conditions as ec

    seen: dict[str, Any] = {}
    if not accept:
        driver.get(ui.url)
    _click(driver, f'[data-scope="{OTHER}"]')
    _waiter(driver).until(lambda d: _all(d, "#scope-title") == [OTHER])
    _click(driver, "#forget-scope")
    alert = _waiter(driver).until(ec.alert_is_present())
    seen["asked"] = alert.text
    if not accept:
        alert.dismiss()
        seen["title"] = _all(driver, "#scope-title")
        return seen
    alert.accept()
    seen["toast"] = _toast(driver)
    _waiter(driver).until(  # the page back at its start, its list read again
        lambda d: _all(d, "#pick") and OTHER not in _all(d, "[data-scope]", "data-scope")
    )
    seen["scopes"] = _all(driver, "[data-scope]", "data-scope")
    return seen


@pytest.mark.slow
async def test_a_person_forgets_a_scope_only_once_they_confirm(daemon: Config) -> None:
    """Forgetting a scope asks first: a cancel erases nothing; a yes erases that scope alone
    (its name, with a slash, sent whole) and says what went."""
    async with socket_client(daemon.server.socket) as client:
        await _two_scopes(client)
        scopes = (await client.get("/v1/scopes")).json()["scopes"]
        other = next(s for s in scopes if s["scope"] == OTHER)
        with ui_process(daemon.server.socket) as ui, chromium() as driver:
            cancelled = await trio.to_thread.run_sync(_forget, driver, ui, False)
            kept = (await client.get("/v1/scopes")).json()["scopes"]
            forgot = await trio.to_thread.run_sync(_forget, driver, ui, True)
        left = (await client.get("/v1/scopes")).json()["scopes"]
    assert cancelled["asked"] == (
        f"Forget the scope “{OTHER}”: every turn, summary and fact it holds? This cannot be undone."
    )
    assert cancelled["title"] == [OTHER] and kept == scopes
    assert forgot["toast"] == (
        f"Forgot {OTHER}: {other['interactions']} turns, {other['summaries']} summaries,"
        f" {other['facts']} facts"
    )
    assert forgot["scopes"] == [SCOPE] and [s["scope"] for s in left] == [SCOPE]


def _fits(driver: Any, view: str, controls: tuple[str, ...]) -> dict[str, Any]:
    """What of `view` is wider than the window: the page itself, and any control not displayed
    or not wholly within the window's width."""
    from selenium.webdriver.common.by import By

    width = driver.execute_script("return window.innerWidth")
    outside = []
    for selector in controls:
        found = driver.find_element(By.CSS_SELECTOR, selector)
        box = found.rect
        if not found.is_displayed() or box["x"] < 0 or box["x"] + box["width"] > width:
            outside.append(selector)
    scroll = driver.execute_script("return document.documentElement.scrollWidth")
    return {"view": view, "width": width, "overflow": scroll > width, "outside": outside}


def _narrow(driver: Any, ui: Ui) -> list[dict[str, Any]]:
    """Every view of the page in a window NARROW pixels wide."""
    driver.set_window_size(NARROW, 900)
    driver.get(ui.url)
    _waiter(driver).until(lambda d: len(_all(d, "[data-scope]")) == 3)
    seen = [_fits(driver, "start", ("#find-scope", "#nav-status", f'[data-scope="{SCOPE}"]'))]
    _click(driver, f'[data-scope="{SCOPE}"]')
    _days(driver, 2 + MORE_DAYS)
    seen.append(_fits(driver, "timeline", (*CONTROLS, "#add-fact", "#show-history")))
    seen[-1]["labels_overlap"] = driver.execute_script(
        "const r = [...document.querySelectorAll('.strip .lbl')].map((e) => e.getBoundingClientRect());"
        "return r.some((box, i) => i > 0 && box.left < r[i - 1].right)"
    )  # the day strip scrolls sideways instead
    _click(driver, ".card.fact")
    _waiter(driver).until(lambda d: _all(d, "#sources [data-turn]"))
    seen.append(_fits(driver, "fact", ("#detail .close", "#correct", "#pin", "#delete-fact")))
    _click(driver, "#detail .close")
    _click(driver, "#tab-search")
    _click(driver, "#query").send_keys("Caroline")
    _click(driver, "#search")
    _waiter(driver).until(lambda d: _all(d, "[data-result]"))
    seen.append(_fits(driver, "search", ("#query", "#search", "#context", "[data-result]")))
    _click(driver, "#nav-status")
    _waiter(driver).until(lambda d: _all(d, "#observers"))
    seen.append(_fits(driver, "status", ("#nav-status", "#find-scope")))
    return seen


@pytest.mark.slow
async def test_every_view_fits_a_window_400_pixels_wide(daemon: Config) -> None:
    """At 400 px nothing is wider than the window (no sideways scrolling, even with a word of
    300 letters and a long scope name), the controls of each view are all on screen, and the
    day strip's labels do not run into each other."""
    async with socket_client(daemon.server.socket) as client:
        await _two_scopes(client)
        long = {"role": "user", "text": "https://example.org/" + "a" * 300}
        turn = {"scope": "project/" + "a-very-long-scope-name-" * 4, "messages": [long]}
        days = [  # enough days that their labels would collide in 400 px
            {**turn, "scope": SCOPE, "timestamp": f"2023-06-{d:02}T12:00:00Z"}
            for d in range(1, MORE_DAYS + 1)
        ]
        await client.post("/v1/interactions", json=[*days, turn])
        await wait_for_watermark(client, 5 + MORE_DAYS)
    with ui_process(daemon.server.socket) as ui, chromium() as driver:
        seen = await trio.to_thread.run_sync(_narrow, driver, ui)
    assert [v["view"] for v in seen] == ["start", "timeline", "fact", "search", "status"]
    assert all(v["width"] <= NARROW for v in seen), seen
    assert [v for v in seen if v["overflow"] or v["outside"]] == [], seen
    assert seen[1]["labels_overlap"] is False
