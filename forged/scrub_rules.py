"""The secret rules: which text is a credential, as data for the scrubber.

Each rule is an exact Python regex (compiled with ``re.ASCII``) whose named groups hold the
secret, the kind its marker names, and an *anchor*: a simpler regex that every match of the rule
contains, matched case-insensitively. Anchors use only what Hyperscan and ``re`` both understand
(no lookarounds, no backreferences, no possessive or atomic groups), so a multi-pattern engine can
find the few strings worth the exact regexes; the scrubber's tests check that each anchor is a
superset of its rule.

Two passes, each one alternation tried in order at every position:

- ``FORMATS``: self-identifying credentials (PEM private keys, AWS, GitHub, Anthropic, OpenAI,
  Slack, Discord, JWT, and the provider rules of gitleaks' default configuration that a token's
  own prefix identifies: GitLab ``glpat-``, Stripe ``sk_live_``, Google ``AIza``, npm, Hugging Face,
  SendGrid, Telegram bot tokens, Azure storage keys and SAS signatures, PuTTY private lines, ...).
- ``CONTEXTS``: credentials known by what stands before them (``Authorization:``, ``Bearer``,
  URL userinfo, ``password=``-style assignments, ``.netrc``, ``mysql -p``, pgpass lines, Docker
  ``"auth"``, and gitleaks' provider rules that need a provider's name before the value).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

# What a redaction looks like; every pattern refuses to start a value with it (idempotence).
MARKER = "[REDACTED:{}]"
_MARKER_AHEAD = r"(?!\[REDACTED:)"

# Token edges: a token never starts inside a run of token characters (keeps scans linear and
# stops "task-sk-..." style matches) except right after an escaped newline or tab of JSON text,
# and never ends in the middle of a word.
_START = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrt]))"
_END = r"(?![A-Za-z0-9_])"

# Characters of an RFC 6750 bearer token, and the shape of an opaque one: at least 8 characters
# with a digit, or at least 20 characters, so that "bearer of bad news" stays prose.
_B64T = r"[A-Za-z0-9._~+/-]"
_OPAQUE = rf"(?={_B64T}{{8}})(?={_B64T}*[0-9]|{_B64T}{{20}}){_B64T}+=*"

# Authorization schemes whose credential follows a space.
_SCHEMES = r"(?i:bearer|basic|digest|token|apikey|api-key|negotiate|ntlm|aws4-hmac-sha256)"


def _trie(words: list[str]) -> str:
    """An alternation of words as a trie: each position tries a few first letters, not all words."""
    if words == [""]:
        return ""
    heads: dict[str, list[str]] = {}
    for word in words:
        heads.setdefault(word[:1], []).append(word[1:])
    branches = [re.escape(head) + _trie(tails) for head, tails in sorted(heads.items()) if head]
    body = "|".join(branches)
    if "" in heads:
        return f"(?:{body})?"
    return f"(?:{body})" if len(branches) > 1 else body


def _spelled(pattern: str) -> list[str]:
    """Every spelling of an ending whose separators are ``[_.-]``, as plain words."""
    head, sep, tail = pattern.partition("[_.-]")
    return [pattern] if not sep else [head + c + rest for c in "_.-" for rest in _spelled(tail)]


# Name characters of an assignment, and the name endings that mark its value as a credential.
_NAME = r"[A-Za-z0-9_.-]"
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
_ENDINGS_TRIE = _trie(sorted({word for end in _ENDINGS for word in _spelled(end)}))

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

# A bare value that looks like a credential rather than a word of prose ("Secret: the meeting"):
# it holds a digit or a symbol, an upper-case letter after its first character, or 12 characters.
_CREDENTIAL_LIKE = rf"(?={_VALUE}*[^A-Za-z\s'\"`,;&<>{{}}()\[\]\\]|{_VALUE}+[A-Z]|{_VALUE}{{12}})"

# Characters of the further words of a passphrase: words to the end of the line, with no
# punctuation of a sentence ("password: correct horse battery staple", not "password: x, then").
_WORD = r"[^\s'\"`<>{}()\[\]\\,.;:!?]"

# The name just scanned ends like a password's.
_PASSWORD_NAME = "(?:" + "|".join(f"(?<=(?i:{end}))" for end in _PASSWORD_ENDINGS) + ")"

# Name endings mapped to kinds, checked in order on the lower-cased name without separators.
_NAME_KINDS = (
    (("password", "passwd", "passphrase", "pwd", "pass", "pw"), "password"),
    (("apikey", "accesskey", "authkey", "subscriptionkey"), "api_key"),
    (("secret", "secretkey", "privatekey", "privatekeyid"), "secret"),
    (("token",), "token"),
)

# A character of the prose between a credential's name and the credential: not a line break,
# and never into a marker, so that a marker's kind never reads as a name.
_PROSE = r"(?:[^\n\[]|\[(?!REDACTED:))"

# Where a line begins or ends, also inside a JSON string (an escaped newline).
_LINE_START = r"(?:(?m:^)|(?<=\\n))"
_LINE_END = r"(?=[ \t]*(?:(?m:$)|\\[rn]))"

# Assignment operators of code, config files and prose.
_ASSIGN = r"(?:=>|:=|==|[:=])"


class Rule(NamedTuple):
    """One alternative of a pass: the groups that hold the secret, its kind, and its anchor."""

    tag: str
    pattern: str
    secrets: tuple[str, ...]
    kind: str | Callable[[re.Match[str], str], str]
    anchor: str


def _assigned_value(p: str, style: str) -> str:
    """Pattern for an assigned value, quoted (possibly JSON-escaped) or bare, groups prefixed p.

    A quoted value holding a marker already is left whole: its secret has a more precise kind.
    Bare values by `style`: ``words`` runs over several words to the end of the line (a
    passphrase after ``password:``), ``token`` is one token, ``credential`` one token that looks
    like a credential rather than a word of prose.
    """
    quoted = (
        rf"(?P<{p}_bs>\\?)(?P<{p}_q>[\"'])(?P<{p}_qv>{_MARKER_AHEAD}"
        rf"(?:(?!(?P={p}_bs)(?P={p}_q)|\[REDACTED:)(?:[^\\\n]|\\.))+)(?P={p}_bs)(?P={p}_q)"
    )
    value = {
        "words": rf"{_VALUE}++(?:[ \t]+{_WORD}+)++(?=[ \t]*(?:(?m:$)|\\[nr]|\\?[\"'`]))",
        "token": rf"{_VALUE}++",
        "credential": rf"{_CREDENTIAL_LIKE}{_VALUE}++",
    }[style]
    bare = (
        rf"(?P<{p}_uv>(?>(?:(?i:bearer|basic)[ \t]+)?){_MARKER_AHEAD}"
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


def _assignment_kind(match: re.Match[str], group: str) -> str:
    """Kind of an assigned value (group ``a_...``) or a command-line option's (``c_...``)."""
    return name_kind(match.group(f"{group[0]}_name" if group[0] == "c" else "a_name"))


