"""Telling a credential from ordinary text, for memory and for configuration output alike.

`find_secret` names the kind of secret a text seems to hold (a backend refuses to store it);
`secret_spans` says where each one is (`deerflow.redaction` masks them in configuration output
and logs). The rules are deliberately narrow where prose is involved: talking *about* passwords
("I forgot my password", "密码策略要求12个字符") is fine, giving one ("password: hunter2",
"密码是abc123", "mein Passwort ist Sommer2024") is not.

Identifiers are not secrets: hex strings (git SHAs, SHA-256 digests, UUIDs, `fact_…` ids),
paths, and URLs without a password pass. A hex secret is still caught when it is assigned to or
introduced by a secret's name (`api_key=…`, "the api key is …"), which is how one realistically
shows up in a conversation, or when it has a vendor's prefix (Twilio `SK…`, Mailgun `key-…`).

Every pattern compiles on first use (`re` keeps it): some hold CJK character classes, which cost
milliseconds to compile, and most processes that import this never scan a text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["find_secret", "refuse_secrets", "secret_spans"]

# Values that stand for a secret without being one: masks, template variables, references to
# another variable (`self.key_password`), type names, and words such as "required".
_PLACEHOLDER: Final = r"""(?ix)[*xX.•#_-]+|<[^>]*>|\{[^}]*\}|\[[^\]]*\]|\$\w+|your[_-]?\w*
    |[\w.]*(?:password|passwd|pwd|secret|token)|pass|str|string|bool
    |redacted|hidden|none|null|n/a|empty|required|optional|yes|no|true|false"""
# Template markers anywhere in a value: "<user>:<password>", "${PGPASSWORD}", "{{ token }}".
_TEMPLATE: Final = r"<\w[^>]{0,64}>|\$\{\w+\}|\{\{|%\(\w+\)s"
_PATH: Final = r"(?:~|\.{1,2})?/|[A-Za-z]:\\"
_KEY_CHARS: Final = r"[\w+/=.~-]+"
# Not `}` or `]`: they close placeholders. Also the CJK full stop, comma, marks and quotes.
_TRAILING_PUNCTUATION: Final = ".,;:!?)'\"\u3002\uff0c\uff01\uff1f\u300d\u300f\u201d\u00bb"
# Words that follow "my password is" in talk about a password rather than in giving one, in the
# languages the rules below read (English, Spanish, German, French, Portuguese).
_TALK_ABOUT_PASSWORDS: Final = """
    a an the my your our this that what which who not no too very so still now also just only
    always never being been weak strong wrong right correct incorrect invalid valid required
    expired expiring changed reset saved stored kept managed shared synced rotated hashed
    encrypted long short secure insecure safe unsafe same different new old empty blank set
    unset case-sensitive easy hard simple complex missing lost forgotten known unknown visible
    hidden used needed written printed sent about in on at for from of to with without like
    one something nothing part
    el la un una mi tu su muy demasiado incorrecta incorrecto correcta correcto obligatoria
    segura débil nueva vieja igual otra
    der die das ein eine mein dein sein nicht zu sehr noch falsch richtig abgelaufen
    erforderlich sicher unsicher schwach stark neu alt gleich anders geändert gespeichert
    le les une mon ton son pas trop très incorrect requis expiré sûr faible nouveau ancien
    o os um uma meu minha não muito errada errado nova antiga
"""
_NOT_A_PASSWORD: Final = frozenset(_TALK_ABOUT_PASSWORDS.split())


def _real_value(value: str) -> bool:
    """A value that is not a placeholder, a template, an empty/yes/no word or a file path."""
    return not (
        re.fullmatch(_PLACEHOLDER, value) or re.search(_TEMPLATE, value) or re.match(_PATH, value)
    )


def _mixed(value: str) -> bool:
    """Letters and digits together: what random keys have and ordinary words lack."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _at_least(length: int) -> Callable[[str], bool]:
    def accept(value: str) -> bool:
        return len(value) >= length and _real_value(value)

    return accept


def _password_like(value: str) -> bool:
    """For "password is X" prose: X must look like a password (or a PIN of 4+ digits), not like
    "required", "12" or "8-16"."""
    if value.isdigit():
        return len(value) >= 4
    return len(value) >= 6 and not value.isalpha() and _real_value(value)


def _given_password(value: str) -> bool:
    """For "my password is X": any word that is not one of the words of talk about passwords."""
    return (
        len(value) >= 4 and value.lower() not in _NOT_A_PASSWORD and _real_value(value)
    ) or _password_like(value)


def _key_like(value: str) -> bool:
    """For `token=X`: X must look like a key, not like `tokens[0]` or `b64encode(raw)`."""
    return (
        len(value) >= 8
        and bool(re.fullmatch(_KEY_CHARS, value))
        and _mixed(value)
        and _real_value(value)
    )


def _basic_credentials(value: str) -> bool:
    """Base64 of `user:password`, as an HTTP Basic header carries."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii()


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    reason: str
    # Checks the `value` group if the pattern has one, else the whole match, in both cases
    # without trailing punctuation.
    accept: Callable[[str], bool] | None = None


def _rule(pattern: str, reason: str, accept: Callable[[str], bool] | None = None) -> _Rule:
    return _Rule(re.compile(pattern), reason, accept)


_NOT_AFTER_WORD: Final = r"(?<![A-Za-z0-9])"
_KEY_END: Final = r"""["']?\s*[:=]\s*["']?"""
# A value runs to the next space or quote; a `<placeholder with spaces>` is taken whole.
# Placeholders are bounded in length, here and in `_TEMPLATE`, to keep scanning linear.
# A `;` ends it too, as in a connection string (`Uid=app;Pwd=…;Encrypt=yes`).
_VALUE: Final = r"""(?P<value><[^>\n]{0,64}>|[^\s"';]+)"""
_SECRET_KEYS: Final = (
    r"api[_-]?key|secret[_-]?key|client[_-]?secret|(?:access|auth|refresh)[_-]?token|secret|token"
)
_PASSWORD_KEYS: Final = r"password|passwd|passphrase|passcode|pwd|pw"
# "password" in the languages the prose rules read, and the verbs that give one its value.
_PASSWORD_WORDS: Final = (
    r"password|passphrase|passcode|pass\s?code|pin(?:\s?code)?|access\s+code|door\s+code"
    r"|contraseña|clave|passwort|kennwort|mot\s+de\s+passe|senha"
)
_GIVING: Final = r"(?:is|was|ist|lautet|war|es|era|est|était|é)\b"
# What the password is for: "the password for the NAS was …", "la contraseña del router es …".
_WHOSE: Final = (
    r"\s+(?:for|of|to|on|at|del|de|für|vom|zum|du|da|do)"
    r"(?:\s+(?:the|my|our|a|an|el|la|mi|den|der|die|das|le|o))?\s+[\w.-]+"
)
_MINE: Final = r"my|mi|mein|meine|mon|ma|meu|minha"
# "password" in Chinese and Japanese (and Korean), with their "is" particles; the value is ASCII.
_CJK_PASSWORD: Final = r"密码|密碼|口令|パスワード|暗証番号|パスコード|비밀번호"
_CJK_GIVING: Final = r"是|为|為|は|:|\uff1a|=|는|은"


@functools.cache
def _rules() -> tuple[_Rule, ...]:
    """Most specific first, so the reason names the vendor when it can."""
    return (
        _rule(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[^-]|-(?!----END))*"
            r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)?",
            "contains a private key block",
        ),
        _rule(_NOT_AFTER_WORD + r"sk-ant-[A-Za-z0-9_-]{20,}", "looks like an Anthropic API key"),
        _rule(
            r"(?<![A-Za-z0-9-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
            "looks like an OpenAI API key",
            _mixed,
        ),
        _rule(
            _NOT_AFTER_WORD + r"(?:[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})",
            "looks like a Stripe secret key",
        ),
        _rule(
            r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])",
            "looks like an AWS access key id",
        ),
        _rule(
            r"(?i)aws[_-]?secret[_-]?(?:access[_-]?)?key" + _KEY_END + r"[A-Za-z0-9/+=]{30,}",
            "looks like an AWS secret access key",
        ),
        _rule(
            _NOT_AFTER_WORD + r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
            "looks like a GitHub token",
        ),
        _rule(_NOT_AFTER_WORD + r"glpat-[A-Za-z0-9_-]{20,}", "looks like a GitLab token"),
        _rule(_NOT_AFTER_WORD + r"xox[abposr]-[A-Za-z0-9-]{10,}", "looks like a Slack token"),
        _rule(r"hooks\.slack\.com/services/T\w+/B\w+/\w+", "looks like a Slack webhook URL"),
        _rule(
            r"discord(?:app)?\.com/api/webhooks/\d+/[\w-]{20,}", "looks like a Discord webhook URL"
        ),
        _rule(_NOT_AFTER_WORD + r"AIza[0-9A-Za-z_-]{35}", "looks like a Google API key"),
        _rule(_NOT_AFTER_WORD + r"hf_[A-Za-z0-9]{30,}", "looks like a Hugging Face token"),
        _rule(_NOT_AFTER_WORD + r"npm_[A-Za-z0-9]{36}", "looks like an npm token"),
        _rule(_NOT_AFTER_WORD + r"pypi-[A-Za-z0-9_-]{50,}", "looks like a PyPI token"),
        _rule(r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![0-9a-zA-Z])", "looks like a Twilio API key"),
        _rule(_NOT_AFTER_WORD + r"key-[0-9a-f]{32}(?![0-9a-zA-Z])", "looks like a Mailgun key"),
        _rule(_NOT_AFTER_WORD + r"SG\.[\w-]{16,}\.[\w-]{16,}", "looks like a SendGrid API key"),
        _rule(
            r"django-insecure-\S{20,}",
            "looks like a Django secret key",
        ),
        _rule(
            r"(?<![\w-])eyJ[\w-]{5,}\.eyJ[\w-]{5,}\.[\w-]*",
            "looks like a JSON Web Token",
        ),
        _rule(
            r"(?i)\bauthorization" + _KEY_END + r"(?:basic|bearer|token|digest)\s+(?P<value>\S+)",
            "contains an Authorization header credential",
            _at_least(8),
        ),
        _rule(r"(?i)\bbearer\s+(?P<value>[\w.~+/=-]{16,})", "contains a bearer token", _mixed),
        _rule(
            r"(?i)\bbasic\s+(?P<value>[A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])",
            "contains HTTP Basic credentials",
            _basic_credentials,
        ),
        _rule(
            # Bounded scheme: unbounded, every word start would rescan the rest of a long token.
            r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@]*:(?P<value>[^\s@/]+)@[^\s/@]+",
            "contains a connection string with an embedded password",
            _at_least(1),
        ),
        _rule(
            rf"(?i){_NOT_AFTER_WORD}(?:{_PASSWORD_KEYS}){_KEY_END}{_VALUE}",
            "looks like a password assignment",
            _at_least(3),
        ),
        _rule(
            rf"(?i)\b(?:{_MINE})\s+(?:\w+\s+)?(?:{_PASSWORD_WORDS})\s+(?:{_GIVING})\s*[:\uff1a]?\s*"
            r"""["'“«]?(?P<value>[^\s"'“”«»]+)""",
            "looks like a password given in a sentence",
            _given_password,
        ),
        _rule(
            rf"(?i)\b(?:{_PASSWORD_WORDS})(?:{_WHOSE})?\s+(?:{_GIVING})\s*[:\uff1a]?\s*"
            r"""["'“«]?(?P<value>[^\s"'“”«»]+)""",
            "looks like a password given in a sentence",
            _password_like,
        ),
        # Possessive: the value is ASCII and no ideograph follows it, so "密码是12位" (12 digits) or
        # "パスワードは12文字" (12 characters) is not a value.
        _rule(
            rf"(?:{_CJK_PASSWORD})\s*(?:{_CJK_GIVING})\s*[「『\"]?(?P<value>[!-~]++)"
            r"(?![\u4e00-\u9fff])",
            "looks like a password assignment",
            _at_least(4),
        ),
        _rule(
            rf"(?i){_NOT_AFTER_WORD}(?:{_SECRET_KEYS}){_KEY_END}{_VALUE}",
            "looks like a secret assignment",
            _key_like,
        ),
        _rule(
            r"(?i)\b(?:api[ _-]?key|secret[ _-]?key|access[ _-]?key|(?:access |auth )?token"
            r"|client[ _-]?secret|secret)\s+(?:is|was)\s*:?\s*(?P<value>\S+)",
            "looks like a secret given in a sentence",
            _key_like,
        ),
    )


