"""Data lineage: the guard against training on an eval set, and the record of what a stage trained on.

Cases are compared by their content hash (`training.case_hashing`), not their ids.

`check_disjoint(train, exclusions)` raises `LineageError` naming the eval set and the cases when any
training case is one an eval set (that the job will be judged on) contains. `lineage_record()` is
what every stage result stores: how many cases, their hashes' digest, and the exclusions checked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from training.case_hashing import case_content_hash, case_hashes


class LineageError(ValueError):
    """Training data overlaps an eval set the job will be judged on."""


def digest(hashes: Iterable[str]) -> str:
    """One hash for a set of case hashes (order-independent)."""
    return hashlib.sha256("\n".join(sorted(set(hashes))).encode()).hexdigest()


def check_disjoint(train: Mapping[str, str], exclusions: Mapping[str, Iterable[str]]) -> None:
    """Refuse training cases that an eval set contains.

    train: case id → content hash of every training case.
    exclusions: eval-set label (e.g. "lsqa@v2") → content hashes of its cases.
    """
    by_hash: dict[str, list[str]] = {}
    for case_id, content in train.items():
        by_hash.setdefault(content, []).append(case_id)
    problems = []
    for label, hashes in exclusions.items():
        overlap = sorted(case_id for h in set(hashes) for case_id in by_hash.get(h, ()))
        if overlap:
            shown = ", ".join(overlap[:5]) + (f" and {len(overlap) - 5} more" if len(overlap) > 5 else "")
            problems.append(f"{len(overlap)} training case(s) are in eval set {label}: {shown}")
    if problems:
        raise LineageError("training data overlaps the eval sets it will be judged on; " + "; ".join(problems))


def planned_case_hashes(config: Any) -> dict[str, str]:
    """Every case and prompt a `PipelineConfig`'s stages will draw on ("sft:<case id>", "rl:<case id>",
    "opd:prompt-NNNNN" → content hash), found without generating or loading anything, so a job can be
    refused before it is queued. The stages check their prepared data again (`data_prep`)."""
    from pathlib import Path

    from training.trajectories import jsonl_cases, simulator_cases

    data = config.data
    planned: dict[str, str] = {}

    def add(prefix: str, hashes: Mapping[str, str]) -> None:
        planned.update({f"{prefix}:{key}": value for key, value in hashes.items()})

    if any(stage.kind == "sft" for stage in config.stages):
        if data.simulator_cases:
            add("sft", case_hashes(simulator_cases(data.simulator_seed, data.simulator_cases,
                                                   n_rooms=data.simulator_rooms)))
        for path in data.cases_jsonl:
            add("sft", case_hashes(jsonl_cases(path)))
    for stage in config.stages:
        if stage.kind == "rl":
            add("rl", case_hashes(simulator_cases(f"{data.simulator_seed}/rl", stage.config.cases,
                                                  n_rooms=data.simulator_rooms)))
        elif stage.kind == "opd":
            source = Path(stage.config.prompts or Path(__file__).resolve().parent / "data" / "general_instructions.jsonl")
            lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
            prompts = [json.loads(line).get("prompt") for line in lines]
            if stage.config.max_prompts:
                prompts = prompts[:stage.config.max_prompts]
            add("opd", {f"prompt-{i:05d}": case_content_hash({"prompt": text}) for i, text in enumerate(prompts)})
    return planned


def lineage_record(train: Mapping[str, str], exclusions: Mapping[str, Iterable[str]], *,
                   sources: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stage trained on, stored with its result (JSON-ready)."""
    return {
        "cases": len(train),
        "cases_digest": digest(train.values()),
        "sources": sources,
        "excluded_eval_sets": {label: {"cases": len(set(h)), "digest": digest(h)}
                               for label, h in ((k, list(v)) for k, v in exclusions.items())},
        "checked_disjoint": True,
    }
