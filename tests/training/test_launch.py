"""accelerate launch commands for one GPU, one node of N GPUs, several nodes and DeepSpeed ZeRO; and the
worker's launched path (`run_launched`) run for real on a CPU."""

import json
import math
from pathlib import Path

import pytest
import yaml

from training.launch import CONFIGS, LaunchConfig, check_host, launch_command, launch_shell
from training.validation import ConfigError

JOB, OUT = Path("/jobs/7/config.json"), Path("/artifacts/7")


def flags(argv):
    """--flag value pairs before `-m` (accelerate's own options)."""
    head = argv[2:argv.index("-m")]
    parsed, i = {}, 0
    while i < len(head):
        if i + 1 < len(head) and not head[i + 1].startswith("--"):
            parsed[head[i]] = head[i + 1]
            i += 2
        else:
            parsed[head[i]] = True
            i += 1
    return parsed


def test_single_gpu():
    argv = launch_command(LaunchConfig(), job_config=JOB, artifacts_dir=OUT)
    assert argv[:2] == ["accelerate", "launch"]
    assert argv[argv.index("-m"):] == ["-m", "training.cli", "--config", str(JOB), "--artifacts-dir", str(OUT)]
    options = flags(argv)
    assert options["--config_file"].endswith("accelerate/single_gpu.yaml")
    assert options["--num_processes"] == "1" and options["--num_machines"] == "1"
    assert "--main_process_ip" not in options and "--use_deepspeed" not in options


def test_one_node_eight_gpus():
    options = flags(launch_command(LaunchConfig(gpus_per_node=8), job_config=JOB, artifacts_dir=OUT))
    assert options["--config_file"].endswith("accelerate/multi_gpu.yaml")
    assert options["--num_processes"] == "8" and options["--machine_rank"] == "0"
    assert options["--main_process_port"] == "29500"


def test_four_nodes_zero3_each_node_its_rank():
    commands = [launch_command(LaunchConfig(gpus_per_node=8, num_nodes=4, node_rank=rank, main_process_ip="10.0.0.1",
                                            deepspeed="zero3"), job_config=JOB, artifacts_dir=OUT)
                for rank in range(4)]
    for rank, argv in enumerate(commands):
        options = flags(argv)
        assert options["--num_processes"] == "32" and options["--num_machines"] == "4"
        assert options["--machine_rank"] == str(rank) and options["--main_process_ip"] == "10.0.0.1"
        assert options["--use_deepspeed"] is True
        assert options["--deepspeed_config_file"].endswith("deepspeed/zero3.json")
        assert options["--deepspeed_multinode_launcher"] == "standard"
        assert options["--config_file"].endswith("accelerate/deepspeed.yaml")
    assert len({tuple(c) for c in commands}) == 4
    assert "--machine_rank 3" in launch_shell(LaunchConfig(gpus_per_node=8, num_nodes=4, node_rank=3,
                                                           deepspeed="zero3"), job_config=JOB, artifacts_dir=OUT)


def test_config_files_exist_and_parse():
    for name in ("single_gpu", "multi_gpu", "deepspeed"):
        data = yaml.safe_load((CONFIGS / "accelerate" / f"{name}.yaml").read_text())
        assert data["compute_environment"] == "LOCAL_MACHINE"
    for stage, name in ((2, "zero2"), (3, "zero3"), (3, "zero3_offload")):
        data = json.loads((CONFIGS / "deepspeed" / f"{name}.json").read_text())
        assert data["zero_optimization"]["stage"] == stage
        assert data["train_micro_batch_size_per_gpu"] == "auto"  # the trainer's batch size wins


@pytest.mark.parametrize(("data", "field"), [
    ({"node_rank": 2, "num_nodes": 2}, "launch.node_rank"),
    ({"deepspeed": "zero4"}, "launch.deepspeed"),
    ({"gpus_per_node": 0}, "launch.gpus_per_node"),
    ({"mixed_precision": "fp8"}, "launch.mixed_precision"),
    ({"device": "tpu"}, "launch.device"),
    ({"device": "cpu"}, "launch.mixed_precision"),  # bf16 by default: a CPU job's precision is model.precision
    ({"device": "cpu", "mixed_precision": "no", "deepspeed": "zero3"}, "launch.deepspeed"),
])
def test_bad_launch_config_names_the_field(data, field):
    with pytest.raises(ConfigError) as error:
        LaunchConfig.from_dict(data)
    assert error.value.field == field


def test_cpu_processes_are_started_by_torchrun_not_accelerates_cpu_flag():
    """accelerate's --cpu starts one process whatever --num_processes says; the multi-GPU config starts them all."""
    argv = launch_command(LaunchConfig(device="cpu", gpus_per_node=2, mixed_precision="no"), job_config=JOB,
                          artifacts_dir=OUT)
    options = flags(argv)
    assert options["--config_file"].endswith("accelerate/multi_gpu.yaml") and options["--num_processes"] == "2"
    assert "--cpu" not in options and options["--mixed_precision"] == "no"


