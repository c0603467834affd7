"""The pipeline's contract with its caller (no torch, no Django: cheap to import anywhere).

The Django side implements `Reporter` (push metrics to the live page, write log lines, register a
checkpoint) and passes `should_stop` (has the operator cancelled?); `run_pipeline` returns one
`StageResult` per finished stage and raises `TrainingCancelled` or `StageFailed` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Reporter(Protocol):
    def log(self, stage: str, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        """Metrics of one logging step (loss, learning_rate, grad_norm, rewards/…, kl, tokens_per_s, eta_s…)."""

    def line(self, text: str) -> None:
        """A human-readable log line (data report, checkpoint saved, resumed, cancelled…)."""

    def checkpoint(self, result: StageResult) -> None:
        """A stage finished and its model is at `result.path`. May be called again for the same stage on a
        resumed job (the registry should treat `result.path` as the identity)."""


@dataclass(frozen=True)
class StageResult:
    stage: str                      # "sft" | "opd" | "rl"
    path: str                       # the stage's output model directory (Hugging Face format, tokenizer included)
    parent_path: str                # its input: the previous stage's path, or the base model
    base_model: str                 # the pipeline's base model (name or directory)
    metrics: dict[str, float] = field(default_factory=dict)
    data_lineage: dict[str, Any] = field(default_factory=dict)
    harness_hashes: tuple[str, ...] = ()  # every harness content hash the stage's data was produced under
    resolved_config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "path": self.path, "parent_path": self.parent_path,
                "base_model": self.base_model, "metrics": dict(self.metrics), "data_lineage": self.data_lineage,
                "harness_hashes": list(self.harness_hashes), "resolved_config": self.resolved_config}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageResult:
        return cls(stage=data["stage"], path=data["path"], parent_path=data["parent_path"],
                   base_model=data["base_model"], metrics=dict(data.get("metrics") or {}),
                   data_lineage=dict(data.get("data_lineage") or {}),
                   harness_hashes=tuple(data.get("harness_hashes") or ()),
                   resolved_config=dict(data.get("resolved_config") or {}))


class TrainingCancelled(Exception):
    """`should_stop()` said stop: the stage stopped after step `step` and saved `checkpoint` (re-running the
    pipeline with the same artifacts directory resumes from it)."""

    def __init__(self, stage: str, step: int, checkpoint: str | None):
        super().__init__(f"{stage} cancelled after step {step}" + (f"; last checkpoint {checkpoint}" if checkpoint
                                                                  else ""))
        self.stage, self.step, self.checkpoint = stage, step, checkpoint


class StageFailed(RuntimeError):
    """A stage could not run (bad data, a diverged loss): the message says why."""
