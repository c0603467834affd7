"""Several training processes on a CPU: SFT, OPD and RL under `accelerate launch` beside one process.

    .venv/bin/python benchmarks/distributed_smoke.py [--processes 2] [--sft-steps 2] [--opd-steps 1]
                                                     [--rl-steps 1] [--workdir DIR]

Both runs go the way a GPU worker's job goes: `training.launch.run_launched` (`accelerate launch`, here with
`device: cpu`: torchrun starts the processes, which join over gloo) → `training.cli` → `run_pipeline`, with
the tiny random SmolLM2 and the test suite's mini harness. The one-process run and the N-process run have the
same seed and the same global batch (the N-process run's per-device batch is the one-process batch / N), so
they should compute the same thing:

- sft: the same samples in the same order (the sampler's permutation is seeded and does not depend on the
  batch size; process k takes the k-th slice of each global batch), the loss averaged over the tokens of the
  whole global batch, and gradients all-reduced before each step. Every logged loss is compared, the second
  and later ones only match if the processes stayed in step, and so are the weights of the two saved SFT
  models (the N-process one written from the accelerator's state dict by the main process). Tolerances:
  relative 1e-3 on the losses, 1e-4 absolute on the weights (float sums in another order; on this machine
  the losses came out identical and the weights within 5e-6). The SFT data must hold `--sft-steps` full global batches (checked): a partial
  last batch is padded differently by N processes.
- opd and rl sample (the student's completions, the policy's rollouts). TRL seeds each process apart
  (`seed + process index`) and one process samples the whole batch in one `generate` call, so the two runs
  draw different completions from nearly identical weights: only the first logged loss is compared, against
  a looser tolerance (opd: relative 0.25; it is the reverse KL of the same student and teacher on other
  samples; measured here 2-3 %), and later steps diverge because they train on different samples. With the tiny random model every RL
  reward is the same for every rollout, so every GRPO group has zero spread and RL's loss is exactly 0 in both
  runs (absolute tolerance 1e-6): the RL line shows the stage runs, gathers rewards across processes and
  saves, not that its updates agree.

It prints one line per stage with both losses and the wall time of both runs, and `processes N ok` when every
stage finished in both runs, each stage registered one checkpoint (a model directory with its weights, and
the trainer's `checkpoint-N` with one RNG state per process) and the losses agree within the tolerances;
otherwise `processes N FAILED: …` and exit status 1.
"""

from __future__ import annotations

import argparse
import math
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.training.conftest import MINI_HARNESS, RecordingReporter  # noqa: E402
from training.launch import LaunchConfig, run_launched  # noqa: E402
from training.pipeline import PipelineConfig  # noqa: E402

STAGES = ("sft", "opd", "rl")
SFT_RELATIVE = 1e-3
SFT_WEIGHTS = 1e-4
OPD_RELATIVE = 0.25
RL_ABSOLUTE = 1e-6


def job(processes: int, *, sft_steps: int, opd_steps: int, rl_steps: int) -> PipelineConfig:
    """The job for `processes` processes: per-device batches of the global batch / processes."""
    def per_device(global_batch: int) -> int:
        if global_batch % processes:
            raise SystemExit(f"--processes must divide the global batch {global_batch}")
        return global_batch // processes

    common = {"learning_rate": 5e-3, "logging_steps": 1, "lr_scheduler_type": "constant"}
    return PipelineConfig.from_dict({
        "model": {"base": "tiny-random-smollm2", "device": "cpu", "precision": "fp32"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 6},
        "trajectories": {"augmented_variants": 0},
        "seed": 11,
        "stages": [
            {"kind": "sft", "config": {**common, "max_steps": sft_steps, "save_steps": sft_steps,
                                       "max_length": 2048, "per_device_train_batch_size": per_device(2)}},
            {"kind": "opd", "config": {**common, "max_steps": opd_steps, "save_steps": opd_steps,
                                       "max_completion_length": 8, "max_prompts": 4,
                                       "per_device_train_batch_size": per_device(2)}},
            {"kind": "rl", "config": {**common, "max_steps": rl_steps, "save_steps": rl_steps, "num_generations": 2,
                                      "per_device_train_batch_size": per_device(4), "cases": 2, "max_new_tokens": 8,
                                      "max_completion_length": 48, "fault_rate": 0.0, "turn_deadline_s": 120.0}},
        ]})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(processes: int, directory: Path, **steps: int) -> tuple[RecordingReporter, float]:
    launch = LaunchConfig(device="cpu", gpus_per_node=processes, mixed_precision="no", main_process_port=free_port())
    reporter = RecordingReporter()
    started = time.perf_counter()
    run_launched(job(processes, **steps), launch, artifacts_dir=directory, reporter=reporter,
                 should_stop=lambda: False, poll_s=0.2)
    return reporter, time.perf_counter() - started


