"""Secret redaction for everything that shows configuration: CLI output, API answers, logs.

Secrets are found by key (`api_key: …`, `MYSQL_PWD: …`, `--password …`) and by value: every
credential the memory's secret detector (`deerflow.agents.memory.secret_detector`) recognises is
masked wherever it appears, so a Slack webhook, a JWT or an `hf_…` token under a neutral key is
masked too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

from deerflow.agents.memory.secret_detector import secret_spans

__all__ = [
    "REDACTED",
    "RedactingFilter",
    "RedactingFormatter",
    "is_secret_key",
    "redact",
    "redact_text",
]

REDACTED: Final = "***"

# Compared with the end of the normalised key, so `api_key` and `openai_api_key` are secret while
# `max_tokens` or `guaranteed_token_budget` are not. `*_env` keys hold a variable's name.
_SECRET_SUFFIXES: Final = (
    "apikey",
    "api_key",
    "key",
    "token",
    "pat",
    "pass",
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "pwd",
    "pw",
    "secret",
    "secret_key",
    "private_key",
    "access_key",
    "credential",
    "credentials",
    "authorization",
    "cookie",
    "webhook",
    "webhook_url",
)
# Words that make a key secret however they are joined to the rest (`PGPASSWORD`, `apiToken`).
_SECRET_ENDINGS: Final = ("password", "passwd", "passphrase", "secret", "apikey", "token")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Provider keys in shorter forms than the memory's detector insists on (it must not refuse prose).
_SECRET_VALUE = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{12,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bxox[abpr]-[A-Za-z0-9\-]{10,}"
)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.\-]*://[^:/@\s]+:)(?P<password>[^@\s]+)(?=@)")
# `name=value` with a secret-looking name: a URL's query parameter, a command line's
# `--flag=value`, an environment assignment (`-e GITHUB_TOKEN=…`) or a connection string's part,
# whose value libpq quotes when it holds spaces (`password='a b\' c'`).
_NAMED_VALUE = re.compile(
    r"(?P<head>(?:[?&;]|\B--|^|(?<=\s))(?P<name>[A-Za-z0-9_\-]+)=)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|[^&#;\s]+)"
)
# The short flag that takes a password in mysql and other clients; after it, a port or a port
# mapping (`-p 8080`, docker's `-p 127.0.0.1:8080:80/tcp`) is shown.
_PASSWORD_FLAG: Final = "-p"
_PORTS: Final = re.compile(r"(?:[\d.]+:)?\d+(?:-\d+)?(?::\d+(?:-\d+)?)?(?:/(?:tcp|udp|sctp))?")


def is_secret_key(key: str) -> bool:
    """Whether a configuration key looks like it holds a secret."""
    normalised = _CAMEL.sub("_", key).lower().replace("-", "_")
    if normalised.endswith("_env"):
        return False
    return normalised.endswith(_SECRET_ENDINGS) or any(
        normalised == suffix or normalised.endswith("_" + suffix) for suffix in _SECRET_SUFFIXES
    )


def redact_text(text: str) -> str:
    """Mask credentials that appear inside free text: passwords in URLs, secret-named query
    parameters, `--flag=value` options and `NAME=value` assignments, and every credential the
    secret detector finds (vendor keys, tokens, JWTs, Basic and Bearer credentials, passwords
    given in a sentence)."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    text = _NAMED_VALUE.sub(
        lambda m: m.group("head") + REDACTED if is_secret_key(m.group("name")) else m.group(), text
    )
    text = _SECRET_VALUE.sub(REDACTED, text)
    masked, last = [], 0
    for start, end in secret_spans(text):
        masked += [text[last:start], REDACTED]
        last = end
    return "".join(masked) + text[last:]


def redact(value: Any) -> Any:
    """A deep copy of `value` with secret-looking keys and embedded credentials masked."""
    if isinstance(value, Mapping):
        return {
            key: REDACTED if is_secret_key(str(key)) and item not in (None, "") else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        # A command line (`args: ["--token", "..."]`): the item after a secret-named flag.
        return [
            REDACTED if at and _secret_after(value[at - 1], item) else redact(item)
            for at, item in enumerate(value)
        ]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _secret_after(flag: Any, item: Any) -> bool:
    """Whether `item` is the value of the command-line flag `flag` that takes a secret."""
    if not (isinstance(flag, str) and isinstance(item, str) and flag.startswith("-")):
        return False
    if flag == _PASSWORD_FLAG:
        return not _PORTS.fullmatch(item)
    return "=" not in flag and is_secret_key(flag.lstrip("-"))


class RedactingFilter(logging.Filter):
    """A logging filter that masks credentials in every record's final message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class RedactingFormatter(logging.Formatter):
    """A formatter that masks credentials in the whole output, tracebacks included.

    `RedactingFilter` sees only the message; an exception's traceback is added by the formatter.
    """

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))
