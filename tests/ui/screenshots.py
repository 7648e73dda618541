"""The memory browser's screenshots in docs/: LoCoMo conversation 0 pushed into a daemon that
distils with the fake model's gold facts, then `forged ui` in headless Chromium.

    python -m tests.ui.screenshots docs/     (finds LoCoMo as `make eval` does, or FORGED_BENCH_LOCOMO)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from bench.quality import first_sessions_of
from forged.config import load_config
from tests.support.browser import chromium
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.fakellm import FakeLLM
from tests.ui.test_server import Ui, ui_process

REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0  # seconds the page may take to show a conversation
NARROW = 400  # the narrow picture's width in CSS pixels, as a phone's
SHOTS = ("ui-timeline.png", "ui-fact.png", "ui-narrow.png")


def _shoot(driver: Any, ui: Ui, scope: str, out: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT)
    driver.get(ui.url)
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, f'[data-scope="{scope}"]'))).click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".daybox")))
    driver.save_screenshot(str(out / "ui-timeline.png"))
    fact = driver.find_elements(By.CSS_SELECTOR, ".card.fact")[2]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", fact)
    fact.click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#sources [data-turn]")))
    driver.save_screenshot(str(out / "ui-fact.png"))
    driver.set_window_size(NARROW, 1000)  # the same tab keeps its session
    driver.get(ui.origin + "/")
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, f'[data-scope="{scope}"]'))).click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".daybox")))
    driver.save_screenshot(str(out / "ui-narrow.png"))


async def main(out: Path) -> None:
    conversation = first_sessions_of(REPO, None)
    if conversation is None:
        raise SystemExit("LoCoMo not found: set FORGED_BENCH_LOCOMO to locomo10.json")
    llm = FakeLLM()
    llm.default, llm.gold = "gold", conversation.gold
    with tempfile.TemporaryDirectory(prefix="fg") as tmp:
        async with trio.open_nursery() as nursery:
            await nursery.start(llm.serve)
            config = load_config(write_config(Path(tmp), llm.base_url), {})
            async with running_daemon(config), socket_client(config.server.socket) as client:
                answer = await client.post("/v1/interactions", json=conversation.interactions)
                await wait_for_watermark(client, answer.json()["last_seq"])
                with ui_process(config.server.socket) as ui, chromium() as driver:
                    await trio.to_thread.run_sync(_shoot, driver, ui, conversation.scope, out)
            nursery.cancel_scope.cancel()
    print("wrote", ", ".join(str(out / name) for name in SHOTS))


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
