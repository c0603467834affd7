"""Several training processes on a CPU (gloo): how the processes agree (`stage_runtime.Processes`), the distributed
smoke (SFT, OPD and RL with two processes against one, `benchmarks/distributed_smoke.py`), and a two-process
stage cancelled and resumed from the checkpoint every process reads."""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.conftest import MINI_HARNESS, RecordingReporter
from training.stage_runtime import CancelCallback, Processes
from training.validation import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_one_process_decides_alone_and_touches_nothing_distributed():
    import torch.distributed as dist

    processes = Processes.join(use_cpu=True)
    assert processes == Processes() and processes.main and processes.count == 1
    assert processes.main_decides(lambda: 7) == 7
    assert processes.local_main_first(lambda: "made") == "made"
    with pytest.raises(ConfigError):
        processes.main_decides(lambda: (_ for _ in ()).throw(ConfigError("stages[0].config.max_steps", "bad")))
    processes.agree()
    assert not dist.is_initialized()


def _rank(index: int, world: int, port: int, out: str) -> None:
    """One of `world` processes (spawned): exercises Processes and writes what it saw to out/rank-N.json."""
    os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from training.results import StageFailed

    processes = Processes.join(use_cpu=True)
    seen: dict = {"index": processes.index, "count": processes.count, "main": processes.main}
    seen["decided"] = processes.main_decides(lambda: f"by {processes.index}")
    try:
        processes.main_decides(lambda: (_ for _ in ()).throw(ConfigError("launch.gpus_per_node", "too many")))
    except ConfigError as error:
        seen["config_error"] = error.field
    marker = Path(out) / "made-once"

    def make() -> bool:
        found = marker.exists()
        if not found:
            marker.write_text(str(processes.index))
        return found

    seen["found_made"] = processes.local_main_first(make)
    try:
        processes.agree(RuntimeError("disk full") if processes.index == 1 else None)
    except StageFailed as error:
        seen["agree"] = str(error)
    except RuntimeError as error:
        seen["agree"] = f"own: {error}"
    cancel = CancelCallback(lambda: processes.index == 0, processes)  # only the main process's answer counts

    class Control:
        should_save = should_training_stop = False

    cancel.on_step_end(None, type("State", (), {"global_step": 3})(), Control())
    seen["stopped_at"] = cancel.cancelled_at
    processes.close()
    (Path(out) / f"rank-{index}.json").write_text(json.dumps(seen))


def test_two_processes_share_the_main_process_decisions_and_failures(tmp_path):
    import torch.multiprocessing as mp

    mp.start_processes(_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    main, other = (json.loads((tmp_path / f"rank-{k}.json").read_text()) for k in (0, 1))
    assert (main["index"], main["count"], main["main"]) == (0, 2, True)
    assert (other["index"], other["count"], other["main"]) == (1, 2, False)
    assert main["decided"] == other["decided"] == "by 0"
    assert main["config_error"] == other["config_error"] == "launch.gpus_per_node"  # raised on both, field kept
    assert (main["found_made"], other["found_made"]) == (False, True)  # made once, by the local main process
    assert main["agree"] == "process 1 of 2 failed: RuntimeError: disk full" and other["agree"] == "own: disk full"
    assert main["stopped_at"] == other["stopped_at"] == 3


@pytest.mark.timeout(420)
def test_distributed_smoke_two_processes_match_one():
    """SFT, OPD and RL under `accelerate launch` with 2 CPU processes against one (the benchmark's checks:
    a checkpoint per stage, SFT losses and weights equal, the sampling stages' first loss within tolerance)."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "distributed_smoke.py"), "--processes", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines and lines[-1] == "processes 2 ok", done.stdout + done.stderr[-3000:]
    for stage in ("sft", "opd", "rl"):
        assert any(line.startswith(f"{stage} ") and line.endswith(" ok") for line in lines), done.stdout


@pytest.mark.timeout(420)
def test_two_processes_cancel_then_resume_from_the_same_checkpoint(tmp_path):
    """A cancel reaches both processes at the same step (the main process decides), the checkpoint holds both
    RNG states, and the relaunch resumes both from it: the steps continue, none is repeated or lost."""
    from training.launch import LaunchConfig, run_launched
    from training.pipeline import PipelineConfig, TrainingCancelled

    job = PipelineConfig.from_dict({
        "model": {"base": "tiny-random-smollm2", "device": "cpu", "precision": "fp32"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 6}, "trajectories": {"augmented_variants": 0},
        "stages": [{"kind": "sft", "config": {"max_steps": 4, "save_steps": 50, "logging_steps": 1,
                                              "learning_rate": 5e-3, "per_device_train_batch_size": 1}}]})
    first = RecordingReporter()
    with pytest.raises(TrainingCancelled) as cancelled:
        run_launched(job, LaunchConfig(device="cpu", gpus_per_node=2, mixed_precision="no",
                                       main_process_port=free_port()),
                     artifacts_dir=tmp_path, reporter=first, should_stop=lambda: bool(first.logs), poll_s=0.1)
    stopped_at = [step for _, step, _, _ in first.logs]
    assert stopped_at and cancelled.value.step == stopped_at[-1] < 4
    checkpoint = Path(cancelled.value.checkpoint)
    assert sorted(p.name for p in checkpoint.glob("rng_state*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert sum(1 for line in first.lines if "sft: checkpoint at step" in line) == 1  # one reporter, not one per rank

    second = RecordingReporter()
    [result] = run_launched(job, LaunchConfig(device="cpu", gpus_per_node=2, mixed_precision="no",
                                              main_process_port=free_port()),
                            artifacts_dir=tmp_path, reporter=second, should_stop=lambda: False, poll_s=0.1)
    resumed = [step for _, step, _, _ in second.logs]
    assert resumed == list(range(stopped_at[-1] + 1, 5))
    assert any(f"resuming from {checkpoint.name}" in line for line in second.lines)
    assert all(math.isfinite(v) for v in second.values("sft", "loss"))
    assert (Path(result.path) / "config.json").is_file() and not Path(result.path + ".tmp").exists()
