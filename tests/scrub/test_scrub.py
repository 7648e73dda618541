"""Tests for forged.scrub: every kind, every embedding, look-alikes, idempotence, speed safety."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from forged.scrub.rules import CONTEXTS, FORMATS, Rule
from forged.scrub.scan import KINDS, scrub, secret_key_kind
from tests.support.secret_corpus import NEAR_MISSES, SECRETS, embed

# Kinds known only by their context; inside `api_key="..."` such a secret is that api_key.
_CONTEXT_KINDS = frozenset(
    {
        "bearer",
        "authorization",
        "url_credentials",
        "docker_auth",
        "password",
        "secret",
        "token",
        "api_key",
    }
)

# Names of the embeddings returned by embed(), in order.
_PLACES = ("prose", "code", "json", "shell", "log")

# Every (secret, place, text) the corpus gives, by kind.
_EMBEDDED: dict[str, list[tuple[str, str, str]]] = {}
for _kind, _secret in SECRETS:
    _EMBEDDED.setdefault(_kind, []).extend(
        (_secret, place, text) for place, text in zip(_PLACES, embed(_secret), strict=True)
    )

# A well-formed marker, and the start of any marker.
_MARKER = re.compile(r"\[REDACTED:([a-z0-9_]+)\]")
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
    if kind == "private_key" and "-----BEGIN" in secret:
        return secret.splitlines()[-2]
    if kind == "private_key" and "Private-Lines" in secret:
        return _group(r"Private-Lines: 1\n(\S+)", secret, 1)
    if kind in ("private_key", "aws_secret_key", "azure_key", "azure_sas", "docker_auth"):
        return max(re.findall(r"[A-Za-z0-9/+]{16,}", secret), key=len)
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


@pytest.mark.parametrize("kind", sorted(_EMBEDDED))
def test_secret_is_redacted_and_labelled_in_every_embedding(kind: str) -> None:
    """No embedding of a corpus secret keeps its credential; a marker naming its kind takes its
    place (a context-known secret in api_key="..." is an api_key). Each failure names its input."""
    failures = []
    for secret, place, text in _EMBEDDED[kind]:
        out = scrub(text)
        expected = "api_key" if place == "code" and kind in _CONTEXT_KINDS else kind
        if _credential(kind, secret) in out or f"[REDACTED:{expected}]" not in out:
            failures.append(f"{place}: {text!r} -> {out!r}")
    assert not failures, "\n".join(failures)


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


@settings(deadline=None)  # the first scrub of a rule mix compiles its regex
@given(st.text())
def test_scrub_is_idempotent_on_arbitrary_text(text: str) -> None:
    """Scrubbing twice gives what scrubbing once gave."""
    once = scrub(text)
    assert scrub(once) == once


@settings(deadline=None)  # the first scrub of a rule mix compiles its regex
@given(_corpus_text)
@example("-api_token = hunter2")
@example("mysql -u root -prakDVO6nSo3Mg9 shopmysql -u root -prakDVO6nSo3Mg9 shop")
def test_scrub_is_idempotent_on_corpus_mixtures(text: str) -> None:
    """Secrets, look-alikes and fragments glued together scrub to a fixed point."""
    once = scrub(text)
    assert scrub(once) == once


@settings(deadline=None)  # the first scrub of a rule mix compiles its regex
@given(st.lists(st.sampled_from(NEAR_MISSES), max_size=8).map("\n".join))
def test_scrub_never_lengthens_secret_free_text(text: str) -> None:
    """Lines holding no secret come back equal, so never longer."""
    assert scrub(text) == text


@settings(deadline=None)  # the first scrub of a rule mix compiles its regex
@given(_corpus_text)
def test_markers_are_never_nested(text: str) -> None:
    """Every marker in the output is whole, names a known kind and holds no other marker."""
    out = scrub(text)
    kinds = _MARKER.findall(out)
    assert out.count(_MARKER_START) == len(kinds)
    assert set(kinds) <= set(KINDS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Access key ID,Secret access key\nAKIAIOSFODNN7EXAMPLE,wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "Access key ID,Secret access key\n[REDACTED:aws_access_key],[REDACTED:aws_secret_key]",
        ),
        (
            "AWS Secret Access Key [None]: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "AWS Secret Access Key [None]: [REDACTED:aws_secret_key]",
        ),
        (
            "the AWS secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, rotate it",
            "the AWS secret is [REDACTED:aws_secret_key], rotate it",
        ),
        (
            "AccountName=acme;AccountKey=" + "Zm9vYmFy" * 11 + "==;EndpointSuffix=core.windows.net",
            "AccountName=acme;AccountKey=[REDACTED:azure_key];EndpointSuffix=core.windows.net",
        ),
        (
            "https://acme.blob.core.windows.net/c?sv=2022-11-02&sig=Zm9vYmFyYmF6cXV4cXV1eA%3D%3D",
            "https://acme.blob.core.windows.net/c?sv=2022-11-02&sig=[REDACTED:azure_sas]",
        ),
        ("use sk_live_4eC39HqLyjWDarjtT1zdp7dc now", "use [REDACTED:stripe_key] now"),
        ("rk_live_51H8x2b7Q9zTtW3eAbC", "[REDACTED:stripe_key]"),
        ("key AIzaSyD-1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTu", "key [REDACTED:gcp_api_key]"),
        ("npm_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:npm_token]"),
        ("glpat-x7Yz9AbCdEfGhIjK1234", "[REDACTED:gitlab_token]"),
        ("hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "[REDACTED:huggingface_token]"),
        (
            "SG.abcdefghijklmnopqrstuv.ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg",
            "[REDACTED:sendgrid_key]",
        ),
        (
            "bot 1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw9 ok",
            "bot [REDACTED:telegram_bot_token] ok",
        ),
        (
            '{"auths": {"r.io": {"auth": "dXNlcjpwYXNzd29yZA=="}}}',
            '{"auths": {"r.io": {"auth": "[REDACTED:docker_auth]"}}}',
        ),
        (
            "Private-Lines: 1\nAAAAIQDx4i9rQyNTUxOQAAACDx4i9rQyNTUxOQAA\nPrivate-MAC: 0a1b2c",
            "Private-Lines: 1[REDACTED:private_key]",
        ),
        (
            "machine h.io login bob password s3cr3t!",
            "machine h.io login bob password [REDACTED:password]",
        ),
        ("mysql -u root -phunter2 shop", "mysql -u root -p[REDACTED:password] shop"),
        ("db.internal:5432:app:alice:hunter2", "db.internal:5432:app:alice:[REDACTED:password]"),
        (
            '"private_key_id": "3f786850e387550fdab836ed7e6dc881de23001b"',
            '"private_key_id": "[REDACTED:secret]"',
        ),
        (
            "Ocp-Apim-Subscription-Key: 0123456789abcdef0123456789abcdef",
            "Ocp-Apim-Subscription-Key: [REDACTED:api_key]",
        ),
        (
            "my wallet private key: 0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
            "my wallet private key: [REDACTED:private_key]",
        ),
        ("password: correct horse battery staple", "password: [REDACTED:password]"),
        ("password: hunter2, then log in", "password: [REDACTED:password], then log in"),
        (
            "postgres://app:p@ss/w#rd@db.internal:5432/app",
            "postgres://app:[REDACTED:url_credentials]@db.internal:5432/app",
        ),
        ("Secret: the meeting moved to Tuesday.", "Secret: the meeting moved to Tuesday."),
        ("HEROKU_API: 01234567-89ab-cdef-0123-456789abcdef", "HEROKU_API: [REDACTED:api_key]"),
    ],
)
def test_hardening_form_is_redacted_exactly(text: str, expected: str) -> None:
    """Each form the hardening issue found leaking (or over-caught) now scrubs to exactly this."""
    assert scrub(text) == expected


def _rule_matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.ASCII) is not None


@pytest.mark.parametrize("rule", [*FORMATS, *CONTEXTS], ids=lambda rule: rule.tag)
def test_anchor_is_found_wherever_its_rule_matches(rule: Rule) -> None:
    """The prefilter never misses: every corpus text a rule matches also holds the rule's anchor."""
    texts = [e for _, secret in SECRETS for e in [secret, *embed(secret)]] + NEAR_MISSES
    anchor = re.compile(rule.anchor, re.IGNORECASE | re.ASCII)
    matched = [t for t in texts if _rule_matches(rule.pattern, t)]
    assert matched, "the corpus has no example of this rule"
    assert [t for t in matched if anchor.search(t) is None] == []


