"""Fake secrets, look-alikes that are not secrets, and the places a secret turns up in text.

Every secret here is generated from a fixed seed: it has the shape of a real credential and is
none. Entries whose kind is known only by context (``password``, ``bearer``, ...) carry that
context, so each string is detectable on its own.
"""

from __future__ import annotations

import json
import random
import string

# Fixed seed: the corpus is the same on every run and every machine.
_SEED = 20261129

# Alphabets of the generated values.
_UPPER_DIGITS = string.ascii_uppercase + string.digits
_ALNUM = string.ascii_letters + string.digits
_URLSAFE = _ALNUM + "-_"
_B64 = _ALNUM + "+/"

_rng = random.Random(_SEED)


def _r(alphabet: str, n: int) -> str:
    """n characters drawn from alphabet."""
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _b64url_json(n: int) -> str:
    """A base64url JSON object segment as JWTs have ("eyJ" is '{"')."""
    return "eyJ" + _r(_URLSAFE, n)


def _pem(label: str, lines: int, headers: str = "") -> str:
    """A PEM private key block with a random body."""
    body = "\n".join(_r(_B64, 64) for _ in range(lines))
    return (
        f"-----BEGIN {label}PRIVATE KEY-----\n{headers}{body}\n{_r(_B64, 20)}==\n"
        f"-----END {label}PRIVATE KEY-----"
    )


SECRETS: list[tuple[str, str]] = [
    ("private_key", _pem("RSA ", 6)),
    ("private_key", _pem("EC ", 3)),
    ("private_key", _pem("OPENSSH ", 5)),
    ("private_key", _pem("ENCRYPTED ", 4)),
    ("private_key", _pem("", 4)),
    (
        "private_key",
        _pem(
            "RSA ",
            4,
            f"Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{_r('0123456789ABCDEF', 32)}\n\n",
        ),
    ),
    ("aws_access_key", "AKIA" + _r(_UPPER_DIGITS, 16)),
    ("aws_access_key", "ASIA" + _r(_UPPER_DIGITS, 16)),
    ("aws_access_key", "AGPA" + _r(_UPPER_DIGITS, 16)),
    ("aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_secret_key", "aws_secret_access_key = " + _r(_B64, 40)),
    ("aws_secret_key", "AWS_SECRET_ACCESS_KEY=" + _r(_B64, 40)),
    ("aws_secret_key", '"SecretAccessKey": "' + _r(_B64, 40) + '"'),
    ("github_token", "ghp_" + _r(_ALNUM, 36)),
    ("github_token", "gho_" + _r(_ALNUM, 36)),
    ("github_token", "ghs_" + _r(_ALNUM, 36)),
    ("github_token", "ghu_" + _r(_ALNUM, 36)),
    ("github_token", "ghr_" + _r(_ALNUM, 36)),
    ("github_token", "github_pat_" + _r(_ALNUM, 22) + "_" + _r(_ALNUM, 59)),
    ("anthropic_key", "sk-ant-api03-" + _r(_URLSAFE, 93) + "AA"),
    ("anthropic_key", "sk-ant-admin01-" + _r(_URLSAFE, 93) + "AA"),
    ("anthropic_key", "sk-ant-oat01-" + _r(_URLSAFE, 60)),
    ("openai_key", "sk-" + _r(_ALNUM, 20) + "T3BlbkFJ" + _r(_ALNUM, 20)),
    ("openai_key", "sk-proj-" + _r(_URLSAFE, 120) + "A1"),
    ("openai_key", "sk-svcacct-" + _r(_URLSAFE, 80) + "Z9"),
    ("openai_key", "sk-admin-" + _r(_URLSAFE, 60) + "Q7"),
    ("slack_token", f"xoxb-{_r(string.digits, 12)}-{_r(string.digits, 13)}-{_r(_ALNUM, 24)}"),
    ("slack_token", f"xoxp-{_r(string.digits, 12)}-{_r(string.digits, 12)}-{_r(_ALNUM, 32)}"),
    ("slack_token", f"xapp-1-A{_r(_UPPER_DIGITS, 10)}-{_r(string.digits, 13)}-{_r(_ALNUM, 64)}"),
    (
        "slack_token",
        f"https://hooks.slack.com/services/T{_r(_UPPER_DIGITS, 8)}/B{_r(_UPPER_DIGITS, 10)}/"
        + _r(_ALNUM, 24),
    ),
    ("discord_token", f"M{_r(_ALNUM, 25)}.{_r(_URLSAFE, 6)}.{_r(_URLSAFE, 38)}"),
    ("discord_token", f"N{_r(_ALNUM, 23)}.{_r(_URLSAFE, 6)}.{_r(_URLSAFE, 27)}"),
    (
        "discord_token",
        f"https://discord.com/api/webhooks/{_r(string.digits, 18)}/{_r(_URLSAFE, 68)}",
    ),
    ("jwt", f"{_b64url_json(30)}.{_b64url_json(80)}.{_r(_URLSAFE, 43)}"),
    ("jwt", f"{_b64url_json(16)}.{_b64url_json(120)}.{_r(_URLSAFE, 86)}"),
    ("jwt", f"{_b64url_json(20)}.{_b64url_json(40)}.{_r(_URLSAFE, 342)}"),
    ("bearer", "Bearer " + _r(_ALNUM, 40)),
    ("bearer", "Bearer " + _r(_URLSAFE + ".~", 64)),
    ("bearer", "bearer " + _r(string.digits + "abcdef", 32)),
    ("authorization", "Authorization: Basic " + _r(_B64, 28) + "=="),
    ("authorization", "Authorization: token " + _r(_ALNUM, 40)),
    ("authorization", "authorization: " + _r(_ALNUM, 24) + "7"),
    ("authorization", "Proxy-Authorization: Basic " + _r(_B64, 20)),
    ("url_credentials", f"postgres://app:{_r(_ALNUM, 16)}@db.internal:5432/app"),
    ("url_credentials", f"redis://:{_r(_ALNUM, 24)}@cache.local:6379/0"),
    ("url_credentials", f"https://deploy:{_r(_ALNUM + '%!*', 20)}@git.example.com/org/repo.git"),
    ("url_credentials", f"amqp://guest:{_r(_ALNUM, 12)}@mq.example.org"),
    ("password", "password=" + _r(_ALNUM + "!#%", 14)),
    ("password", 'PASSWORD: "' + _r(_ALNUM + " !#", 12) + '"'),
    ("password", "DB_PASSWORD=" + _r(_ALNUM, 18)),
    ("password", "--password " + _r(_ALNUM + "!%", 12)),
    ("password", "passphrase = '" + _r(_ALNUM + " ", 22) + "'"),
    ("secret", '"client_secret": "' + _r(_URLSAFE, 32) + '"'),
    ("secret", "WEBHOOK_SECRET=" + _r(_ALNUM, 40)),
    ("secret", "secret: " + _r(_ALNUM, 24)),
    ("token", "GITLAB_TOKEN=glpat-" + _r(_URLSAFE, 20)),
    ("token", '"access_token": "' + _r(_URLSAFE, 48) + '"'),
    ("token", "--token " + _r(_ALNUM, 30)),
    ("api_key", "api_key = '" + _r(_ALNUM, 32) + "'"),
    ("api_key", "X-Api-Key: " + _r(_ALNUM, 32)),
    ("api_key", '"apiKey": "' + _r(_ALNUM, 39) + '"'),
]

