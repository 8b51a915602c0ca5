"""Configuration output never shows a secret, wherever in the config it is planted and whatever
its key is called: `deerflow config check` (text and --json) and `GET /api/memory/config`.

The values are fake but shaped like the real thing, built from pieces so that this file does
not trip secret scanners itself.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from deerflow.cli.app import app
from deerflow.config import load_config
from deerflow.gateway.app import create_app
from tests.gateway.live import LiveServer

B62 = "a8Kd93LmQz7Xw2Rt5YvN0bPc4HsJ6gFe"  # 32 random-looking base62 characters
HEX = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"  # 32 hex digits
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJhbGljZSIsImlhdCI6MTcwMDAwMDAwMH0."
    "Qm9vVGhpc0lzTm90QVJlYWxTaWduYXR1cmUxMjM0"
)
BASIC = base64.b64encode(b"deploy:Gr33nTea-41").decode()
PEM_BODY = "MIIEowIBAAKCAQEA" + B62 + B62

# Every value here must be absent from every output.
SECRETS: dict[str, str] = {
    "mysql_pwd": "Tr0ub4dor&3xyz",
    "gpg_passphrase": "correct horse battery staple 42",
    "slack_webhook": f"https://hooks.slack.com/services/T024BE7LD/B01234567/{B62[:24]}",
    "odbc_pwd": "Wint3r!Sky#9",
    "odbc_password": "Qz7!mL2#pWx",
    "redis_password": "S3cr3tRedis99",
    "postgres_password": "pg-Pa55word-7",
    "mongo_password": "M0ng0-Atl4s-pw",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYz" + B62[:9],
    "github_pat_env": "ghp_" + B62 + "Ab12",
    "openai_env": "sk-proj-" + B62 + "Zx",
    "mysql_cli": "Sup3rS3cret!",
    "pw_flag": "Blue-Moon-7781",
    "password_flag": "pa55w0rd-xyz",
    "api_key_option": "k3y-" + B62[:20],
    "token_flag": "plain-token-value-9",
    "basic_header": BASIC,
    "jwt_header": JWT,
    "bearer_header": B62 + "Qq",
    "authorization": "Bearer " + B62[::-1],
    "x_api_key": "xak-" + B62[4:28],
    "url_token": "tok" + B62[:18],
    "hf_neutral": "hf_" + B62 + "Xy",
    "google_neutral": "AIza" + B62 + "abc",
    "slack_bot_neutral": "xoxb-1234567890-" + B62[:16],
    "stripe_neutral": "sk_live_" + B62[:24],
    "anthropic_neutral": "sk-ant-api03-" + B62,
    "aws_id_neutral": "AKIA" + "IOSFODNN7EXAMPLE",
    "private_key_neutral": PEM_BODY,
    "twilio_neutral": "SK" + HEX,
    "mailgun_neutral": "key-" + HEX[::-1],
    "proxy_password": "pr0xy-Passw0rd",
    "dsn_in_backend": "mem-Db-pass-55",
}
# Ordinary values that must still be shown.
ORDINARY = [
    "gpt-4o-mini",
    "langchain_openai:ChatOpenAI",
    "https://api.openai.com/v1",
    "4096",
    "0.2",
    "docker",
    "ghcr.io/github/github-mcp-server",
    "8080",
    "db.internal",
    "Europe/Lisbon",
    "application/json",
    "deerflow/1.0",
    "https://search.example.com/mcp?page=2",
    "3f786850e387550fdab836ed7e6dc881de23001b",
    "123e4567-e89b-12d3-a456-426614174000",
    "proxy.internal:3128",
    "127.0.0.1:9090:90/tcp",
]


def planted_config(tmp_path: Path) -> dict[str, Any]:
    s = SECRETS
    return {
        "models": [
            {
                "name": "main",
                "use": "langchain_openai:ChatOpenAI",
                "model": "gpt-4o-mini",
                "base_url": "https://api.openai.com/v1",
                "max_tokens": 4096,
                "temperature": 0.2,
                "hub": s["hf_neutral"],
                "http_proxy": f"http://deploy:{s['proxy_password']}@proxy.internal:3128",
                "default_headers": {"X-Request-Source": "deerflow/1.0"},
            },
            {"name": "maps", "use": "langchain_openai:ChatOpenAI", "extra": s["google_neutral"]},
        ],
        "memory": {
            "manager_class": "deermem",
            "backend_config": {"storage_path": str(tmp_path / "store")},
        },
        "mcp_servers": {
            "db": {
                "command": "mysql-mcp",
                "args": ["-h", "db.internal", "-u", "app", "-p", s["mysql_cli"], "--port", "3306"],
                "env": {
                    "MYSQL_PWD": s["mysql_pwd"],
                    "GPG_PASSPHRASE": s["gpg_passphrase"],
                    "ALERTS": s["slack_webhook"],
                    "ODBC": "Driver={ODBC Driver 18 for SQL Server};Server=tcp:sql.internal,1433;"
                    f"Uid=app;Pwd={s['odbc_pwd']};Encrypt=yes",
                    "LEGACY_ODBC": f"Server=sql2;User ID=app;Password={s['odbc_password']};",
                    "CACHE": f"redis://:{s['redis_password']}@cache.internal:6379/0",
                    "DATABASE_URL": f"postgresql://app:{s['postgres_password']}@db.internal/app",
                    "MONGO": f"mongodb+srv://admin:{s['mongo_password']}@cluster0.example.net",
                    "AWS_SECRET_ACCESS_KEY": s["aws_secret"],
                    "TZ": "Europe/Lisbon",
                    "BUILD": "3f786850e387550fdab836ed7e6dc881de23001b",
                },
            },
            "github": {
                "command": "docker",
                "args": [
                    "run",
                    "-i",
                    "--rm",
                    "-p",
                    "8080",
                    "-p",
                    "127.0.0.1:9090:90/tcp",
                    "-e",
                    f"GITHUB_PERSONAL_ACCESS_TOKEN={s['github_pat_env']}",
                    "--env",
                    f"OPENAI_API_KEY={s['openai_env']}",
                    "--pw",
                    s["pw_flag"],
                    "--password",
                    s["password_flag"],
                    f"--api-key={s['api_key_option']}",
                    "--token",
                    s["token_flag"],
                    "ghcr.io/github/github-mcp-server",
                ],
            },
            "search": {
                "transport": "streamable_http",
                "url": f"https://search.example.com/mcp?access_token={s['url_token']}&page=2",
                "headers": {
                    "X-Auth": f"Basic {s['basic_header']}",
                    "X-Session": s["jwt_header"],
                    "X-Upstream": f"Bearer {s['bearer_header']}",
                    "Authorization": s["authorization"],
                    "X-Api-Key": s["x_api_key"],
                    "Accept": "application/json",
                },
            },
            "plain": {"transport": "sse", "url": "https://search.example.com/mcp?page=2"},
        },
        "integrations": {
            "notify": s["slack_bot_neutral"],
            "billing": s["stripe_neutral"],
            "fallback": s["anthropic_neutral"],
            "aws_id": s["aws_id_neutral"],
            "deploy_material": "-----BEGIN RSA PRIVATE KEY-----\n"
            f"{s['private_key_neutral']}\n-----END RSA PRIVATE KEY-----\n",
            "sms": s["twilio_neutral"],
            "mail": s["mailgun_neutral"],
            "request": "123e4567-e89b-12d3-a456-426614174000",
            "dsn": f"mysql://mem:{s['dsn_in_backend']}@db.internal/mem",
        },
    }


@pytest.fixture
def config_file(tmp_path: Path, isolated_environment: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(planted_config(tmp_path)), encoding="utf-8")
    return path


def assert_nothing_secret(shown: str) -> None:
    leaked = [name for name, value in SECRETS.items() if value in shown]
    assert leaked == [], f"{len(leaked)} of {len(SECRETS)} planted secrets shown"
    # Nor a recognisable piece of one (a password split off at a `;` or a `@`).
    pieces = (B62[:12], B62[::-1][:12], HEX[:12])
    assert [piece for piece in pieces if piece in shown] == []


def test_config_check_json_shows_no_secret_and_every_ordinary_value(config_file: Path) -> None:
    result = CliRunner().invoke(app, ["config", "check", "--json", "-c", str(config_file)])
    assert result.exit_code == 0, result.output
    assert len(SECRETS) >= 30
    assert_nothing_secret(result.output)
    shown = json.loads(result.stdout)["config"]
    assert [value for value in ORDINARY if value not in json.dumps(shown)] == []
    assert shown["mcp_servers"]["github"]["args"][3:5] == ["-p", "8080"], "a port is shown"
    assert shown["mcp_servers"]["db"]["args"][4:6] == ["-p", "***"]
    assert shown["mcp_servers"]["db"]["env"]["TZ"] == "Europe/Lisbon"
    assert shown["mcp_servers"]["db"]["env"]["DATABASE_URL"] == (
        "postgresql://app:***@db.internal/app"
    )


def test_config_check_text_shows_no_secret(config_file: Path) -> None:
    result = CliRunner().invoke(
        app, ["config", "check", "-c", str(config_file)], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    assert_nothing_secret(result.output)
    for value in ("gpt-4o-mini", "Europe/Lisbon", "db.internal", "application/json", "8080"):
        assert value in result.output


def test_the_config_route_shows_no_secret(config_file: Path, isolated_environment: Path) -> None:
    app_config = load_config(config_file)
    with LiveServer(create_app(app_config, home=isolated_environment)) as server:
        answered = httpx.get(server.url("/api/memory/config"))
    assert answered.status_code == 200
    assert_nothing_secret(answered.text)
    assert [value for value in ORDINARY if value not in answered.text] == []
