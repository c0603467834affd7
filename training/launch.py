"""`accelerate launch` command lines for a training job on one GPU, N GPUs of one node, or several nodes.

The GPU worker does not train in its own process: it writes the job's `PipelineConfig` as JSON and
runs the command `launch_command(...)` returns, which starts `python -m training.cli` once per GPU
(data-parallel), or under DeepSpeed ZeRO when a model does not fit one GPU. Every node of a
multi-node job runs the same command with its own `node_rank`; node 0's address is the rendezvous.

`run_launched` is the worker's side of it: it writes the config, starts the command (node 0, or this
node's rank), relays the JSON lines the main process prints to the job's `Reporter`, turns
`should_stop` into the `CANCEL` file `training.cli` watches, and maps the exit status back to the
pipeline's outcomes (results, `TrainingCancelled`, `ConfigError`/`LineageError`, `StageFailed`). The
launched processes die with the worker (a worker killed with `kill -9` takes them along), so the
redelivered job resumes from the last checkpoint without a second trainer writing beside it.

Config files live in `training/configs/`: `accelerate/{single_gpu,multi_gpu,deepspeed}.yaml` and
`deepspeed/{zero2,zero3,zero3_offload}.json`. Command-line flags override what the YAML says, so one
YAML per topology serves every size. CPU machines normally skip all of this and call `run_pipeline` in
process (`use_cpu`, fp32).

`device: cpu` starts the processes on CPU cores instead (gloo; `benchmarks/distributed_smoke.py` and the
tests use it to run several processes on a machine without GPUs). accelerate's own `--cpu` flag starts
one process whatever `--num_processes` says (its multi-CPU path is mpirun), so CPU processes are started
like GPU ones, by torchrun through the multi-GPU config, and join over gloo because the job trains on the
CPU (`model.device: cpu`, checked by `check_host`).

`check_host` refuses, before anything starts, a launch this host cannot run, naming the field: more
processes per node than GPUs (or, with `device: cpu`, than CPU cores).
"""

from __future__ import annotations

import collections
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.lineage import LineageError
from training.results import Reporter, StageFailed, StageResult, TrainingCancelled
from training.validation import ConfigError, build, knob, require

CONFIGS = Path(__file__).resolve().parent / "configs"
ZERO_STAGES = ("none", "zero2", "zero3", "zero3_offload")
LAUNCH_DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class LaunchConfig:
    gpus_per_node: int = knob(1, "Processes per node: one per GPU (with device cpu: CPU processes, at most one "
                                 "per core).")
    num_nodes: int = knob(1, "Nodes in the job.")
    node_rank: int = knob(0, "This node's rank (0 is the rendezvous node).")
    main_process_ip: str = knob("127.0.0.1", "Address of node 0, reachable from every node.")
    main_process_port: int = knob(29500, "Rendezvous port on node 0.")
    deepspeed: str = knob("none", "DeepSpeed ZeRO: none, zero2, zero3 or zero3_offload (a model that does not "
                                  "fit one GPU).")
    mixed_precision: str = knob("bf16", "bf16 (GPUs from Ampere on), fp16 or no.")
    device: str = knob("cuda", "cuda (one process per GPU, NCCL) or cpu (processes on CPU cores over gloo: "
                               "machines without GPUs, the distributed smoke; needs mixed_precision no, no "
                               "DeepSpeed, and a job with model.device cpu).")

    def check(self) -> None:
        require(1 <= self.gpus_per_node <= 64, "gpus_per_node", "must be within 1..64")
        require(1 <= self.num_nodes <= 1024, "num_nodes", "must be within 1..1024")
        require(0 <= self.node_rank < self.num_nodes, "node_rank", f"must be within 0..{self.num_nodes - 1}")
        require(1 <= self.main_process_port <= 65535, "main_process_port", "must be a TCP port")
        require(self.main_process_ip.strip() != "", "main_process_ip", "must be set")
        require(self.deepspeed in ZERO_STAGES, "deepspeed", f"must be one of {', '.join(ZERO_STAGES)}")
        require(self.mixed_precision in ("bf16", "fp16", "no"), "mixed_precision", "must be bf16, fp16 or no")
        require(self.device in LAUNCH_DEVICES, "device", "must be cuda or cpu")
        if self.device == "cpu":
            require(self.mixed_precision == "no", "mixed_precision",
                    "must be no with device cpu (the job's model.precision decides bf16 on a CPU)")
            require(self.deepspeed == "none", "deepspeed", "must be none with device cpu (DeepSpeed is for GPU hosts)")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "launch") -> LaunchConfig:
        return build(cls, data, where)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes


def usable_cpu_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which a container's CPU limit narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_host(launch: LaunchConfig, *, model_device: str = "auto", cpu_cores: int | None = None,
               gpus: int | None = None) -> None:
    """Refuse a launch this host cannot run (ConfigError naming the field), before anything starts.

    Processes per node beyond this host's GPUs would share or miss a GPU; beyond its CPU cores (device cpu)
    they would only take turns on the cores and slow each other down. `model_device` is the job's
    `model.device`: CPU processes need a job that trains on the CPU.
    """
    per_node = launch.gpus_per_node
    found = visible_gpus() if gpus is None else gpus
    if launch.device == "cpu":
        cores = usable_cpu_cores() if cpu_cores is None else cpu_cores
        if per_node > cores:
            raise ConfigError("launch.gpus_per_node", f"{per_node} CPU processes per node, but this host has "
                                                      f"{cores} CPU core{'s' if cores != 1 else ''}")
        if model_device == "cuda" or (model_device == "auto" and found):
            raise ConfigError("launch.device", "is cpu, but the job's model.device puts it on a GPU (set it to cpu)")
        return
    if per_node > found:
        raise ConfigError("launch.gpus_per_node", f"{per_node} processes per node, but this host has "
                                                  f"{found or 'no'} GPU{'s' if found != 1 else ''}")
    if model_device == "cpu":
        raise ConfigError("launch.device", "is cuda, but the job's model.device is cpu (use launch device cpu)")


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
    # device cpu: the same files; single_gpu.yaml is one plain process, multi_gpu.yaml starts torchrun (module
    # docstring), and the processes find the CPU through the job's model.device
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


