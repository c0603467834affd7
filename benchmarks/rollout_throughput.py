"""HSA-RL rollouts per second: a generation batch's turns one after another, or advancing together.

    .venv/bin/python benchmarks/rollout_throughput.py [--model tiny-random-smollm2|smollm2-135m-instruct]
                                                      [--rounds 3] [--sizes 2 4 8] [--threads N]

What is measured (CPU, fp32, one torch thread by default, `training.rollout.HarnessRollout` called as
TRL's GRPOTrainer calls it): each round is one `rollout_func` call over a group of N rollouts of one
simulator case (the test suite's mini harness; RlConfig's defaults: 96 new tokens a model call, 512 a
turn, temperature 1, fault rate 0.1), seeded.
- sequential: each turn runs alone; every model call is one `model.generate` of one row.
- batched: the group's turns run together; each generation serves every waiting turn (left-padded rows;
  the first call's rows, all from one prompt, share its prefill).
The two alternate round by round, so load from other work on the machine falls on both alike.
Episodes/s = rollouts / wall time over `--rounds` rounds (different cases), after one untimed warm-up
rollout each; the CPU-time ratio is the same over process CPU time, less sensitive to that load. Tool
calls and hooks run in both; on the random model most turns are two model calls (a reply the skill hook
refuses, then another). One thread: two threads on two cores shared with other work oversubscribe, and
the timings then measure the contention. The last line is the group-of-4 wall-clock ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness.simulator import generate_cases, generate_room  # noqa: E402
from harness.spec import parse_files  # noqa: E402
from tests.training.conftest import MINI_HARNESS  # noqa: E402
from training.base_models import load_model, load_tokenizer, materialize_base, model_cache  # noqa: E402
from training.rl_config import FAULT_KINDS, RlConfig  # noqa: E402
from training.rollout import Episode, HarnessRollout, prompt_key  # noqa: E402


@dataclass
class Timing:
    rollouts: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    model_calls: int = 0
    generations: int = 0


def measure(model, tokenizer, episodes: list[Episode], size: int) -> dict[str, Timing]:
    """Sequential and batched rollouts of groups of `size`, round by round in turn (so that load from other
    work on the machine falls on both alike)."""
    defaults = RlConfig()
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m, num_processes=1))
    keyed = {prompt_key(e.prompt()): e for e in episodes}
    timings = {}
    rollouts = {}
    for mode in ("sequential", "batched"):
        rollouts[mode] = HarnessRollout(keyed, tokenizer, max_new_tokens=defaults.max_new_tokens,
                                        temperature=defaults.temperature,
                                        max_completion_length=defaults.max_completion_length,
                                        deadline_s=defaults.turn_deadline_s, batched=mode == "batched")
        rollouts[mode]([episodes[0].prompt()], trainer)  # warm-up, untimed
        timings[mode] = Timing(model_calls=-rollouts[mode].model_calls, generations=-rollouts[mode].batches)
    for index, episode in enumerate(episodes[1:]):
        for mode, rollout in rollouts.items():
            torch.manual_seed(index)
            wall, cpu = time.perf_counter(), time.process_time()
            rollout([episode.prompt()] * size, trainer)
            timings[mode].wall_s += time.perf_counter() - wall
            timings[mode].cpu_s += time.process_time() - cpu
            timings[mode].rollouts += size
    for mode, rollout in rollouts.items():
        timings[mode].model_calls += rollout.model_calls
        timings[mode].generations += rollout.batches
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random-smollm2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    options = parser.parse_args()
    if options.threads:
        torch.set_num_threads(options.threads)
    tokenizer = load_tokenizer(materialize_base(options.model, model_cache()))
    model = load_model(materialize_base(options.model, model_cache()), use_cpu=True)
    spec = parse_files(MINI_HARNESS)
    rate = RlConfig().fault_rate / len(FAULT_KINDS)
    cases = generate_cases(5, options.rounds + 1, room=generate_room(5, n_products=3),
                           mix={"product_qa": 0.7, "casual_chat": 0.3})
    episodes = [Episode(case=case, spec=spec, fault_rates={kind: rate for kind in FAULT_KINDS}, seed=index)
                for index, case in enumerate(cases)]
    print(f"model {options.model}, {options.rounds} rounds of one case × group size, "
          f"CPU threads {torch.get_num_threads()}")
    print(f"{'group':>5} {'sequential ep/s':>16} {'batched ep/s':>13} {'ratio':>6} {'CPU-time ratio':>15} "
          f"{'model calls':>12} {'generations seq/batched':>24}")
    ratios = {}
    for size in options.sizes:
        alone, together = measure(model, tokenizer, episodes, size).values()
        ratios[size] = (together.rollouts / together.wall_s) / (alone.rollouts / alone.wall_s)
        cpu_ratio = (together.rollouts / together.cpu_s) / (alone.rollouts / alone.cpu_s)
        print(f"{size:>5} {alone.rollouts / alone.wall_s:>16.2f} {together.rollouts / together.wall_s:>13.2f} "
              f"{ratios[size]:>6.2f} {cpu_ratio:>15.2f} {f'{alone.model_calls}/{together.model_calls}':>12} "
              f"{f'{alone.generations}/{together.generations}':>24}")
    if 4 in ratios:
        print(f"batched/sequential: {ratios[4]:.2f}×")


if __name__ == "__main__":
    main()
