"""`backend_config.model`, checked without importing LangChain: the configuration validates it
at start (a typo stops the start, not every extraction) and extraction builds the model from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MODEL_KEYS", "PROVIDERS", "model_settings"]

# Named providers and the LangChain integration each needs; anything else is a class path.
PROVIDERS: Final[Mapping[str, tuple[str, str]]] = {
    "openai": ("langchain_openai:ChatOpenAI", "langchain-openai"),
    "anthropic": ("langchain_anthropic:ChatAnthropic", "langchain-anthropic"),
    "ollama": ("langchain_ollama:ChatOllama", "langchain-ollama"),
    "deepseek": ("langchain_deepseek:ChatDeepSeek", "langchain-deepseek"),
    "google_genai": ("langchain_google_genai:ChatGoogleGenerativeAI", "langchain-google-genai"),
    "groq": ("langchain_groq:ChatGroq", "langchain-groq"),
    "mistralai": ("langchain_mistralai:ChatMistralAI", "langchain-mistralai"),
}
MODEL_KEYS: Final = ("provider", "model", "api_key", "base_url", "temperature")


def model_settings(
    model_config: Mapping[str, Any] | None,
) -> tuple[str, str, dict[str, Any]] | None:
    """`backend_config.model` as a class path, the package that provides it and its keyword
    arguments; None when every key is unset (the host's model is used then).

    Checked when the configuration is validated too, so that a typo stops the start rather
    than every extraction.

    Raises:
        ValueError: an unknown key, or a missing or unknown provider.
    """
    settings = {key: value for key, value in (model_config or {}).items() if value is not None}
    unknown = sorted(set(settings) - set(MODEL_KEYS))
    if unknown:
        raise ValueError(f"unknown keys {unknown}; known: {', '.join(MODEL_KEYS)}")
    if not settings:
        return None
    provider = settings.pop("provider", None)
    if not isinstance(provider, str) or not provider.strip():
        raise ValueError(
            "provider: required when other model keys are set "
            "(omit them all to use the host's default model)"
        )
    path, package = PROVIDERS.get(provider, (provider, ""))
    if not package and ":" not in path and "." not in path:
        raise ValueError(
            f"provider: unknown provider {provider!r}; use one of "
            f"{', '.join(PROVIDERS)} or a class path 'pkg.mod:Class'"
        )
    return path, package, settings
