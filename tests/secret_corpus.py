"""Test data for the secret detector: 50 secrets as people and programs write them, and benign
facts that talk about passwords, keys, ids, versions and URLs without holding a credential.

`benchmarks/secret_scrub.py` measures the detector on both (and on LoCoMo's observations); the
tests in `tests/deermem/test_secret_corpus.py` hold it to the documented figures. The values are
fake; keys are built from pieces so that this file does not trip secret scanners itself.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Final

_B62: Final = "a8Kd93LmQz7Xw2Rt5YvN0bPc4HsJ6gFe"  # 32 random-looking base62 characters
_HEX40: Final = hashlib.sha1(b"deerflow secret corpus").hexdigest()
_HEX32: Final = _HEX40[:32]
_JWT: Final = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJhbGljZSIsImlhdCI6MTcwMDAwMDAwMH0."
    "Qm9vVGhpc0lzTm90QVJlYWxTaWduYXR1cmUxMjM0"
)
_BASIC: Final = base64.b64encode(b"deploy:Gr33nTea-41").decode()


def _spaced(text: str) -> str:
    return " ".join(text)


SECRETS: Final[tuple[str, ...]] = (
    # vendor key shapes
    f"my OpenAI key is sk-proj-{_B62}Zx",
    f"use sk-ant-api03-{_B62} for the Claude experiments",
    "AWS access key AKIA" + "IOSFODNN7EXAMPLE for the backup bucket",
    f"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY{_B62[:10]}",
    f"GitHub token ghp_{_B62}Ab12",
    f"fine-grained token github_pat_11ABCDEFG0{_B62}",
    f"GitLab CI uses glpat-{_B62[:22]}",
    f"the bot token is xoxb-1234567890-{_B62[:16]}",
    f"alerts go to https://hooks.slack.com/services/T024BE7LD/B01234567/{_B62[:24]}",
    f"maps key AIza{_B62}abc",
    f"Stripe live key sk_live_{_B62[:24]}",
    f"HF_TOKEN is hf_{_B62}Xy",
    f"publish with npm_{_B62}Wxyz",
    f"Twilio API key SK{_HEX32}",
    f"Mailgun key-{_HEX32[::-1]}",
    f"SendGrid SG.{_B62[:22]}.{_B62[::-1]}",
    f"the Discord webhook is https://discord.com/api/webhooks/112233445566/{_B62}",
    f"pypi token pypi-AgEIcHlwaS5vcmc{_B62}{_B62[:8]}",
    f"session cookie {_JWT}",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----",
    # assignments, headers and URLs
    "SECRET_KEY = 'django-insecure-8#x@(k)p!2v$w^q-7z&m1n+b=c*r%t3y_u4i'",
    f"api_key={_HEX32}",
    "client_secret: Xk29fLq83ZmP0aWd",
    "DB_PASSWORD=correcthorsebattery",
    "pw: Xk9#mL2q",
    "passwd=Sn0wfl4ke",
    f"curl -H 'Authorization: Bearer {_B62}'",
    f"the proxy wants Basic {_BASIC}",
    "postgres://admin:s3cretpass@db.internal:5432/app",
    "redis://:Hunter2Redis@cache:6379",
    f"blob {_B62[7:]}Q9x2Lm7vR4",
    # prose, in English
    "my password is bluebird",
    "My password is hunter22",
    "the wifi password is Gr8-Wifi-2024",
    "passcode is 4471",
    "my bank PIN is 8812",
    "the door code is 135790",
    f"the api key is {_HEX40}",
    "the ssh password for the NAS was Tr!cky-Nas-44",
    "secret is 7f3a9c2e1b8d4f6a0e5c",
    # prose, in the other languages
    "数据库密码是abc123456",
    "我的密码：P@ssw0rd，别忘了",
    "私のパスワードはsakura2024です",
    "暗証番号は4471です",
    "비밀번호는 qwer1234 입니다",
    "mi contraseña es Girasol#88",
    "La contraseña del router es Tortuga2023",
    "Mein Passwort ist Sommer2024!",
    "mon mot de passe est Soleil2023",
    # typed out one character at a time
    f"key: {_spaced('sk-proj-' + _B62)}",
)

_HANDWRITTEN: Final = (
    "Prefers uv over pip for Python projects",
    "Works as a data engineer at a logistics company in Porto",
    "The password policy at work requires 14 characters and a symbol",
    "Forgot the password to the old laptop and reset it last week",
    "Uses 1Password to manage passwords for the whole family",
    "Thinks password managers are worth paying for",
    "The team rotates API keys every 90 days",
    "Keeps API keys in the vault, never in the repository",
    "The API key for the staging service is stored in Vault",
    "My password manager is Bitwarden",
    "Their password is required to be changed every quarter",
    "The password is too short for the new policy",
    "My password is stored in the keychain",
    "The token expired yesterday, so the deploy failed",
    "Bearer tokens go in the Authorization header",
    "Asked how Basic authentication encodes the user name",
    "The secret to good bread is a long cold fermentation",
    "The key to the shed is under the blue pot",
    "Secret Santa at the office is on December 18",
    "The pin on the map marks the new office",
    "Passcode reset emails go to the work address",
    "Mi contraseña es demasiado corta, tengo que cambiarla",
    "Mein Passwort ist abgelaufen und muss erneuert werden",
    "Mon mot de passe est trop court pour le nouveau système",
    "La clave es la paciencia cuando aprende alemán",
    "密码策略要求12个字符",
    "我忘记了密码",
    "密码是12位",
    "パスワードは12文字以上が必要です",
    "用户喜欢使用 uv 而不是 pip",
    "Deploys with git tag v2.4.1 and GitHub Actions",
    "Fixed the bug in commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "The release's SHA-256 is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Tracks the incident as request 123e4567-e89b-12d3-a456-426614174000",
    "Runs PostgreSQL 16.2 at postgres://localhost:5432/app",
    "Reads the docs at https://docs.python.org/3/library/re.html",
    "Bookmarked https://github.com/bytedance/deer-flow/pull/5251/files",
    "The connection string is postgres://app:${PGPASSWORD}@db/app",
    "Sets password=${DB_PASSWORD} in the compose file",
    "Uses max_tokens=2000 and token_budget: 500 for the summaries",
    "Prefers tabs set to 4 spaces in Go and 2 in YAML",
    "Uses Node 20.11.1 and pnpm 8.15.4",
    "Has an M2 MacBook Air with 16 GB of RAM",
    "Lives in Lisbon and commutes by bike",
    "Speaks Portuguese, English and some German",
    "Allergic to peanuts",
    "Drinks green tea in the afternoon, coffee in the morning",
    "Plays five-a-side football on Thursdays",
    "Is training for the Porto half marathon in November",
    "Has two cats named Miso and Tofu",
    "Prefers dark mode in every editor",
    "Uses Neovim with the lazy.nvim plugin manager",
    "Writes commit messages in the imperative mood",
    "Wants code reviews to focus on naming and tests",
    "Is learning Rust by porting a small CLI tool",
    "Dislikes meetings before 10 am",
    "Works in the Europe/Lisbon time zone",
    "The on-call rotation changes every Monday at 09:00",
    "Budget for the conference trip is EUR 1,200",
    "Flight to Berlin on 2025-03-14 at 07:45, seat 12C",
    "Booked the hotel with confirmation number 4471-8812",
    "Order #A7F3-22B9 should arrive on Friday",
    "Uses the model gpt-4o-mini for quick drafts",
    "Tried claude-3-5-sonnet-20241022 for long documents",
    "Runs llama.cpp with gemma-3-270m-it-Q8_0.gguf offline",
    "Keeps the project in ~/code/deer-flow",
    "The cache lives in ~/.cache/huggingface/hub/models--minishlab--potion-base-8M",
    "The config file is at /etc/deerflow/config.yaml",
    "Windows path C:\\Users\\alice\\Documents\\notes is synced",
    "Uses the environment variable OPENAI_API_KEY in CI",
    "Sets api_key_env: OPENAI_API_KEY in config.yaml",
    "The field is called password: string in the API schema",
    "raise ValueError('user or password is invalid') shows on bad logins",
    "self.key_password = key_password appears in the legacy module",
    "final = tokens[0]; token = tokens[1] in the tokenizer test",
    "Asked what the difference between a passphrase and a password is",
    "Set up two-factor authentication with an authenticator app",
    "The Wi-Fi network at home is called Casa-Azul",
    "Changed the router's admin password last month",
    "The school portal password must be changed every term",
    "Uses SSH keys instead of passwords for the servers",
    "Generates SSH keys with ed25519",
    "Stores the GPG key fingerprint in the README",
    "The AWS region is eu-west-1",
    "The S3 bucket is called acme-backups-prod",
    "The Kubernetes namespace is payments-staging",
    "Pod payments-api-7d9f8c6b5-x2k4q restarted twice",
    "The Docker image is ghcr.io/acme/payments:1.14.2",
    "Prefers Conventional Commits for changelogs",
    "Works on ticket PAY-4471 this sprint",
    "Reads papers on retrieval-augmented generation",
    "Wants summaries in bullet points, not paragraphs",
    "Prefers metric units",
    "Uses a standing desk in the afternoon",
    "The daughter's school starts at 8:30",
    "Partner's birthday is on June 3",
    "Is vegetarian since 2019",
    "Prefers trains over planes for trips under 6 hours",
    "Likes jazz, especially Bill Evans",
    "Reads one novel a month, currently Kafka on the Shore",
    "Goes climbing at the gym on Tuesdays and Saturdays",
    "The new API is versioned as /v2/orders",
    "Rate limit is 600 requests per minute per token",
    "The JWT library is PyJWT 2.8.0",
    "Session tokens expire after 15 minutes of inactivity",
    "OAuth client id is configured per environment",
    "The invoice number is INV-2024-000731",
    "IBAN details are kept by the accountant, not in notes",
    "The PIN length for the new cards is 6 digits",
    "The password field must accept 64 characters",
    "Passwords are hashed with argon2id",
    "Key rotation is automated with a nightly job",
    "The secret sauce of the team is pairing on hard bugs",
    "Base64 encodes 3 bytes as 4 characters",
    "Uses the bearer of bad news joke too often",
    "The task-management-system-for-the-whole-company-2024 project is late",
    "Class AbstractSingletonProxyFactoryBean2 was renamed",
    "TIKTOKEN_CACHE_DIR/9b5ad71b2ce5302211f9c61530b329a4922fc6a4 holds the encodings",
    "special_tokens=CL100K_SPECIAL_TOKENS is passed to the encoder",
    "Meeting on 2024-05-17 at 14:30, budget $45,000",
    "Use pnpm, not npm (avoid: used npm)",
    "The Authorization header looks like Basic <username>:<password>",
    "password: <your password> is the placeholder in the template",
    "pwd: /home/alice/projects is what the shell printed",
)


def _generated() -> tuple[str, ...]:
    """Ids, versions, hashes and URLs, the shapes most likely to be taken for a key."""
    facts: list[str] = []
    for number in range(1, 31):
        digest = hashlib.sha256(f"build {number}".encode()).hexdigest()
        ident = uuid.uuid5(uuid.NAMESPACE_URL, f"https://example.com/{number}")
        facts += [
            f"Build {number} of the app has digest {digest}",
            f"Release 3.{number}.{number % 7} fixed issue #{1200 + number}",
            f"Trace id {ident} belongs to the checkout incident",
            f"Fact fact_{digest[:32]} replaced an older one",
            f"Read https://example.com/blog/2024/{number:02d}/release-notes-v{number}",
        ]
    return tuple(facts)


BENIGN: Final[tuple[str, ...]] = _HANDWRITTEN + _generated()
