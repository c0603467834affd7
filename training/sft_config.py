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
    packing: bool = knob(False, "Pack rows into padding-free sequences of up to max_length tokens (TRL's best-fit "
                                "decreasing packing; position ids restart at every row, so no row attends to another "
                                "and every row keeps exactly its own assistant labels). A micro-batch is then one "
                                "packed sequence and max_steps counts packed sequences, several rows each, not rows. "
                                "Off by default: with one row per micro-batch (the shipped recipe) there is no padding "
                                "to save, and on a CPU transformers attends over a packed sequence through a dense "
                                "block-diagonal mask: on the shipped recipe's rows (max_length 8192, ~6,000-token "
                                "packed sequences) the packed run was killed for memory at 21 GB before its first "
                                "step (docs/training.md). Worth trying where attention is varlen (flash attention on "
                                "a GPU) or micro-batches hold several rows of unequal length.")
    compact_lm_head: bool = knob(True, "On a CPU, project only the positions that carry a label (assistant tokens) "
                                       "through the LM head. TRL's fused LM head scores every position on devices "
                                       "without Triton, and assistant tokens are ~5% of a HAT trajectory. Same loss, "
                                       "gradients, entropy and accuracy; on the shipped recipe's rows 1.38x the SFT "
                                       "tokens/s and 1.15x the tokens per CPU-second on this 2-core host under load "
                                       "(docs/training.md). No effect on a GPU, where TRL already does this.")

    def check(self) -> None:
        super().check()
        require(64 <= self.max_length <= 131072, "max_length", "must be within 64..131072")
        require(self.overlong in ("error", "drop"), "overlong", "must be 'error' or 'drop'")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "sft") -> SftConfig:
        return build(cls, data, where)
