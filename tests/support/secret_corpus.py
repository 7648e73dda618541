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
_HEX = "0123456789abcdef"
_LOWER_DIGITS = string.ascii_lowercase + string.digits

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
    ("gitlab_token", "GITLAB_TOKEN=glpat-" + _r(_URLSAFE, 20)),
    ("token", '"access_token": "' + _r(_URLSAFE, 48) + '"'),
    ("token", "--token " + _r(_ALNUM, 30)),
    ("api_key", "api_key = '" + _r(_ALNUM, 32) + "'"),
    ("api_key", "X-Api-Key: " + _r(_ALNUM, 32)),
    ("api_key", '"apiKey": "' + _r(_ALNUM, 39) + '"'),
]

# The forms of the hardening issue that were not caught, or only in part.
SECRETS += [
    (
        "aws_secret_key",
        f"Access key ID,Secret access key\n{'AKIA' + _r(_UPPER_DIGITS, 16)},{_r(_B64, 39)}7",
    ),
    ("aws_secret_key", f"AWS Secret Access Key [None]: {_r(_B64, 39)}7"),
    ("aws_secret_key", f"my AWS secret key is {_r(_B64, 39)}7 so keep it"),
    (
        "azure_key",
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={_r(_B64, 86)}==;EndpointSuffix=core.windows.net",
    ),
    (
        "azure_sas",
        f"https://acme.blob.core.windows.net/c/f.txt?sv=2022-11-02&se=2026-12-01&sp=r&sig={_r(_ALNUM, 40)}%3D",
    ),
    ("stripe_key", "sk_live_" + _r(_ALNUM, 24)),
    ("stripe_key", "rk_live_" + _r(_ALNUM, 99)),
    ("gcp_api_key", "AIza" + _r(_URLSAFE, 35)),
    ("npm_token", "npm_" + _r(_ALNUM, 36)),
    ("gitlab_token", "glpat-" + _r(_URLSAFE, 20)),
    ("huggingface_token", "hf_" + _r(string.ascii_letters, 34)),
    ("sendgrid_key", f"SG.{_r(_URLSAFE, 22)}.{_r(_URLSAFE, 43)}"),
    ("telegram_bot_token", f"{_r(string.digits, 10)}:AA{_r(_URLSAFE, 33)}"),
    ("docker_auth", '{"auths": {"registry.example.com": {"auth": "' + _r(_B64, 40) + '="}}}'),
    (
        "private_key",
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy\nPublic-Lines: 2\n"
        f"{_r(_B64, 64)}\n{_r(_B64, 20)}\nPrivate-Lines: 1\n{_r(_B64, 44)}\n"
        f"Private-MAC: {_r(_HEX, 64)}",
    ),
    ("password", f"machine api.example.com login deploy password {_r(_ALNUM, 16)}"),
    ("password", f"mysql -u root -p{_r(_ALNUM, 14)} shop"),
    ("password", f"\ndb.internal:5432:app:alice:{_r(_ALNUM, 18)}\n"),
    ("secret", '"private_key_id": "' + _r(_HEX, 40) + '"'),
    ("api_key", "Ocp-Apim-Subscription-Key: " + _r(_HEX, 32)),
    ("private_key", "my ethereum private key is 0x" + _r(_HEX, 64)),
    ("password", "password: correct horse battery staple"),
    (
        "url_credentials",
        f"postgres://app:{_r(_ALNUM, 6)}@{_r(_ALNUM, 4)}/#{_r(_ALNUM, 5)}@db.internal:5432/app",
    ),
    ("password", f"curl https://api.example.com -u deploy:{_r(_ALNUM, 16)}"),
    ("password", f'<add key="ClearTextPassword" value="{_r(_ALNUM, 16)}" />'),
    (
        "api_key",
        f"HEROKU_API: {_r(_HEX, 8)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 12)}",
    ),
    ("api_key", f'"twitter_consumer": "{_r(_LOWER_DIGITS, 25)}"'),
    ("api_key", f"datadog_app = {_r(_LOWER_DIGITS, 40)}"),
]

