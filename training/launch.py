"""`accelerate launch` command lines for a training job on one GPU, N GPUs of one node, or several nodes.

The GPU worker does not train in its own process: it writes the job's `PipelineConfig` as JSON and
runs the command `launch_command(...)` returns, which starts `python -m training.cli` once per GPU
(data-parallel), or under DeepSpeed ZeRO when a model does not fit one GPU. Every node of a
multi-node job runs the same command with its own `node_rank`; node 0's address is the rendezvous.

Config files live in `training/configs/`: `accelerate/{single_gpu,multi_gpu,deepspeed}.yaml` and
`deepspeed/{zero2,zero3,zero3_offload}.json`. Command-line flags override what the YAML says, so one
YAML per topology serves every size. CPU machines skip all of this and call `run_pipeline` in
process (`use_cpu`, fp32).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.validation import ConfigError, build, knob, require

CONFIGS = Path(__file__).resolve().parent / "configs"
ZERO_STAGES = ("none", "zero2", "zero3", "zero3_offload")


@dataclass(frozen=True)
class LaunchConfig:
    gpus_per_node: int = knob(1, "Processes (GPUs) per node.")
    num_nodes: int = knob(1, "Nodes in the job.")
    node_rank: int = knob(0, "This node's rank (0 is the rendezvous node).")
    main_process_ip: str = knob("127.0.0.1", "Address of node 0, reachable from every node.")
    main_process_port: int = knob(29500, "Rendezvous port on node 0.")
    deepspeed: str = knob("none", "DeepSpeed ZeRO: none, zero2, zero3 or zero3_offload (a model that does not "
                                  "fit one GPU).")
    mixed_precision: str = knob("bf16", "bf16 (GPUs from Ampere on), fp16 or no.")

    def check(self) -> None:
        require(1 <= self.gpus_per_node <= 64, "gpus_per_node", "must be within 1..64")
        require(1 <= self.num_nodes <= 1024, "num_nodes", "must be within 1..1024")
        require(0 <= self.node_rank < self.num_nodes, "node_rank", f"must be within 0..{self.num_nodes - 1}")
        require(1 <= self.main_process_port <= 65535, "main_process_port", "must be a TCP port")
        require(self.main_process_ip.strip() != "", "main_process_ip", "must be set")
        require(self.deepspeed in ZERO_STAGES, "deepspeed", f"must be one of {', '.join(ZERO_STAGES)}")
        require(self.mixed_precision in ("bf16", "fp16", "no"), "mixed_precision", "must be bf16, fp16 or no")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "launch") -> LaunchConfig:
        return build(cls, data, where)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes


def accelerate_config_file(launch: LaunchConfig) -> Path:
    if launch.deepspeed != "none":
        return CONFIGS / "accelerate" / "deepspeed.yaml"
    if launch.world_size == 1:
        return CONFIGS / "accelerate" / "single_gpu.yaml"
    return CONFIGS / "accelerate" / "multi_gpu.yaml"


def launch_command(launch: LaunchConfig, *, job_config: Path, artifacts_dir: Path,
                   accelerate: str = "accelerate") -> list[str]:
    """argv for `accelerate launch … -m training.cli --config JOB --artifacts-dir DIR` on this node."""
    if not isinstance(launch, LaunchConfig):
        raise ConfigError("launch", "expected a LaunchConfig")
    argv = [accelerate, "launch", "--config_file", str(accelerate_config_file(launch)),
            "--num_machines", str(launch.num_nodes), "--num_processes", str(launch.world_size),
            "--machine_rank", str(launch.node_rank), "--mixed_precision", launch.mixed_precision]
    if launch.world_size > 1:
        argv += ["--main_process_ip", launch.main_process_ip, "--main_process_port", str(launch.main_process_port)]
    if launch.deepspeed != "none":
        argv += ["--use_deepspeed", "--deepspeed_config_file", str(CONFIGS / "deepspeed" / f"{launch.deepspeed}.json")]
        if launch.num_nodes > 1:
            argv += ["--deepspeed_multinode_launcher", "standard"]
    argv += ["-m", "training.cli", "--config", str(job_config), "--artifacts-dir", str(artifacts_dir)]
    return argv


def launch_shell(launch: LaunchConfig, **kwargs: Any) -> str:
    """The same command as one shell line (for docs and the job's log)."""
    return shlex.join(launch_command(launch, **kwargs))
