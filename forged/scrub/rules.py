"""The secret rules: which text is a credential, as data for the scrubber.

Each rule is an exact Python regex (compiled with ``re.ASCII``) whose named groups hold the
secret, the kind its marker names, and an *anchor*: a simpler regex that every match of the rule
contains, matched case-insensitively. Anchors use only what Hyperscan and ``re`` both understand
(no lookarounds, no backreferences, no possessive or atomic groups), so a multi-pattern engine can
find the few strings worth the exact regexes; the scrubber's tests check that each anchor is a
superset of its rule. The regex pieces rules share live in ``scrub.patterns``; the provider
tables adapted from gitleaks in ``scrub.providers``.

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

from forged.scrub.patterns import (
    ASSIGN,
    CREDENTIAL_LIKE,
    END,
    ENDINGS_TRIE,
    LINE_END,
    LINE_START,
    MARKER_AHEAD,
    NAME,
    OPAQUE,
    PASSWORD_NAME,
    PROSE,
    SCHEMES,
    SECRET_NAME,
    START,
    assigned_value,
    name_kind,
    trie,
)
from forged.scrub.providers import PROVIDER_OP, PROVIDER_TOKENS, PROVIDER_VALUE, PROVIDERS

__all__ = ["CONTEXTS", "FORMATS", "KINDS", "Rule"]


class Rule(NamedTuple):
    """One alternative of a pass: the groups that hold the secret, its kind, and its anchor."""

    tag: str
    pattern: str
    secrets: tuple[str, ...]
    kind: str | Callable[[re.Match[str], str], str]
    anchor: str


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
    return Rule(tag, rf"{START}(?P<{tag}_s>{body}){END}", (f"{tag}_s",), kind, anchor)


FORMATS = (
    Rule(
        "pem",
        r"(?P<pem_s>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----))*+"
        rf"(?:-----END[A-Z0-9 ]{{0,40}}PRIVATE KEY(?: BLOCK)?-----{END})?)",
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
        rf"{START}(?P<awsp_id>(?:AKIA|ASIA)[A-Z0-9]{{16}})[ \t]*[,;\t][ \t]*"
        r"(?P<awsp_s>(?=[A-Za-z0-9/+]*[0-9])(?=[A-Za-z0-9/+]*[a-z])[A-Za-z0-9/+]{40})"
        r"(?![A-Za-z0-9/+=])",
        ("awsp_id", "awsp_s"),
        _aws_pair_kind,
        "(?:akia|asia)[a-z0-9]{16}[ \t]*[,;\t]",
    ),
    Rule(
        "akia",
        rf"{START}(?P<akia_s>(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA|A3T[A-Z0-9])"
        rf"[A-Z0-9]{{16}}){END}",
        ("akia_s",),
        "aws_access_key",
        "(?:akia|asia|agpa|aida|aroa|aipa|anpa|anva|abia|acca|a3t[a-z0-9])[a-z0-9]{16}",
    ),
    Rule(
        "awss",
        r"(?<![A-Za-z0-9])(?:(?i:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_. -]?access[_. -]?key)"
        r"\\?[\"']?[ \t]*(?:\[[^\]\n]{0,40}\][ \t]*)?(?:=>|:=|[:=])"
        rf"|(?<!\[REDACTED:)(?i:aws){PROSE}{{0,60}}?(?i:secret){PROSE}{{0,40}}?)[ \t]*\\?[\"']?"
        r"(?<![A-Za-z0-9/+])(?P<awss_s>(?=[A-Za-z0-9/+]*[0-9])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("awss_s",),
        "aws_secret_key",
        "secret[_. -]?access[_. -]?key|aws[^\n]*secret",
    ),
    Rule(
        "hexkey",
        r"(?<![A-Za-z0-9])(?<!\[REDACTED:)(?i:private[ _-]?key|(?:eth|ethereum|wallet)[ _-]?key)"
        rf"{PROSE}{{0,30}}?"
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
        rf"{START}(?P<ant_s>sk-ant-[A-Za-z0-9_-]{{20,}})",
        ("ant_s",),
        "anthropic_key",
        "sk-ant-",
    ),
    Rule(
        "oai",
        rf"{START}(?P<oai_s>sk-(?!ant-)(?:proj-|svcacct-|admin-)?"
        r"(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Z])[A-Za-z0-9_-]{20,})",
        ("oai_s",),
        "openai_key",
        "sk-[a-z0-9_-]{20}",
    ),
    Rule(
        "slack",
        rf"{START}(?P<slack_s>xox[abposr]-[A-Za-z0-9-]{{10,}}|xapp-[0-9]-[A-Za-z0-9-]{{10,}})"
        rf"|{START}(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<slackw_s>[A-Za-z0-9_+/-]{10,})",
        ("slack_s", "slackw_s"),
        "slack_token",
        r"xox[abposr]-|xapp-|hooks\.slack\.com/",
    ),
    Rule(
        "discord",
        rf"{START}(?P<discord_s>[MNO][A-Za-z0-9]{{23,25}}\.[A-Za-z0-9_-]{{6}}\.[A-Za-z0-9_-]{{27,}})"
        rf"|{START}(?:https?://)?(?:ptb\.|canary\.)?discord(?:app)?\.com/api/(?:v[0-9]+/)?"
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
        for i, (kind, body, anchor) in enumerate(PROVIDER_TOKENS)
    ),
)


CONTEXTS = (
    Rule(
        "h",
        rf"{START}(?i:(?:proxy-)?authorization)(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
        rf"(?:(?P<h_scheme>{SCHEMES})[ \t]+{MARKER_AHEAD}(?P<h_cred>[^\s'\",;\\]+)"
        rf"|(?!{SCHEMES}[ \t]){MARKER_AHEAD}(?P<h_raw>{OPAQUE}))",
        ("h_cred", "h_raw"),
        _scheme_kind,
        "authorization",
    ),
    Rule(
        "b",
        rf"{START}(?i:bearer)[ \t]+{MARKER_AHEAD}(?P<b_s>{OPAQUE})",
        ("b_s",),
        "bearer",
        "bearer[ \t]",
    ),
    Rule(
        "u",
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?:\[REDACTED:[a-z0-9_]+\]|[^\s:/@?#\[\]]*):"
        rf"{MARKER_AHEAD}(?![0-9]{{1,5}}(?:[/?#]|$))"
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
        rf"(?<!{NAME})(?P<a_name>{SECRET_NAME})"
        rf"(?:{PASSWORD_NAME}(?:\\?[\"'])?[ \t]*:(?![=:])[ \t]*{assigned_value('w', 'words')}"
        rf"|{PASSWORD_NAME}(?:\\?[\"'])?[ \t]*{ASSIGN}[ \t]*{assigned_value('v', 'token')}"
        rf"|(?:\\?[\"'])?[ \t]*{ASSIGN}[ \t]*{assigned_value('a', 'credential')})",
        ("w_qv", "w_uv", "v_qv", "v_uv", "a_qv", "a_uv"),
        _assignment_kind,
        rf"{ENDINGS_TRIE}(?:\\?[\"'])?[ \t]*[:=]",
    ),
    Rule(
        "c",
        rf"(?<!\S)(?P<c_name>-{SECRET_NAME})[ \t]+(?![-=:])"
        rf"{assigned_value('c', 'credential')}",
        ("c_qv", "c_uv"),
        _assignment_kind,
        rf"-[a-z0-9_.-]*{ENDINGS_TRIE}[ \t]",
    ),
    Rule(
        "netrc",
        r"(?<![A-Za-z0-9_-])(?i:login|machine|account)\s+[^\s]+\s+"
        r"(?:(?i:login|account)\s+[^\s]+\s+)?(?i:password|passwd)\s+"
        rf"{MARKER_AHEAD}(?P<netrc_s>[^\s'\"\\]+)"
        rf"|{LINE_START}(?i:password|passwd)[ \t]+{MARKER_AHEAD}{CREDENTIAL_LIKE}"
        rf"(?P<netrcl_s>[^\s'\"\\]+){LINE_END}",
        ("netrc_s", "netrcl_s"),
        "password",
        r"passw(?:or)?d\s",
    ),
    Rule(
        "mysql",
        r"(?<![A-Za-z0-9_-])(?i:mysql(?:dump|admin|sh|import|check)?|mariadb)[ \t][^\n]*?"
        rf"(?<=[ \t])-p{MARKER_AHEAD}(?P<mysql_s>[^\s'\"-][^\s'\"]*)",
        ("mysql_s",),
        "password",
        "(?:mysql|mariadb)[^\n]*[ \t]-p",
    ),
    Rule(
        "curlu",
        r"(?<![A-Za-z0-9_-])(?:-u|--user)(?:=|[ \t]+)(?P<curlu_q>[\"']?)[^\s:\"']+:"
        rf"{MARKER_AHEAD}(?P<curlu_s>[^\s\"']+)(?P=curlu_q)",
        ("curlu_s",),
        "password",
        "-(?:u|-user)[= \t][^\n]*:",
    ),
    Rule(
        "nuget",
        r"(?<![A-Za-z0-9])(?i:key)=\\?\"(?i:(?:ClearText)?Password)\\?\"[ \t]+(?i:value)="
        rf"(?P<nuget_q>\\?\"){MARKER_AHEAD}(?P<nuget_s>[^\"\\]+)(?P=nuget_q)",
        ("nuget_s",),
        "password",
        'password\\\\?"[ \t]+value=',
    ),
    Rule(
        "pgpass",
        rf"{LINE_START}[A-Za-z0-9_.*-]+:(?:[0-9]{{1,5}}|\*):[^\s:]+:[^\s:]+:"
        rf"{MARKER_AHEAD}(?P<pgpass_s>[^\s'\"\\]+){LINE_END}",
        ("pgpass_s",),
        "password",
        r":(?:[0-9]{1,5}|\*):[^\s:]+:[^\s:]+:",
    ),
    Rule(
        "p",
        rf"(?<![A-Za-z0-9])(?i:{trie(PROVIDERS)})"
        rf"[ \t\w.-]{{0,20}}(?:\\?[\s'\"]){{0,3}}{PROVIDER_OP}(?:\\?[`'\"\s=]){{0,5}}"
        rf"{MARKER_AHEAD}(?P<p_s>{PROVIDER_VALUE})(?=[`'\"\s;,.)\]}}\\]|$)",
        ("p_s",),
        "api_key",
        rf"{trie(PROVIDERS)}[ \t\w.-]{{0,20}}[\s'\"\\]{{0,6}}[=>:|?,]",
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
