"""The TRL callbacks that connect a running stage to the pipeline's Reporter and cancel check.

Both are called in the training process between optimizer steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from training.results import Reporter, StageFailed, TrainingCancelled


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class ReporterCallback(TrainerCallback):
    """Forwards TRL's logs to the Reporter with throughput and ETA; fails the stage on a NaN loss."""

    def __init__(self, stage: str, reporter: Reporter):
        self.stage, self.reporter = stage, reporter
        self.started = time.perf_counter()
        self.first_step = 0
        self.last_tokens: float | None = None
        self.last_time = self.started
        self.history: list[dict[str, float]] = []

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any):
        self.started = self.last_time = time.perf_counter()
        self.first_step = state.global_step
        if state.global_step:
            self.reporter.line(f"{self.stage}: resumed at step {state.global_step} of {state.max_steps}")

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **_: Any):
        metrics = {k: v for k, v in ((k, _number(v)) for k, v in (logs or {}).items()) if v is not None}
        if "train_runtime" in metrics:  # the end-of-training summary, not a step
            return
        now = time.perf_counter()
        tokens = metrics.get("num_tokens", float(state.num_input_tokens_seen or 0) or None)
        if tokens is not None and self.last_tokens is not None and now > self.last_time:
            metrics["tokens_per_s"] = (tokens - self.last_tokens) / (now - self.last_time)
        if tokens is not None:
            self.last_tokens, self.last_time = tokens, now
        done = state.global_step - self.first_step
        if done > 0:
            metrics["eta_s"] = (now - self.started) / done * max(0, state.max_steps - state.global_step)
        loss = metrics.get("loss")
        if loss is not None and not math.isfinite(loss):
            raise StageFailed(f"{self.stage}: loss is {loss} at step {state.global_step}")
        self.history.append({"step": float(state.global_step), **metrics})
        self.reporter.log(self.stage, state.global_step, state.max_steps, metrics)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any):
        self.reporter.line(f"{self.stage}: checkpoint at step {state.global_step}")


class CancelCallback(TrainerCallback):
    """Checks `should_stop()` after every optimizer step; on yes, saves a checkpoint and stops."""

    def __init__(self, should_stop: Callable[[], bool]):
        self.should_stop = should_stop
        self.cancelled_at: int | None = None

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any):
        if self.should_stop():
            self.cancelled_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control


def last_checkpoint(trainer_dir: Path) -> str | None:
    """The newest `checkpoint-N` directory TRL wrote under `trainer_dir`, if any."""
    if not trainer_dir.is_dir():
        return None
    found = [(int(p.name.split("-")[-1]), p) for p in trainer_dir.glob("checkpoint-*")
             if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(found)[1]) if found else None


@dataclass
class StageContext:
    """Everything a stage needs from the pipeline (built by `pipeline.run_pipeline`)."""

    stage: str
    index: int
    input_model: str          # the previous stage's model directory, or the base model's name/directory
    base_model: str           # the pipeline's base (OPD's teacher)
    model: Any                # pipeline_config.ModelConfig
    directory: Path           # stages/NN-kind/
    use_cpu: bool
    seed: int
    reporter: Reporter
    should_stop: Callable[[], bool]
    prepared: Any             # data_prep.Prepared
    specs: list[Any] = field(default_factory=list)  # the job's HarnessSpecs (RL rebuilds its episodes from them)
    bf16: bool = False        # mixed precision (model.precision, resolved for the device)

    def trainer_arguments(self, config: Any) -> dict[str, Any]:
        """The stage config's trainer arguments for this device and precision."""
        return config.trainer_arguments(output_dir=str(self.trainer_dir), use_cpu=self.use_cpu, seed=self.seed,
                                        bf16=self.bf16)

    @property
    def trainer_dir(self) -> Path:
        return self.directory / "trainer"

    @property
    def model_dir(self) -> Path:
        return self.directory / "model"

    @property
    def adapter_dir(self) -> Path:
        return self.directory / "adapter"

    @property
    def bases_dir(self) -> Path:
        from training.base_models import model_cache

        return model_cache()

    def input_model_dir(self) -> str:
        """The input as a directory (a named base is materialised once per machine, base_models.model_cache)."""
        from training.base_models import materialize_base

        return materialize_base(self.input_model, self.bases_dir, seed=self.seed)

    def base_model_dir(self) -> str:
        from training.base_models import materialize_base

        return materialize_base(self.base_model, self.bases_dir, seed=self.seed)

    def callbacks(self) -> tuple[ReporterCallback, CancelCallback]:
        return ReporterCallback(self.stage, self.reporter), CancelCallback(self.should_stop)


def train_with_resume(trainer: Any, context: StageContext, cancel: CancelCallback) -> None:
    """`trainer.train()` from the newest checkpoint if there is one; raise TrainingCancelled on a cancel."""
    checkpoint = last_checkpoint(context.trainer_dir)
    if checkpoint:
        context.reporter.line(f"{context.stage}: resuming from {Path(checkpoint).name}")
    trainer.train(resume_from_checkpoint=checkpoint)
    if cancel.cancelled_at is not None:
        raise TrainingCancelled(context.stage, cancel.cancelled_at, last_checkpoint(context.trainer_dir))


def summary_metrics(history: list[dict[str, float]]) -> dict[str, float]:
    """The stage's final metrics: the last logged value of each metric, plus the first loss."""
    metrics: dict[str, float] = {}
    for entry in history:
        metrics.update({k: v for k, v in entry.items() if k != "step"})
    losses = [e["loss"] for e in history if "loss" in e]
    if losses:
        metrics["first_loss"] = losses[0]
    return metrics
