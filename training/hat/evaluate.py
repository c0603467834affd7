"""Scoring a model directory for the HAT reproduction: agent turns judged by the reference judge, IFEval.

- `eval_backend(model_dir, engine=...)`: the model as a `ModelBackend`. `llama.cpp` (CPU): the model
  directory exported to a Q8_0 GGUF (`training.gguf_export`) and served by the product's own `local`
  backend, which reuses the common prompt prefix between calls; `transformers` (GPU, or models
  llama.cpp cannot load): `GreedyBackend`. Both render prompts exactly as the served format
  (`render_chatml`, Hermes tool calls), the format the SFT data was trained in, and decode greedily.
- `Capped`: bounds every agent call's new tokens (a CPU-time bound, recorded in the report's config).
- `judge_turns(model, items)`: each (case, harness) runs through `harness.runtime.run_turn` in the
  simulator's sandbox (no injected faults) and is graded by `evaluation.judges.reference`.
- `ifeval_scores(model, records)`: the model answers each prompt as a plain chat; the official
  checkers grade it (prompt-level strict: every instruction followed).
- `bootstrap_ci(values)`: a seeded percentile bootstrap of the mean (95%).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from evaluation.judges.reference import judge_reference
from evaluation.metrics.ifeval.evaluate import check_record
from harness.model_protocol import ModelResponse
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.simulator import SandboxTools
from harness.simulator.cases import Case
from harness.spec import HarnessSpec
from training.selection import GreedyBackend
from training.trajectories import TRAINING_NOW


class Capped:
    """A backend whose every call decodes at most `max_new_tokens` (the agent turns' CPU-time bound)."""

    def __init__(self, inner: Any, max_new_tokens: int):
        self.inner, self.max_new_tokens = inner, max_new_tokens
        self.name = getattr(inner, "name", "eval")
        # judged as served: a backend that constrains decoding to the harness's declared calls still does
        self.constrains_tool_calls = getattr(inner, "constrains_tool_calls", False)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int = 512,
                       temperature: float = 0.0, tool_choice: str = "auto", **constraint: Any) -> ModelResponse:
        return await self.inner.complete(messages, tools, max_tokens=min(max_tokens, self.max_new_tokens),
                                         temperature=temperature, tool_choice=tool_choice, **constraint)


def eval_backend(model_dir: str, *, engine: str, device: str = "cpu", threads: int | None = None) -> Any:
    """The model directory as a greedy `ModelBackend` on the chosen engine (module docstring)."""
    if engine == "llama.cpp":
        from pathlib import Path

        from serving.backends.local import LocalBackend
        from training.base_models import gguf_path
        from training.gguf_export import export_gguf

        target = Path(model_dir) / "model.q8_0.gguf"
        if not target.is_file():
            export_gguf(model_dir, target, template=gguf_path())
        return LocalBackend(target, n_ctx=4096, n_threads=threads)
    if engine == "transformers":
        return GreedyBackend(*load_for_eval(model_dir, device=device), name="hat-eval")
    raise ValueError(f"engine must be llama.cpp or transformers, not {engine!r}")


@dataclass(frozen=True)
class TurnScore:
    case_id: str
    accuracy: int
    effectiveness: float
    outcome: str
    reasons: tuple[str, ...]
    tools_called: tuple[str, ...] = ()  # in call order, load_skill included
    skills_asked: tuple[str, ...] = ()  # the names the model passed to load_skill, in order


def _skills_asked(trace: Mapping[str, Any]) -> tuple[str, ...]:
    asked = []
    for step in trace.get("steps") or ():
        if step.get("kind") == "tool" and step.get("name") == "load_skill":
            try:
                name = json.loads(step.get("arguments") or "{}").get("name")
            except (ValueError, AttributeError):
                name = None
            asked.append(name if isinstance(name, str) else "")
    return tuple(asked)


def load_for_eval(model_dir: str, *, device: str = "cpu") -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    from training.base_models import load_tokenizer, resolve_device

    device = resolve_device(device)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    model.eval()
    return model, load_tokenizer(model_dir)


def judge_turns(backend: Any, items: Sequence[tuple[Case, HarnessSpec]], *, deadline_s: float,
                label: str, say: Callable[[str], None] | None = None) -> list[TurnScore]:
    """Every (case, harness) answered once and judged (failures are failed answers, never skipped).

    `say` hears a progress line every 20 turns (a CPU run takes long enough to want one)."""
    scores = []
    started = time.monotonic()
    for index, (case, spec) in enumerate(items, 1):
        sandbox = SandboxTools(dict(case.room), forced_faults=dict(case.faults) or None, seed=case.case_id)
        turn = TurnInput(message=case.message, viewer_id=case.viewer_id, room=RoomContext.from_dict(dict(case.room)),
                         recent_dialogue=case.dialogue)
        result = asyncio.run(run_turn(spec, turn, backend, sandbox.registry(), arm=f"hat:{label}", now=TRAINING_NOW,
                                      deadline_s=deadline_s))
        verdict = judge_reference(case, result.trace)
        scores.append(TurnScore(case.case_id, int(verdict.accuracy), float(verdict.effectiveness), result.outcome,
                                tuple(verdict.reasons), tuple(result.trace.get("tools_called") or ()),
                                _skills_asked(result.trace)))
        if say and (index % 20 == 0 or index == len(items)):
            elapsed = time.monotonic() - started
            say(f"hat: {label} {index}/{len(items)} judged, accuracy so far "
                f"{sum(s.accuracy for s in scores) / index:.2f}, {elapsed / index:.1f} s/turn")
    return scores


def ifeval_scores(backend: Any, records: Sequence[Mapping[str, Any]], *, max_new_tokens: int) -> list[int]:
    """1 per record whose every instruction the response follows (prompt-level strict), else 0."""
    out = []
    for record in records:
        response = asyncio.run(backend.complete([{"role": "user", "content": record["prompt"]}], [],
                                                max_tokens=max_new_tokens))
        out.append(int(check_record(record, response.content.strip()).prompt_strict))
    return out


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def bootstrap_ci(values: Sequence[float], *, seed: int, resamples: int = 2000) -> list[float]:
    """95% percentile bootstrap interval of the mean; [0, 0] for an empty list."""
    if not values:
        return [0.0, 0.0]
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return [round(means[int(0.025 * resamples)], 4), round(means[min(resamples - 1, int(0.975 * resamples))], 4)]
