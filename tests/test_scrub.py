"""Tests for forged.scrub: every kind, every embedding, look-alikes, idempotence, speed safety."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from forged.scrub import KINDS, scrub
from tests.secret_corpus import NEAR_MISSES, SECRETS, embed

# Kinds known only by their context; inside `api_key="..."` such a secret is that api_key.
_CONTEXT_KINDS = frozenset(
    {"bearer", "authorization", "url_credentials", "password", "secret", "token", "api_key"}
)

# Names of the embeddings returned by embed(), in order.
_PLACES = ("prose", "code", "json", "shell", "log")

# Every (kind, secret, place, text) the corpus gives.
_EMBEDDED = [
    pytest.param(kind, secret, place, text, id=f"{kind}-{n}-{place}")
    for n, (kind, secret) in enumerate(SECRETS)
    for place, text in zip(_PLACES, embed(secret), strict=True)
]

# A well-formed marker, and the start of any marker.
_MARKER = re.compile(r"\[REDACTED:([a-z_]+)\]")
_MARKER_START = "[REDACTED:"

# Pieces that provoke interactions between patterns when glued together at random.
_FRAGMENTS = (
    "=",
    ":",
    " ",
    "\n",
    '"',
    "'",
    "\\",
    "-",
    "@",
    "Bearer ",
    "Authorization: ",
    "password=",
    "--token ",
    '"api_key": "',
    "://u:",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "[REDACTED:token]",
    "sk-",
    "eyJ",
    "AKIA",
)

_corpus_text = st.lists(
    st.one_of(
        st.sampled_from([secret for _, secret in SECRETS]),
        st.sampled_from(NEAR_MISSES),
        st.sampled_from(_FRAGMENTS),
        st.text(max_size=12),
    ),
    max_size=12,
).map("".join)


def _credential(kind: str, secret: str) -> str:
    """The part of a corpus secret that must not survive scrubbing."""
    if kind == "private_key":
        return secret.splitlines()[-2]
    if kind == "aws_secret_key":
        return re.findall(r"[A-Za-z0-9/+]{40}", secret)[-1]
    if kind == "url_credentials":
        return _group(r"://[^:]*:([^@]+)@", secret, 1)
    if "://" in secret or kind in ("bearer", "authorization"):
        return re.split(r"[\s/]", secret)[-1]
    if kind in _CONTEXT_KINDS:
        return _group(r"(?:[:=]\s*|\s)([\"']?)(.+)\1$", secret, 2)
    return secret


def _group(pattern: str, text: str, group: int) -> str:
    """One group of the first match of pattern in text, which must match."""
    match = re.search(pattern, text)
    assert match is not None, (pattern, text)
    return match[group]


@pytest.mark.parametrize(("kind", "secret", "place", "text"), _EMBEDDED)
def test_secret_is_redacted_in_every_embedding(
    kind: str, secret: str, place: str, text: str
) -> None:
    """No embedding of a corpus secret keeps its credential, and a marker takes its place."""
    out = scrub(text)
    assert _credential(kind, secret) not in out
    assert _MARKER_START in out


@pytest.mark.parametrize(("kind", "secret", "place", "text"), _EMBEDDED)
def test_secret_is_labelled_with_its_kind(kind: str, secret: str, place: str, text: str) -> None:
    """The marker names the secret's kind; a context-known secret in api_key="..." is an api_key."""
    expected = "api_key" if place == "code" and kind in _CONTEXT_KINDS else kind
    assert f"[REDACTED:{expected}]" in scrub(text)


def test_corpus_covers_every_kind() -> None:
    """Every kind in KINDS has corpus secrets, and the corpus uses no other kind."""
    assert {kind for kind, _ in SECRETS} == set(KINDS)


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_miss_is_left_unchanged(text: str) -> None:
    """Look-alikes (hashes, UUIDs, prose, code reading a secret) come back unchanged."""
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter2", "password=[REDACTED:password]"),
        ('PASSWORD: "hunter 2"', 'PASSWORD: "[REDACTED:password]"'),
        ("api_key = 'k3y'", "api_key = '[REDACTED:api_key]'"),
        ('{"client_secret": "c2VjcmV0"}', '{"client_secret": "[REDACTED:secret]"}'),
        ("mysql --password hunter2 -h db", "mysql --password [REDACTED:password] -h db"),
        ("export DB_PASSWORD=s3cret!", "export DB_PASSWORD=[REDACTED:password]"),
    ],
)
def test_assignment_keeps_name_and_quotes(text: str, expected: str) -> None:
    """Only the assigned value is redacted; the name, separator and quote style stay."""
    assert scrub(text) == expected


def test_bearer_keeps_the_word_bearer() -> None:
    """A bearer token in a header loses the token and keeps the scheme."""
    text = 'curl -H "Authorization: Bearer 9f86d081884c7d659a2feaa0c55ad015" https://api'
    expected = 'curl -H "Authorization: Bearer [REDACTED:bearer]" https://api'
    assert scrub(text) == expected


def test_basic_authorization_keeps_the_scheme() -> None:
    """A Basic credential is redacted and the header name and scheme stay."""
    assert scrub("Authorization: Basic dXNlcjpwYXNz") == (
        "Authorization: Basic [REDACTED:authorization]"
    )


