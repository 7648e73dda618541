"""The regex vocabulary the secret rules are written in: token edges, credential names and the
kinds their endings give, assigned values, line edges, and the marker a redaction leaves.

Everything here is a piece of an exact Python regex (``re.ASCII``) for ``scrub.rules``; the
``*_TRIE`` pieces also serve the rules' anchors, so they use only what Hyperscan understands.
"""

from __future__ import annotations

import re

__all__ = [
    "ASSIGN",
    "CREDENTIAL_LIKE",
    "END",
    "ENDINGS_ALTERNATION",
    "ENDINGS_TRIE",
    "LINE_END",
    "LINE_START",
    "MARKER",
    "MARKER_AHEAD",
    "NAME",
    "OPAQUE",
    "PASSWORD_NAME",
    "PROSE",
    "SCHEMES",
    "SECRET_NAME",
    "START",
    "assigned_value",
    "name_kind",
    "trie",
]

# What a redaction looks like; every pattern refuses to start a value with it (idempotence).
MARKER = "[REDACTED:{}]"
MARKER_AHEAD = r"(?!\[REDACTED:)"

# Token edges: a token never starts inside a run of token characters (keeps scans linear and
# stops "task-sk-..." style matches) except right after an escaped newline or tab of JSON text,
# and never ends in the middle of a word.
START = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrt]))"
END = r"(?![A-Za-z0-9_])"

# Characters of an RFC 6750 bearer token, and the shape of an opaque one: at least 8 characters
# with a digit, or at least 20 characters, so that "bearer of bad news" stays prose.
_B64T = r"[A-Za-z0-9._~+/-]"
OPAQUE = rf"(?={_B64T}{{8}})(?={_B64T}*[0-9]|{_B64T}{{20}}){_B64T}+=*"

# Authorization schemes whose credential follows a space.
SCHEMES = r"(?i:bearer|basic|digest|token|apikey|api-key|negotiate|ntlm|aws4-hmac-sha256)"


def trie(words: list[str]) -> str:
    """An alternation of words as a trie: each position tries a few first letters, not all words."""
    if words == [""]:
        return ""
    heads: dict[str, list[str]] = {}
    for word in words:
        heads.setdefault(word[:1], []).append(word[1:])
    branches = [re.escape(head) + trie(tails) for head, tails in sorted(heads.items()) if head]
    body = "|".join(branches)
    if "" in heads:
        return f"(?:{body})?"
    return f"(?:{body})" if len(branches) > 1 else body


def _spelled(pattern: str) -> list[str]:
    """Every spelling of an ending whose separators are ``[_.-]``, as plain words."""
    head, sep, tail = pattern.partition("[_.-]")
    return [pattern] if not sep else [head + c + rest for c in "_.-" for rest in _spelled(tail)]


# Name characters of an assignment, and the name endings that mark its value as a credential.
NAME = r"[A-Za-z0-9_.-]"
_PASSWORD_ENDINGS = ("password", "passwd", "passphrase", "[_.-]pwd", "[_.-]pass", "[_.-]pw")
_ENDINGS = (
    *_PASSWORD_ENDINGS,
    "secret",
    "token",
    *(
        f"{word}{sep}key"
        for word in (
            "api",
            "access",
            "auth",
            "secret",
            "private",
            "subscription",
            "master",
            "account",
            "signing",
            "encryption",
        )
        for sep in ("", "[_.-]")
    ),
    *(f"private{a}key{b}id" for a in ("", "[_.-]") for b in ("", "[_.-]")),
)
ENDINGS_ALTERNATION = "|".join(_ENDINGS)
# The same endings as a trie of words, for anchors: fast in both engines.
ENDINGS_TRIE = trie(sorted({word for end in _ENDINGS for word in _spelled(end)}))

# A whole name run that ends in one of them: one scan per name, then fixed-width lookbehinds.
SECRET_NAME = rf"{NAME}++(?:{'|'.join(f'(?<=(?i:{end}))' for end in _ENDINGS)})"

