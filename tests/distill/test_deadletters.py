"""The dead-letter routes on a real store, without a daemon: the seq range, listing, a missing observer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from forged.errors import InvalidRequest
from forged.http.connection import Request
from forged.http.params import MAX_SEQ, SCOPED, Params
from forged.http.work import PARAMS, list_dead_letters, redistill
from forged.models import DISTILL_OBSERVER
from forged.store.records import BatchOutcome, DeadLetter
from forged.store.sqlite import Store
from tests.support.data import new

PATH = "/v1/dead-letters"


def _request(**query: str) -> tuple[Request, Params]:
    return Request("GET", PATH, query, {}, b""), Params(query, PATH, (*SCOPED, *PARAMS))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(str(tmp_path / "f.db"))
    yield store
    store.close()


async def _with_letters(store: Store, *seqs: int) -> None:
    await store.append([[new(f"turn {n}", f"id-{n}") for n in range(1, max(seqs) + 1)]])
    letters = [DeadLetter(seq, f"InvalidAnswer: bad {seq}", "x" * 600) for seq in seqs]
    await store.commit_batch(DISTILL_OBSERVER, BatchOutcome([], letters, [], max(seqs)))


async def test_open_dead_letters_are_listed_in_seq_order_within_the_range(store: Store) -> None:
    """Only the letters with seq in [from, to] are listed, each raw answer cut to an excerpt."""
    await _with_letters(store, 2, 4, 5)
    query = {"from": "3", "to": "5", "all_scopes": "true"}
    response = await list_dead_letters(store, *_request(**query))
    letters = json.loads(response.body)["dead_letters"]
    assert response.status == 200
    assert [(d["seq"], d["reason"]) for d in letters] == [
        (4, "InvalidAnswer: bad 4"),
        (5, "InvalidAnswer: bad 5"),
    ]
    assert {len(d["raw_excerpt"]) for d in letters} == {500}


async def test_dead_letters_are_listed_by_the_scope_rule(store: Store) -> None:
    """Without a scope only the default scope's letters (whose raw answers quote transcripts);
    a scope named, its own; every scope only when asked for."""
    await _with_letters(store, 1, 2)  # in scope "s"

    async def seqs(**query: str) -> list[int]:
        response = await list_dead_letters(store, *_request(**query))
        return [d["seq"] for d in json.loads(response.body)["dead_letters"]]

    assert await seqs() == []
    assert await seqs(scope="other") == []
    assert await seqs(scope="s") == [1, 2]
    assert await seqs(all_scopes="true") == [1, 2]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"from": "9", "to": "3"}, "`from` (9) is greater than `to` (3)"),
        ({"to": "-1"}, f"`to` must be an integer from 0 to {MAX_SEQ}; got '-1'"),
    ],
)
async def test_a_bad_range_is_a_400_naming_it(
    store: Store, query: dict[str, str], message: str
) -> None:
    """A reversed or malformed range is refused before the store is read."""
    with pytest.raises(InvalidRequest) as refused:
        await list_dead_letters(store, *_request(**query))
    assert (refused.value.status, refused.value.code) == (400, "invalid_parameter")
    assert refused.value.message == message


async def test_redistill_without_the_distill_observer_is_a_409(store: Store) -> None:
    """With distillation disabled there is nobody to re-run the letters: 409, nothing changed."""
    await _with_letters(store, 1)
    with pytest.raises(InvalidRequest, match=r"^the distill observer is not running$") as refused:
        await redistill(None, *_request())
    assert (refused.value.status, refused.value.code) == (409, "distill_disabled")
    assert len(await store.list_dead_letters(DISTILL_OBSERVER)) == 1
