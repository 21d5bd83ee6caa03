"""Which settings are secrets, and keeping their values out of files, messages and logs.

A secret is a storage option or setting whose last name part is a credential (key, secret,
token, password, the AWS names, SSECustomerKey, ...), wherever it sits: `--storage-option
secret=...`, `rsm.config.storage.key=...`, `rsm.config.storage.s3_additional_kwargs.SSECustomerKey`.
Values are secrets whatever their type (a numeric secret parses as a number). The userinfo of a
URL (`s3://KEY:SECRET@bucket/prefix`) is a secret too: `redact_url` drops it.

A log root never stores secrets: LogRoot keeps them in memory (from the broker's config, the
command line or the environment) and writes the root's files without them.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

SECRET_NAMES = frozenset({
    "key", "secret", "token", "password", "passwd", "passphrase", "session_token",
    "access_key", "secret_key", "access_key_id", "secret_access_key", "aws_access_key_id",
    "aws_secret_access_key", "aws_session_token", "ssecustomerkey", "sse_customer_key",
    "ssecustomerkeymd5", "client_secret", "account_key", "sas_token", "credentials",
})
MASK = "***"
_MIN_SECRET = 3          # shorter values would mask unrelated text; they are not worth hiding


# Dotted credential names whose last part alone says nothing (Aiven's storage backend settings:
# rsm.config.storage.aws.access.key.id, ...gcs.credentials.json, ...azure.connection.string).
SECRET_SUFFIXES = ("access.key.id", "credentials.json", "connection.string")


def is_secret_name(name: str) -> bool:
    """True for a setting or option whose value is a credential (its last dotted part, or one
    of the dotted SECRET_SUFFIXES)."""
    lower = name.lower()
    return lower.rsplit(".", 1)[-1] in SECRET_NAMES or lower.endswith(SECRET_SUFFIXES)


def url_userinfo(url: str) -> str | None:
    """The `user:password` part of a URL, or None."""
    protocol, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
    if not sep:
        return None
    netloc = rest.partition("/")[0]
    return netloc.rsplit("@", 1)[0] if "@" in netloc else None


def redact_url(url: str) -> str:
    """The URL without any `user:password@` part."""
    info = url_userinfo(url)
    if info is None:
        return url
    protocol, _, rest = url.partition("://")
    return f"{protocol}://{rest[len(info) + 1:]}"


def secret_values(options: Mapping[str, Any] | None, *, all_values: bool = False) -> list[str]:
    """Every secret value in (nested) options or flat settings, as text; `all_values`: every
    value below this level (the options under a secret name)."""
    found: list[str] = []
    for name, value in (options or {}).items():
        secret = all_values or is_secret_name(str(name))
        if isinstance(value, Mapping):
            found.extend(secret_values(value, all_values=secret))
        elif secret and value is not None and not isinstance(value, bool):
            found.append(str(value))
        elif isinstance(value, str):
            info = url_userinfo(value)
            if info is not None:
                found.append(info)
                found.extend(p for p in info.split(":") if p)
    return [v for v in dict.fromkeys(found) if len(v) >= _MIN_SECRET]


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value (longest first) replaced by ***."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SECRET:
            text = text.replace(secret, MASK)
    return text


def split_secrets(settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(what may be stored, what may not) of flat settings: secret names go to the second dict,
    and a URL value with userinfo is stored without it (the whole value kept with the secrets)."""
    public: dict[str, str] = {}
    private: dict[str, str] = {}
    for name, value in settings.items():
        if is_secret_name(name):
            private[name] = value
        elif isinstance(value, str) and url_userinfo(value) is not None:
            private[name] = value
            public[name] = redact_url(value)
        else:
            public[name] = value
    return public, private


class RedactingFilter(logging.Filter):
    """A logging filter that masks secret values in every record it passes (message and
    arguments formatted first, exception text included)."""

    def __init__(self, secrets: Iterable[str]):
        super().__init__()
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        masked = redact(message, self.secrets)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info:
            import traceback
            text = "".join(traceback.format_exception(*record.exc_info))
            record.exc_text = redact(text, self.secrets)
            record.exc_info = None
            record.msg = f"{record.msg}\n{record.exc_text}"
            record.exc_text = None
        return True