# Unquoted value characters: stop at whitespace, quotes and the punctuation that ends a value
# in URLs, JSON, shell and code.
_VALUE = r"[^\s'\"`,;&<>{}()\[\]\\]"

# Whole values that are code, not credentials: null literals and type names.
_NOT_SECRET = (
    r"(?:None|null|nil|undefined|true|false|True|False"
    r"|str|string|bytes|int|bool|number|any|SecretStr)"
)

# A bare value that looks like a credential rather than a word of prose ("Secret: the meeting"):
# it holds a digit or a symbol, an upper-case letter after its first character, or 12 characters.
CREDENTIAL_LIKE = rf"(?={_VALUE}*[^A-Za-z\s'\"`,;&<>{{}}()\[\]\\]|{_VALUE}+[A-Z]|{_VALUE}{{12}})"

# Characters of the further words of a passphrase: words to the end of the line, with no
# punctuation of a sentence ("password: correct horse battery staple", not "password: x, then").
_WORD = r"[^\s'\"`<>{}()\[\]\\,.;:!?]"

# The name just scanned ends like a password's.
PASSWORD_NAME = "(?:" + "|".join(f"(?<=(?i:{end}))" for end in _PASSWORD_ENDINGS) + ")"

# Name endings mapped to kinds, checked in order on the lower-cased name without separators.
_NAME_KINDS = (
    (("password", "passwd", "passphrase", "pwd", "pass", "pw"), "password"),
    (("apikey", "accesskey", "authkey", "subscriptionkey"), "api_key"),
    (("secret", "secretkey", "privatekey", "privatekeyid"), "secret"),
    (("token",), "token"),
)

# A character of the prose between a credential's name and the credential: not a line break,
# and never into a marker, so that a marker's kind never reads as a name.
PROSE = r"(?:[^\n\[]|\[(?!REDACTED:))"

# Where a line begins or ends, also inside a JSON string (an escaped newline).
LINE_START = r"(?:(?m:^)|(?<=\\n))"
LINE_END = r"(?=[ \t]*(?:(?m:$)|\\[rn]))"

# Assignment operators of code, config files and prose.
ASSIGN = r"(?:=>|:=|==|[:=])"


def assigned_value(p: str, style: str) -> str:
    """Pattern for an assigned value, quoted (possibly JSON-escaped) or bare, groups prefixed p.

    A quoted value holding a marker already is left whole: its secret has a more precise kind.
    Bare values by `style`: ``words`` runs over several words to the end of the line (a
    passphrase after ``password:``), ``token`` is one token, ``credential`` one token that looks
    like a credential rather than a word of prose.
    """
    quoted = (
        rf"(?P<{p}_bs>\\?)(?P<{p}_q>[\"'])(?P<{p}_qv>{MARKER_AHEAD}"
        rf"(?:(?!(?P={p}_bs)(?P={p}_q)|\[REDACTED:)(?:[^\\\n]|\\.))+)(?P={p}_bs)(?P={p}_q)"
    )
    value = {
        "words": rf"{_VALUE}++(?:[ \t]+{_WORD}+)++(?=[ \t]*(?:(?m:$)|\\[nr]|\\?[\"'`]))",
        "token": rf"{_VALUE}++",
        "credential": rf"{CREDENTIAL_LIKE}{_VALUE}++",
    }[style]
    bare = (
        rf"(?P<{p}_uv>(?>(?:(?i:bearer|basic)[ \t]+)?){MARKER_AHEAD}"
        rf"(?!{_NOT_SECRET}(?!{_VALUE})|\$\{{){value})(?![(\[{{])"
    )
    return f"(?:{quoted}|{bare})"


def name_kind(name: str) -> str:
    """Kind of a credential named `name`, read from how the name ends."""
    name = re.sub(r"[^a-z]", "", name.lower())
    for endings, kind in _NAME_KINDS:
        if name.endswith(endings):
            return kind
    return "secret"
