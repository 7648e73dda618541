"""Push bodies decoded into interactions: large ones off the event loop."""

from __future__ import annotations

import json

import trio
import trio.lowlevel

from forged.config import ServerConfig
from forged.ingest import OFFLOAD_BYTES, read_body

TEXT = "We keep PostgreSQL for billing because JSONB matters. " * 100  # about 5 kB


async def test_a_large_body_is_decoded_off_the_event_loop() -> None:
    """While a large body is decoded, other tasks keep running; a small one is decoded at once."""
    one = {"messages": [{"role": "user", "text": TEXT}]}
    small = json.dumps(one).encode()
    large = json.dumps([one] * (4 * OFFLOAD_BYTES // len(TEXT))).encode()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async def ticks_while_decoding(body: bytes) -> int:
        before = ticks
        items = await read_body(body, "application/json", ServerConfig())
        assert items[0].messages[0].text == TEXT
        return ticks - before

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            await trio.lowlevel.checkpoint()  # the ticker is running
            during = {"small": await ticks_while_decoding(small)}
            during["large"] = await ticks_while_decoding(large)
            nursery.cancel_scope.cancel()
    assert during == {"small": 0, "large": during["large"]}
    assert during["large"] > 0