@settings(deadline=None)  # the first scrub of a rule mix compiles its regex
@given(_corpus_text)
def test_anchors_are_found_in_mixtures(text: str) -> None:
    """On random mixtures too, a rule that matches has its anchor in the text."""
    for rule in (*FORMATS, *CONTEXTS):
        if _rule_matches(rule.pattern, text):
            assert re.search(rule.anchor, text, re.IGNORECASE | re.ASCII), rule.tag


def test_metadata_key_names_its_kind() -> None:
    """Keys that name a credential, at any spelling, give a kind; ordinary keys give none."""
    kinds = {
        key: secret_key_kind(key)
        for key in (
            "password",
            "DB_PASSWORD",
            "api_key",
            "apiKey",
            "API Key",
            "client_secret",
            "access_token",
            "auth",
            "Cookie",
            "pwd",
            "channel",
            "tokens_used",
            "author",
        )
    }
    assert kinds == {
        "password": "password",
        "DB_PASSWORD": "password",
        "api_key": "api_key",
        "apiKey": "api_key",
        "API Key": "api_key",
        "client_secret": "secret",
        "access_token": "token",
        "auth": "authorization",
        "Cookie": "authorization",
        "pwd": "password",
        "channel": None,
        "tokens_used": None,
        "author": None,
    }
