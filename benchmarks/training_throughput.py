"""Tokens/s of each training stage beside a plain PyTorch loop over the same model and sequences; with
`--sft-recipe`, HSA-SFT's tokens/s on the shipped recipe's rows before and after the SFT throughput knobs.

    .venv/bin/python benchmarks/training_throughput.py [--model tiny-random-smollm2|smollm2-135m-instruct]
                                                       [--steps 4] [--cases 6]
    .venv/bin/python benchmarks/training_throughput.py --sft-recipe [--rows 15] [--variants before,after,...]

What is measured (CPU, fp32, batch of one sequence):
- plain: AdamW steps of `model(input_ids, labels)` + backward over the SFT trajectories (oracle teacher,
  the test suite's mini harness), labels on assistant tokens only: the floor the pipeline adds to.
- sft: the pipeline's HSA-SFT stage (TRL SFTTrainer) on the same tokenized trajectories.
- opd: General OPD (TRL DistillationTrainer): the student samples, teacher and student score.
- rl: HSA-RL (TRL GRPOTrainer + the runtime rollouts): sampling whole agent turns, then the update.
Throughput = tokens the trainer reports (`num_tokens`: prompt + completion) between its first and last
logging step / wall time between them, so model loading and data preparation are left out. OPD and RL
spend most of their time generating; their ratio to the plain loop is that cost, not overhead.

`--sft-recipe` trains the HSA-SFT stage of `make train-default` (SmolLM2-135M-Instruct, LoRA r16 on every linear
layer, max_length 8192, one row per micro-batch, precision auto, the compact harness's tools-first-named oracle
rows over 12 rooms, one HSA state per case) on its first `--rows` rows, once per variant, each in its own
artifacts directory: `before` is the stage as it was (no packing, TRL's LM head), `compact` scores only the
labelled positions, `packed` adds packing, `*-fp32` force fp32 where auto resolves to bf16, `compact-nodropout`
also drops LoRA dropout (a change of recipe, measured apart so that it can be chosen on a validation split). Gradient accumulation
is 1 instead of the recipe's 2 so a packed run has steps to time (accumulation changes no per-token work).
Tokens are TRL's `num_tokens`: the micro-batches' real tokens (attention-mask sum; a packed sequence's length,
unpadded), never padding. Rates run from the first logged step to the last, so loading, data preparation and the
first step are left out; the CPU-time column (this process's CPU seconds over the same span) moves less when
other work shares the cores.
"""

from __future__ import annotations

import argparse
import os
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
        self.points: dict[str, list[tuple[float, float, float]]] = {}
        self.lines: list[str] = []

    def log(self, stage, step, total_steps, metrics):
        if "num_tokens" in metrics:
            self.points.setdefault(stage, []).append((time.perf_counter(), metrics["num_tokens"],
                                                      time.process_time()))

    def line(self, text):
        self.lines.append(text)

    def checkpoint(self, result):
        pass

    def tokens_per_s(self, stage: str) -> float:
        points = self.points.get(stage, [])
        if len(points) < 2:
            return float("nan")
        (t0, n0, _), (t1, n1, _) = points[0], points[-1]
        return (n1 - n0) / (t1 - t0)

    def tokens_per_cpu_s(self, stage: str) -> float:
        points = self.points.get(stage, [])
        if len(points) < 2:
            return float("nan")
        (_, n0, c0), (_, n1, c1) = points[0], points[-1]
        return (n1 - n0) / (c1 - c0)

    def timed_tokens(self, stage: str) -> float:
        points = self.points.get(stage, [])
        return points[-1][1] - points[0][1] if len(points) >= 2 else 0.0


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


# name: (SftConfig knobs, model.precision)
# name → (SFT stage knobs, model.precision, other model settings)
SFT_VARIANTS = {
    "before": ({"packing": False, "compact_lm_head": False}, "auto", {}),
    "compact": ({"packing": False, "compact_lm_head": True}, "auto", {}),
    "packed": ({"packing": True, "compact_lm_head": True}, "auto", {}),
    "before-fp32": ({"packing": False, "compact_lm_head": False}, "fp32", {}),
    "compact-fp32": ({"packing": False, "compact_lm_head": True}, "fp32", {}),
    # a recipe change, not a faster path to the same training: LoRA without dropout skips drawing a random mask
    # over every adapted layer's input (9 % of a step's CPU time in a profile on this host)
    "compact-nodropout": ({"packing": False, "compact_lm_head": True}, "auto", {"lora_dropout": 0.0}),
}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return "unknown CPU"


