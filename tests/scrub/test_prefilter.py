"""Tests for forged.scrub.prefilter: every engine, and no engine, gives exactly the exact scrub's output."""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import corpus
from forged.scrub import prefilter
from forged.scrub.scan import ANCHORS, Scrubber, scrub_all, scrub_exact
from tests.support.profiles import examples
from tests.support.secret_corpus import NEAR_MISSES, SECRETS, embed

REPO = Path(__file__).resolve().parents[2]

_hyperscan = pytest.importorskip("hyperscan")
with tempfile.TemporaryDirectory() as _cache:  # the second database is the first one saved
    ENGINES = {
        "hyperscan": Scrubber(prefilter.HyperscanPrefilter(ANCHORS, _hyperscan, Path(_cache))),
        "hyperscan, saved": Scrubber(
            prefilter.HyperscanPrefilter(ANCHORS, _hyperscan, Path(_cache))
        ),
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
    """Hyperscan, the stdlib fallback and plain exact matching give identical output (which
    `scrub_all` stores with NUL as U+FFFD)."""
    exact = [scrub_exact(t) for t in texts]
    assert all(engine.scrub_all(texts) == exact for engine in ENGINES.values())
    assert scrub_all(texts) == [t.replace("\x00", "\ufffd") for t in exact]


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


TOKENS = ["ghp_", "password"]  # two small rule sets, quick to compile, which differ in one rule
CHANGED = ["gho_", "password"]
TEXTS = ["token ghp_x", "token gho_x", "password=x", "plain"]
FLAGS = [{0}, set(), {1}, set()]  # TOKENS' flags of TEXTS; CHANGED's are CHANGED_FLAGS
CHANGED_FLAGS = [set(), {0}, {1}, set()]


def test_a_saved_database_is_read_instead_of_compiled(tmp_path: Path) -> None:
    """What the cache holds is used: the database of other rules saved under these rules' name
    answers with the other rules' flags (so these were not compiled)."""
    prefilter.HyperscanPrefilter(CHANGED, _hyperscan, tmp_path / "other")
    saved = prefilter.cache_path(CHANGED, _hyperscan, tmp_path / "other").read_bytes()
    prefilter.cache_path(TOKENS, _hyperscan, tmp_path).write_bytes(saved)
    assert prefilter.HyperscanPrefilter(TOKENS, _hyperscan, tmp_path).flags(TEXTS) == CHANGED_FLAGS


@pytest.mark.parametrize("damage", ["truncated", "one byte changed", "empty", "not a database"])
def test_a_damaged_cache_is_compiled_again_and_replaced(tmp_path: Path, damage: str) -> None:
    """A cache file cut short, altered or foreign is not read: the rules are compiled again,
    flag as before, and the file is written anew."""
    prefilter.HyperscanPrefilter(TOKENS, _hyperscan, tmp_path)
    path = prefilter.cache_path(TOKENS, _hyperscan, tmp_path)
    sound = path.read_bytes()
    damaged = {
        "truncated": sound[: len(sound) // 2],
        "one byte changed": sound[:-1] + bytes([sound[-1] ^ 1]),
        "empty": b"",
        "not a database": hashlib.sha256(b"junk").digest() + b"junk",  # a sound digest
    }
    path.write_bytes(damaged[damage])
    assert prefilter.HyperscanPrefilter(TOKENS, _hyperscan, tmp_path).flags(TEXTS) == FLAGS
    assert path.read_bytes() == sound


def test_changed_rules_are_compiled_into_their_own_file(tmp_path: Path) -> None:
    """Rules that differ are another database, saved beside the first; each flags its own."""
    first = prefilter.HyperscanPrefilter(TOKENS, _hyperscan, tmp_path)
    second = prefilter.HyperscanPrefilter(CHANGED, _hyperscan, tmp_path)
    assert len(list(tmp_path.iterdir())) == 2
    assert (first.flags(TEXTS), second.flags(TEXTS)) == (FLAGS, CHANGED_FLAGS)


def test_a_cache_that_cannot_be_written_only_costs_a_compile(tmp_path: Path) -> None:
    """A cache directory that cannot be made (a file stands in its place) is no error."""
    (tmp_path / "file").write_text("")
    engine = prefilter.HyperscanPrefilter(TOKENS, _hyperscan, tmp_path / "file" / "cache")
    assert engine.flags(TEXTS) == FLAGS