NEAR_MISSES: list[str] = [
    "Fixed in 3f786850e387550fdab836ed7e6dc881de23001b, see the log.",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed",
    "The payload was SGVsbG8sIHdvcmxkISBUaGlzIGlzIGp1c3QgYmFzZTY0Lg== in base64.",
    "Click the password reset link we emailed you.",
    "the token is in the vault",
    "He was the bearer of bad news.",
    "Bearer tokens expire after an hour.",
    "Run it with task-skip enabled.",
    "Our risk-assessment and the ask-me-anything thread used scikit-learn (sk-learn).",
    "Docs: https://example.com/docs/install?page=2#linux",
    "postgres://db.internal:5432/app",
    "Clone https://user@example.com/org/repo.git first.",
    "Mail alice@example.com or bob.smith+tag@mail.example.org.",
    "ssh git@github.com and then ssh deploy@10.0.0.5 -p 2222",
    "Upgraded from v1.2.3 to 2.0.0-rc.1 on Python 3.11.9.",
    "Meeting on 2026-11-29T17:00:00Z, notes dated 2026-11-30.",
    "Use #fff for the text and #a1b2c3 for borders.",
    "AKIA is the prefix AWS gives long-term access key IDs.",
    "password = input()",
    "token = get_token(session)",
    "password = getpass.getpass()",
    'secret = os.environ["APP_SECRET"]',
    "def login(user: str, password: str) -> bool:",
    "token: None",
    "password=${DB_PASSWORD}",
    'print("Password: ")',
    "max_tokens: 256",
    "tokenizer = AutoTokenizer.from_pretrained(name)",
    "Authorization required before you continue.",
    "The secret to good bread is patience.",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "eyJhbGciOiJIUzI1NiJ9 alone is only a JWT header.",
    "xoxb- is the prefix of Slack bot tokens, ghp_ of GitHub ones.",
    "Webhooks go to hooks.slack.com and https://discord.com/api/webhooks.",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/120.0",
    "The MD5 is d41d8cd98f00b204e9800998ecf8427e.",
    'Leave "password": "" empty to be asked at login.',
]


def embed(secret: str) -> list[str]:
    """The secret in prose, in code, in JSON, in a shell line and in a log line."""
    return [
        f"Sure, use {secret} when you log in, then rotate it.",
        f"client = Client(api_key={json.dumps(secret)})",
        json.dumps({"level": "info", "message": f"loaded config {secret}", "attempt": 2}),
        f"$ ./deploy.sh --verbose {secret} 2>&1 | tee deploy.log",
        f"2026-11-29T17:00:01Z INFO  worker[4211]: connecting with {secret}\n",
    ]
