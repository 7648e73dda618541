"""The provider credentials adapted from gitleaks' default rules, as data for ``scrub.rules``:
tokens whose own prefix names the provider, and providers whose name stands before a value."""

from __future__ import annotations

__all__ = ["PROVIDERS", "PROVIDER_OP", "PROVIDER_TOKENS", "PROVIDER_VALUE"]

# Self-identifying tokens adapted from gitleaks' default rules (config/gitleaks.toml): the
# prefix that names the provider, then the token's alphabet and length. Kinds follow the rule ids.
# A data table, one row a line: the formatter would reflow its rows.
PROVIDER_TOKENS = (
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

# gitleaks' provider rules that need the provider's name before the value: the names here, then
# up to 20 name characters, an assignment or a comma, and a value shaped like a token (letters
# and digits, 14 or more). Matched case-insensitively where a name or one of its parts begins
# (``HEROKU_API``, ``my_heroku``, ``herokuKey``), not inside a word.
PROVIDERS = (  # noqa: SIM905 - one string of words reads better than a column of quotes
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


PROVIDER_OP = r"(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"
PROVIDER_VALUE = (
    r"(?![A-Za-z][A-Za-z0-9+.-]*://)(?=[A-Za-z0-9_=+/.%~-]*[0-9])(?=[A-Za-z0-9_=+/.%~-]*[A-Za-z])"
    r"[A-Za-z0-9_=+/.%~-]{13,511}[A-Za-z0-9_=+/%~-]|[a-f0-9]{8}:[a-f0-9]{8}"
    r"|[0-9]{5,16}:A[A-Za-z0-9_-]{34}"
)
