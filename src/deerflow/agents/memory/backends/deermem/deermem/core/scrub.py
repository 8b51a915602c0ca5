"""Secret scrubbing: content that looks like a credential is never stored.

`find_secret` names the kind of secret it sees, or returns None; `refuse_secrets` turns that into
the `ValueError` a write path raises. The rules are deliberately narrow where prose is involved:
talking *about* passwords ("I forgot my password", "密码策略要求12个字符") is fine, assigning one
("password: hunter2", "密码是abc123") is not.

Identifiers are not secrets: hex strings (git SHAs, SHA-256 digests, UUIDs, `fact_…` ids),
paths, and URLs without a password pass. A hex secret is still caught when it is assigned to a
secret-named key (`api_key=…`), which is how one realistically shows up in a conversation.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.factfile import FRONT_MATTER_ORDER

__all__ = ["fact_secret", "find_secret", "refuse_fact_secrets", "refuse_secrets"]

# Values that stand for a secret without being one: masks, template variables, references to
# another variable (`self.key_password`), type names, and words such as "required".
_PLACEHOLDER: Final = re.compile(
    r"""[*xX.•#_-]+|<[^>]*>|\{[^}]*\}|\[[^\]]*\]|\$\w+|your[_-]?\w*
    |[\w.]*(?:password|passwd|pwd|secret|token)|pass|str|string|bool
    |redacted|hidden|none|null|n/a|empty|required|optional|yes|no|true|false""",
    re.IGNORECASE | re.VERBOSE,
)
# Template markers anywhere in a value: "<user>:<password>", "${PGPASSWORD}", "{{ token }}".
_TEMPLATE: Final = re.compile(r"<\w[^>]{0,64}>|\$\{\w+\}|\{\{|%\(\w+\)s")
_PATH: Final = re.compile(r"(?:~|\.{1,2})?/|[A-Za-z]:\\")
_KEY_CHARS: Final = re.compile(r"[\w+/=.~-]+")
_TRAILING_PUNCTUATION: Final = ".,;:!?)'\""  # not `}` or `]`: they close placeholders


def _real_value(value: str) -> bool:
    """A value that is not a placeholder, a template, an empty/yes/no word or a file path."""
    return not (_PLACEHOLDER.fullmatch(value) or _TEMPLATE.search(value) or _PATH.match(value))


def _mixed(value: str) -> bool:
    """Letters and digits together: what random keys have and ordinary words lack."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _at_least(length: int) -> Callable[[str], bool]:
    def accept(value: str) -> bool:
        return len(value) >= length and _real_value(value)

    return accept


def _password_like(value: str) -> bool:
    """For "password is X" prose: X must look like a password, not like "required" or "12"."""
    return len(value) >= 6 and not value.isalpha() and _real_value(value)


def _key_like(value: str) -> bool:
    """For `token=X`: X must look like a key, not like `tokens[0]` or `b64encode(raw)`."""
    return (
        len(value) >= 8
        and bool(_KEY_CHARS.fullmatch(value))
        and _mixed(value)
        and _real_value(value)
    )


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
_VALUE: Final = r"""(?P<value><[^>\n]{0,64}>|[^\s"']+)"""
_SECRET_KEYS: Final = (
    r"api[_-]?key|secret[_-]?key|client[_-]?secret|(?:access|auth|refresh)[_-]?token|secret|token"
)

# Most specific first, so the reason names the vendor when it can.
_RULES: Final = (
    _rule(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", "contains a private key block"),
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
    _rule(_NOT_AFTER_WORD + r"xox[abposr]-[A-Za-z0-9-]{10,}", "looks like a Slack token"),
    _rule(r"hooks\.slack\.com/services/T\w+/B\w+/\w+", "looks like a Slack webhook URL"),
    _rule(_NOT_AFTER_WORD + r"AIza[0-9A-Za-z_-]{35}", "looks like a Google API key"),
    _rule(_NOT_AFTER_WORD + r"hf_[A-Za-z0-9]{30,}", "looks like a Hugging Face token"),
    _rule(_NOT_AFTER_WORD + r"npm_[A-Za-z0-9]{36}", "looks like an npm token"),
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
        # Bounded scheme: unbounded, every word start would rescan the rest of a long token.
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/@]*:(?P<value>[^\s@/]+)@[^\s/@]+",
        "contains a connection string with an embedded password",
        _at_least(1),
    ),
    _rule(
        rf"(?i){_NOT_AFTER_WORD}(?:password|passwd|passphrase|pwd){_KEY_END}{_VALUE}",
        "looks like a password assignment",
        _at_least(3),
    ),
    _rule(
        r"(?i)\b(?:password|passphrase)\s+(?:is|was)\s+(?P<value>\S+)",
        "looks like a password assignment",
        _password_like,
    ),
    # Possessive: the value must be entirely non-CJK, so "密码是12位" (12 digits) is not a value.
    _rule(
        r"密码\s*(?:是|为|:|\uff1a|=)\s*(?P<value>[!-~]++)(?![\u4e00-\u9fff])",
        "looks like a password assignment",
        _at_least(4),
    ),
    _rule(
        rf"(?i){_NOT_AFTER_WORD}(?:{_SECRET_KEYS}){_KEY_END}{_VALUE}",
        "looks like a secret assignment",
        _key_like,
    ),
)