def test_url_credentials_keep_scheme_user_and_host() -> None:
    """Only the password of a URL's userinfo is redacted."""
    text = "DATABASE_URL=postgres://app:Zx81pQ@db.internal:5432/app"
    assert (
        scrub(text) == "DATABASE_URL=postgres://app:[REDACTED:url_credentials]@db.internal:5432/app"
    )


def test_anthropic_key_is_not_an_openai_key() -> None:
    """An sk-ant- key is labelled anthropic_key, never openai_key."""
    key = "sk-ant-api03-" + "a1B2" * 23 + "xAA"
    assert scrub(f"ANTHROPIC_API_KEY={key}") == "ANTHROPIC_API_KEY=[REDACTED:anthropic_key]"


def test_token_format_wins_over_the_assignment_it_sits_in() -> None:
    """A self-identifying token keeps its own kind when assigned to a secret-looking name."""
    text = 'api_key="AKIAIOSFODNN7EXAMPLE"'
    assert scrub(text) == 'api_key="[REDACTED:aws_access_key]"'


def test_prefixed_aws_secret_name_keeps_the_aws_kind() -> None:
    """A prefix before aws_secret_access_key does not hide the AWS secret behind a generic kind."""
    text = "MY_AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert scrub(text) == "MY_AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_key]"


def test_private_key_block_is_redacted_whole() -> None:
    """A PEM private key, from BEGIN to END, becomes one marker; the text around it stays."""
    text = (
        "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
        "QyNTUxOQAAACDx4i9r\n-----END OPENSSH PRIVATE KEY-----\nthanks"
    )
    assert scrub(text) == "key:\n[REDACTED:private_key]\nthanks"


def test_truncated_private_key_is_redacted() -> None:
    """A private key cut off before its END line is still redacted."""
    text = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7\n"
    assert scrub(text) == "[REDACTED:private_key]"


def test_webhook_url_keeps_host_and_loses_path() -> None:
    """A Slack webhook keeps its host, its secret path goes."""
    text = "POST https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF12/Zx9Qw8Er7Ty6Ui5Op4As3Df2"
    assert scrub(text) == "POST https://hooks.slack.com/services/[REDACTED:slack_token]"


def test_marker_is_not_matched_again() -> None:
    """A marker where a value would be is left as is."""
    text = 'password=[REDACTED:password] token: "[REDACTED:jwt]" Bearer [REDACTED:bearer]'
    assert scrub(text) == text


def test_text_without_secrets_is_unchanged() -> None:
    """Ordinary text comes back equal."""
    text = "We agreed on PostgreSQL for the new service; JSONB covers the metadata."
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a" * 1_000_000, "a" * 1_000_000),
        ("-sk" * 333_333, "-sk" * 333_333),
        ("eyJ" * 333_333, "eyJ" * 333_333),
        ("eyJa." * 200_000, "eyJa." * 200_000),
        ("password" * 125_000, "password" * 125_000),
        ("a://:" + "x:" * 500_000, "a://:" + "x:" * 500_000),
        ("Bearer " * 142_857, "Bearer " * 142_857),
        ("-----BEGIN PRIVATE KEY-----" * 37_037, "[REDACTED:private_key]" * 37_037),
        ("-----BEGIN RSA " + "A " * 500_000, "-----BEGIN RSA " + "A " * 500_000),
        ("x=" * 500_000, "x=" * 500_000),
        ('password="' + "\\" * 1_000_000, 'password="' + "\\" * 1_000_000),
    ],
    ids=[
        "letters",
        "sk-runs",
        "eyJ-runs",
        "jwt-halves",
        "keywords",
        "url-colons",
        "bearers",
        "pem-begins",
        "pem-header",
        "equals",
        "open-quote",
    ],
)
def test_adversarial_megabyte_is_scrubbed_correctly(text: str, expected: str) -> None:
    """Inputs built to make regexes backtrack are scrubbed correctly (and, in practice, fast)."""
    assert scrub(text) == expected


@given(st.text())
def test_scrub_is_idempotent_on_arbitrary_text(text: str) -> None:
    """Scrubbing twice gives what scrubbing once gave."""
    once = scrub(text)
    assert scrub(once) == once


@given(_corpus_text)
@example("-api_token = hunter2")
def test_scrub_is_idempotent_on_corpus_mixtures(text: str) -> None:
    """Secrets, look-alikes and fragments glued together scrub to a fixed point."""
    once = scrub(text)
    assert scrub(once) == once


@given(st.lists(st.sampled_from(NEAR_MISSES), max_size=8).map("\n".join))
def test_scrub_never_lengthens_secret_free_text(text: str) -> None:
    """Lines holding no secret come back equal, so never longer."""
    assert scrub(text) == text


@given(_corpus_text)
def test_markers_are_never_nested(text: str) -> None:
    """Every marker in the output is whole, names a known kind and holds no other marker."""
    out = scrub(text)
    kinds = _MARKER.findall(out)
    assert out.count(_MARKER_START) == len(kinds)
    assert set(kinds) <= set(KINDS)
