"""DeerMem's extraction step: one LLM call, then a validation gate.

`extract` sends the prompt of `prompt.build_messages` (with JSON-schema structured output where
the model offers it), reads the reply with `parse_reply`, and passes it through `gate`, which
keeps only well-formed proposals labelled `scope=user, durability=durable,
authority=descriptive` and counts every other one by reason. The gate never raises on a model
mistake; a reply with nothing usable in it is an `ExtractionError`, and the batch is retried
later. Applying the result to memory is `apply.apply_extraction`'s job.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig

from deerflow.agents.memory.backends.deermem.deermem.governance import MAX_VALID_DAYS
from deerflow.agents.memory.backends.deermem.deermem.model_settings import (
    model_settings,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.compact import (
    COMPACT_SCHEMA,
    build_compact_messages,
    ground,
    with_kept_labels,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.prompt import (
    EXTRACTION_SCHEMA,
    HISTORY_SECTIONS,
    REPLY_KEYS,
    USER_SECTIONS,
    build_messages,
    parse_reply,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.proposals import (
    Consolidation,
    Extraction,
    ExtractionError,
    Labels,
    NewFact,
    Removal,
)
from deerflow.agents.memory.manager import (
    FACT_CATEGORIES,
    MemoryCallbacks,
    checked_text,
    import_object,
    validate_content,
)

__all__ = [
    "EXTRACTION_SCHEMA",
    "GATE_REASONS",
    "Consolidation",
    "Extraction",
    "ExtractionError",
    "Labels",
    "NewFact",
    "Removal",
    "build_messages",
    "build_model",
    "extract",
    "gate",
    "parse_reply",
    "use_compact_prompt",
]

# Keys of `Extraction.rejected`: why the gate dropped a proposal (one reason per proposal).
GATE_REASONS: Final = (
    "missing_labels",
    "scope",
    "durability",
    "authority",
    "content",
    "category",
    "confidence",
    "unknown_id",
    "bad_field",
)
# Models with a smaller context window get the compact prompt under `extraction_prompt: auto`.
COMPACT_PROMPT_BELOW_TOKENS: Final = 8192
T = TypeVar("T")

_KEPT: Final = {"scope": "user", "durability": "durable", "authority": "descriptive"}
_SECTIONS: Final = {"user": USER_SECTIONS, "history": HISTORY_SECTIONS}


class _Rejected(Exception):
    """Internal: one proposal failed the gate for `reason`."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _text(value: Any, reason: str = "bad_field") -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Rejected(reason)
    return value.strip()


def _content(value: Any) -> str:
    try:
        return validate_content(value)
    except ValueError:
        raise _Rejected("content") from None


def _optional_text(value: Any) -> str | None:
    try:
        return checked_text(value)
    except ValueError:
        return None


def _positive_int(value: Any) -> int | None:
    # Integral floats (90.0) are accepted: some models write every number as a float.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) and value >= 1 else None


def _valid_days(value: Any) -> int | None:
    days = _positive_int(value)
    return None if days is None else min(days, MAX_VALID_DAYS)