def _scheme_kind(match: re.Match[str], _group: str) -> str:
    """``bearer`` for an Authorization header with the Bearer scheme, else ``authorization``."""
    scheme = match.group("h_scheme")
    return "bearer" if scheme and scheme.lower() == "bearer" else "authorization"


def _aws_pair_kind(_match: re.Match[str], group: str) -> str:
    """An access key id and the secret beside it, as in the console's credentials CSV."""
    return "aws_access_key" if group == "awsp_id" else "aws_secret_key"


def _token(tag: str, kind: str, body: str, anchor: str) -> Rule:
    """A self-identifying token: `body` between token edges, its prefix as the anchor."""
    return Rule(tag, rf"{_START}(?P<{tag}_s>{body}){_END}", (f"{tag}_s",), kind, anchor)


# Self-identifying tokens adapted from gitleaks' default rules (config/gitleaks.toml): the
# prefix that names the provider, then the token's alphabet and length. Kinds follow the rule ids.
_PROVIDER_TOKENS = (
    ("onepassword_secret_key", r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})(?:-[A-Z0-9]{5}){3}", "a3-"),
    ("onepassword_service_token", r"ops_eyJ[A-Za-z0-9+/]{250,}={0,3}", "ops_eyj"),
    ("adobe_client_secret", r"p8e-[A-Za-z0-9]{32}", "p8e-"),
    ("age_secret_key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", "age-secret-key-1"),
    ("airtable_token", r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}", r"pat[a-z0-9]{14}\."),
    ("alibaba_access_key", r"LTAI[A-Za-z0-9]{20}", "ltai"),
    ("artifactory_key", r"AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59}", "akcp|cmvmd"),
    ("atlassian_token", r"ATATT3[A-Za-z0-9_=-]{186}", "atatt3"),
    ("authress_key", r"(?:sc|ext|scauth|authress)_[A-Za-z0-9]{5,30}\.[A-Za-z0-9]{4,6}\.acc[_-][A-Za-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}", r"\.acc[_-]"),
    ("aws_bedrock_key", r"ABSK[A-Za-z0-9+/]{109,269}={0,2}|bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=]*", "absk|bedrock-api-key-"),
    ("clickhouse_key", r"4b1d[A-Za-z0-9]{38}", "4b1d"),
    ("clojars_token", r"(?i:CLOJARS_)[A-Za-z0-9]{60}", "clojars_"),
    ("cloudflare_origin_ca_key", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}", r"v1\.0-"),
    ("databricks_token", r"dapi[a-f0-9]{32}(?:-[0-9])?", "dapi"),
    ("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", "do[opr]_v1_"),
    ("doppler_token", r"dp\.pt\.[A-Za-z0-9]{43}", r"dp\.pt\."),
    ("duffel_token", r"duffel_(?:test|live)_[A-Za-z0-9_=-]{43}", "duffel_"),
    ("dynatrace_token", r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}", r"dt0c01\."),
    ("easypost_token", r"EZ[AT]K[A-Za-z0-9]{54}", "ez[at]k"),
    ("facebook_token", r"EAA[MC][A-Za-z0-9]{100,}|[0-9]{15,16}(?:\||%7C)[0-9A-Za-z_-]{27,40}", r"eaa[mc]|[0-9]{15}(?:\||%7c)"),
    ("flutterwave_key", r"FLW(?:SECK|PUBK)_TEST-[A-Ha-h0-9]{12,32}(?:-X)?", "flw(?:seck|pubk)_test-"),
    ("flyio_token", r"fo1_[A-Za-z0-9_-]{43}|fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}|fm2_[A-Za-z0-9+/]{100,}={0,3}", "fo1_|fm1[ar]_|fm2_"),
    ("frameio_token", r"fio-u-[A-Za-z0-9_=-]{64}", "fio-u-"),
    ("gcp_api_key", r"AIza[A-Za-z0-9_-]{35}", "aiza"),
    ("gitlab_token", r"gl(?:pat|dt|ffct|ft|imt|agent|oas|rt|soat|cbt|ptt)-[A-Za-z0-9_.-]{20,300}|GR1348941[A-Za-z0-9_-]{20,}", "gl(?:pat|dt|ffct|ft|imt|agent|oas|rt|soat|cbt|ptt)-|gr1348941"),
    ("grafana_token", r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}|glc_[A-Za-z0-9+/]{32,400}={0,3}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", "eyjrijoi|glc_|glsa_"),
    ("harness_key", r"(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}", r"[ps]at\.[a-z0-9_-]{22}\."),
    ("terraform_token", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}", r"\.atlasv1\."),
    ("heroku_key", r"HRKU-AA[0-9A-Za-z_-]{58}", "hrku-aa"),
    ("huggingface_token", r"hf_[A-Za-z]{34}|api_org_[A-Za-z]{34}", "hf_|api_org_"),
    ("infracost_token", r"ico-[A-Za-z0-9]{32}", "ico-"),
    ("intra42_secret", r"s-s4t2(?:ud|af)-[A-Fa-f0-9]{64}", "s-s4t2"),
    ("linear_key", r"lin_api_[A-Za-z0-9]{40}", "lin_api_"),
    ("maxmind_key", r"[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk", "_mmk"),
    ("notion_token", r"ntn_[0-9]{11}[A-Za-z0-9]{35}", "ntn_"),
    ("npm_token", r"npm_[A-Za-z0-9]{36}", "npm_"),
    ("octopus_key", r"API-[A-Z0-9]{26}", "api-[a-z0-9]{26}"),
    ("openshift_token", r"sha256~[A-Za-z0-9_-]{43}", "sha256~"),
    ("perplexity_key", r"pplx-[A-Za-z0-9]{48}", "pplx-"),
    ("planetscale_token", r"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.-]{32,64}", "pscale_"),
    ("postman_token", r"PMAK-[A-Fa-f0-9]{24}-[A-Fa-f0-9]{34}", "pmak-"),
    ("prefect_token", r"pnu_[A-Za-z0-9]{36}", "pnu_"),
    ("pulumi_token", r"pul-[a-f0-9]{40}", "pul-"),
    ("pypi_token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,1000}", "pypi-ageichlwas5vcmc"),
    ("readme_token", r"rdme_[a-z0-9]{70}", "rdme_"),
    ("rubygems_token", r"rubygems_[a-f0-9]{48}", "rubygems_"),
    ("scalingo_token", r"tk-us-[A-Za-z0-9_-]{48}", "tk-us-"),
    ("sendgrid_key", r"SG\.[A-Za-z0-9_-]{20,24}\.[A-Za-z0-9_-]{39,50}|SG\.[A-Za-z0-9=_.-]{66}", r"sg\."),
    ("sendinblue_key", r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}", "xkeysib-"),
    ("sentry_token", r"sntrys_eyJpYXQiO[A-Za-z0-9+/=_]{60,500}|sntryu_[a-f0-9]{64}", "sntry[su]_"),
    ("settlemint_token", r"sm_[aps]at_[A-Za-z0-9]{16}", "sm_[aps]at_"),
    ("shippo_token", r"shippo_(?:live|test)_[a-fA-F0-9]{40}", "shippo_"),
    ("shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "shp(?:at|ca|pa|ss)_"),
    ("slack_config_token", r"xoxe\.xox[bp]-[0-9]-[A-Za-z0-9]{163,166}|xoxe-[0-9]-[A-Za-z0-9]{146}", "xoxe"),
    ("sourcegraph_token", r"sgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}|sgp_[a-fA-F0-9]{40}", "sgp_"),
    ("square_token", r"(?:EAAA|sq0atp-|sq0csp-)[A-Za-z0-9_-]{22,60}", "eaaa|sq0atp-|sq0csp-"),
    ("stripe_key", r"(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,247}", "[sr]k_(?:test|live|prod)_"),
    ("twilio_key", r"SK[0-9a-fA-F]{32}", "sk[0-9a-f]{32}"),
    ("typeform_token", r"tfp_[A-Za-z0-9_.=-]{59}", "tfp_"),
    ("vault_token", r"hv[sb]\.[A-Za-z0-9_-]{90,300}", r"hv[sb]\."),
    ("yandex_key", r"AQVN[A-Za-z0-9_-]{35,38}|YC[A-Za-z0-9_-]{38}|t1\.[A-Za-z0-9_-]+={0,2}\.[A-Za-z0-9_-]{86}={0,2}", r"aqvn|yc[a-z0-9_-]{38}|t1\."),
    ("telegram_bot_token", r"[0-9]{8,10}:AA[A-Za-z0-9_-]{33}", "[0-9]{8}:aa"),
)  # fmt: skip

