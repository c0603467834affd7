"""`python -m training.cli --config job.json --artifacts-dir DIR`: run (or resume) a job's pipeline.

What `accelerate launch` starts on every GPU process (`training/launch.py`). Progress goes to stdout
as JSON lines (`{"stage", "step", "total_steps", "metrics"}`, `{"line"}`, `{"checkpoint"}`, and at the
end `{"cancelled": {"stage", "step", "checkpoint"}}` or `{"error": {"kind", "message", "field"}}`), one
writer per job: only the main process reports. Exit status 0 done, 3 cancelled (a file named
`CANCEL` in the artifacts directory asks for it), 2 bad config or lineage refusal, 1 a failed stage.
Errors also go to stderr as one JSON line.

Which process is the main one is settled before anything else (`stage_runtime.Processes.join`), on the
device the job trains on: on a host without GPUs accelerate counts the processes only when asked for
the CPU, and would otherwise let every one of them believe it is the main one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from training.launch import DIE_WITH_PARENT_ENV, die_with_parent
from training.lineage import LineageError
from training.pipeline import PipelineConfig, run_pipeline
from training.results import StageFailed, StageResult, TrainingCancelled
from training.validation import ConfigError


class JsonLinesReporter:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    def emit(self, payload: dict) -> None:
        if self.enabled:
            print(json.dumps(payload, ensure_ascii=False), flush=True)

    def log(self, stage: str, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.emit({"stage": stage, "step": step, "total_steps": total_steps, "metrics": metrics})

    def line(self, text: str) -> None:
        self.emit({"line": text})

    def checkpoint(self, result: StageResult) -> None:
        self.emit({"checkpoint": result.to_dict()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--artifacts-dir", required=True, type=Path)
    options = parser.parse_args(argv)
    if os.environ.get(DIE_WITH_PARENT_ENV):
        die_with_parent()
    try:
        config = PipelineConfig.from_dict(json.loads(options.config.read_text(encoding="utf-8")))
    except (ConfigError, ValueError, OSError) as error:
        field = getattr(error, "field", None)
        print(json.dumps({"error": {"kind": "config", "message": getattr(error, "message", str(error)),
                                    "field": field}}), flush=True)
        print(json.dumps({"error": str(error), "field": field}), file=sys.stderr)
        return 2
    from training.base_models import resolve_device
    from training.stage_runtime import Processes

    processes = Processes.join(use_cpu=resolve_device(config.model.device) == "cpu")
    reporter = JsonLinesReporter(processes.main)
    cancel_file = options.artifacts_dir / "CANCEL"
    try:
        run_pipeline(config, artifacts_dir=options.artifacts_dir, reporter=reporter, should_stop=cancel_file.exists)
    except TrainingCancelled as cancelled:
        reporter.emit({"cancelled": {"stage": cancelled.stage, "step": cancelled.step,
                                      "checkpoint": cancelled.checkpoint}})
        print(json.dumps({"cancelled": str(cancelled)}), file=sys.stderr)
        return 3
    except (ConfigError, LineageError) as error:
        kind = "lineage" if isinstance(error, LineageError) else "config"
        field = getattr(error, "field", None)
        reporter.emit({"error": {"kind": kind, "message": getattr(error, "message", str(error)), "field": field}})
        print(json.dumps({"error": str(error), "field": field}), file=sys.stderr)
        return 2
    except StageFailed as error:
        reporter.emit({"error": {"kind": "stage", "message": str(error)}})
        print(json.dumps({"error": str(error)}), file=sys.stderr)
        return 1
    finally:
        processes.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
