"""What connects a running stage to the pipeline: the job's processes, the TRL callbacks (Reporter, cancel
check) and resuming from the newest checkpoint.

A stage runs in one process (a Celery worker, a test, `accelerate launch` with one process) or in several
under `accelerate launch` (one per GPU, or CPU processes over gloo). `Processes` is this process's place
among them. The rule that keeps several processes safe: whatever must be decided or written once — the
prepared data, the checkpoint to resume from, whether to stop, the markers and the stage's model — is
decided or written by the main process and shared with the others (`main_decides`), and every process
reaches the same collective calls in the same order. The callbacks are called in every process between
optimizer steps.
"""

from __future__ import annotations

import math
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from training.results import Reporter, StageFailed, TrainingCancelled
from training.validation import ConfigError

T = TypeVar("T")


def launched_world_size() -> int:
    """How many processes the launcher started (torchrun, DeepSpeed, mpirun set one of these); 1 otherwise."""
    from accelerate.utils import get_int_from_env

    return get_int_from_env(["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"], 1)


def _sendable(error: Exception) -> tuple[str, Any]:
    """`error` as something that pickles, to raise it in the other processes too (`_received`): itself when it
    pickles, a ConfigError by its field and message (its constructor defeats pickle), else a description."""
    if isinstance(error, ConfigError):
        return "config", (error.field, error.message)
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any error that cannot cross is described instead
        return "failed", f"{type(error).__name__}: {error}"
    return "error", error


def _received(kind: str, payload: Any) -> Exception:
    if kind == "config":
        return ConfigError(*payload)
    if kind == "failed":
        return StageFailed(payload)
    return payload


