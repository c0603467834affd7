"""Model backends: one contract (`base.ModelBackend`), several implementations, chosen by name.

    backend = create_backend("openai", base_url="http://gpu:8000/v1", model="qwen3-8b")
    response = await backend.complete(messages, tools)

Registered: `scripted` (deterministic, tests), `openai` (any OpenAI-compatible server, i.e. vLLM),
`local` (SmolLM2-135M GGUF on llama.cpp, the offline default; llama-cpp-python is imported on first
use, so importing this package never needs it). Pure Python: no Django here.
"""

from serving.backends.base import BackendError, ModelBackend, ModelResponse, ToolCall
from serving.backends.registry import backend_names, create_backend, register_backend

# Importing the implementations registers them.
from serving.backends import local, openai, scripted  # noqa: E402,F401  isort: skip

__all__ = [
    "BackendError",
    "ModelBackend",
    "ModelResponse",
    "ToolCall",
    "backend_names",
    "create_backend",
    "register_backend",
]