FORMATS = (
    Rule(
        "pem",
        r"(?P<pem_s>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----))*+"
        rf"(?:-----END[A-Z0-9 ]{{0,40}}PRIVATE KEY(?: BLOCK)?-----{_END})?)",
        ("pem_s",),
        "private_key",
        "-----BEGIN",
    ),
    Rule(
        "ppk",
        r"(?P<ppk_h>Private-Lines:[ \t]*[0-9]+)(?P<ppk_s>(?:[ \t]*(?:\r?\n|\\r\\n|\\n))"
        r"(?:[A-Za-z0-9+/=]|[ \t]*(?:\r?\n|\\r\\n|\\n)(?!Private-MAC))*+"
        r"(?:[ \t]*(?:\r?\n|\\r\\n|\\n)Private-MAC:[ \t]*[0-9a-fA-F]+)?)",
        ("ppk_s",),
        "private_key",
        "private-lines:",
    ),
    Rule(
        "awsp",
        rf"{_START}(?P<awsp_id>(?:AKIA|ASIA)[A-Z0-9]{{16}})[ \t]*[,;\t][ \t]*"
        r"(?P<awsp_s>(?=[A-Za-z0-9/+]*[0-9])(?=[A-Za-z0-9/+]*[a-z])[A-Za-z0-9/+]{40})"
        r"(?![A-Za-z0-9/+=])",
        ("awsp_id", "awsp_s"),
        _aws_pair_kind,
        "(?:akia|asia)[a-z0-9]{16}[ \t]*[,;\t]",
    ),
    Rule(
        "akia",
        rf"{_START}(?P<akia_s>(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA|A3T[A-Z0-9])"
        rf"[A-Z0-9]{{16}}){_END}",
        ("akia_s",),
        "aws_access_key",
        "(?:akia|asia|agpa|aida|aroa|aipa|anpa|anva|abia|acca|a3t[a-z0-9])[a-z0-9]{16}",
    ),
    Rule(
        "awss",
        r"(?<![A-Za-z0-9])(?:(?i:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_. -]?access[_. -]?key)"
        r"\\?[\"']?[ \t]*(?:\[[^\]\n]{0,40}\][ \t]*)?(?:=>|:=|[:=])"
        rf"|(?<!\[REDACTED:)(?i:aws){_PROSE}{{0,60}}?(?i:secret){_PROSE}{{0,40}}?)[ \t]*\\?[\"']?"
        r"(?<![A-Za-z0-9/+])(?P<awss_s>(?=[A-Za-z0-9/+]*[0-9])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("awss_s",),
        "aws_secret_key",
        "secret[_. -]?access[_. -]?key|aws[^\n]*secret",
    ),
    Rule(
        "hexkey",
        r"(?<![A-Za-z0-9])(?<!\[REDACTED:)(?i:private[ _-]?key|(?:eth|ethereum|wallet)[ _-]?key)"
        rf"{_PROSE}{{0,30}}?"
        r"(?<![A-Za-z0-9])(?P<hexkey_s>(?:0x)?[0-9a-fA-F]{64})(?![A-Za-z0-9])",
        ("hexkey_s",),
        "private_key",
        r"(?:private[ _-]?|eth[ _-]?|ethereum[ _-]?|wallet[ _-]?)key[^\n]*[0-9a-f]{64}",
    ),
    _token(
        "gh",
        "github_token",
        r"gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}",
        "gh[pousr]_|github_pat_",
    ),
    Rule(
        "ant",
        rf"{_START}(?P<ant_s>sk-ant-[A-Za-z0-9_-]{{20,}})",
        ("ant_s",),
        "anthropic_key",
        "sk-ant-",
    ),
    Rule(
        "oai",
        rf"{_START}(?P<oai_s>sk-(?!ant-)(?:proj-|svcacct-|admin-)?"
        r"(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Z])[A-Za-z0-9_-]{20,})",
        ("oai_s",),
        "openai_key",
        "sk-[a-z0-9_-]{20}",
    ),
    Rule(
        "slack",
        rf"{_START}(?P<slack_s>xox[abposr]-[A-Za-z0-9-]{{10,}}|xapp-[0-9]-[A-Za-z0-9-]{{10,}})"
        rf"|{_START}(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<slackw_s>[A-Za-z0-9_+/-]{10,})",
        ("slack_s", "slackw_s"),
        "slack_token",
        r"xox[abposr]-|xapp-|hooks\.slack\.com/",
    ),
    Rule(
        "discord",
        rf"{_START}(?P<discord_s>[MNO][A-Za-z0-9]{{23,25}}\.[A-Za-z0-9_-]{{6}}\.[A-Za-z0-9_-]{{27,}})"
        rf"|{_START}(?:https?://)?(?:ptb\.|canary\.)?discord(?:app)?\.com/api/(?:v[0-9]+/)?"
        r"webhooks/(?P<discordw_s>[0-9]{17,20}/[A-Za-z0-9_-]{20,})",
        ("discord_s", "discordw_s"),
        "discord_token",
        r"[mno][a-z0-9]{23,25}\.[a-z0-9_-]{6}\.|discord(?:app)?\.com/api/",
    ),
    Rule(
        "teams",
        r"(?<![A-Za-z0-9])https://[A-Za-z0-9]+\.webhook\.office\.com/webhookb2/"
        r"(?P<teams_s>[A-Za-z0-9@/-]{60,})",
        ("teams_s",),
        "teams_webhook",
        r"\.webhook\.office\.com/webhookb2/",
    ),
    _token(
        "jwt",
        "jwt",
        r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
        r"eyj[a-z0-9_-]{5,}\.eyj",
    ),
    Rule(
        "azure",
        r"(?<![A-Za-z0-9])(?i:(?:Account|SharedAccess)Key)=(?P<azure_s>[A-Za-z0-9+/]{20,}={0,2})",
        ("azure_s",),
        "azure_key",
        "(?:account|sharedaccess)key=",
    ),
    Rule(
        "sas",
        r"(?<=[?&;])sig=(?P<sas_s>[A-Za-z0-9%+/=_-]{16,})",
        ("sas_s",),
        "azure_sas",
        "[?&;]sig=",
    ),
    Rule(
        "azad",
        r"(?<![A-Za-z0-9_~.-])(?P<azad_s>[A-Za-z0-9_~.]{3}[0-9]Q~(?:[A-Za-z0-9_~.]|-(?!----)){31,34})"
        r"(?![A-Za-z0-9_~.]|-(?!----))",
        ("azad_s",),
        "azure_client_secret",
        "[0-9]q~",
    ),
    *(
        _token(f"t{i}", kind, body, anchor)
        for i, (kind, body, anchor) in enumerate(_PROVIDER_TOKENS)
    ),
)

