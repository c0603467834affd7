"""Run a training job: its stages in order, each starting from the previous one's model.

    results = run_pipeline(PipelineConfig.from_dict(data), artifacts_dir=Path(…), reporter=r,
                           should_stop=lambda: job_was_cancelled())

Contract (stable; the Django app `training` builds on it):

- Chained: stage k trains the model stage k-1 wrote (`StageResult.path`); the first stage starts
  from `config.model.base`. Every stage writes a Hugging Face model directory with the tokenizer and
  the training chat template (`stages/NN-kind/model`), with LoRA adapters merged (the adapter itself
  is kept beside it in `adapter/`), so any stage's output can be served or trained further.
- Resumable: re-running with the same `artifacts_dir` skips finished stages (their `result.json`),
  reuses the data already prepared (`data/`), and resumes the current stage from its newest TRL
  checkpoint (optimizer, scheduler and RNG state included), so a worker killed with `kill -9`
  continues where its last checkpoint was. An artifacts directory belongs to one config: another
  config there is refused.
- Cancellable: `should_stop()` is checked after every optimizer step; on yes the stage saves a
  checkpoint and `TrainingCancelled` is raised (resume later with the same call).
- Reported: `reporter.log()` per logging step, `reporter.line()` for data reports and events,
  `reporter.checkpoint(result)` when a stage finishes (again for finished stages on a resumed run).
- Lineage: before any stage trains, its data is checked against `config.data.exclude` (eval-set
  cases the job will be judged on, by content hash) and the job's validation split; overlap raises
  `LineageError`, nothing trains.
- Validation apart from the test (`holdout.py`, `selection.py`): with `data.validation`, a split of held-out
  cases and IFEval-style prompts is drawn once (`data/validation.json`); each stage's checkpoints are scored on
  it and the best becomes the stage's model, and `learning_rate_candidates` are tried on it first. The eval
  sets are never read for either. Each result records the split (`data_lineage["validation"]`) and the choices
  (`resolved_config["selection"]`: checkpoint, learning rate); without a split the checkpoint record says
  "no validation: last checkpoint".
- Several processes (`accelerate launch`, `training.launch`): every process runs this function; the main
  process alone claims the directory, prepares the data, writes `result.json`, the stage's model and the
  reports, and shares what it decided (`stage_runtime.Processes`); a failure on it is raised on every
  process. With one process and no launcher nothing distributed is initialised.

Failures raise: `ConfigError` (bad config), `LineageError`, `StageFailed` (a NaN loss, unusable data).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.holdout import VALIDATION_LABEL, ValidationSplit, draw_validation
from training.lineage import LineageError, check_disjoint, lineage_record
from training.pipeline_config import PipelineConfig, StageSpec
from training.results import Reporter, StageFailed, StageResult, TrainingCancelled
from training.validation import ConfigError, to_dict

__all__ = ["run_pipeline", "PipelineConfig", "Reporter", "StageResult", "TrainingCancelled", "StageFailed",
           "LineageError", "ConfigError", "stage_dir"]


def stage_dir(artifacts_dir: Path, index: int, spec: StageSpec) -> Path:
    return artifacts_dir / "stages" / f"{index:02d}-{spec.kind}"


def _write_json(path: Path, data: Any) -> None:
    """Write-then-rename, so a killed worker never leaves half a file that a resume would trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)


def _read_result(done: Path) -> StageResult | None:
    """A finished stage's result (its `result.json`), or None."""
    if not done.is_file():
        return None
    return StageResult.from_dict(json.loads(done.read_text(encoding="utf-8")))


def _claim(artifacts_dir: Path, config: PipelineConfig) -> None:
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    marker = artifacts_dir / "pipeline.json"
    if marker.is_file():
        stored = json.loads(marker.read_text(encoding="utf-8"))
        if stored.get("fingerprint") != config.fingerprint():
            raise ConfigError("artifacts_dir", f"{artifacts_dir} holds another job's artifacts")
        return
    _write_json(marker, {"fingerprint": config.fingerprint(), "config": config.to_dict(with_files=False)})


def _validation_split(config: PipelineConfig, artifacts_dir: Path, reporter: Reporter) -> ValidationSplit | None:
    """The job's validation split: drawn once and kept in `data/validation.json` (reused on a resume)."""
    if not config.data.validation.enabled:
        return None
    stored = artifacts_dir / "data" / "validation.json"
    if stored.is_file():
        return ValidationSplit.from_dict(json.loads(stored.read_text(encoding="utf-8")))
    split = draw_validation(config)
    assert split is not None
    _write_json(stored, split.to_dict())
    reporter.line(f"validation: {len(split.cases)} held-out cases and {len(split.prompts)} held-out prompts, "
                  f"apart from the training data and the eval sets")
    return split