_TOKEN: Final = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
_SEPARATOR: Final = re.compile(r"[/_=-]")
_HEX: Final = re.compile(r"[0-9a-fA-F]+")
# Words as identifiers spell them: "Mysten", "SPECIAL", "gemma", "270".
_PIECE: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


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
    segments = [s for s in _SEPARATOR.split(token) if len(s) >= 8 and not _HEX.fullmatch(s)]
    rest = "".join(segments)
    if len(rest) < 20 or not _mixed(rest):
        return False
    entropy = -sum(n / len(rest) * math.log2(n / len(rest)) for n in Counter(rest).values())
    pieces = sum(len(_PIECE.findall(segment)) for segment in segments)
    return entropy >= 4.0 and len(rest) / pieces < 2.8


def find_secret(text: str) -> str | None:
    """Return a short reason naming the kind of secret `text` seems to contain, or None."""
    for rule in _RULES:
        for match in rule.pattern.finditer(text):
            value = match.group("value") if "value" in rule.pattern.groupindex else match.group()
            value = value.rstrip(_TRAILING_PUNCTUATION)
            if rule.accept is None or rule.accept(value):
                return rule.reason
    if any(_high_entropy(token) for token in _TOKEN.findall(text)):
        return "contains a long high-entropy token"
    return None


def refuse_secrets(text: str, *, field: str = "content") -> None:
    """Raise `ValueError` if `text` looks like it contains a credential.

    Raises:
        ValueError: `"{field}: refused, {reason}; secrets are never stored in memory"`.
    """
    reason = find_secret(text)
    if reason is not None:
        raise ValueError(f"{field}: refused, {reason}; secrets are never stored in memory")


# The text a fact record carries besides its id, times and provenance: a secret in
# a correction's `sourceError` reaches the prompt just as one in its content does.
_FACT_TEXT_FIELDS: Final = ("content", "sourceError", "event_time")
# The fact file format's keys; any other key (a legacy or hand-written one) is scanned, with its
# name, so that `password: ...` is seen. The known ones other than the texts above and `topics`
# hold ids, times, numbers or provenance.
_KNOWN: Final = frozenset({*FRONT_MATTER_ORDER, "content"})


def _fact_texts(fact: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, text) for every text of a fact record that could hold a secret."""
    for key in _FACT_TEXT_FIELDS:
        value = fact.get(key)
        if isinstance(value, str):
            yield key, value
    topics = fact.get("topics")
    if isinstance(topics, list):
        for number, topic in enumerate(topics):
            if isinstance(topic, str):
                yield f"topics[{number}]", topic
    for key, value in fact.items():
        if key not in _KNOWN:
            yield str(key), str(key)
            yield from _named_texts(str(key), str(key), value)


def _named_texts(field: str, key: str, value: Any) -> Iterator[tuple[str, str]]:
    """The texts in an unknown key's value, each as `key: text`, and the nested keys' names."""
    if isinstance(value, str):
        yield field, f"{key}: {value}"
    elif isinstance(value, Mapping):
        for inner, item in value.items():
            yield f"{field}.{inner}", str(inner)
            yield from _named_texts(f"{field}.{inner}", str(inner), item)
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from _named_texts(f"{field}[{number}]", key, item)


def fact_secret(fact: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first field of a fact record that seems to hold a credential, and why; or None."""
    for field, text in _fact_texts(fact):
        reason = find_secret(text)
        if reason is not None:
            return field, reason
    return None


def refuse_fact_secrets(fact: Mapping[str, Any], *, where: str = "") -> None:
    """`refuse_secrets` for every text of a fact record (`where` prefixes the field's name).

    Raises:
        ValueError: `"{where}{field}: refused, {reason}; ..."` for the first such field.
    """
    for field, text in _fact_texts(fact):
        refuse_secrets(text, field=f"{where}{field}")
