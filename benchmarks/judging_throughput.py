"""Judged turns per second on a CPU: one llama.cpp model with every thread, against several processes judging parts
of the same turns at once with a model and a thread each (how the harness-reading study could spread its judging;
one process's local backend shares one model and one lock, so the spread needs processes).

Both ways judge the same turns of the study's validation split with the offline SmolLM2 GGUF (the base arm, which
retries until it falls back: the slowest arm) or any GGUF given; greedy decoding, so each turn's verdict must be
the same both ways, which the script checks before it prints a speed.

    .venv/bin/python benchmarks/judging_throughput.py [--turns 6] [--workers 2] [--gguf PATH]
        [--condition original] [--decoding constrained]
"""

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def study_items(turns: int, condition: str, decoding: str):
    """The first `turns` (case, harness) pairs of the study's validation split under `condition`."""
    from training.hat.ablation import condition_items
    from training.hat.experiment import ExperimentConfig
    from training.hat.study import StudyConfig, build_study_data

    config = StudyConfig(experiment=ExperimentConfig(model="smollm2"), validation_cases=turns)
    data = build_study_data(config)["validation"]
    return condition_items(data, condition, config.experiment.heldout_seed, turns, decoding)


def judge(gguf: Path, items, threads: int, deadline_s: float) -> list[tuple]:
    from serving.backends.local import LocalBackend
    from training.hat.evaluate import judge_turns

    backend = LocalBackend(gguf, n_ctx=4096, n_threads=threads)
    return [(s.case_id, s.accuracy, s.outcome, s.tools_called)
            for s in judge_turns(backend, items, deadline_s=deadline_s, label="throughput")]


def judge_share(gguf: Path, args: argparse.Namespace, index: int, barrier, results) -> None:
    """One worker process: its share of the turns, judged by its own model with one thread, timed from the moment
    every worker has loaded (the barrier) to its last verdict."""
    items = study_items(args.turns, args.condition, args.decoding)[index::args.workers]
    judge(gguf, items[:1], 1, args.deadline_s)  # load and warm it
    barrier.wait()
    started = time.time()
    scores = judge(gguf, items, 1, args.deadline_s)
    results.put((index, started, time.time(), scores))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2, help="models judging at once, a thread each")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="threads of the single model")
    parser.add_argument("--gguf", default="", help="the model (default: the offline SmolLM2 GGUF, the base arm)")
    parser.add_argument("--condition", default="original")
    parser.add_argument("--decoding", default="constrained", choices=("constrained", "free"))
    parser.add_argument("--deadline-s", type=float, default=600.0)
    args = parser.parse_args(argv)

    from training.base_models import gguf_path

    items = study_items(args.turns, args.condition, args.decoding)
    gguf = Path(args.gguf) if args.gguf else gguf_path()
    judge(gguf, items[:1], args.threads, args.deadline_s)  # load and warm the page cache once

    started = time.perf_counter()
    single = judge(gguf, items, args.threads, args.deadline_s)
    single_s = time.perf_counter() - started

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(args.workers), context.Queue()
    workers = [context.Process(target=judge_share, args=(gguf, args, index, barrier, results))
               for index in range(args.workers)]
    for worker in workers:
        worker.start()
    finished = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    spread_s = max(end for _, _, end, _ in finished) - min(start for _, start, _, _ in finished)
    parts = [scores for *_, scores in finished]

    by_case = {score[0]: score for part in parts for score in part}
    differing = [score[0] for score in single if by_case[score[0]] != score]
    print(f"model {gguf.name}, {len(items)} turns ({args.condition}, {args.decoding}), load {os.getloadavg()[0]:.2f}")
    print(f"one model, {args.threads} threads: {single_s:.1f} s, {len(items) / single_s:.3f} turns/s")
    print(f"{args.workers} processes, 1 thread each: {spread_s:.1f} s, {len(items) / spread_s:.3f} turns/s")
    print(f"spread/single: {single_s / spread_s:.2f}x")
    if differing:
        print(f"verdicts differ on {len(differing)} turns: {', '.join(differing)}")
        return 1
    print("verdicts: the same turn by turn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
