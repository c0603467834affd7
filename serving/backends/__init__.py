"""Model backends: the agent loop's one contract (`harness.model_protocol.ModelBackend`), implemented several
ways and chosen by name.

    backend = create_backend("openai", base_url="http://gpu:8000/v1", model="qwen3-8b")
    response = await backend.complete(messages, tools)

Registered: `scripted` (deterministic, tests), `openai` (any OpenAI-compatible server, i.e. vLLM),
`local` (SmolLM2-135M GGUF on llama.cpp, the offline default; llama-cpp-python is imported on first
use, so importing this package never needs it), `transformers` (a model directory such as a trained
checkpoint, on torch; imported on first use too). Families resolve names with a prefix: the training
app registers `checkpoint:<id>`. Pure Python: no Django here.
"""

from serving.backends.registry import (
    backend_families,
    backend_family,
    backend_names,
    create_backend,
    is_backend_name,
    register_backend,
    register_backend_family,
)

# Importing the implementations registers them.
from serving.backends import local, openai, scripted, transformers_backend  # noqa: E402,F401  isort: skip

__all__ = [
    "backend_families",
    "backend_family",
    "backend_names",
    "create_backend",
    "is_backend_name",
    "register_backend",
    "register_backend_family",
]
