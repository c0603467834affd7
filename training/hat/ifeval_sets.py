"""The HAT experiment's IFEval splits: validation chooses recipes and checkpoints, test is touched once.

- `validation`: `benchmarks/data/hat/ifeval_validation.jsonl` (new prompts only);
- `test`: the 55 prompts of the earlier figures (the shipped mini set and `ifeval_extra.jsonl`) and
  `benchmarks/data/hat/ifeval_test.jsonl`.

Both new files are written by `benchmarks/data/hat/make_ifeval_sets.py` (no two prompts across the splits
are near-duplicates by `training.lineage.PromptGuard`), and `training.lineage.IFEVAL_PROMPT_FILES` lists them,
so the OPD prompt pool is checked against both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.metrics.ifeval.evaluate import mini_records, read_records

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "hat"
EXTRA = DATA / "ifeval_extra.jsonl"
VALIDATION = DATA / "ifeval_validation.jsonl"
TEST = DATA / "ifeval_test.jsonl"
SPLITS = ("validation", "test")


def ifeval_records(split: str) -> list[dict[str, Any]]:
    """The IFEval records (google/IFEval rows) of `split`, "validation" or "test", in file order."""
    if split == "validation":
        return read_records(VALIDATION)
    if split == "test":
        return [*mini_records(), *read_records(EXTRA), *read_records(TEST)]
    raise ValueError(f"unknown IFEval split {split!r}: expected one of {', '.join(SPLITS)}")