def sft_recipe(rows: int, variants: list[str]) -> None:
    """HSA-SFT tokens/s of `make train-default`'s recipe under each variant (module docstring)."""
    from datasets import Dataset
    from trl import pack_dataset

    from training.base_models import cpu_has_bf16
    from training.hat.experiment import (
        ExperimentConfig,
        _token_counts,
        build_data,
        pipeline_configs,
        split_training,
        teacher_config,
    )

    bf16 = cpu_has_bf16()
    if not bf16:  # auto is fp32 here: the fp32 variants would repeat the others
        variants = [v for v in variants if not v.endswith("-fp32")]
    work = Path(tempfile.mkdtemp(prefix="sft-recipe-throughput-"))
    try:
        recipe = ExperimentConfig(model="smollm2", cases=100, train_examples=rows, grad_accumulation=2,
                                  learning_rate=3e-4, precision="auto", oracle="tools-first-named", train_rooms=12,
                                  hsa_states="single", workdir=str(work))
        data = build_data(recipe)
        tokenizer = load_tokenizer(recipe.base)
        split = split_training(recipe, data, tokenizer)
        raw = pipeline_configs(recipe, data, split, work)["hat"]
        raw["stages"] = raw["stages"][:1]
        stage = raw["stages"][0]["config"]
        lengths, _ = _token_counts(split["hsa_cases"], data.spec, 1, tokenizer, teacher_config(recipe),
                                   single_state=recipe.single_state)
        sequences = len(pack_dataset(Dataset.from_dict({"input_ids": [[0] * n for n in lengths]}),
                                     stage["max_length"], "bfd"))
        print(f"{cpu_model()}; torch threads {torch.get_num_threads()}; bf16 instructions: {'yes' if bf16 else 'no'}"
              f" (precision auto = {'bf16' if bf16 else 'fp32'}); load average {os.getloadavg()[0]:.1f} at start")
        print(f"recipe rows: {split['hsa_rows']}, {split['hsa_tokens']} tokens ({sequences} packed sequences); "
              f"max_length {stage['max_length']}, micro-batch {stage['per_device_train_batch_size']}, "
              f"LoRA r{recipe.lora_r}; unpacked variants train {min(rows, 8)} rows, packed ones every sequence")
        rates: dict[str, tuple[float, float, float, str]] = {}
        for name in variants:
            knobs, precision, model = SFT_VARIANTS[name]
            # unpacked: one row a step; packed: one packed sequence (several rows) a step, each once
            steps = sequences if knobs["packing"] else min(rows, 8)
            variant = {**raw, "model": {**raw["model"], "precision": precision, **model},
                       "stages": [{"kind": "sft", "config": {**stage, **knobs, "max_steps": steps,
                                                             "gradient_accumulation_steps": 1, "save_steps": steps,
                                                             "warmup_steps": 0}}]}
            reporter = TimingReporter()
            run_pipeline(PipelineConfig.from_dict(variant), artifacts_dir=work / name, reporter=reporter,
                         should_stop=lambda: False)
            packed = next((line for line in reporter.lines if "packed into" in line), "")
            rates[name] = (reporter.tokens_per_s("sft"), reporter.tokens_per_cpu_s("sft"),
                           reporter.timed_tokens("sft"), packed)
            print(f"  {name}: {rates[name][0]:.1f} tokens/s, {rates[name][1]:.1f} tokens/CPU-s over "
                  f"{rates[name][2]:.0f} tokens{'; ' + packed if packed else ''}", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} at end")
        print(f"{'variant':<13} {'packing':>7} {'LM head':>8} {'precision':>9} {'tokens/s':>9} {'tok/CPU-s':>9} "
              f"{'vs before':>9} {'CPU-s':>6}")
        for name, (rate, cpu_rate, _, _) in rates.items():
            knobs, precision, _ = SFT_VARIANTS[name]
            base = rates.get("before")
            print(f"{name:<13} {'on' if knobs['packing'] else 'off':>7} "
                  f"{'compact' if knobs['compact_lm_head'] else 'TRL':>8} "
                  f"{'bf16' if precision == 'auto' and bf16 else 'fp32':>9} {rate:>9.1f} {cpu_rate:>9.1f} "
                  f"{rate / base[0] if base else float('nan'):>9.2f} "
                  f"{cpu_rate / base[1] if base else float('nan'):>6.2f}")
        if "before" in rates and "compact" in rates:
            print(f"after (the new default: compact LM head, no packing) / before: "
                  f"{rates['compact'][0] / rates['before'][0]:.2f}x tokens/s, "
                  f"{rates['compact'][1] / rates['before'][1]:.2f}x tokens per CPU-second")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random-smollm2")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--sft-recipe", action="store_true",
                        help="HSA-SFT on the shipped recipe's rows, before/after the SFT throughput knobs")
    parser.add_argument("--rows", type=int, default=15, help="--sft-recipe: rows trained per variant")
    parser.add_argument("--variants", default=",".join(SFT_VARIANTS),
                        help=f"--sft-recipe: comma-separated, in order, of {', '.join(SFT_VARIANTS)}")
    options = parser.parse_args()
    torch.manual_seed(0)
    if options.sft_recipe:
        unknown = set(options.variants.split(",")) - set(SFT_VARIANTS)
        if unknown:
            parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
        sft_recipe(options.rows, options.variants.split(","))
        return
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
