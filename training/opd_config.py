"""General on-policy distillation knobs (`opd.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from training.lineage import LineageError, check_prompts_disjoint
from training.prompt_pool import load_prompts, read_prompts
from training.stage_config import StageConfig
from training.validation import ConfigError, build, knob, require


@dataclass(frozen=True)
class OpdConfig(StageConfig):
    learning_rate: float = knob(1e-6, "Peak learning rate (TRL's distillation default).")
    beta: float = knob(1.0, "Divergence interpolation: 1.0 is the reverse KL(student || teacher) of on-policy "
                            "distillation, 0.0 the forward KL; the HAT recipe uses 1.0.")
    temperature: float = knob(1.0, "Sampling temperature of the student's on-policy completions.")
    max_completion_length: int = knob(128, "Tokens the student generates per prompt.")
    prompts: str = knob("", "JSONL of general-instruction prompts ({\"prompt\": text} per line); empty uses the "
                            "generated pool (training/prompt_pool.py: 2,400 prompts, seed 0). A file holding an "
                            "IFEval eval prompt or a near-duplicate of one is refused.")
    max_prompts: int = knob(0, "Use at most this many prompts (0: all).")

    def check(self) -> None:
        super().check()
        require(0.0 <= self.beta <= 1.0, "beta", "must be within 0..1")
        require(0.0 < self.temperature <= 2.0, "temperature", "must be within (0, 2]")
        require(1 <= self.max_completion_length <= 8192, "max_completion_length", "must be within 1..8192")
        require(self.max_prompts >= 0, "max_prompts", "must be >= 0")
        if self.prompts:
            # The generated pool is built clear of the eval prompts; a file is checked here, before training.
            try:
                check_prompts_disjoint(read_prompts(self.prompts))
            except OSError as error:
                raise ConfigError("prompts", f"cannot read {self.prompts}: {error.strerror or error}") from None
            except LineageError as error:
                raise ConfigError("prompts", str(error).removeprefix("opd.prompts: ")) from None
            except ValueError as error:
                raise ConfigError("prompts", str(error)) from None

    def prompt_texts(self) -> list[str]:
        """The prompts the stage distils on: the `prompts` file or the generated pool, cut to `max_prompts`."""
        prompts = load_prompts(self.prompts)
        return prompts[:self.max_prompts] if self.max_prompts else prompts

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "opd") -> OpdConfig:
        return build(cls, data, where)