def _topics(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(dict.fromkeys(filter(None, map(_optional_text, value))))


def _confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Rejected("confidence")
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise _Rejected("confidence")
    return float(value)


def _category(value: Any) -> str:
    category = value.strip().lower() if isinstance(value, str) else value
    if category not in FACT_CATEGORIES:
        raise _Rejected("category")
    return str(category)


def _labels(item: Mapping[str, Any], *, checked: Iterable[str]) -> Labels:
    """The item's labels, if those in `checked` are present and the kept values.

    Labels normally sit under `labels`; a model that flattens them onto the item is understood.
    A label outside `checked` may be absent (""): DeerFlow's summaries carry no `durability`.
    """
    raw = item.get("labels", item)
    if not isinstance(raw, Mapping):
        raise _Rejected("missing_labels")
    found = {key: raw.get(key) for key in _KEPT}
    if not all(isinstance(found[key], str) for key in checked):
        raise _Rejected("missing_labels")
    values = {key: str(v).strip().lower() if isinstance(v, str) else "" for key, v in found.items()}
    for key in checked:
        if values[key] != _KEPT[key]:
            raise _Rejected(key)
    return Labels(**values)


def _new_fact(item: Any) -> NewFact:
    if not isinstance(item, Mapping):
        raise _Rejected("bad_field")
    labels = _labels(item, checked=_KEPT)
    return NewFact(
        content=_content(item.get("content")),
        category=_category(item.get("category")),
        confidence=_confidence(item.get("confidence")),
        labels=labels,
        # Optional fields that are malformed are dropped, not the fact they came with.
        source_error=_optional_text(item.get("sourceError")),
        topics=_topics(item.get("topics")),
        expected_valid_days=_valid_days(item.get("expected_valid_days")),
        event_time=_optional_text(item.get("event_time")),
    )


class _Gate:
    """One pass over a reply: checks proposals against the known ids and counts rejections."""

    def __init__(self, known_fact_ids: Collection[str]) -> None:
        self.known = known_fact_ids
        self.rejected: dict[str, int] = {}

    def count(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def listed(self, raw: Mapping[str, Any], key: str) -> list[Any]:
        value = raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.count("bad_field")
            return []
        return value

    def keep(self, items: Iterable[Any], check: Callable[[Any], T]) -> list[T]:
        passed = []
        for item in items:
            try:
                passed.append(check(item))
            except _Rejected as rejection:
                self.count(rejection.reason)
        return passed

    def fact_id(self, value: Any) -> str:
        fact_id = _text(value)
        if fact_id not in self.known:
            raise _Rejected("unknown_id")
        return fact_id

    def removal(self, item: Any) -> Removal:
        if not isinstance(item, Mapping):
            raise _Rejected("bad_field")
        fact_id = self.fact_id(item.get("id"))
        _labels(item, checked=_KEPT)
        reason = _text(item.get("reason"))
        replacement = item.get("replacement")
        # A removal whose replacement fails the gate goes too: removing without replacing would
        # lose what the model meant to keep.
        return Removal(fact_id, reason, None if replacement is None else _new_fact(replacement))

    def extension(self, item: Any) -> tuple[str, int]:
        if not isinstance(item, Mapping):
            raise _Rejected("bad_field")
        fact_id = self.fact_id(item.get("id"))
        days = _positive_int(item.get("extraDays"))
        if days is None:
            raise _Rejected("bad_field")
        return fact_id, days

    def consolidation(self, item: Any) -> Consolidation:
        if not isinstance(item, Mapping) or not isinstance(item.get("sourceIds"), list):
            raise _Rejected("bad_field")
        sources = tuple(dict.fromkeys(self.fact_id(i) for i in item["sourceIds"]))
        if len(sources) < 2:
            raise _Rejected("bad_field")
        labels = _labels(item, checked=_KEPT)
        return Consolidation(
            sources,
            _content(item.get("content")),
            _category(item.get("category")),
            _confidence(item.get("confidence")),
            labels,
        )

    def summaries(self, raw: Mapping[str, Any]) -> dict[str, dict[str, str]]:
        entries: list[tuple[str, str, Any]] = []
        for part in _SECTIONS:
            sections = raw.get(part)
            if isinstance(sections, Mapping):
                entries += [(part, str(name), section) for name, section in sections.items()]
            elif sections is not None:
                self.count("bad_field")
        summaries: dict[str, dict[str, str]] = {}
        for kept in self.keep(entries, _summary):
            if kept is not None:
                part, name, text = kept
                summaries.setdefault(part, {})[name] = text
        return summaries


def _summary(entry: tuple[str, str, Any]) -> tuple[str, str, str] | None:
    """A section rewrite, or None when the model did not ask for one."""
    part, name, section = entry
    if name not in _SECTIONS[part] or not isinstance(section, Mapping):
        raise _Rejected("bad_field")
    if section.get("shouldUpdate") is not True:
        return None
    # Durability is not checked: a section such as topOfMind is meant to change.
    _labels(section, checked=("scope", "authority"))
    return part, name, _content(section.get("summary"))


def _first_per_id(items: Iterable[T], fact_id: Callable[[T], str]) -> tuple[T, ...]:
    first: dict[str, T] = {}
    for item in items:
        first.setdefault(fact_id(item), item)
    return tuple(first.values())


def gate(raw: Mapping[str, Any], *, known_fact_ids: Collection[str]) -> Extraction:
    """Validate and classify a parsed reply; never raises on the model's mistakes.

    A proposal is dropped at its first failed check and counted under that reason (see
    `GATE_REASONS`): labels missing or not `user/durable/descriptive` (summaries need only
    `user` and `descriptive`), empty content, unknown category, confidence not a number in 0..1,
    an id not in `known_fact_ids`, or any other malformed field. A key that is not a list (or, for
    `user`/`history`, not an object) counts once as `bad_field`. Sections whose `shouldUpdate` is
    not true propose nothing and are not counted. A repeated id keeps its first proposal.
    Malformed optional fields of a new fact (`sourceError`, `topics`, ...) are dropped, not the
    fact.
    """
    checker = _Gate(known_fact_ids)
    summaries = checker.summaries(raw)
    new_facts = checker.keep(checker.listed(raw, "newFacts"), _new_fact)
    reinforce = checker.keep(checker.listed(raw, "factsToReinforce"), checker.fact_id)
    removals = checker.keep(checker.listed(raw, "factsToRemove"), checker.removal)
    stale_remove = checker.keep(checker.listed(raw, "staleFactsToRemove"), checker.fact_id)
    stale_extend = checker.keep(checker.listed(raw, "staleFactsToExtend"), checker.extension)
    merges = checker.keep(checker.listed(raw, "factsToConsolidate"), checker.consolidation)
    return Extraction(
        summaries=summaries,
        new_facts=tuple(new_facts),
        reinforce=tuple(dict.fromkeys(reinforce)),
        removals=_first_per_id(removals, lambda removal: removal.fact_id),
        stale_remove=tuple(dict.fromkeys(stale_remove)),
        stale_extend=_first_per_id(stale_extend, lambda pair: pair[0]),
        consolidations=tuple(merges),
        rejected=checker.rejected,
    )


_RUN_NAME: Final = "deermem_extraction"
_TAGS: Final = ("deermem", "memory-extraction")


def _model_name(model: Any) -> str:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _structured(model: BaseChatModel, schema: dict[str, Any]) -> Runnable[Any, Any] | None:
    """The model bound to `schema`, or None when it offers no structured output."""
    try:
        return model.with_structured_output(schema, method="json_schema", include_raw=True)
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        # NotImplementedError: LangChain's default for models without tool calling;
        # ValueError/TypeError: integrations that refuse the method or an argument;
        # AttributeError: a chat-model-like object without the method at all.
        return None


def _unpack(output: Any) -> tuple[BaseMessage | None, Any]:
    """(the model's message, the structured value) of a plain or an `include_raw` call."""
    if isinstance(output, BaseMessage):
        return output, None
    if isinstance(output, Mapping) and "raw" in output:
        raw = output["raw"]
        return (raw if isinstance(raw, BaseMessage) else None), output.get("parsed")
    return None, output


def _token_usage(message: BaseMessage | None) -> dict[str, int] | None:
    if not isinstance(message, AIMessage) or not message.usage_metadata:
        return None
    usage = message.usage_metadata
    return {
        "input_tokens": usage.get("input_tokens", 0),
        "output_tokens": usage.get("output_tokens", 0),
        "total_tokens": usage.get("total_tokens", 0),
    }


def _reply(message: BaseMessage | None, parsed: Any) -> tuple[str, dict[str, Any] | None]:
    """The reply as text (for the callbacks) and as the reply object, if there is one."""
    text = message.text if message is not None else ""
    if isinstance(parsed, Mapping) and any(key in parsed for key in REPLY_KEYS):
        return text or json.dumps(parsed, ensure_ascii=False), dict(parsed)
    # Structured output that failed to parse still leaves the raw text, which may hold the JSON.
    return text, parse_reply(text)


def _known_ids(memory: Mapping[str, Any], *candidates: Sequence[Mapping[str, Any]]) -> set[str]:
    facts = memory.get("facts")
    pools = [facts if isinstance(facts, list) else [], *candidates]
    return {
        fact["id"]
        for pool in pools
        for fact in pool
        if isinstance(fact, Mapping) and isinstance(fact.get("id"), str)
    }


def extract(
    model: BaseChatModel,
    memory: Mapping[str, Any],
    turns: Sequence[Mapping[str, str]],
    *,
    signals: Iterable[str] = (),
    stale_candidates: Sequence[Mapping[str, Any]] = (),
    consolidation_candidates: Sequence[Mapping[str, Any]] = (),
    nearest_facts: Sequence[Mapping[str, Any]] = (),
    callbacks: MemoryCallbacks | None = None,
    thread_id: str | None = None,
    user_id: str | None = None,
    trace_id: str | None = None,
    compact: bool = False,
) -> tuple[Extraction, dict[str, Any]]:
    """Run one extraction call over `turns` and gate its reply.

    Uses the model's structured output (JSON schema) when it has one, else a plain call whose
    text goes through `parse_reply`. With `compact`, the prompt is the few-shot one for small
    models (`compact.build_compact_messages`): it proposes new facts only, and facts copied from
    its example or not said by the user are dropped after the gate. `callbacks.notify_call` runs
    before the call and may add tracing to the invoke config (`run_name`, `tags`, `metadata`,
    `callbacks`), which is passed to `invoke`; `notify_result` runs after it, on failure too.

    Args:
        model: the chat model.
        memory: the memory document; its fact ids (and the candidates') are the known ids.
        turns: the new conversation, as `build_messages` takes it.
        signals: signal classes detected in the latest user turns.
        stale_candidates: facts due for staleness review.
        consolidation_candidates: facts that may be merged.
        nearest_facts: the stored facts closest to the conversation (not in the compact prompt).
        callbacks: the host's tracing hooks.
        thread_id: for tracing metadata.
        user_id: for tracing metadata.
        trace_id: for tracing metadata.
        compact: use the compact prompt (see `use_compact_prompt`).

    Returns:
        The gated extraction, and metrics: `token_usage` (`input_tokens`, `output_tokens`,
        `total_tokens`, or None when the model reports none), `duration_ms`, `model_name`.

    Raises:
        ExtractionError: the call failed, or the reply holds no JSON object with the expected
            keys; `error.metrics` has what is known of the attempt.
        ValueError: bad `turns` (see `build_messages`).
    """
    if compact:
        messages, schema = build_compact_messages(turns), COMPACT_SCHEMA
    else:
        messages = build_messages(
            memory,
            turns,
            signals=signals,
            stale_candidates=stale_candidates,
            consolidation_candidates=consolidation_candidates,
            nearest_facts=nearest_facts,
        )
        schema = EXTRACTION_SCHEMA
    prompt = "\n\n".join(f"{message.type}: {message.text}" for message in messages)
    hooks = callbacks or MemoryCallbacks()
    model_name = _model_name(model)
    ids = {"thread_id": thread_id, "user_id": user_id, "trace_id": trace_id}
    invoke_config: dict[str, Any] = {
        "run_name": _RUN_NAME,
        "tags": list(_TAGS),
        "metadata": {k: v for k, v in ids.items() if v is not None},
        "callbacks": [],
    }
    hooks.notify_call(invoke_config, **ids, model_name=model_name)
    metrics: dict[str, Any] = {"token_usage": None, "duration_ms": 0.0, "model_name": model_name}

    def report(response: str | None, error: BaseException | None) -> None:
        hooks.notify_result(
            invoke_config,
            prompt=prompt,
            response=response,
            error=error,
            duration_ms=metrics["duration_ms"],
            model_name=model_name,
        )

    runnable: Runnable[Any, Any] = _structured(model, schema) or model
    started = time.perf_counter()
    try:
        output = runnable.invoke(messages, config=cast(RunnableConfig, invoke_config))
    except Exception as exc:
        metrics["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
        report(None, exc)
        raise ExtractionError(
            f"the extraction call to {model_name} failed: {type(exc).__name__}: {exc}",
            metrics=metrics,
        ) from exc
    metrics["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
    message, parsed = _unpack(output)
    metrics["token_usage"] = _token_usage(message)
    response, reply = _reply(message, parsed)
    if reply is None:
        error = ExtractionError(
            f"the extraction reply ({len(response)} characters) has no JSON object with the "
            f"expected keys ({', '.join(REPLY_KEYS)})",
            metrics=metrics,
        )
        report(response, error)
        raise error
    report(response, None)
    known = _known_ids(memory, stale_candidates, consolidation_candidates)
    if not compact:
        return gate(reply, known_fact_ids=known), metrics
    return ground(gate(with_kept_labels(reply), known_fact_ids=known), turns), metrics


def use_compact_prompt(setting: str, model: BaseChatModel) -> bool:
    """Whether extraction with `model` uses the compact prompt.

    `setting` is `backend_config.extraction_prompt`: `full`, `compact`, or `auto`, which picks
    the compact prompt for a model whose profile reports a context window below
    `COMPACT_PROMPT_BELOW_TOKENS`: the full prompt's instructions alone are about 1,700 tokens,
    before the stored facts and the conversation.
    """
    if setting != "auto":
        return setting == "compact"
    profile = getattr(model, "profile", None) or {}
    window = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    return isinstance(window, int) and window < COMPACT_PROMPT_BELOW_TOKENS


def build_model(
    model_config: Mapping[str, Any] | None,
    host_llm_factory: Callable[[], Any] | None,
) -> BaseChatModel | None:
    """The extraction model: from `backend_config.model`, else the host's default, else None.

    `provider` is a named provider (openai, anthropic, ollama, deepseek, google_genai, groq,
    mistralai: each needs its LangChain integration installed, e.g. `langchain-openai`) or a
    class path `pkg.mod:Class`. The class gets `model`, `api_key`, `base_url` and `temperature`
    as keyword arguments, those that are set. With every key omitted (or None), the host's
    `host_llm_factory()` decides; without one, there is no model.

    Raises:
        ValueError: an unknown key, a missing or unknown provider, a class that cannot be
            imported, is not a LangChain chat model or cannot be constructed (the message
            never shows the api_key), or a host factory that returned something else.
    """
    try:
        chosen = model_settings(model_config)
    except ValueError as exc:
        raise ValueError(f"backend_config.model: {exc}") from None
    if chosen is None:
        return _host_model(host_llm_factory)
    path, package, settings = chosen
    try:
        cls = import_object(path)
    except ImportError as exc:
        hint = f" (pip install {package})" if package else ""
        raise ValueError(f"backend_config.model.provider: cannot load {path}{hint}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, BaseChatModel)):
        raise ValueError(f"backend_config.model.provider: {path} is not a LangChain chat model")
    try:
        return cls(**settings)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        secret = settings.get("api_key")
        if isinstance(secret, str) and secret:
            detail = detail.replace(secret, "***")
        raise ValueError(f"backend_config.model: constructing {path} failed: {detail}") from exc


def _host_model(host_llm_factory: Callable[[], Any] | None) -> BaseChatModel | None:
    model = host_llm_factory() if host_llm_factory is not None else None
    if model is None or isinstance(model, BaseChatModel):
        return model
    raise ValueError(
        f"host_llm_factory returned {type(model).__name__}, not a LangChain chat model"
    )
