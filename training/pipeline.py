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
  cases the job will be judged on, by content hash); overlap raises `LineageError`, nothing trains.
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


def run_pipeline(config: PipelineConfig, *, artifacts_dir: Path, reporter: Reporter,
                 should_stop: Callable[[], bool]) -> list[StageResult]:
    """Run (or resume) every stage; the finished stages' results, in order. See the module docstring."""
    from training import data_prep  # torch and TRL load here, not on import of this module
    from training.base_models import resolve_bf16, resolve_device, slow_bf16_warning
    from training.stage_runtime import Processes, SilentReporter, StageContext

    artifacts_dir = Path(artifacts_dir)
    use_cpu = resolve_device(config.model.device) == "cpu"
    processes = Processes.join(use_cpu=use_cpu)
    if not processes.main:
        reporter = SilentReporter()
    processes.main_decides(lambda: _claim(artifacts_dir, config))
    bf16 = resolve_bf16(config.model.precision, use_cpu=use_cpu)
    if warning := slow_bf16_warning(config.model.precision, use_cpu=use_cpu):
        reporter.line(warning)
    specs = [h.spec() for h in config.harnesses]
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
            prepared = data_prep.prepare(stage, config, specs, artifacts_dir / "data", reporter)
            check_disjoint(prepared.case_hashes, config.data.exclude)
            return prepared

        prepared = processes.main_decides(prepare_checked)  # the others train on what the main process wrote
        lineage = lineage_record(prepared.case_hashes, config.data.exclude, sources=prepared.sources)
        context = StageContext(stage=stage.kind, index=index, input_model=parent, base_model=config.model.base,
                               model=config.model, directory=directory, use_cpu=use_cpu, seed=config.seed,
                               reporter=reporter, should_stop=should_stop, prepared=prepared, specs=specs,
                               bf16=bf16, processes=processes)
        reporter.line(f"{stage.kind}: starting from {parent}")
        metrics = _stage_runner(stage.kind)(stage.config, context)
        result = StageResult(
            stage=stage.kind, path=str(context.model_dir), parent_path=parent, base_model=config.model.base,
            metrics=metrics, data_lineage={**lineage, "report": prepared.report},
            harness_hashes=tuple(sorted(prepared.harness_hashes)),
            resolved_config={"stage": {"kind": stage.kind, "config": to_dict(stage.config)},
                             "pipeline": config.to_dict(with_files=False), "use_cpu": use_cpu,
                             "bf16": bf16},
        )
        processes.main_decides(functools.partial(_write_json, done, result.to_dict()))
        reporter.line(f"{stage.kind}: finished, model at {result.path}")
        reporter.checkpoint(result)
        results.append(result)
        parent = result.path
    return results


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
