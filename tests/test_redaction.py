"""Secrets are masked wherever configuration is shown."""

from __future__ import annotations

import logging

import pytest

from deerflow.redaction import REDACTED, RedactingFilter, is_secret_key, redact, redact_text


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "OPENAI_API_KEY",
        "token",
        "auth_token",
        "accessToken",
        "password",
        "db-password",
        "secret",
        "client_secret",
        "private_key",
        "aws_secret_key",
        "credentials",
        "Authorization",
        "PGPASSWORD",
        "DB_PASS",
        "OPENAI_KEY",
        "GITHUB_PAT",
        "Ocp-Apim-Subscription-Key",
    ],
)
def test_secret_looking_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "max_tokens",
        "max_injection_tokens",
        "guaranteed_token_budget",
        "api_key_env",
        "tokenizer",
        "model",
        "passthrough",
        "keep_alive",
    ],
)
def test_ordinary_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_masks_nested_values_and_keeps_the_shape() -> None:
    config = {
        "models": [{"name": "a", "api_key": "sk-live-abcdefghijklmnop", "max_tokens": 100}],
        "memory": {
            "backend_config": {
                "model": {"api_key": "plain-looking", "base_url": "http://h"},
                "dsn": "postgresql://app:hunter2@db:5432/mem",
                "note": "key sk-abcdefghijklmnopqrstu inline",
                "token": None,
            }
        },
    }
    redacted = redact(config)
    text = repr(redacted)
    for secret in (
        "sk-live-abcdefghijklmnop",
        "plain-looking",
        "hunter2",
        "sk-abcdefghijklmnopqrstu",
    ):
        assert secret not in text
    assert redacted["models"][0] == {"name": "a", "api_key": REDACTED, "max_tokens": 100}
    assert redacted["memory"]["backend_config"]["dsn"] == f"postgresql://app:{REDACTED}@db:5432/mem"
    assert redacted["memory"]["backend_config"]["token"] is None, (
        "an unset secret stays visibly unset"
    )
    assert config["models"][0]["api_key"] == "sk-live-abcdefghijklmnop", "the input is not modified"


def test_redact_text_leaves_ordinary_text_alone() -> None:
    text = "http://localhost:8000/api and task-12345 and sk-short"
    assert redact_text(text) == text


def test_logging_filter_masks_credentials_in_arguments() -> None:
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "connecting to %s", ("redis://u:pw123456@h",), None
    )
    RedactingFilter().filter(record)
    assert record.getMessage() == f"connecting to redis://u:{REDACTED}@h"


def test_command_lines_and_urls_lose_their_secrets() -> None:
    config = {
        "args": ["--token", "ghs-secret-value", "--verbose", "--api-key=abc123", "server.py"],
        "url": "https://example.test/mcp?access_token=abc&page=2&key=AIzaSyZ",
    }
    assert redact(config) == {
        "args": ["--token", "***", "--verbose", "--api-key=***", "server.py"],
        "url": "https://example.test/mcp?access_token=***&page=2&key=***",
    }


def test_a_quoted_password_of_a_connection_string_is_masked_whole() -> None:
    # libpq quotes a value with spaces; the user saw "password=*** ter2'" with its tail shown.
    conninfo = r"host=db password='hun ter2 \' x' dbname=mem"
    assert redact({"database_url": conninfo}) == {"database_url": "host=db password=*** dbname=mem"}
    assert redact_text(f"connecting: {conninfo}") == "connecting: host=db password=*** dbname=mem"
