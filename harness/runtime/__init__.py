"""The agent runtime (pure core: no Django). See docs/runtime.md."""

from harness.runtime import demo_tools  # noqa: F401  (registers the demo.* builtins)
from harness.runtime.hooks import HookEngine, engine_for
from harness.runtime.loop import reply_chunks, run_turn, stream_turn
from harness.runtime.react import react_baseline_spec
from harness.runtime.tools import (
    HttpPolicy,
    ToolContext,
    ToolError,
    ToolPermissionError,
    ToolRegistry,
    register_builtin,
)
from harness.runtime.trace import SCHEMA as TRACE_SCHEMA
from harness.runtime.turn import OUTCOMES, RoomContext, TurnInput, TurnResult

__all__ = [
    "HookEngine", "engine_for", "reply_chunks", "run_turn", "stream_turn", "react_baseline_spec", "ToolContext", "ToolError",
    "ToolPermissionError", "ToolRegistry", "HttpPolicy", "register_builtin", "TRACE_SCHEMA", "OUTCOMES", "RoomContext",
    "TurnInput", "TurnResult",
]
