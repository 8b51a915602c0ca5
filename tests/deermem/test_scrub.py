"""Secret scrubbing: credentials are refused, talk about them is not."""

from __future__ import annotations

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core.scrub import find_secret, refuse_secrets

# Built from pieces so that this file itself does not trip secret scanners.
_B62 = "a8Kd93LmQz7Xw2Rt5YvN0bPc4HsJ6gFe"  # 32 random-looking base62 characters

SECRETS = [
    "my key is sk-proj-" + _B62,
    "OPENAI_API_KEY=sk-" + _B62,
    "use sk-ant-api03-" + _B62 + " for claude",
    "AWS id AKIAIOSFODNN7EXAMPLE in us-east-1",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "token ghp_" + _B62 + "1234",
    "github_pat_11ABCDEFG0" + _B62,
    "slack bot xoxb-1234567890-abcdefghijkl",
    "webhook https://hooks.slack.com/services/T0001/B0002/" + _B62,
    "maps key AIza" + _B62 + "abc",
    "stripe sk_live_" + _B62,
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "curl -H 'Authorization: Bearer abc123def456ghi789'",
    "send bearer Zm9vYmFyMTIzNDU2Nzg5MA== to the api",
    "password: hunter2",
    "password=xyz",
    'config {"password": "S3cr3t!"}',
    "DB_PASSWORD=correcthorsebattery",
    "my password is hunter22",
    "pwd: tr0ub4dor&3",
    "数据库密码是abc123456",
    "我的密码：P@ssw0rd，别忘了",
    "postgres://admin:s3cretpass@db.internal:5432/app",
    "redis://:hunter2@cache:6379",
    "api_key=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "client_secret: Xk29fLq83ZmP0aWd",
    "blob 7Hq2Lm9XzR4tW8vK1pN6cB3yF5sD0gJa",
    "hf_" + _B62 + "XY",
    "Authorization: Basic dXNlcjpwYXNz",
    "the PIN is in 密码=8812ab",
]

HARMLESS = [
    "User prefers uv over pip",
    "the password policy requires 12 characters",
    "I forgot my password again",
    "The password is required for admin accounts",
    "password: required",
    "password=${DB_PASSWORD}",
    "password: <your password>",
    "pwd: /home/alice/projects",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "see fact_0123abcd and fact_89ef4567",
    "fact_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "https://github.com/bytedance/deer-flow/pull/5251/files",
    "postgres://localhost:5432/app",
    "postgres://app:${PGPASSWORD}@db/app",
    "src/deerflow/agents/memory/backends/deermem/deermem/core/tokens.py",
    "class AbstractSingletonProxyFactoryBean2 is too long",
    "test_format_context_budget_boundary_with_guaranteed_facts_2",
    "max_tokens=2000, token_budget: 500",
    "the task-management-system-for-the-whole-company-2024 project",
    "bearer of bad news",
    "Bearer tokens go in the Authorization header",
    "用户喜欢使用 uv 而不是 pip",
    "密码策略要求12个字符",
    "我忘记了密码",
    "密码是12位",
    "密码是多少？",
    "Use pnpm, not npm (avoid: used npm)",
    "Meeting on 2024-05-17 at 14:30, budget $45,000",
    "Authorization: Basic <username>:<password>",
    "final = tokens[0]; token = tokens[1]",
    "raise ValueError('user or password is invalid')",
    "self.key_password = key_password",
    "the API returns password: string",
    "TIKTOKEN_CACHE_DIR/9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
    "~/.cache/huggingface/hub/models--minishlab--potion-base-8M/snapshots",
    "special_tokens=CL100K_SPECIAL_TOKENS",
    "",
]


@pytest.mark.parametrize("text", SECRETS)
def test_secrets_are_found(text: str) -> None:
    assert find_secret(text) is not None


@pytest.mark.parametrize("text", HARMLESS)
def test_ordinary_text_passes(text: str) -> None:
    assert find_secret(text) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("sk-proj-" + _B62, "looks like an OpenAI API key"),
        ("sk-ant-api03-" + _B62, "looks like an Anthropic API key"),
        ("AKIAIOSFODNN7EXAMPLE", "looks like an AWS access key id"),
        ("-----BEGIN EC PRIVATE KEY-----", "contains a private key block"),
        ("password: hunter2", "looks like a password assignment"),
        ("密码：hunter22", "looks like a password assignment"),
        (
            "mysql://root:toor@localhost/db",
            "contains a connection string with an embedded password",
        ),
        ("blob 7Hq2Lm9XzR4tW8vK1pN6cB3yF5sD0gJa", "contains a long high-entropy token"),
    ],
)
def test_reason_names_the_kind(text: str, reason: str) -> None:
    assert find_secret(text) == reason


def test_refuse_secrets_raises_with_field_and_reason() -> None:
    with pytest.raises(ValueError, match="looks like a password assignment") as raised:
        refuse_secrets("login with password: hunter2", field="newFacts[0].content")
    assert str(raised.value) == (
        "newFacts[0].content: refused, looks like a password assignment; "
        "secrets are never stored in memory"
    )


def test_refuse_secrets_accepts_ordinary_text() -> None:
    refuse_secrets("User prefers uv over pip")
