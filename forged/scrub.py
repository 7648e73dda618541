"""Secret scrubbing: credentials in text become ``[REDACTED:<kind>]`` before anything stores or sends it.

Kinds, in the order they are tried:

Self-identifying formats (first pass):

- ``private_key``: a whole PEM ``-----BEGIN ... PRIVATE KEY-----`` block (RSA, EC, DSA, OPENSSH,
  ENCRYPTED, PGP ... BLOCK), also with JSON-escaped newlines; a block cut off before its END line
  is redacted up to the first character that cannot occur in PEM.
- ``aws_access_key``: ``AKIA``/``ASIA``/``AGPA``/... followed by 16 upper-case letters or digits.
- ``aws_secret_key``: a 40-character secret after an ``aws_secret_access_key``-style name.
- ``github_token``: ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` tokens and ``github_pat_`` tokens.
- ``anthropic_key``: ``sk-ant-...``.
- ``openai_key``: ``sk-...``, ``sk-proj-...``, ``sk-svcacct-...``, ``sk-admin-...`` (never
  ``sk-ant-``, which is Anthropic's).
- ``slack_token``: ``xox[abprs]-...``, ``xapp-...`` and the secret path of a Slack webhook URL.
- ``discord_token``: bot tokens and the secret path of a Discord webhook URL.
- ``jwt``: ``eyJ...``.``eyJ...``.signature.

Credentials known by their context (second pass; the context stays, the credential goes):

- ``authorization``: the credential of an ``Authorization:`` header (``Basic``, ``Digest``,
  ``token`` ... or a bare token); with the ``Bearer`` scheme the kind is ``bearer``.
- ``bearer``: the token after the word ``Bearer``.
- ``url_credentials``: the password in ``scheme://user:password@host``.
- ``password``, ``secret``, ``token``, ``api_key``: the value assigned to a name ending in such a
  word (``password=hunter2``, ``PASSWORD: "x"``, ``"client_secret": "..."``, ``--token abc``), the
  kind chosen by how the name ends. Quotes and names are kept. Values that are code rather than
  data are left alone: a call or subscript (``password = input()``), a ``${VAR}`` reference, a
  type or null literal (``password: str``, ``token = None``).

Guarantees: ``scrub(scrub(x)) == scrub(x)``; a marker is never matched again, so markers never
nest; every pattern is compiled once and written so that its work grows linearly with the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

# What a redaction looks like; every pattern refuses to start a value with it (idempotence).
_MARKER = "[REDACTED:{}]"
_MARKER_AHEAD = r"(?!\[REDACTED:)"

# Token edges: a token never starts inside a run of token characters (keeps scans linear and
# stops "task-sk-..." style matches) and never ends in the middle of a word.
_START = r"(?<![A-Za-z0-9_-])"
_END = r"(?![A-Za-z0-9_])"

# Shared first check of every pass: every rule starts with one of these characters, and none
# right after a letter or digit except a PEM block, so most positions fail here once instead
# of in every alternative.
_GUARD = r"(?=[A-Za-z0-9_.-])(?:(?<![A-Za-z0-9])|(?=-----))"

# Characters of an RFC 6750 bearer token, and the shape of an opaque one: at least 8 characters
# with a digit, or at least 20 characters, so that "bearer of bad news" stays prose.
_B64T = r"[A-Za-z0-9._~+/-]"
_OPAQUE = rf"(?={_B64T}{{8}})(?={_B64T}*[0-9]|{_B64T}{{20}}){_B64T}+=*"

# Authorization schemes whose credential follows a space.
_SCHEMES = r"(?i:bearer|basic|digest|token|apikey|api-key|negotiate|ntlm|aws4-hmac-sha256)"

# Name characters of an assignment, and the name endings that mark its value as a credential.
_NAME = r"[A-Za-z0-9_.-]"
_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "[_.-]pwd",
    "secret",
    "token",
    *(
        f"{word}{sep}key"
        for word in ("api", "access", "auth", "secret", "private")
        for sep in ("", "[_.-]")
    ),
)
# A whole name run that ends in one of them: one scan per name, then fixed-width lookbehinds.
_SECRET_NAME = rf"{_NAME}++(?:{'|'.join(f'(?<=(?i:{end}))' for end in _ENDINGS)})"

# Unquoted value characters: stop at whitespace, quotes and the punctuation that ends a value
# in URLs, JSON, shell and code.
_VALUE = r"[^\s'\"`,;&<>{}()\[\]\\]"

# Whole values that are code, not credentials: null literals and type names.
_NOT_SECRET = (
    r"(?:None|null|nil|undefined|true|false|True|False"
    r"|str|string|bytes|int|bool|number|any|SecretStr)"
)

# Name endings mapped to kinds, checked in order on the lower-cased name without separators.
_NAME_KINDS = (
    (("password", "passwd", "passphrase", "pwd"), "password"),
    (("apikey", "accesskey", "authkey"), "api_key"),
    (("secret", "secretkey", "privatekey"), "secret"),
    (("token",), "token"),
)

KINDS: tuple[str, ...] = (
    "private_key",
    "aws_access_key",
    "aws_secret_key",
    "github_token",
    "anthropic_key",
    "openai_key",
    "slack_token",
    "discord_token",
    "jwt",
    "authorization",
    "bearer",
    "url_credentials",
    "password",
    "secret",
    "token",
    "api_key",
)


class _Rule(NamedTuple):
    """One alternative of a pass: which groups hold the secret and how to name its kind."""

    tag: str
    pattern: str
    secrets: tuple[str, ...]
    kind: str | Callable[[re.Match[str]], str]


def _assigned_value(p: str) -> str:
    """Pattern for an assigned value, quoted (possibly JSON-escaped) or bare, groups prefixed p.

    A quoted value holding a marker already is left whole: its secret has a more precise kind.
    """
    quoted = (
        rf"(?P<{p}_bs>\\?)(?P<{p}_q>[\"'])(?P<{p}_qv>{_MARKER_AHEAD}"
        rf"(?:(?!(?P={p}_bs)(?P={p}_q)|\[REDACTED:)(?:[^\\\n]|\\.))+)(?P={p}_bs)(?P={p}_q)"
    )
    bare = (
        rf"(?P<{p}_uv>(?>(?:(?i:bearer|basic)[ \t]+)?){_MARKER_AHEAD}"
        rf"(?!{_NOT_SECRET}(?!{_VALUE})|\$\{{){_VALUE}++)(?![(\[{{])"
    )
    return f"(?:{quoted}|{bare})"


def _name_kind(match: re.Match[str]) -> str:
    """Kind of an assignment, read from how its name ends."""
    name = re.sub(r"[^a-z]", "", (match.group("a_name") or match.group("c_name")).lower())
    for endings, kind in _NAME_KINDS:
        if name.endswith(endings):
            return kind
    return "secret"


def _scheme_kind(match: re.Match[str]) -> str:
    """``bearer`` for an Authorization header with the Bearer scheme, else ``authorization``."""
    scheme = match.group("h_scheme")
    return "bearer" if scheme and scheme.lower() == "bearer" else "authorization"


_FORMATS = (
    _Rule(
        "pem",
        r"(?P<pem_s>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----))*+"
        rf"(?:-----END[A-Z0-9 ]{{0,40}}PRIVATE KEY(?: BLOCK)?-----{_END})?)",
        ("pem_s",),
        "private_key",
    ),
    _Rule(
        "akia",
        rf"{_START}(?P<akia_s>(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)"
        rf"[A-Z0-9]{{16}}){_END}",
        ("akia_s",),
        "aws_access_key",
    ),
    _Rule(
        "awss",
        r"(?<![A-Za-z0-9])(?i:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)"
        r"\\?[\"']?[ \t]*(?:=>|:=|[:=])[ \t]*\\?[\"']?"
        r"(?P<awss_s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("awss_s",),
        "aws_secret_key",
    ),
    _Rule(
        "gh",
        rf"{_START}(?P<gh_s>gh[pousr]_[A-Za-z0-9]{{36,255}}|github_pat_[A-Za-z0-9_]{{22,255}}){_END}",
        ("gh_s",),
        "github_token",
    ),
    _Rule("ant", rf"{_START}(?P<ant_s>sk-ant-[A-Za-z0-9_-]{{20,}})", ("ant_s",), "anthropic_key"),
    _Rule(
        "oai",
        rf"{_START}(?P<oai_s>sk-(?!ant-)(?:proj-|svcacct-|admin-)?"
        r"(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Z])[A-Za-z0-9_-]{20,})",
        ("oai_s",),
        "openai_key",
    ),
    _Rule(
        "slack",
        rf"{_START}(?P<slack_s>xox[abprs]-[A-Za-z0-9-]{{10,}}|xapp-[0-9]-[A-Za-z0-9-]{{10,}})"
        rf"|{_START}(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<slackw_s>[A-Za-z0-9_/-]{10,})",
        ("slack_s", "slackw_s"),
        "slack_token",
    ),
    _Rule(
        "discord",
        rf"{_START}(?P<discord_s>[MNO][A-Za-z0-9]{{23,25}}\.[A-Za-z0-9_-]{{6}}\.[A-Za-z0-9_-]{{27,}})"
        rf"|{_START}(?:https?://)?(?:ptb\.|canary\.)?discord(?:app)?\.com/api/(?:v[0-9]+/)?"
        r"webhooks/(?P<discordw_s>[0-9]{17,20}/[A-Za-z0-9_-]{20,})",
        ("discord_s", "discordw_s"),
        "discord_token",
    ),
    _Rule(
        "jwt",
        rf"{_START}(?P<jwt_s>eyJ[A-Za-z0-9_-]{{5,}}\.eyJ[A-Za-z0-9_-]{{5,}}\.[A-Za-z0-9_-]*)",
        ("jwt_s",),
        "jwt",
    ),
)

_CONTEXTS = (
    _Rule(
        "h",
        rf"{_START}(?i:(?:proxy-)?authorization)(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
        rf"(?:(?P<h_scheme>{_SCHEMES})[ \t]+{_MARKER_AHEAD}(?P<h_cred>[^\s'\",;\\]+)"
        rf"|(?!{_SCHEMES}[ \t]){_MARKER_AHEAD}(?P<h_raw>{_OPAQUE}))",
        ("h_cred", "h_raw"),
        _scheme_kind,
    ),
    _Rule("b", rf"{_START}(?i:bearer)[ \t]+{_MARKER_AHEAD}(?P<b_s>{_OPAQUE})", ("b_s",), "bearer"),
    _Rule(
        "u",
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?:\[REDACTED:[a-z_]+\]|[^\s:/@?#\[\]]*):"
        rf"{_MARKER_AHEAD}(?P<u_s>[^\s/@?#]+)@(?=[A-Za-z0-9\[])",
        ("u_s",),
        "url_credentials",
    ),
    _Rule(
        "a",
        rf"(?<!{_NAME})(?P<a_name>{_SECRET_NAME})(?:\\?[\"'])?"
        rf"[ \t]*(?:=>|:=|==|[:=])[ \t]*{_assigned_value('a')}",
        ("a_qv", "a_uv"),
        _name_kind,
    ),
    _Rule(
        "c",
        rf"(?<!\S)(?P<c_name>-{_SECRET_NAME})[ \t]+(?![-=:])"
        rf"{_assigned_value('c')}",
        ("c_qv", "c_uv"),
        _name_kind,
    ),
)


def _compile(rules: tuple[_Rule, ...]) -> re.Pattern[str]:
    """One alternation of all rules; each rule is wrapped in a group named by its tag."""
    alternation = "|".join(f"(?P<{rule.tag}>{rule.pattern})" for rule in rules)
    return re.compile(f"{_GUARD}(?:{alternation})")


def _replacer(rules: tuple[_Rule, ...]) -> Callable[[re.Match[str]], str]:
    """Replacement function: the matched secret becomes a marker, its context stays."""
    by_tag = {rule.tag: rule for rule in rules}

    def replace(match: re.Match[str]) -> str:
        # The wrapping group closes last, so lastgroup names the rule that matched.
        rule = by_tag[match.lastgroup or ""]
        group = next(name for name in rule.secrets if match.start(name) >= 0)
        kind = rule.kind if isinstance(rule.kind, str) else rule.kind(match)
        text, offset = match.group(), match.start()
        start, end = match.start(group) - offset, match.end(group) - offset
        return text[:start] + _MARKER.format(kind) + text[end:]

    return replace


# Formats first, so that a token assigned to a name keeps its own kind ("api_key=sk-..." is an
# openai_key); the second pass never re-matches the first pass's markers.
_PASSES = tuple((_compile(rules), _replacer(rules)) for rules in (_FORMATS, _CONTEXTS))


def scrub(text: str) -> str:
    """Return text with every secret it recognises replaced by ``[REDACTED:<kind>]``."""
    for pattern, replace in _PASSES:
        text = pattern.sub(replace, text)
    return text
