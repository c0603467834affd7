"""Judge models by name: OpenAI-compatible endpoints the Agent-as-a-Judge can vote with. Pure: no Django.

Configured as JSON (the `HARNESSOPS_JUDGE_MODELS` setting), one entry per name:

    {"qwen3-8b": {"base_url": "http://vllm-a:8000/v1", "model": "Qwen/Qwen3-8B"},
     "llama-70b": {"base_url": "http://vllm-b:8000/v1", "model": "meta-llama/Llama-3.3-70B-Instruct",
                   "api_key_env": "JUDGE_B_KEY", "timeout_s": 90}}

A run's judge `harness:qwen3-8b,llama-70b` then votes over both; a score records each model's id.
The API key is never in the configuration: `api_key_env` names the environment variable holding it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.model_protocol import ModelBackend
from serving.backends import create_backend

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")


@dataclass(frozen=True)
class JudgeModel:
    """One judge model: an OpenAI-compatible endpoint and the model it serves."""

    name: str = field(metadata={"help": "How runs refer to it: lowercase letters, digits, '.', '_', '-'."})
    base_url: str = field(metadata={"help": "The endpoint with its API prefix, e.g. http://vllm:8000/v1."})
    model: str = field(metadata={"help": "The served model's id; recorded with every score."})
    api_key_env: str = field(default="", metadata={"help": "Environment variable holding the API key, if any."})
    timeout_s: float = field(default=60.0, metadata={"help": "Per-request timeout in seconds."})

    def backend(self) -> ModelBackend:
        api_key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return create_backend("openai", base_url=self.base_url, model=self.model, api_key=api_key,
                              timeout_s=self.timeout_s)

    def factory(self) -> tuple[str, Callable[[], ModelBackend]]:
        """(name, backend factory), as `HarnessJudge` takes them."""
        return self.name, self.backend


def parse_judge_models(raw: str | Mapping[str, Any] | None) -> dict[str, JudgeModel]:
    """The judge models of a JSON object (text or parsed); ValueError naming the bad entry otherwise."""
    if raw is None or raw == "":
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, Mapping):
        raise ValueError("judge models must be a JSON object of name → {base_url, model}")
    out = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"judge model name {name!r} must be lowercase letters, digits, '.', '_' or '-'")
        if not isinstance(entry, Mapping) or not entry.get("base_url") or not entry.get("model"):
            raise ValueError(f"judge model {name!r} needs a base_url and a model")
        unknown = set(entry) - {"base_url", "model", "api_key_env", "timeout_s"}
        if unknown:
            raise ValueError(f"judge model {name!r} has unknown keys: {', '.join(sorted(unknown))}")
        try:
            timeout = float(entry.get("timeout_s", 60.0))
        except (TypeError, ValueError):
            raise ValueError(f"judge model {name!r}: timeout_s must be a number") from None
        if not timeout > 0:
            raise ValueError(f"judge model {name!r}: timeout_s must be positive")
        out[name] = JudgeModel(name=name, base_url=str(entry["base_url"]), model=str(entry["model"]),
                               api_key_env=str(entry.get("api_key_env") or ""), timeout_s=timeout)
    return out
