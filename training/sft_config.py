"""HSA-SFT knobs (`sft.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from training.stage_config import StageConfig
from training.validation import build, knob, require


@dataclass(frozen=True)
class SftConfig(StageConfig):
    learning_rate: float = knob(2e-5, "Peak learning rate.")
    max_length: int = knob(4096, "Longest trajectory in tokens. Never truncated: see `overlong`.")
    overlong: str = knob("error", "A trajectory longer than max_length: 'error' stops the stage naming how many "
                                  "and the longest; 'drop' leaves them out and counts them in the stage's metrics.")

    def check(self) -> None:
        super().check()
        require(64 <= self.max_length <= 131072, "max_length", "must be within 64..131072")
        require(self.overlong in ("error", "drop"), "overlong", "must be 'error' or 'drop'")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "sft") -> SftConfig:
        return build(cls, data, where)
