"""The model-backend contract the agent runtime calls (serving.backends implements it). Pure Python: no Django.

It lives under the runtime's package, not serving's: the loop is below the backends in the layers.

A backend takes OpenAI-style chat messages and tool definitions and returns one
assistant message: text and/or tool calls, plus the numbers the trace records.
Backends never raise for model-side trouble they can describe; they raise
`BackendError` (the runtime records it and falls back) and let
`asyncio.CancelledError` through (the runtime's deadline uses cancellation).
"""

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class BackendError(RuntimeError):
    """The model could not answer (connection, HTTP status, timeout, bad response)."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it; may be malformed


@dataclass(frozen=True)
class ModelResponse:
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""  # separated reasoning (vLLM's reasoning parser); inline <think> stays in content
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0  # of tokens_in, those served from the backend's prefix cache (as the backend says)
    latency_ms: float = 0.0
    ttft_ms: float | None = None  # time to first token, when the call streamed
    finish_reason: str = "stop"
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ToolConstraint:
    """Ask a backend to decode only free text or calls of the `tools` it is given (a skill only through
    `load_skill`, whose `name` enum lists the declared skills), with arguments that follow each tool's schema.

    `key` is the harness's content hash: the tools of one harness version never change, so a backend builds
    its grammar once per key and every later turn reuses it. Only backends whose class sets
    `constrains_tool_calls = True` are passed one (`complete(..., constraint=...)`); others never see it.
    """

    key: str


@runtime_checkable
class ModelBackend(Protocol):
    name: str

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        tool_choice: str = "auto",
    ) -> ModelResponse:
        """One assistant turn. Implementations stream internally when they can, to fill `ttft_ms`."""
        ...