def checkpoint_problems(reporter: RecordingReporter, directory: Path, processes: int) -> list[str]:
    """What is missing of one registered checkpoint per stage (model weights, trainer checkpoint, RNG states)."""
    problems = []
    stages = [result.stage for result in reporter.checkpoints]
    if stages != list(STAGES):
        problems.append(f"{processes} process(es): checkpoints registered for {stages}, expected {list(STAGES)}")
    for result in reporter.checkpoints:
        model = Path(result.path)
        if not ((model / "config.json").is_file() and any(model.glob("*.safetensors"))):
            problems.append(f"{processes} process(es): {result.stage} has no model at {model}")
        saved = sorted((model.parent / "trainer").glob("checkpoint-*"))
        rng = list(saved[-1].glob("rng_state*.pth")) if saved else []
        if len(saved) != 1 or len(rng) != processes:
            problems.append(f"{processes} process(es): {result.stage} has {len(saved)} trainer checkpoint(s) "
                            f"with {len(rng)} RNG state(s)")
        if directory not in model.parents:
            problems.append(f"{processes} process(es): {result.stage} saved outside its artifacts: {model}")
    return problems


def weight_gap(one: Path, many: Path) -> float:
    """Largest absolute difference between two saved models' weights."""
    from safetensors.torch import load_file

    first, second = load_file(str(one / "model.safetensors")), load_file(str(many / "model.safetensors"))
    if first.keys() != second.keys():
        return math.inf
    return max(float((first[name] - second[name]).abs().max()) for name in first)


def compare(stage: str, one: list[float], many: list[float]) -> tuple[bool, str]:
    """Whether the stage's losses agree (module docstring), and how far apart they are."""
    if not one or not many or len(one) != len(many) or not all(map(math.isfinite, one + many)):
        return False, "missing or non-finite losses"
    if stage == "sft":
        worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(one, many, strict=True))
        return worst <= SFT_RELATIVE, f"max relative difference {worst:.2e} (tolerance {SFT_RELATIVE:g}, every step)"
    if stage == "opd":
        gap = abs(one[0] - many[0]) / max(abs(one[0]), 1e-12)
        return gap <= OPD_RELATIVE, f"first-step relative difference {gap:.2e} (tolerance {OPD_RELATIVE:g})"
    gap = abs(one[0] - many[0])
    return gap <= RL_ABSOLUTE, f"first-step absolute difference {gap:.2e} (tolerance {RL_ABSOLUTE:g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--sft-steps", type=int, default=2)
    parser.add_argument("--opd-steps", type=int, default=1)
    parser.add_argument("--rl-steps", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep the artifacts here (default: a temporary directory)")
    options = parser.parse_args()
    steps = {"sft_steps": options.sft_steps, "opd_steps": options.opd_steps, "rl_steps": options.rl_steps}
    work = options.workdir or Path(tempfile.mkdtemp(prefix="distributed-smoke-"))
    try:
        single, single_s = run(1, work / "one", **steps)
        several, several_s = run(options.processes, work / "many", **steps)
        problems = checkpoint_problems(single, work / "one", 1)
        problems += checkpoint_problems(several, work / "many", options.processes)
        trajectories = len((work / "one" / "data" / "sft.jsonl").read_text(encoding="utf-8").splitlines())
        if trajectories < 2 * options.sft_steps:  # a partial last batch is filled differently by N processes
            problems.append(f"sft: {trajectories} trajectories hold fewer than {options.sft_steps} global batches of 2")
        print(f"tiny-random-smollm2 on CPU (gloo); wall time: 1 process {single_s:.0f} s, "
              f"{options.processes} processes {several_s:.0f} s")
        for stage in STAGES:
            one, many = single.values(stage, "loss"), several.values(stage, "loss")
            agree, detail = compare(stage, one, many)
            if stage == "sft" and len(single.checkpoints) == len(several.checkpoints) == len(STAGES):
                gap = weight_gap(Path(single.checkpoints[0].path), Path(several.checkpoints[0].path))
                agree = agree and gap <= SFT_WEIGHTS
                detail += f"; saved weights max |difference| {gap:.2e} (tolerance {SFT_WEIGHTS:g})"
            if not agree:
                problems.append(f"{stage}: losses differ: {detail}")
            print(f"{stage:<4} loss 1 process {' '.join(f'{v:.6f}' for v in one)} | {options.processes} processes "
                  f"{' '.join(f'{v:.6f}' for v in many)} | {detail} {'ok' if agree else 'FAILED'}")
        if problems:
            print(f"processes {options.processes} FAILED: " + "; ".join(problems))
            sys.exit(1)
        print(f"processes {options.processes} ok")
    finally:
        if options.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
