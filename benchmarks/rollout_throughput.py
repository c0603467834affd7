"""HSA-RL rollouts per second: a generation batch's turns one after another, or advancing together.

    .venv/bin/python benchmarks/rollout_throughput.py [--model tiny-random-smollm2|smollm2-135m-instruct]
                                                      [--harness compact|mini] [--rounds 3] [--sizes 2 4 8]
                                                      [--threads N] [--breakdown]

What is measured (CPU, fp32, one torch thread by default, `training.rollout.HarnessRollout` called as
TRL's GRPOTrainer calls it): each round is one `rollout_func` call over a group of N rollouts of one
simulator case under the compact harness (`harness/demo/compact`, the one the shipped recipe trains on;
`--harness mini`: the test suite's short one), with RlConfig's defaults (96 new tokens a model call, 512 a
turn, temperature 1, fault rate 0.1), seeded.
- sequential: the rollout before batching: each turn runs alone, every model call is one `model.generate` of
  one row that prefills the turn's whole prefix again (`batched=False, carry_cache=False`).
- batched: the shipped rollout: the group's turns run together, each generation serves every waiting turn
  (left-padded rows; the first call's rows, all from one prompt, share its prefill) and each turn's KV cache
  is carried from one of its model calls to the next, so a call prefills only what the runtime appended.
- with `--breakdown`, also each half alone: batched without carrying the cache, and one at a time with it.
The modes alternate round by round, so load from other work on the machine falls on all alike.
Episodes/s = rollouts / wall time over `--rounds` rounds (different cases), after one untimed warm-up
rollout each; the CPU-time ratio is the same over process CPU time, less sensitive to that load. Tool
calls and hooks run in all; "prefilled" is the prefix tokens run through the model before sampling, summed
over the mode's calls. One thread: two threads on two cores shared with other work oversubscribe, and the
timings then measure the contention. The last line is the group-of-4 wall-clock ratio, batched/sequential.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness.simulator import generate_cases, generate_room  # noqa: E402
from harness.spec import parse_files, read_dir  # noqa: E402
from harness.spec.prompt import openai_tools  # noqa: E402
from serving.backends.hermes import render_chatml  # noqa: E402
from tests.training.conftest import MINI_HARNESS  # noqa: E402
from training.base_models import load_model, load_tokenizer, materialize_base, model_cache  # noqa: E402
from training.hat.experiment import COMPACT_HARNESS  # noqa: E402
from training.rl_config import FAULT_KINDS, RlConfig  # noqa: E402
from training.rollout import Episode, HarnessRollout, prompt_key  # noqa: E402


@dataclass
class Timing:
    rollouts: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    model_calls: int = 0
    generations: int = 0
    prefilled: int = 0


# mode → (batched, carry_cache)
MODES = {"sequential": (False, False), "batched": (True, True), "batched, no carry": (True, False),
         "sequential, carry": (False, True)}


def measure(model, tokenizer, episodes: list[Episode], size: int, modes: list[str]) -> dict[str, Timing]:
    """Rollouts of groups of `size` in each mode, round by round in turn (so that load from other work on the
    machine falls on all alike)."""
    defaults = RlConfig()
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m, num_processes=1))
    keyed = {prompt_key(e.prompt()): e for e in episodes}
    timings = {}
    rollouts = {}
    for mode in modes:
        batched, carry = MODES[mode]
        rollouts[mode] = HarnessRollout(keyed, tokenizer, max_new_tokens=defaults.max_new_tokens,
                                        temperature=defaults.temperature,
                                        max_completion_length=defaults.max_completion_length,
                                        deadline_s=defaults.turn_deadline_s, batched=batched, carry_cache=carry)
        rollouts[mode]([episodes[0].prompt()], trainer)  # warm-up, untimed
        timings[mode] = Timing(model_calls=-rollouts[mode].model_calls, generations=-rollouts[mode].batches,
                               prefilled=-rollouts[mode].prefilled_tokens)
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
        timings[mode].prefilled += rollout.prefilled_tokens
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random-smollm2")
    parser.add_argument("--harness", choices=("compact", "mini"), default="compact")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also batched without the carried cache, and sequential with it")
    options = parser.parse_args()
    if options.threads:
        torch.set_num_threads(options.threads)
    tokenizer = load_tokenizer(materialize_base(options.model, model_cache()))
    model = load_model(materialize_base(options.model, model_cache()), use_cpu=True)
    spec = parse_files(read_dir(COMPACT_HARNESS) if options.harness == "compact" else MINI_HARNESS)
    rate = RlConfig().fault_rate / len(FAULT_KINDS)
    cases = generate_cases(5, options.rounds + 1, room=generate_room(5, n_products=3),
                           mix={"product_qa": 0.7, "casual_chat": 0.3})
    episodes = [Episode(case=case, spec=spec, fault_rates={kind: rate for kind in FAULT_KINDS}, seed=index)
                for index, case in enumerate(cases)]
    modes = list(MODES) if options.breakdown else ["sequential", "batched"]
    prompt = len(tokenizer(render_chatml(episodes[0].prompt(), openai_tools(spec)), add_special_tokens=False)["input_ids"])
    print(f"model {options.model}, {options.harness} harness (first prompt ~{prompt} tokens), {options.rounds} "
          f"rounds of one case × group size, CPU threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'group':>5} {'mode':<18} {'episodes/s':>10} {'vs sequential':>13} {'CPU-time ratio':>14} "
          f"{'model calls':>11} {'generations':>11} {'prefilled':>10}")
    ratios = {}
    for size in options.sizes:
        timings = measure(model, tokenizer, episodes, size, modes)
        alone = timings["sequential"]
        for mode, timing in timings.items():
            ratio = (timing.rollouts / timing.wall_s) / (alone.rollouts / alone.wall_s)
            cpu_ratio = (timing.rollouts / timing.cpu_s) / (alone.rollouts / alone.cpu_s)
            if mode == "batched":
                ratios[size] = ratio
            print(f"{size:>5} {mode:<18} {timing.rollouts / timing.wall_s:>10.3f} {ratio:>13.2f} {cpu_ratio:>14.2f} "
                  f"{timing.model_calls:>11} {timing.generations:>11} {timing.prefilled:>10}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    if 4 in ratios:
        print(f"batched/sequential: {ratios[4]:.2f}×")


if __name__ == "__main__":
    main()
