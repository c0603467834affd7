"""Data lineage: the guard against training on an eval set, and the record of what a stage trained on.

Cases are compared by their content hash (`training.case_hashing`), not their ids.

`check_disjoint(train, exclusions)` raises `LineageError` naming the eval set and the cases when any
training case is one an eval set (that the job will be judged on) contains. `lineage_record()` is
what every stage result stores: how many cases, their hashes' digest, and the exclusions checked.

Prompts (General OPD's) are also compared by meaning-preserving likeness, since a prompt copied with
a word changed or its spacing redone is still the eval's prompt: `PromptGuard` finds a prompt whose
normalised text (NFKC, case-folded, punctuation and spacing collapsed) equals an eval prompt's, or
whose character 5-shingles have a Jaccard similarity ≥ 0.8 with one. `check_prompts_disjoint(prompts)`
refuses a prompt set that holds any, against the IFEval prompts the project evaluates on
(`ifeval_prompts()`: the shipped mini set, the HAT experiment's extra prompts and its validation and
test splits).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.case_hashing import case_content_hash, case_hashes

ROOT = Path(__file__).resolve().parents[1]
# The IFEval prompts the project evaluates on: the mini set evaluation ships, the HAT experiment's extra, and
# the HAT experiment's validation and test splits (benchmarks/data/hat/make_ifeval_sets.py).
IFEVAL_PROMPT_FILES = (ROOT / "evaluation" / "metrics" / "ifeval" / "data" / "ifeval_mini.jsonl",
                       ROOT / "benchmarks" / "data" / "hat" / "ifeval_extra.jsonl",
                       ROOT / "benchmarks" / "data" / "hat" / "ifeval_validation.jsonl",
                       ROOT / "benchmarks" / "data" / "hat" / "ifeval_test.jsonl")
SHINGLE_CHARS = 5
NEAR_DUPLICATE_JACCARD = 0.8


class LineageError(ValueError):
    """Training data overlaps an eval set the job will be judged on; `field` names the config field, if any."""

    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.field = field


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


# --- prompts: exact and near duplicates ---------------------------------------------------------------

def normalise_prompt(text: str) -> str:
    """Case-folded NFKC text with every run of punctuation and spacing made one space."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[\W_]+", " ", folded).split())


def prompt_shingles(text: str, k: int = SHINGLE_CHARS) -> frozenset[str]:
    """The character k-grams of the normalised text (the whole text when it is shorter)."""
    norm = normalise_prompt(text)
    return frozenset(norm[i:i + k] for i in range(max(1, len(norm) - k + 1)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


@dataclass(frozen=True)
class PromptMatch:
    index: int            # of the prompt in the checked set
    prompt: str
    eval_label: str       # e.g. "ifeval_mini.jsonl:1001"
    eval_prompt: str
    similarity: float     # 1.0 for equal normalised text


class PromptGuard:
    """Finds, for a prompt, an eval prompt it equals after normalisation or nearly duplicates (module docstring)."""

    def __init__(self, eval_prompts: Mapping[str, str], *, threshold: float = NEAR_DUPLICATE_JACCARD):
        self.threshold = threshold
        self.normalise = normalise_prompt
        self.exact = {normalise_prompt(text): label for label, text in eval_prompts.items()}
        self.texts = dict(eval_prompts)
        self.shingles = [(label, prompt_shingles(text)) for label, text in eval_prompts.items()]

    def closest(self, prompt: str) -> tuple[str, float] | None:
        """(eval label, similarity) of the most similar eval prompt at or over the threshold, else None."""
        label = self.exact.get(normalise_prompt(prompt))
        if label is not None:
            return label, 1.0
        mine = prompt_shingles(prompt)
        best: tuple[str, float] | None = None
        for label, theirs in self.shingles:
            smaller, larger = sorted((len(mine), len(theirs)))
            if smaller < self.threshold * larger:  # Jaccard ≤ |smaller| / |larger|: cannot reach it
                continue
            similarity = jaccard(mine, theirs)
            if similarity >= self.threshold and (best is None or similarity > best[1]):
                best = (label, similarity)
        return best

    def matches(self, prompts: Sequence[str]) -> list[PromptMatch]:
        found = []
        for index, prompt in enumerate(prompts):
            hit = self.closest(prompt)
            if hit is not None:
                found.append(PromptMatch(index, prompt, hit[0], self.texts[hit[0]], round(hit[1], 3)))
        return found


def ifeval_prompts(files: Sequence[Path] = IFEVAL_PROMPT_FILES) -> dict[str, str]:
    """"<file>:<key>" → prompt of every IFEval record the project evaluates on (a missing file is an error:
    a guard that silently checked nothing would pass everything)."""
    prompts = {}
    for path in files:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                prompts[f"{Path(path).name}:{record.get('key', number)}"] = str(record["prompt"])
    return prompts


def check_prompts_disjoint(prompts: Sequence[str], eval_prompts: Mapping[str, str] | None = None, *,
                           field: str = "opd.prompts") -> None:
    """Refuse prompts that are IFEval eval prompts or near-duplicates of one (`LineageError` naming `field`)."""
    found = PromptGuard(ifeval_prompts() if eval_prompts is None else eval_prompts).matches(prompts)
    if found:
        shown = "; ".join(f"prompt {m.index + 1} ≈ {m.eval_label} (similarity {m.similarity:.2f})"
                          for m in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        raise LineageError(f"{field}: {len(found)} prompt(s) are IFEval eval prompts or near-duplicates of one: "
                           f"{shown}{more}", field=field)


def planned_case_hashes(config: Any) -> dict[str, str]:
    """Every case and prompt a `PipelineConfig`'s stages will draw on ("sft:<case id>", "rl:<case id>",
    "opd:prompt-NNNNN" → content hash), found without generating or loading anything, so a job can be
    refused before it is queued. The stages check their prepared data again (`data_prep`)."""
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
            prompts = stage.config.prompt_texts()  # the file, or the generated pool (training.prompt_pool)
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
