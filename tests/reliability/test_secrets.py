"""Secrets: no credential of the corpus reaches the database, the WAL, the logs or the LLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest
import trio

from forged.config import load_config
from forged.scrub.scan import scrub
from tests.support.daemons import (
    DaemonProcess,
    running_daemon,
    socket_client,
    wait_for_watermark,
    write_config,
)
from tests.support.data import interaction, rows, store_files, stored_bytes
from tests.support.fakellm import FakeLLM
from tests.support.reliability import record
from tests.support.secret_corpus import NEAR_MISSES, SECRETS, embed

TOKEN = re.compile(r"[\w+/=%!*#.~-]{8,}")  # long runs of credential characters
PER_REQUEST = 5  # interactions per push: one secret in all its embeddings
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
    config = write_config(
        short_tmp,
        fake_llm.base_url,
        log={"format": "json", "level": "debug"},
        server={"max_name_chars": 65536},
    )  # some secrets are used as names
    daemon = DaemonProcess(config, short_tmp)
    with trio.fail_after(180):  # several hundred pushes and their distillation, on a busy machine
        await daemon.start()
        async with socket_client(daemon.socket) as client:
            for at in range(0, len(pushed), PER_REQUEST):
                chunk = pushed[at : at + PER_REQUEST]
                assert (await client.post("/v1/interactions", json=chunk)).status_code == 202
            assert (await client.post("/v1/interactions", json=near)).status_code == 202
            await wait_for_watermark(client, len(pushed) + len(near))
            while_running = stored_bytes(daemon.config.store.path)  # the WAL is still there
        assert await daemon.stop() == 0
    db = daemon.config.store.path
    at_rest = stored_bytes(db)
    assert b"near-0" in at_rest  # what is stored is looked at
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


async def test_metadata_values_are_redacted_by_their_key(
    short_tmp: Path, fake_llm: FakeLLM
) -> None:
    """A value under a key naming a credential is redacted whole, at any depth, numbers too."""
    item = interaction("meta-1")
    item["metadata"] = {
        "password": "correct-horse",
        "api_key": "plainvalue",
        "channel": "slack",
        "tokens_used": 12,
        "db": {"settings": [{"DB_PASSWORD": 123456, "host": "db.internal"}], "auth": ["x1", "x2"]},
        "client_secret": None,
    }
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            assert (await client.post("/v1/interactions", json=item)).status_code == 202
    [(stored,)] = rows(config.store.path, "SELECT metadata FROM interactions")
    assert msgspec.json.decode(stored) == {
        "password": "[REDACTED:password]",
        "api_key": "[REDACTED:api_key]",
        "channel": "slack",
        "tokens_used": 12,
        "db": {
            "settings": [{"DB_PASSWORD": "[REDACTED:password]", "host": "db.internal"}],
            "auth": ["[REDACTED:authorization]", "[REDACTED:authorization]"],
        },
        "client_secret": None,
    }
    files = b"".join(p.read_bytes() for p in store_files(config.store.path))
    assert [v for v in (b"correct-horse", b"plainvalue", b"123456") if v in files] == []


@pytest.mark.parametrize(
    ("field", "first", "second", "kind"),
    [
        ("id", "ticket-token=1001", "ticket-token=1002", "token"),
        ("scope", "user:token=abc123", "user:token=zzz999", "token"),
        ("session", "s password=hunter2", "s password=hunter3", "password"),
    ],
)
async def test_identifier_holding_a_secret_is_refused_not_merged(
    short_tmp: Path, fake_llm: FakeLLM, field: str, first: str, second: str, kind: str
) -> None:
    """Ids, scopes and sessions are stored as given; one holding a secret gets a clear 400, so
    two of them are never scrubbed into one."""
    config = load_config(write_config(short_tmp, fake_llm.base_url), {})
    with trio.fail_after(30):
        async with running_daemon(config), socket_client(config.server.socket) as client:
            for n, value in enumerate((first, second)):
                item = interaction(f"plain-{n}")
                item[field] = value
                response = await client.post("/v1/interactions", json=[interaction("ok"), item])
                assert response.status_code == 400
                assert response.json()["error"] == {
                    "code": "invalid_body",
                    "message": f"$[1].{field}: holds what looks like a secret ({kind}); ids, "
                    "scopes and sessions are stored as given, so send one without it",
                }
            ordinary = interaction("ticket-token-1001", scope="user:tokens")
            response = await client.post("/v1/interactions", json=ordinary)
            assert response.json() == {"accepted": 1, "duplicates": 0, "last_seq": 1}
    stored = rows(config.store.path, "SELECT client_id, scope FROM interactions")
    assert stored == [("ticket-token-1001", "user:tokens")]
