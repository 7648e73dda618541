"""Tests for forged.prefilter: every engine, and no engine, gives exactly the exact scrub's output."""

from __future__ import annotations

import concurrent.futures
import functools
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import corpus
from forged import prefilter
from forged.scrub import ANCHORS, Scrubber, scrub_all, scrub_exact
from tests.profiles import examples
from tests.secret_corpus import NEAR_MISSES, SECRETS, embed

REPO = Path(__file__).resolve().parent.parent

_hyperscan = pytest.importorskip("hyperscan")
ENGINES = {
    "hyperscan": Scrubber(prefilter.HyperscanPrefilter(ANCHORS, _hyperscan)),
    "stdlib": Scrubber(prefilter.StdlibPrefilter(ANCHORS)),
}


def _locomo() -> list[list[str]]:
    """LoCoMo's turns as interactions' strings (text, speaker, session, scope), if present."""
    turns, source = corpus.turns(REPO)
    if not source.startswith("LoCoMo"):
        return []
    return [[t.text, t.speaker, t.session, t.scope] for t in turns]


LOCOMO = _locomo()

# Every secret in every embedding, and every look-alike: the strings the engines must agree on.
HOSTILE = [text for _, secret in SECRETS for text in [secret, *embed(secret)]] + NEAR_MISSES

_interaction = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE),
        *([st.sampled_from([s for turn in LOCOMO for s in turn])] if LOCOMO else []),
        st.text(max_size=40),
        st.lists(st.sampled_from(HOSTILE), min_size=2, max_size=3).map(" ".join),
    ),
    min_size=1,
    max_size=8,
)


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_equals_exact_on_the_hostile_corpus(engine: str) -> None:
    """Every secret of the corpus in every embedding, and every near-miss: the same output."""
    assert ENGINES[engine].scrub_all(HOSTILE) == [scrub_exact(t) for t in HOSTILE]


@functools.cache
def _locomo_exact() -> list[list[str]]:
    return [[scrub_exact(s) for s in turn] for turn in LOCOMO]


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_equals_exact_on_locomo(engine: str) -> None:
    """Each LoCoMo turn scrubbed as one interaction equals exact matching on each string."""
    if not LOCOMO:
        pytest.skip("LoCoMo not found (../shared/datasets/locomo10.json)")
    scrubbed = [ENGINES[engine].scrub_all(turn) for turn in LOCOMO]
    assert scrubbed == _locomo_exact()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_request_of_many_interactions_is_scrubbed_in_one_scan(engine: str) -> None:
    """Ingest scans a whole request's strings at once: each secret, behind text of every UTF-8
    width, is found in its own string among thousands, and nothing else changes."""
    prose = [s for turn in LOCOMO[:2000] for s in turn] or ["plain words"] * 4000
    widths = ["", "é", "€uro", "😀 ", "\ud800"]  # two, three and four bytes, a lone surrogate
    texts = [*prose]
    for i, secret in enumerate(HOSTILE):
        texts[(i * 37) % len(texts)] = widths[i % len(widths)] * (i % 4) + secret
    assert ENGINES[engine].scrub_all(texts) == [scrub_exact(t) for t in texts]


@settings(max_examples=examples(200), deadline=None)
@given(_interaction)
def test_fast_paths_and_exact_matching_agree(texts: list[str]) -> None:
    """Hyperscan, the stdlib fallback and plain exact matching give identical output."""
    exact = [scrub_exact(t) for t in texts]
    assert ENGINES["hyperscan"].scrub_all(texts) == exact
    assert ENGINES["stdlib"].scrub_all(texts) == exact
    assert scrub_all(texts) == exact


def test_fallback_is_chosen_when_hyperscan_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the hyperscan module the stdlib prefilter is used, and it still finds secrets."""
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # makes `import hyperscan` fail
    engine = prefilter.best(ANCHORS)
    assert engine.name == "stdlib"
    assert Scrubber(engine).scrub_all(["password=hunter2", "hello"]) == [
        "password=[REDACTED:password]",
        "hello",
    ]


def test_default_engine_is_hyperscan() -> None:
    """Where the wheel is installed, the daemon scans with Hyperscan."""
    assert prefilter.best(ANCHORS).name == "hyperscan"


@pytest.mark.parametrize("engine", ENGINES)
def test_nothing_flagged_in_plain_prose(engine: str) -> None:
    """Ordinary conversation costs one scan and no regex: nothing is flagged."""
    texts = ["We agreed on PostgreSQL for the new service.", "alice", "chat-42", "user:alice"]
    assert ENGINES[engine].engine.flags(texts) is None


@pytest.mark.parametrize("engine", ENGINES)
def test_match_is_attributed_to_its_string(engine: str) -> None:
    """A secret in the third string flags the third string only, also after non-ASCII text."""
    texts = ["héllo wörld ✓", "plain", "token: ghp_" + "a1" * 18, "after"]
    flags = ENGINES[engine].engine.flags(texts)
    assert flags is not None
    assert [bool(f) for f in flags] == [False, False, True, False]


def test_threads_scan_with_their_own_scratch() -> None:
    """Ingest scrubs large requests in worker threads: concurrent scans agree with exact matching."""
    texts = HOSTILE[:40]
    expected = [scrub_exact(t) for t in texts]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: ENGINES["hyperscan"].scrub_all(texts), range(16)))
    assert results == [expected] * 16