# Tokens that name their provider by their prefix, one per rule adapted from gitleaks.
SECRETS += [
    (
        "onepassword_secret_key",
        f"A3-{_r(_UPPER_DIGITS, 6)}-{_r(_UPPER_DIGITS, 11)}-{_r(_UPPER_DIGITS, 5)}-{_r(_UPPER_DIGITS, 5)}-{_r(_UPPER_DIGITS, 5)}",
    ),
    ("onepassword_service_token", "ops_eyJ" + _r(_B64, 260)),
    ("adobe_client_secret", "p8e-" + _r(_ALNUM, 32)),
    ("age_secret_key", "AGE-SECRET-KEY-1" + _r("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)),
    ("airtable_token", f"pat{_r(_ALNUM, 14)}.{_r(_HEX, 64)}"),
    ("alibaba_access_key", "LTAI" + _r(_ALNUM, 20)),
    ("artifactory_key", "AKCp" + _r(_ALNUM, 69)),
    ("atlassian_token", "ATATT3" + _r(_URLSAFE, 186)),
    (
        "authress_key",
        f"sc_{_r(_LOWER_DIGITS, 10)}.{_r(_LOWER_DIGITS, 5)}.acc_{_r(_LOWER_DIGITS, 20)}.{_r(_B64, 60)}",
    ),
    ("aws_bedrock_key", "ABSK" + _r(_B64, 120)),
    ("clickhouse_key", "4b1d" + _r(_ALNUM, 38)),
    ("clojars_token", "CLOJARS_" + _r(_LOWER_DIGITS, 60)),
    ("cloudflare_origin_ca_key", f"v1.0-{_r(_HEX, 24)}-{_r(_HEX, 146)}"),
    ("databricks_token", "dapi" + _r(_HEX, 32)),
    ("digitalocean_token", "dop_v1_" + _r(_HEX, 64)),
    ("doppler_token", "dp.pt." + _r(_ALNUM, 43)),
    ("duffel_token", "duffel_live_" + _r(_URLSAFE, 43)),
    ("dynatrace_token", f"dt0c01.{_r(_UPPER_DIGITS, 24)}.{_r(_ALNUM, 64)}"),
    ("easypost_token", "EZAK" + _r(_ALNUM, 54)),
    ("facebook_token", "EAAC" + _r(_ALNUM, 120)),
    ("flutterwave_key", f"FLWSECK_TEST-{_r('abcdef0123456789', 32)}-X"),
    ("flyio_token", "fo1_" + _r(_URLSAFE, 43)),
    ("frameio_token", "fio-u-" + _r(_URLSAFE, 64)),
    ("grafana_token", f"glsa_{_r(_ALNUM, 32)}_{_r(_HEX, 8)}"),
    ("harness_key", f"pat.{_r(_URLSAFE, 22)}.{_r(_ALNUM, 24)}.{_r(_ALNUM, 20)}"),
    ("terraform_token", f"{_r(_ALNUM, 14)}.atlasv1.{_r(_URLSAFE, 64)}"),
    ("heroku_key", "HRKU-AA" + _r(_URLSAFE, 58)),
    ("infracost_token", "ico-" + _r(_ALNUM, 32)),
    ("intra42_secret", "s-s4t2ud-" + _r(_HEX, 64)),
    ("linear_key", "lin_api_" + _r(_ALNUM, 40)),
    ("maxmind_key", f"{_r(_ALNUM, 6)}_{_r(_ALNUM, 29)}_mmk"),
    ("notion_token", f"ntn_{_r(string.digits, 11)}{_r(_ALNUM, 35)}"),
    ("octopus_key", "API-" + _r(_UPPER_DIGITS, 26)),
    ("openshift_token", "sha256~" + _r(_URLSAFE, 43)),
    ("perplexity_key", "pplx-" + _r(_ALNUM, 48)),
    ("planetscale_token", "pscale_tkn_" + _r(_URLSAFE, 43)),
    ("postman_token", f"PMAK-{_r(_HEX, 24)}-{_r(_HEX, 34)}"),
    ("prefect_token", "pnu_" + _r(_ALNUM, 36)),
    ("pulumi_token", "pul-" + _r(_HEX, 40)),
    ("pypi_token", "pypi-AgEIcHlwaS5vcmc" + _r(_URLSAFE, 70)),
    ("readme_token", "rdme_" + _r(_LOWER_DIGITS, 70)),
    ("rubygems_token", "rubygems_" + _r(_HEX, 48)),
    ("scalingo_token", "tk-us-" + _r(_URLSAFE, 48)),
    ("sendinblue_key", f"xkeysib-{_r(_HEX, 64)}-{_r(_ALNUM, 16)}"),
    ("sentry_token", "sntryu_" + _r(_HEX, 64)),
    ("settlemint_token", "sm_pat_" + _r(_ALNUM, 16)),
    ("shippo_token", "shippo_live_" + _r(_HEX, 40)),
    ("shopify_token", "shpat_" + _r(_HEX, 32)),
    ("slack_config_token", "xoxe-1-" + _r(_UPPER_DIGITS, 146)),
    ("sourcegraph_token", "sgp_" + _r(_HEX, 40)),
    ("square_token", "sq0atp-" + _r(_URLSAFE, 22)),
    ("twilio_key", "SK" + _r(_HEX, 32)),
    ("typeform_token", "tfp_" + _r(_URLSAFE, 59)),
    ("vault_token", "hvs." + _r(_URLSAFE, 95)),
    ("yandex_key", "AQVN" + _r(_URLSAFE, 36)),
    (
        "teams_webhook",
        f"https://acme.webhook.office.com/webhookb2/{_r(_HEX, 8)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 12)}@{_r(_HEX, 8)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 12)}/IncomingWebhook/{_r(_HEX, 32)}/{_r(_HEX, 8)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 4)}-{_r(_HEX, 12)}",
    ),
    ("azure_client_secret", f"{_r(_ALNUM, 3)}8Q~{_r(_URLSAFE, 34)}"),
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
    "Secret: the meeting moved to Tuesday.",
    "The password policy needs 12 characters; passwords expire yearly.",
    "My password manager fills it in; I never type the password myself.",
    "To reset your password, open Settings, then Security.",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 and tag v2.4.1",
    "UUIDs like f47ac10b-58cc-4372-a567-0e02b2c3d479 identify each run.",
    "sha512: cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    "Base64 blob: TWFueSBoYW5kcyBtYWtlIGxpZ2h0IHdvcmsu and dGhpcyBpcyBub3QgYSBzZWNyZXQ=",
    "Contact support@stripe.com or billing+eu@heroku.example.org.",
    "The Ethereum transaction was confirmed after 12 blocks.",
    "The secret key to success is practice, says the coach.",
    "Run mysql -u root -p and type it when asked.",
    "Times: 10:30:45 and 12:00:00 on port 5432.",
    "docker run -p 8080:80 nginx and ssh -p 2222 host",
    "https://example.com:8080/path?email=bob@example.org",
    "We use heroku for staging and sentry for errors.",
    "token count: 1,204 (prompt) and 388 (completion)",
    "The api_key field is optional; see the docs.",
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
