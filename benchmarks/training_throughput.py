"""Tokens/s of each training stage beside a plain PyTorch loop over the same model and sequences.

    .venv/bin/python benchmarks/training_throughput.py [--model tiny-random-smollm2|smollm2-135m-instruct]
                                                       [--steps 4] [--cases 6]

What is measured (CPU, fp32, batch of one sequence):
- plain: AdamW steps of `model(input_ids, labels)` + backward over the SFT trajectories (oracle teacher,
  the test suite's mini harness), labels on assistant tokens only: the floor the pipeline adds to.
- sft: the pipeline's HSA-SFT stage (TRL SFTTrainer) on the same tokenized trajectories.
- opd: General OPD (TRL DistillationTrainer): the student samples, teacher and student score.
- rl: HSA-RL (TRL GRPOTrainer + the runtime rollouts): sampling whole agent turns, then the update.
Throughput = tokens the trainer reports (`num_tokens`: prompt + completion) between its first and last
logging step / wall time between them, so model loading and data preparation are left out. OPD and RL
spend most of their time generating; their ratio to the plain loop is that cost, not overhead.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tests.training.conftest import MINI_HARNESS  # noqa: E402
from training.base_models import load_model, load_tokenizer, materialize_base  # noqa: E402
from training.datasets import read_jsonl, tokenize_rows  # noqa: E402
from training.pipeline import PipelineConfig, run_pipeline  # noqa: E402


class TimingReporter:
    def __init__(self):
        self.points: dict[str, list[tuple[float, float]]] = {}

    def log(self, stage, step, total_steps, metrics):
        if "num_tokens" in metrics:
            self.points.setdefault(stage, []).append((time.perf_counter(), metrics["num_tokens"]))

    def line(self, text):
        pass

    def checkpoint(self, result):
        pass

    def tokens_per_s(self, stage: str) -> float:
        points = self.points.get(stage, [])
        if len(points) < 2:
            return float("nan")
        (t0, n0), (t1, n1) = points[0], points[-1]
        return (n1 - n0) / (t1 - t0)


def plain_loop(model_dir: str, rows: list[dict], steps: int) -> float:
    tokenizer = load_tokenizer(model_dir)
    tokenized, _ = tokenize_rows(rows, tokenizer, max_length=4096)
    model = load_model(model_dir, use_cpu=True)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    tokens, started = 0, None
    for step in range(steps + 1):  # the first step warms up and is not timed
        if step == 1:
            tokens, started = 0, time.perf_counter()
        row = tokenized[step % len(tokenized)]
        ids = torch.tensor([row["input_ids"]])
        labels = ids.clone()
        labels[0, torch.tensor(row["assistant_masks"]) == 0] = -100
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        tokens += ids.shape[1]
    return tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random-smollm2")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--cases", type=int, default=6)
    options = parser.parse_args()
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="training-throughput-"))
    try:
        common = {"max_steps": options.steps, "save_steps": options.steps, "per_device_train_batch_size": 1}
        config = PipelineConfig.from_dict({
            "model": {"base": options.model, "device": "cpu"},
            "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
            "data": {"simulator_seed": 5, "simulator_cases": options.cases},
            "stages": [{"kind": "sft", "config": {**common, "max_length": 4096}},
                       {"kind": "opd", "config": {**common, "max_completion_length": 32, "max_prompts": 16,
                                                  "per_device_train_batch_size": 2}},
                       {"kind": "rl", "config": {**common, "num_generations": 2, "per_device_train_batch_size": 2,
                                                 "cases": 4, "max_new_tokens": 24, "max_completion_length": 128,
                                                 "fault_rate": 0.1}}]})
        reporter = TimingReporter()
        started = time.perf_counter()
        run_pipeline(config, artifacts_dir=work, reporter=reporter, should_stop=lambda: False)
        pipeline_s = time.perf_counter() - started
        base_dir = materialize_base(options.model, work / "base")
        plain = plain_loop(base_dir, read_jsonl(work / "data" / "sft.jsonl"), options.steps)
        print(f"model {options.model}, {options.steps} steps per stage, CPU threads {torch.get_num_threads()}")
        print(f"{'loop':<6} {'tokens/s':>10} {'vs plain':>9}")
        print(f"{'plain':<6} {plain:>10.1f} {1.0:>9.2f}")
        for stage in ("sft", "opd", "rl"):
            rate = reporter.tokens_per_s(stage)
            print(f"{stage:<6} {rate:>10.1f} {rate / plain:>9.2f}")
        print(f"whole pipeline (data, loading, three stages): {pipeline_s:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