@pytest.mark.parametrize(("launch", "host", "model_device", "field", "says"), [
    (LaunchConfig(device="cpu", gpus_per_node=3, mixed_precision="no"), {"cpu_cores": 2, "gpus": 0}, "cpu",
     "launch.gpus_per_node", "3 CPU processes per node, but this host has 2 CPU cores"),
    (LaunchConfig(gpus_per_node=8), {"cpu_cores": 64, "gpus": 4}, "auto",
     "launch.gpus_per_node", "8 processes per node, but this host has 4 GPUs"),
    (LaunchConfig(), {"cpu_cores": 2, "gpus": 0}, "auto", "launch.gpus_per_node", "this host has no GPUs"),
    (LaunchConfig(device="cpu", gpus_per_node=2, mixed_precision="no"), {"cpu_cores": 2, "gpus": 1}, "auto",
     "launch.device", "model.device puts it on a GPU"),
    (LaunchConfig(gpus_per_node=2), {"cpu_cores": 8, "gpus": 2}, "cpu", "launch.device", "model.device is cpu"),
])
def test_a_launch_the_host_cannot_run_is_refused_naming_the_field(launch, host, model_device, field, says):
    with pytest.raises(ConfigError) as error:
        check_host(launch, model_device=model_device, **host)
    assert error.value.field == field and says in error.value.message


def test_a_launch_the_host_can_run_passes():
    check_host(LaunchConfig(device="cpu", gpus_per_node=2, mixed_precision="no"), model_device="cpu", cpu_cores=2,
               gpus=0)
    check_host(LaunchConfig(gpus_per_node=8, num_nodes=4), model_device="auto", cpu_cores=64, gpus=8)


def test_run_launched_refuses_before_anything_starts(tmp_path):
    from tests.training.conftest import MINI_HARNESS, RecordingReporter
    from training.launch import run_launched, usable_cpu_cores
    from training.pipeline import PipelineConfig

    job = PipelineConfig.from_dict({"model": {"base": "tiny-random-smollm2", "device": "cpu"},
                                    "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
                                    "stages": [{"kind": "sft", "config": {"max_steps": 1}}]})
    too_many = LaunchConfig(device="cpu", gpus_per_node=usable_cpu_cores() + 1, mixed_precision="no")
    reporter = RecordingReporter()
    with pytest.raises(ConfigError) as error:
        run_launched(job, too_many, artifacts_dir=tmp_path / "job", reporter=reporter, should_stop=lambda: False)
    assert error.value.field == "launch.gpus_per_node"
    assert not (tmp_path / "job").exists() and not reporter.lines  # nothing written, nothing launched


@pytest.mark.timeout(900)
def test_a_launched_job_relays_progress_stops_on_cancel_and_resumes(tmp_path):
    """The GPU worker's path, run for real on CPU: `accelerate launch` (one process, no mixed precision)
    starts `training.cli`; its JSON lines reach the reporter, `should_stop` becomes the CANCEL file, the
    exit status becomes TrainingCancelled, and a second launch resumes from the saved checkpoint."""
    from tests.training.conftest import MINI_HARNESS, RecordingReporter
    from training.launch import run_launched
    from training.pipeline import PipelineConfig, TrainingCancelled

    job = PipelineConfig.from_dict({
        "model": {"base": "tiny-random-smollm2", "device": "cpu"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 2}, "trajectories": {"augmented_variants": 0},
        "stages": [{"kind": "sft", "config": {"max_steps": 12, "save_steps": 50, "logging_steps": 1,
                                              "learning_rate": 5e-3, "per_device_train_batch_size": 1}}]})
    launch = LaunchConfig(device="cpu", mixed_precision="no")
    first = RecordingReporter()
    with pytest.raises(TrainingCancelled) as cancelled:
        run_launched(job, launch, artifacts_dir=tmp_path, reporter=first, should_stop=lambda: bool(first.logs),
                     poll_s=0.1)
    assert first.lines[0].startswith("launching: ") and " launch --config_file " in first.lines[0]
    stopped_at = [step for _, step, _, _ in first.logs]
    assert stopped_at and cancelled.value.stage == "sft" and cancelled.value.step == stopped_at[-1] < 12
    assert cancelled.value.checkpoint and not first.checkpoints

    second = RecordingReporter()
    [result] = run_launched(job, launch, artifacts_dir=tmp_path, reporter=second, should_stop=lambda: False)
    resumed = [step for _, step, _, _ in second.logs]
    assert resumed[0] == stopped_at[-1] + 1 and resumed[-1] == 12  # continued from the checkpoint
    assert [c.stage for c in second.checkpoints] == ["sft"] and second.checkpoints[0] == result
    assert all(math.isfinite(v) for v in second.values("sft", "loss"))
    assert (tmp_path / result.path / "config.json").is_file()
    assert not (tmp_path / "CANCEL").exists()  # the first run's request does not stop the next launch
    assert json.loads((tmp_path / "job.json").read_text())["harnesses"][0]["files"] == MINI_HARNESS