_TOKEN: Final = r"[A-Za-z0-9+/=_-]{32,}"
_SEPARATOR: Final = r"[/_=-]"
_HEX: Final = r"[0-9a-fA-F]+"
# Words as identifiers spell them: "Mysten", "SPECIAL", "gemma", "270".
_PIECE: Final = r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+"
# A key typed out one character at a time: "s k - p r o j - 4 f G 7 …".
_SPACED_OUT: Final = r"(?<!\S)(?:[!-~] ){15,}[!-~](?!\S)"


def _high_entropy(token: str) -> bool:
    """A long random-looking token, as opposed to a path, an identifier or a hex id.

    Only the token's segments (split at `/ _ = -`) of 8+ characters that are not hex count: hex
    is an id (SHA, UUID, `fact_…`), short segments are path parts or version bits. Those must
    add up to 20+ characters, mix letters and digits, carry at least 4 bits of Shannon entropy
    per character, and break into words shorter than 2.8 characters on average: random base62
    averages under 2, identifiers and paths ("MystenLabs", "SPECIAL_TOKENS") 3 and more. On
    random 32-64 character keys this finds ~99 %; on the 384 long tokens with digits found in
    the installed packages' sources and docs it flagged one (base64 of an English sentence).
    """
    segments = [s for s in re.split(_SEPARATOR, token) if len(s) >= 8 and not re.fullmatch(_HEX, s)]
    rest = "".join(segments)
    if len(rest) < 20 or not _mixed(rest):
        return False
    entropy = -sum(n / len(rest) * math.log2(n / len(rest)) for n in Counter(rest).values())
    pieces = sum(len(re.findall(_PIECE, segment)) for segment in segments)
    return entropy >= 4.0 and len(rest) / pieces < 2.8


