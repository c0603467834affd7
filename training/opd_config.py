"""General on-policy distillation knobs (`opd.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from training.stage_config import StageConfig
from training.validation import build, knob, require


@dataclass(frozen=True)
class OpdConfig(StageConfig):
    learning_rate: float = knob(1e-6, "Peak learning rate (TRL's distillation default).")
    beta: float = knob(1.0, "Divergence interpolation: 1.0 is the reverse KL(student || teacher) of on-policy "
                            "distillation, 0.0 the forward KL; the HAT recipe uses 1.0.")
    temperature: float = knob(1.0, "Sampling temperature of the student's on-policy completions.")
    max_completion_length: int = knob(128, "Tokens the student generates per prompt.")
    prompts: str = knob("", "JSONL of general-instruction prompts ({\"prompt\": text} per line); empty uses the "
                            "set shipped in training/data/general_instructions.jsonl.")
    max_prompts: int = knob(0, "Use at most this many prompts (0: all).")

    def check(self) -> None:
        super().check()
        require(0.0 <= self.beta <= 1.0, "beta", "must be within 0..1")
        require(0.0 < self.temperature <= 2.0, "temperature", "must be within (0, 2]")
        require(1 <= self.max_completion_length <= 8192, "max_completion_length", "must be within 1..8192")
        require(self.max_prompts >= 0, "max_prompts", "must be >= 0")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "opd") -> OpdConfig:
        return build(cls, data, where)
