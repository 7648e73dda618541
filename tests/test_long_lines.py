"""Hostile long lines end to end: a user's one-paragraph message of 3,000, 14,000 and 200,000
characters is distilled by the offline distiller and by a model that copies it into its fact,
and the watermark moves on past it to the next turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from forged.config import load_config
from tests.support.daemons import running_daemon, socket_client, wait_for_watermark, write_config
from tests.support.data import rows
from tests.support.fakellm import FakeLLM
from tests.support.hostile_text import hostile

HANG = 120  # seconds after which a test counts as hung (a guard, not a measure of speed)
LENGTHS = (3_000, 14_000, 200_000)  # characters of the long line
# Each distiller's settings, and the shape of its line: a copy is clipped (max_fact_chars),
# and a clip through a name or number would be rightly dropped, so the copied line has none.
DISTILLERS: dict[str, tuple[dict[str, Any], str]] = {
    "offline": ({"class": "forged.distill.offline:OfflineDistiller"}, "names and numbers"),
    "model copying the line": ({"style": "abstractive"}, "unpunctuated"),
    "model picking the line": ({"style": "extractive"}, "names and numbers"),
}


def _turn(n: int, text: str) -> dict[str, Any]:
    messages = [{"role": "user", "text": text}, {"role": "assistant", "text": "Noted, thanks."}]
    return {"id": f"t{n}", "scope": "user:ana", "session": "s", "messages": messages}


@pytest.mark.parametrize("chars", LENGTHS)
@pytest.mark.parametrize("distiller", sorted(DISTILLERS))
async def test_a_long_unpunctuated_line_is_distilled_and_passed(
    short_tmp: Path, fake_llm: FakeLLM, store_backend: str, distiller: str, chars: int
) -> None:
    """The long line (no punctuation) is grounded whole: a picking model's line is kept
    verbatim; what the offline distiller and a copying model keep of it (a chunk's piece, a
    clipped copy; one cut through a number is rightly dropped) is the line's own words. The
    next turn is distilled after it and nothing is dead-lettered."""
    fake_llm.default = "copy"
    settings, shape = DISTILLERS[distiller]
    line = "Ana " + hostile(shape, chars - 4, seed=chars)
    sections = {"distiller": settings, "distill": {"max_batch_interactions": 1}}
    config = load_config(write_config(short_tmp, fake_llm.base_url, **sections), {})
    with trio.fail_after(HANG):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for n, text in enumerate((line, "Ana moved to Porto in 2024 with her dog Rex."), 1):
                assert (
                    await client.post("/v1/interactions", json=_turn(n, text))
                ).status_code == 202
            status = await wait_for_watermark(client, 2)
    (observer,) = status["observers"]
    assert observer["dead_letters"] == 0
    db = config.store.path
    facts = [text for (text,) in rows(db, "SELECT text FROM facts WHERE first_seq = 1")]
    pieces = [f.removeprefix("user: ").removeprefix("… ").removesuffix("…") for f in facts]
    assert all(piece in line for piece in pieces), [p[:80] for p in pieces]
    if distiller == "model picking the line":
        assert pieces == [line]
    assert rows(db, "SELECT count(*) FROM facts WHERE first_seq = 2 AND text LIKE '%Porto%'") == [
        (1,)
    ]
