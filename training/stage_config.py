"""Knobs every stage shares (optimizer, schedule, logging, checkpoints); each stage's config extends them.

Like TRL's configs extend `TrainingArguments`, `SftConfig`, `OpdConfig` and `RlConfig` extend
`StageConfig`; `trainer_arguments()` turns the shared knobs into TRL/transformers keyword arguments
(CPU: `use_cpu`, no gradient checkpointing, fp32 unless the pipeline asks for bf16; GPU: bf16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training.validation import knob, require


@dataclass(frozen=True)
class StageConfig:
    max_steps: int = knob(20, "Optimizer steps of this stage (>= 1).")
    learning_rate: float = knob(1e-5, "Peak learning rate.")
    lr_scheduler_type: str = knob("cosine", "linear, cosine or constant.")
    warmup_steps: int = knob(0, "Linear warm-up steps.")
    per_device_train_batch_size: int = knob(2, "Sequences per device per micro-batch.")
    gradient_accumulation_steps: int = knob(1, "Micro-batches per optimizer step.")
    max_grad_norm: float = knob(1.0, "Gradient clipping norm.")
    weight_decay: float = knob(0.0, "AdamW weight decay.")
    logging_steps: int = knob(1, "Report metrics every N steps (the live page's resolution).")
    save_steps: int = knob(10, "Checkpoint every N steps (resume and cancel keep the last one; with a validation "
                               "split each is scored and the best becomes the stage's model).")
    save_total_limit: int = knob(2, "Checkpoints kept per stage.")
    learning_rate_candidates: tuple[float, ...] = knob((), "Learning rates to try first: each trains the stage for "
                                                           "learning_rate_trial_steps and is scored on the job's "
                                                           "validation split; the best replaces learning_rate. Empty: "
                                                           "learning_rate as given.")
    learning_rate_trial_steps: int = knob(5, "Optimizer steps of each learning-rate trial.")

    def check(self) -> None:
        require(1 <= self.max_steps <= 1_000_000, "max_steps", "must be within 1..1000000")
        require(0 < self.learning_rate < 1, "learning_rate", "must be within (0, 1)")
        require(self.lr_scheduler_type in ("linear", "cosine", "constant"), "lr_scheduler_type",
                "must be linear, cosine or constant")
        require(0 <= self.warmup_steps < self.max_steps, "warmup_steps", "must be within 0..max_steps-1")
        require(1 <= self.per_device_train_batch_size <= 1024, "per_device_train_batch_size", "must be within 1..1024")
        require(1 <= self.gradient_accumulation_steps <= 1024, "gradient_accumulation_steps",
                "must be within 1..1024")
        require(self.max_grad_norm > 0, "max_grad_norm", "must be positive")
        require(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        require(1 <= self.logging_steps <= self.max_steps, "logging_steps", "must be within 1..max_steps")
        require(1 <= self.save_steps, "save_steps", "must be >= 1")
        require(1 <= self.save_total_limit <= 100, "save_total_limit", "must be within 1..100")
        require(len(self.learning_rate_candidates) <= 8, "learning_rate_candidates", "at most 8")
        require(all(0 < rate < 1 for rate in self.learning_rate_candidates), "learning_rate_candidates",
                "each must be within (0, 1)")
        require(self.learning_rate_trial_steps >= 1, "learning_rate_trial_steps", "must be >= 1")
        require(not self.learning_rate_candidates or self.learning_rate_trial_steps <= self.max_steps,
                "learning_rate_trial_steps", "must be within 1..max_steps")

    def trainer_arguments(self, *, output_dir: str, use_cpu: bool, seed: int, bf16: bool | None = None
                          ) -> dict[str, Any]:
        return {
            "output_dir": output_dir,
            "max_steps": self.max_steps,
            "learning_rate": self.learning_rate,
            "lr_scheduler_type": self.lr_scheduler_type,
            "warmup_steps": self.warmup_steps,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "max_grad_norm": self.max_grad_norm,
            "weight_decay": self.weight_decay,
            "logging_steps": self.logging_steps,
            "save_strategy": "steps",
            "save_steps": self.save_steps,
            "save_total_limit": self.save_total_limit,
            "report_to": "none",
            "seed": seed,
            "use_cpu": use_cpu,
            "bf16": (not use_cpu) if bf16 is None else bf16,
            "fp16": False,
            "gradient_checkpointing": False if use_cpu else True,
            "dataloader_num_workers": 0,
            "disable_tqdm": True,
            "save_only_model": False,  # optimizer and scheduler too: a resumed stage continues, not restarts
        }