# gitleaks' provider rules that need the provider's name before the value: the names here, then
# up to 20 name characters, an assignment or a comma, and a value shaped like a token (letters
# and digits, 14 or more). Matched case-insensitively where a name or one of its parts begins
# (``HEROKU_API``, ``my_heroku``, ``herokuKey``), not inside a word.
_PROVIDERS = (  # noqa: SIM905 - one string of words reads better than a column of quotes
    "adafruit adobe airtable algolia alibaba asana atlassian confluence jira beamer bitbucket "
    "bittrex meraki cloudflare codecov cohere co_api_key coinbase confluent contentful datadog "
    "dnkey discord droneci dropbox etsy facebook fastly finicity finnhub flickr freshbooks "
    "gitter gocardless heroku hubspot intercom jfrog artifactory bintray xray kraken kucoin "
    "launchdarkly linear linkedin linked_in linked-in lob looker mailchimp mailgun mapbox "
    "mattermost messagebird message_bird message-bird netlify new-relic newrelic new_relic "
    "nytimes newyorktimes new-york-times okta plaid private_ai private-ai privateai rapidapi "
    "sendbird sentry contribsys snyk sonar squarespace sumo telegr travis twitch twitter "
    "typeform yandex zendesk"
).split()


_PROVIDER_OP = r"(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"
_PROVIDER_VALUE = (
    r"(?![A-Za-z][A-Za-z0-9+.-]*://)(?=[A-Za-z0-9_=+/.%~-]*[0-9])(?=[A-Za-z0-9_=+/.%~-]*[A-Za-z])"
    r"[A-Za-z0-9_=+/.%~-]{13,511}[A-Za-z0-9_=+/%~-]|[a-f0-9]{8}:[a-f0-9]{8}"
    r"|[0-9]{5,16}:A[A-Za-z0-9_-]{34}"
)