def run_pipeline(config: PipelineConfig, *, artifacts_dir: Path, reporter: Reporter,
                 should_stop: Callable[[], bool]) -> list[StageResult]:
    """Run (or resume) every stage; the finished stages' results, in order. See the module docstring."""
    from training import data_prep  # torch and TRL load here, not on import of this module
    from training.base_models import resolve_bf16, resolve_device, slow_bf16_warning
    from training.selection import (
        CheckpointSelection,
        ValidationScorer,
        last_checkpoint_record,
        select_learning_rate,
    )
    from training.stage_runtime import Processes, SilentReporter, StageContext

    artifacts_dir = Path(artifacts_dir)
    check_host_runs(config)
    use_cpu = resolve_device(config.model.device) == "cpu"
    processes = Processes.join(use_cpu=use_cpu)
    if not processes.main:
        reporter = SilentReporter()
    processes.main_decides(lambda: _claim(artifacts_dir, config))
    bf16 = resolve_bf16(config.model.precision, use_cpu=use_cpu)
    if warning := slow_bf16_warning(config.model.precision, use_cpu=use_cpu):
        reporter.line(warning)
    specs = [h.spec() for h in config.harnesses]
    split = processes.main_decides(lambda: _validation_split(config, artifacts_dir, reporter))
    exclusions = {**config.data.exclude, **({VALIDATION_LABEL: split.hashes().values()} if split else {})}
    scorer = None if split is None else ValidationScorer(
        split, tuple(specs), max_new_tokens=config.data.validation.max_new_tokens,
        deadline_s=config.data.validation.turn_deadline_s, use_cpu=use_cpu)
    results: list[StageResult] = []
    parent = config.model.base
    for index, stage in enumerate(config.stages):
        directory = stage_dir(artifacts_dir, index, stage)
        done = directory / "result.json"
        finished = processes.main_decides(functools.partial(_read_result, done))
        if finished is not None:
            reporter.line(f"{stage.kind}: already finished ({finished.path})")
            reporter.checkpoint(finished)
            results.append(finished)
            parent = finished.path
            continue

        def prepare_checked(stage: StageSpec = stage) -> data_prep.Prepared:
            held_out = split.prompt_hashes.values() if split else ()
            prepared = data_prep.prepare(stage, config, specs, artifacts_dir / "data", reporter,
                                         held_out_prompts=held_out)
            check_disjoint(prepared.case_hashes, exclusions)
            return prepared

        prepared = processes.main_decides(prepare_checked)  # the others train on what the main process wrote
        lineage = lineage_record(prepared.case_hashes, config.data.exclude, sources=prepared.sources)
        context = StageContext(stage=stage.kind, index=index, input_model=parent, base_model=config.model.base,
                               model=config.model, directory=directory, use_cpu=use_cpu, seed=config.seed,
                               reporter=reporter, should_stop=should_stop, prepared=prepared, specs=specs,
                               bf16=bf16, processes=processes)
        reporter.line(f"{stage.kind}: starting from {parent}")
        runner, stage_config, chosen_rate = _stage_runner(stage.kind), stage.config, None
        if stage_config.learning_rate_candidates and scorer is not None:
            stage_config, chosen_rate = select_learning_rate(stage_config, context, runner, scorer)
        if scorer is not None:
            context.selection = CheckpointSelection(
                scorer, stage=stage.kind, directory=directory, input_dir=context.input_model_dir,
                processes=processes, reporter=reporter, total_steps=stage_config.max_steps)
        metrics = runner(stage_config, context)
        if context.selection is not None:
            checkpoint = context.selection.finish(model_dir=context.model_dir, adapter_dir=context.adapter_dir)
            metrics = {**metrics, "validation_score": float(checkpoint["score"]),
                       "selected_step": float(checkpoint["step"])}
        else:
            checkpoint = last_checkpoint_record(stage_config.max_steps)
        result = StageResult(
            stage=stage.kind, path=str(context.model_dir), parent_path=parent, base_model=config.model.base,
            metrics=metrics, data_lineage={**lineage, "report": prepared.report,
                                           "validation": split.record(config.data.exclude) if split else None},
            harness_hashes=tuple(sorted(prepared.harness_hashes)),
            resolved_config={"stage": {"kind": stage.kind, "config": to_dict(stage_config)},
                             "pipeline": config.to_dict(with_files=False), "use_cpu": use_cpu,
                             "bf16": bf16, "selection": {"checkpoint": checkpoint, "learning_rate": chosen_rate},
                             **context.notes},
        )
        processes.main_decides(functools.partial(_write_json, done, result.to_dict()))
        if context.selection is not None:
            processes.main_decides(context.selection.cleanup)
        reporter.line(f"{stage.kind}: finished, model at {result.path}")
        reporter.checkpoint(result)
        results.append(result)
        parent = result.path
    return results


def check_host_runs(config: PipelineConfig) -> None:
    """Refuse, before anything is claimed, prepared or trained, a stage this host cannot run (`ConfigError`
    naming the stage's field): today a vLLM generation mode where vLLM is not installed. The config itself is
    valid anywhere (the console's host validates it without vLLM); only the host that trains checks this."""
    for index, stage in enumerate(config.stages):
        if stage.kind == "rl":
            stage.config.generation_arguments(where=f"stages[{index}].config")


def _stage_runner(kind: str) -> Callable[..., dict[str, float]]:
    if kind == "sft":
        from training.sft import run_sft
        return run_sft
    if kind == "opd":
        from training.opd import run_opd
        return run_opd
    if kind == "rl":
        from training.rl import run_rl
        return run_rl
    raise ConfigError("stages.kind", f"unknown stage “{kind}”")
