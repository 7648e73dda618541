"""Secrets: no credential of the corpus reaches the database, the WAL, the logs or the LLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import trio

from forged.scrub import scrub
from tests.daemons import DaemonProcess, socket_client, wait_for_watermark, write_config
from tests.data import interaction, rows
from tests.fakellm import FakeLLM
from tests.reliability import record
from tests.secret_corpus import NEAR_MISSES, SECRETS, embed

TOKEN = re.compile(r"[\w+/=%!*#.~-]{8,}")  # long runs of credential characters
ARMOR = re.compile(r"^[A-Z-]+$")  # PEM armor such as -----BEGIN: no secret, and near-misses hold it


def _secret_parts(secret: str) -> list[str]:
    """The long tokens of a secret that scrubbing removes: none may be stored, logged or sent."""
    kept = set(TOKEN.findall(scrub(secret)))
    return [t for t in TOKEN.findall(secret) if t not in kept and not ARMOR.match(t)]


def _pushes() -> list[dict[str, object]]:
    """Each secret embedded every way, in message text, a name, metadata values and keys."""
    pushed: list[dict[str, object]] = []
    for i, (kind, secret) in enumerate(SECRETS):
        for j, text in enumerate(embed(secret)):
            item = interaction(f"secret-{i}-{j}", scope=f"user:{kind}", text=text)
            item["metadata"] = {"note": text, secret: [secret, {"nested": text}]}
            item["messages"][1]["name"] = secret  # type: ignore[index]
            pushed.append(item)
    return pushed


async def test_secrets_never_reach_disk_logs_or_llm(short_tmp: Path, fake_llm: FakeLLM) -> None:
    """Every secret, embedded every way, is gone everywhere; near-misses are kept as they were."""
    pushed = _pushes()
    near = [interaction(f"near-{i}", text=text) for i, text in enumerate(NEAR_MISSES)]
    config = write_config(short_tmp, fake_llm.base_url, log={"format": "json", "level": "debug"})
    daemon = DaemonProcess(config, short_tmp)
    with trio.fail_after(60):
        await daemon.start()
        async with socket_client(daemon.socket) as client:
            for item in pushed:
                assert (await client.post("/v1/interactions", json=item)).status_code == 202
            assert (await client.post("/v1/interactions", json=near)).status_code == 202
            await wait_for_watermark(client, len(pushed) + len(near))
            files = Path(daemon.config.store.path).parent.glob("forged.db*")
            while_running = b"".join(p.read_bytes() for p in files)  # the WAL is still there
        assert await daemon.stop() == 0
    db = daemon.config.store.path
    at_rest = b"".join(p.read_bytes() for p in Path(db).parent.glob("forged.db*"))
    places = {
        "database and WAL": while_running + at_rest,
        "daemon log": daemon.log().encode(),
        "LLM requests": json.dumps(fake_llm.requests).encode(),
    }
    parts = {p for _, secret in SECRETS for p in _secret_parts(secret)}
    assert len(parts) >= len(SECRETS)
    leaks = {
        where: sorted(p for p in parts if p.encode() in data) for where, data in places.items()
    }
    assert leaks == {where: [] for where in places}
    stored = dict(
        rows(db, "SELECT client_id, messages FROM interactions WHERE client_id LIKE 'near-%'")
    )
    kept = {key: msgspec.json.decode(messages)[0]["text"] for key, messages in stored.items()}
    assert kept == {f"near-{i}": text for i, text in enumerate(NEAR_MISSES)}
    record(
        "secrets",
        kinds=len({kind for kind, _ in SECRETS}),
        secrets=len(SECRETS),
        embeddings=len(pushed),
        secret_tokens_checked=len(parts),
        places=len(places),
        leaks=0,
        near_misses_kept=len(NEAR_MISSES),
    )