CONTEXTS = (
    Rule(
        "h",
        rf"{_START}(?i:(?:proxy-)?authorization)(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
        rf"(?:(?P<h_scheme>{_SCHEMES})[ \t]+{_MARKER_AHEAD}(?P<h_cred>[^\s'\",;\\]+)"
        rf"|(?!{_SCHEMES}[ \t]){_MARKER_AHEAD}(?P<h_raw>{_OPAQUE}))",
        ("h_cred", "h_raw"),
        _scheme_kind,
        "authorization",
    ),
    Rule(
        "b",
        rf"{_START}(?i:bearer)[ \t]+{_MARKER_AHEAD}(?P<b_s>{_OPAQUE})",
        ("b_s",),
        "bearer",
        "bearer[ \t]",
    ),
    Rule(
        "u",
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?:\[REDACTED:[a-z0-9_]+\]|[^\s:/@?#\[\]]*):"
        rf"{_MARKER_AHEAD}(?![0-9]{{1,5}}(?:[/?#]|$))"
        r"(?P<u_s>[^\s'\"<>]{1,128})@(?=[A-Za-z0-9\[])",
        ("u_s",),
        "url_credentials",
        r"://[^\s/]*:[^\s]*@",
    ),
    Rule(
        "docker",
        r"(?<![A-Za-z0-9_])(?i:auth)(?P<docker_q>\\?\")[ \t]*:[ \t]*(?P=docker_q)"
        r"(?P<docker_s>[A-Za-z0-9+/]{8,}={0,2})(?P=docker_q)",
        ("docker_s",),
        "docker_auth",
        'auth\\\\?"[ \t]*:',
    ),
    Rule(
        "a",
        rf"(?<!{_NAME})(?P<a_name>{_SECRET_NAME})"
        rf"(?:{_PASSWORD_NAME}(?:\\?[\"'])?[ \t]*:(?![=:])[ \t]*{_assigned_value('w', 'words')}"
        rf"|{_PASSWORD_NAME}(?:\\?[\"'])?[ \t]*{_ASSIGN}[ \t]*{_assigned_value('v', 'token')}"
        rf"|(?:\\?[\"'])?[ \t]*{_ASSIGN}[ \t]*{_assigned_value('a', 'credential')})",
        ("w_qv", "w_uv", "v_qv", "v_uv", "a_qv", "a_uv"),
        _assignment_kind,
        rf"{_ENDINGS_TRIE}(?:\\?[\"'])?[ \t]*[:=]",
    ),
    Rule(
        "c",
        rf"(?<!\S)(?P<c_name>-{_SECRET_NAME})[ \t]+(?![-=:])"
        rf"{_assigned_value('c', 'credential')}",
        ("c_qv", "c_uv"),
        _assignment_kind,
        rf"-[a-z0-9_.-]*{_ENDINGS_TRIE}[ \t]",
    ),
    Rule(
        "netrc",
        r"(?<![A-Za-z0-9_-])(?i:login|machine|account)\s+[^\s]+\s+"
        r"(?:(?i:login|account)\s+[^\s]+\s+)?(?i:password|passwd)\s+"
        rf"{_MARKER_AHEAD}(?P<netrc_s>[^\s'\"\\]+)"
        rf"|{_LINE_START}(?i:password|passwd)[ \t]+{_MARKER_AHEAD}{_CREDENTIAL_LIKE}"
        rf"(?P<netrcl_s>[^\s'\"\\]+){_LINE_END}",
        ("netrc_s", "netrcl_s"),
        "password",
        r"passw(?:or)?d\s",
    ),
    Rule(
        "mysql",
        r"(?<![A-Za-z0-9_-])(?i:mysql(?:dump|admin|sh|import|check)?|mariadb)[ \t][^\n]*?"
        rf"(?<=[ \t])-p{_MARKER_AHEAD}(?P<mysql_s>[^\s'\"-][^\s'\"]*)",
        ("mysql_s",),
        "password",
        "(?:mysql|mariadb)[^\n]*[ \t]-p",
    ),
    Rule(
        "curlu",
        r"(?<![A-Za-z0-9_-])(?:-u|--user)(?:=|[ \t]+)(?P<curlu_q>[\"']?)[^\s:\"']+:"
        rf"{_MARKER_AHEAD}(?P<curlu_s>[^\s\"']+)(?P=curlu_q)",
        ("curlu_s",),
        "password",
        "-(?:u|-user)[= \t][^\n]*:",
    ),
    Rule(
        "nuget",
        r"(?<![A-Za-z0-9])(?i:key)=\\?\"(?i:(?:ClearText)?Password)\\?\"[ \t]+(?i:value)="
        rf"(?P<nuget_q>\\?\"){_MARKER_AHEAD}(?P<nuget_s>[^\"\\]+)(?P=nuget_q)",
        ("nuget_s",),
        "password",
        'password\\\\?"[ \t]+value=',
    ),
    Rule(
        "pgpass",
        rf"{_LINE_START}[A-Za-z0-9_.*-]+:(?:[0-9]{{1,5}}|\*):[^\s:]+:[^\s:]+:"
        rf"{_MARKER_AHEAD}(?P<pgpass_s>[^\s'\"\\]+){_LINE_END}",
        ("pgpass_s",),
        "password",
        r":(?:[0-9]{1,5}|\*):[^\s:]+:[^\s:]+:",
    ),
    Rule(
        "p",
        rf"(?<![A-Za-z0-9])(?i:{_trie(_PROVIDERS)})"
        rf"[ \t\w.-]{{0,20}}(?:\\?[\s'\"]){{0,3}}{_PROVIDER_OP}(?:\\?[`'\"\s=]){{0,5}}"
        rf"{_MARKER_AHEAD}(?P<p_s>{_PROVIDER_VALUE})(?=[`'\"\s;,.)\]}}\\]|$)",
        ("p_s",),
        "api_key",
        rf"{_trie(_PROVIDERS)}[ \t\w.-]{{0,20}}[\s'\"\\]{{0,6}}[=>:|?,]",
    ),
)

KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [
            *(r.kind for r in FORMATS if isinstance(r.kind, str)),
            "aws_secret_key",
            "authorization",
            "bearer",
            *(r.kind for r in CONTEXTS if isinstance(r.kind, str)),
            "password",
            "secret",
            "token",
        ]
    )
)