@dataclass(frozen=True)
class Processes:
    """This process among the job's training processes (module docstring).

    With one process (`Processes()`) nothing here touches torch.distributed: the pipeline runs as it always
    did in a Celery worker or a test. With several, `join` initialises the process group the way the trainer
    will (gloo on CPU, NCCL or DeepSpeed's on GPUs), and the methods below use it directly, so they keep
    working after transformers resets accelerate's state when a trainer is built.
    """

    index: int = 0
    count: int = 1
    local_main: bool = True

    @classmethod
    def join(cls, *, use_cpu: bool) -> Processes:
        import torch.distributed as dist

        world = launched_world_size()
        if world <= 1 and not (dist.is_available() and dist.is_initialized()):
            return cls()
        from accelerate import PartialState
        from accelerate.state import AcceleratorState

        state = PartialState(cpu=use_cpu)
        if state.num_processes != world:
            # made earlier without the CPU flag: accelerate then sees one process (DistributedType.NO) on a host
            # without GPUs, and every rank would believe it is the main one. Reset as transformers' own
            # TrainingArguments does before it builds its state.
            AcceleratorState._reset_state(reset_partial_state=True)
            state = PartialState(cpu=use_cpu)
        return cls(index=state.process_index, count=state.num_processes, local_main=state.is_local_main_process)

    @property
    def main(self) -> bool:
        return self.index == 0

    def main_decides(self, decide: Callable[[], T]) -> T:
        """`decide()` run on the main process; its value, or its exception, on every process.

        Every process must call it at the same point. The others never wait on a main process that failed:
        its error is sent to them and raised there too.
        """
        if self.count == 1:
            return decide()
        import torch.distributed as dist

        outcome: list[Any] = [None]
        error: Exception | None = None
        if self.main:
            try:
                outcome[0] = ("value", decide())
            except Exception as raised:  # noqa: BLE001 - re-raised below, on every process
                error = raised
                outcome[0] = _sendable(raised)
        dist.broadcast_object_list(outcome, src=0)
        kind, payload = outcome[0]
        if error is not None:
            raise error
        if kind != "value":
            raise _received(kind, payload)
        return payload

    def local_main_first(self, make: Callable[[], T]) -> T:
        """`make()` on each machine's main process first, then on the others, which find what it made (a named
        base materialised once per machine). A failure anywhere fails every process."""
        if self.count == 1:
            return make()
        error: Exception | None = None
        value: Any = None
        if self.local_main:
            try:
                value = make()
            except Exception as raised:  # noqa: BLE001 - agreed on below
                error = raised
        self.agree(error)
        return value if self.local_main else make()

    def agree(self, error: Exception | None = None) -> None:
        """A barrier that also carries each process's failure: if any process failed, every one raises."""
        if self.count == 1:
            if error is not None:
                raise error
            return
        import torch.distributed as dist

        reports: list[Any] = [None] * self.count
        dist.all_gather_object(reports, None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        failed = [(rank, report) for rank, report in enumerate(reports) if report]
        if failed:
            rank, report = failed[0]
            raise StageFailed(f"process {rank} of {self.count} failed: {report}")

    def close(self) -> None:
        """Leave the process group (every process, at the end of a launched job)."""
        import torch.distributed as dist

        if self.count > 1 and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


class SilentReporter:
    """What the processes other than the main one report to: nothing (the main process reports for all)."""

    def log(self, stage: str, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def checkpoint(self, result: Any) -> None:
        pass


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class ReporterCallback(TrainerCallback):
    """Forwards TRL's logs to the Reporter with throughput and ETA; fails the stage on a NaN loss; hands each saved
    checkpoint to `on_checkpoint` (the stage's validation, `selection.CheckpointSelection`) when there is one."""

    def __init__(self, stage: str, reporter: Reporter,
                 on_checkpoint: Callable[[int, Path], None] | None = None):
        self.stage, self.reporter, self.on_checkpoint = stage, reporter, on_checkpoint
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
        if self.on_checkpoint is not None:
            self.on_checkpoint(state.global_step, Path(args.output_dir) / f"checkpoint-{state.global_step}")


class CancelCallback(TrainerCallback):
    """Checks `should_stop()` after every optimizer step; on yes, saves a checkpoint and stops.

    With several processes the main one asks and every process gets its answer: were each to ask for itself
    (a CANCEL file appearing between two processes' checks), one would stop while the others wait for it in
    the next step's gradient all-reduce.
    """

    def __init__(self, should_stop: Callable[[], bool], processes: Processes | None = None):
        self.should_stop = should_stop
        self.processes = processes or Processes()
        self.cancelled_at: int | None = None

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any):
        if self.processes.main_decides(lambda: bool(self.should_stop())):
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
    processes: Processes = field(default_factory=Processes)  # this process among the job's (one unless launched)
    selection: Any = None     # selection.CheckpointSelection when the job has a validation split
    notes: dict[str, Any] = field(default_factory=dict)  # what the stage decided as it ran, kept in its record

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

        return self.processes.local_main_first(lambda: materialize_base(self.input_model, self.bases_dir,
                                                                        seed=self.seed))

    def base_model_dir(self) -> str:
        from training.base_models import materialize_base

        return self.processes.local_main_first(lambda: materialize_base(self.base_model, self.bases_dir,
                                                                        seed=self.seed))

    def callbacks(self) -> tuple[ReporterCallback, CancelCallback]:
        on_checkpoint = self.selection.checkpoint_saved if self.selection is not None else None
        return (ReporterCallback(self.stage, self.reporter, on_checkpoint),
                CancelCallback(self.should_stop, self.processes))


def train_with_resume(trainer: Any, context: StageContext, cancel: CancelCallback) -> None:
    """`trainer.train()` from the newest checkpoint if there is one; raise TrainingCancelled on a cancel.

    The checkpoint is picked once, by the main process: every process must load the same one (each reads its
    own RNG state from it), and a listing taken while another process is still writing could differ.
    """
    checkpoint = context.processes.main_decides(lambda: last_checkpoint(context.trainer_dir))
    if checkpoint:
        context.reporter.line(f"{context.stage}: resuming from {Path(checkpoint).name}")
    trainer.train(resume_from_checkpoint=checkpoint)
    if cancel.cancelled_at is not None:
        saved = context.processes.main_decides(lambda: last_checkpoint(context.trainer_dir))
        raise TrainingCancelled(context.stage, cancel.cancelled_at, saved)


def summary_metrics(history: list[dict[str, float]]) -> dict[str, float]:
    """The stage's final metrics: the last logged value of each metric, plus the first loss."""
    metrics: dict[str, float] = {}
    for entry in history:
        metrics.update({k: v for k, v in entry.items() if k != "step"})
    losses = [e["loss"] for e in history if "loss" in e]
    if losses:
        metrics["first_loss"] = losses[0]
    return metrics