ROOT = Path(__file__).resolve().parents[1]  # `-m training.cli` is importable from here
CANCEL_FILE = "CANCEL"
JOB_CONFIG_FILE = "job.json"


def default_accelerate() -> str:
    """The `accelerate` next to this interpreter (the worker's virtualenv), else the one on PATH."""
    beside = Path(sys.executable).parent / "accelerate"
    return str(beside) if beside.exists() else "accelerate"


DIE_WITH_PARENT_ENV = "HARNESSOPS_DIE_WITH_PARENT"


def die_with_parent() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies (PR_SET_PDEATHSIG). The worker sets it on
    `accelerate`, and `training.cli` on itself (accelerate does not forward signals to its child), so a
    worker killed with `kill -9` leaves no trainer behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_launched(config: Any, launch: LaunchConfig, *, artifacts_dir: Path, reporter: Reporter,
                 should_stop: Callable[[], bool], accelerate: str | None = None,
                 env: Mapping[str, str] | None = None, poll_s: float = 1.0) -> list[StageResult]:
    """Run a `PipelineConfig` through `accelerate launch` and report as `run_pipeline` would.

    Returns the finished stages' results; raises `TrainingCancelled` (stopped on `should_stop`, the
    stage saved a checkpoint), `ConfigError` / `LineageError` (refused before training, a launch this
    host cannot run included: `check_host`) or `StageFailed`
    (a stage failed, or the launched processes died: the message carries their last stderr lines).
    """
    check_host(launch, model_device=config.model.device)
    artifacts_dir = Path(artifacts_dir)
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    job_config = artifacts_dir / JOB_CONFIG_FILE
    temporary = job_config.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(config.to_dict(with_files=True), ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, job_config)
    cancel = artifacts_dir / CANCEL_FILE
    cancel.unlink(missing_ok=True)  # a previous attempt's request; this one asks afresh
    argv = launch_command(launch, job_config=job_config, artifacts_dir=artifacts_dir,
                          accelerate=accelerate or default_accelerate())
    reporter.line(f"launching: {shlex.join(argv)}")
    child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", DIE_WITH_PARENT_ENV: "1"}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), child_env.get("PYTHONPATH", "")) if p)
    process = subprocess.Popen(argv, cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, bufsize=1, preexec_fn=die_with_parent, start_new_session=True)
    events: queue.Queue = queue.Queue()
    stderr_tail: collections.deque[str] = collections.deque(maxlen=40)

    def read_stdout() -> None:
        for raw in process.stdout:
            events.put(raw.rstrip("\n"))
        events.put(None)

    def read_stderr() -> None:
        for raw in process.stderr:
            stderr_tail.append(raw.rstrip("\n"))

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    results: list[StageResult] = []
    outcome: dict[str, Any] = {}
    last = ("", 0)
    try:
        finished = False
        while not finished:
            try:
                text = events.get(timeout=poll_s)
            except queue.Empty:
                text = ""
            if text is None:
                finished = True
            elif text:
                last = _relay(text, reporter, results, outcome) or last
            if not cancel.exists() and should_stop():
                cancel.touch()
        process.wait()
    finally:
        if process.poll() is None:  # the worker itself is going down: take the trainers along
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
        else:
            _signal_group(process, signal.SIGTERM)  # nothing of the launch outlives it
    for reader in readers:
        reader.join(timeout=5)
    status = process.returncode
    if status == 0:
        return results
    # accelerate's launcher exits 1 whatever its trainer's status was: the trainer's structured last line
    # (relayed into `outcome`) is what says cancelled or refused, the exit status only when it is direct.
    if status == 3 or "cancelled" in outcome:
        cancelled = outcome.get("cancelled") or {}
        raise TrainingCancelled(cancelled.get("stage", last[0]), int(cancelled.get("step", last[1])),
                                cancelled.get("checkpoint"))
    error = outcome.get("error") or {}
    if error.get("kind") in ("lineage", "config") or (status == 2 and error):
        if error.get("kind") == "lineage":
            raise LineageError(error.get("message", ""))
        raise ConfigError(error.get("field") or "config", error.get("message", ""))
    detail = error.get("message") or " | ".join(list(stderr_tail)[-5:]) or "no output"
    raise StageFailed(f"the launched training exited with status {status}: {detail}")


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """Signal the launch's whole process group (accelerate and the trainers it started)."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _relay(text: str, reporter: Reporter, results: list[StageResult], outcome: dict) -> tuple[str, int] | None:
    """One stdout line of `training.cli` to the reporter; returns (stage, step) of a logged step."""
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        reporter.line(text[:2000])  # something else printed to stdout: keep it visible, do not parse it
        return None
    if "stage" in event and "step" in event:
        reporter.log(event["stage"], int(event["step"]), int(event.get("total_steps", 0)), event.get("metrics") or {})
        return event["stage"], int(event["step"])
    if "line" in event:
        reporter.line(str(event["line"]))
    elif "checkpoint" in event:
        result = StageResult.from_dict(event["checkpoint"])
        results[:] = [r for r in results if r.path != result.path] + [result]
        reporter.checkpoint(result)
    elif "cancelled" in event or "error" in event:
        outcome.update(event)
    return None