def _found(text: str) -> Iterator[tuple[str, int, int]]:
    """(reason, start, end) of every secret in `text`, rule by rule, most specific first."""
    for rule in _rules():
        for match in rule.pattern.finditer(text):
            group = "value" if "value" in rule.pattern.groupindex else 0
            value = match.group(group).rstrip(_TRAILING_PUNCTUATION)
            if rule.accept is None or rule.accept(value):
                start = match.start(group)
                yield rule.reason, start, start + len(value)
    for match in re.finditer(_TOKEN, text):
        if _high_entropy(match.group()):
            yield "contains a long high-entropy token", match.start(), match.end()


def _spaced_out(text: str) -> Iterator[tuple[str, int, int]]:
    """Secrets typed with a space between characters, found in the text with those removed."""
    for match in re.finditer(_SPACED_OUT, text):
        joined = match.group()[::2]
        for reason, _, _ in _found(joined):
            yield f"{reason} (spaced out)", match.start(), match.end()
            break


def find_secret(text: str) -> str | None:
    """Return a short reason naming the kind of secret `text` seems to contain, or None."""
    found = next(_found(text), None) or next(_spaced_out(text), None)
    return found[0] if found is not None else None


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Where the secrets of `text` are, as sorted, non-overlapping (start, end) pairs."""
    spans = sorted((start, end) for _, start, end in (*_found(text), *_spaced_out(text)))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        elif end > start:
            merged.append((start, end))
    return merged


def refuse_secrets(text: str, *, field: str = "content") -> None:
    """Raise `ValueError` if `text` looks like it contains a credential.

    Raises:
        ValueError: `"{field}: refused, {reason}; secrets are never stored in memory"`.
    """
    reason = find_secret(text)
    if reason is not None:
        raise ValueError(f"{field}: refused, {reason}; secrets are never stored in memory")
