"""Scoring responses with the official IFEval checkers (`instructions_registry.INSTRUCTION_DICT`).

Records are google/IFEval JSONL rows: `key` (int), `prompt`, `instruction_id_list`,
`kwargs` (one dict per instruction). `kwargs` values that are None are dropped
before `build_description`, so both the upstream file (only the relevant keys)
and the Hugging Face rows (every key, null where unused) work.

The four metrics, as defined by the paper (Zhou et al. 2023) and computed by the
reference `evaluation_lib.py`:

- prompt-level strict: fraction of prompts whose EVERY instruction is followed
  by the response as is.
- instruction-level strict: fraction of all instructions (pooled over prompts,
  i.e. micro-averaged) followed by the response as is.
- loose: the same, but an instruction counts as followed when ANY of eight
  variants passes: the response, the response with every "*" removed, with its
  first line removed, its last line removed, both removed, and those three with
  "*" removed (lines split on "\\n", variants stripped of surrounding whitespace).
- An empty (whitespace-only) variant never passes, so an empty response fails
  every instruction.

Determinism: `langdetect` is seeded (`DetectorFactory.seed = 0`), which the
reference code does not do; without a seed its answer on very short or mixed
texts can change between runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import langdetect

from evaluation.metrics.ifeval.checkers import INSTRUCTION_DICT

langdetect.DetectorFactory.seed = 0

MINI_DATASET = "ifeval_mini.jsonl"


def loose_variants(response: str) -> list[str]:
    """The eight response variants the loose metric tries (order as in the reference code)."""
    lines = response.split("\n")
    remove_first = "\n".join(lines[1:]).strip()
    remove_last = "\n".join(lines[:-1]).strip()
    remove_both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        remove_first,
        remove_last,
        remove_both,
        remove_first.replace("*", ""),
        remove_last.replace("*", ""),
        remove_both.replace("*", ""),
    ]


def _instruction(record: Mapping[str, Any], index: int):
    instruction_id = record["instruction_id_list"][index]
    try:
        cls = INSTRUCTION_DICT[instruction_id]
    except KeyError:
        raise KeyError(f"record {record.get('key')!r}: unknown IFEval instruction {instruction_id!r}") from None
    instruction = cls(instruction_id)
    kwargs = {k: v for k, v in (record["kwargs"][index] or {}).items() if v is not None}
    instruction.build_description(**kwargs)
    args = instruction.get_instruction_args()
    if args and "prompt" in args:
        instruction.build_description(prompt=record["prompt"])
    return instruction


def _followed(instruction, variants: list[str]) -> bool:
    return any(v.strip() and instruction.check_following(v) for v in variants)


@dataclass(frozen=True)
class IfevalRecordResult:
    key: Any
    instruction_ids: tuple[str, ...]
    strict: tuple[bool, ...]
    loose: tuple[bool, ...]

    @property
    def prompt_strict(self) -> bool:
        return all(self.strict)

    @property
    def prompt_loose(self) -> bool:
        return all(self.loose)


def check_record(record: Mapping[str, Any], response: str) -> IfevalRecordResult:
    """Strict and loose verdicts for each instruction of one record."""
    ids = list(record["instruction_id_list"])
    if len(record["kwargs"]) != len(ids):
        raise ValueError(f"record {record.get('key')!r}: {len(ids)} instructions but "
                         f"{len(record['kwargs'])} kwargs entries")
    response = response or ""
    variants = loose_variants(response)
    strict, loose = [], []
    for index in range(len(ids)):
        # A fresh instance per check, as the reference builds one per (instruction, mode).
        strict.append(_followed(_instruction(record, index), [response]))
        loose.append(_followed(_instruction(record, index), variants))
    return IfevalRecordResult(key=record.get("key"), instruction_ids=tuple(ids), strict=tuple(strict),
                              loose=tuple(loose))


def score_response(record: Mapping[str, Any], response: str) -> dict[str, Any]:
    """One record's scores as plain data (what a per-case result row stores).

    `prompt_strict`/`prompt_loose` are 0/1; `instruction_strict`/`instruction_loose`
    are this prompt's fraction of followed instructions. Aggregate a run with
    `aggregate_scores` (instruction level is pooled over instructions, NOT the mean
    of these per-prompt fractions).
    """
    result = check_record(record, response)
    n = len(result.instruction_ids)
    return {
        "prompt_strict": float(result.prompt_strict),
        "prompt_loose": float(result.prompt_loose),
        "instruction_strict": sum(result.strict) / n if n else 1.0,
        "instruction_loose": sum(result.loose) / n if n else 1.0,
        "instructions": n,
        "followed_strict": sum(result.strict),
        "followed_loose": sum(result.loose),
        "per_instruction": _by_id(result.instruction_ids, result.strict),
        "per_instruction_loose": _by_id(result.instruction_ids, result.loose),
    }


def _by_id(ids: tuple[str, ...], values: tuple[bool, ...]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for instruction_id, value in zip(ids, values, strict=True):
        key, n = instruction_id, 2
        while key in out:  # the same instruction twice in one record (not in google/IFEval)
            key, n = f"{instruction_id}#{n}", n + 1
        out[key] = value
    return out


@dataclass(frozen=True)
class IfevalResult:
    prompt_level_strict: float
    prompt_level_loose: float
    instruction_level_strict: float
    instruction_level_loose: float
    n_prompts: int
    n_instructions: int
    records: tuple[IfevalRecordResult, ...] = ()
    # instruction id -> (strict accuracy, loose accuracy, count)
    by_instruction: Mapping[str, tuple[float, float, int]] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # record keys with no response (on_missing="skip")

    def as_dict(self) -> dict[str, Any]:
        return {"prompt_level_strict": self.prompt_level_strict, "prompt_level_loose": self.prompt_level_loose,
                "instruction_level_strict": self.instruction_level_strict,
                "instruction_level_loose": self.instruction_level_loose, "n_prompts": self.n_prompts,
                "n_instructions": self.n_instructions,
                "by_instruction": {k: list(v) for k, v in self.by_instruction.items()},
                "missing": list(self.missing)}


def _response_for(record: Mapping[str, Any], responses: Mapping[str, str]) -> str | None:
    key = str(record.get("key"))
    if key in responses:
        return responses[key]
    return responses.get(record["prompt"])


def evaluate_ifeval(records: Iterable[Mapping[str, Any]], responses: Mapping[str, str], *,
                    on_missing: str = "raise") -> IfevalResult:
    """Score `responses` (keyed by str(record key), or by prompt text as the reference does).

    `on_missing`: "raise" (KeyError listing the keys without a response), "fail"
    (score an empty response, which fails every instruction) or "skip" (leave the
    record out; its key is listed in `missing`).
    """
    if on_missing not in ("raise", "fail", "skip"):
        raise ValueError(f"on_missing must be raise, fail or skip, not {on_missing!r}")
    records = list(records)
    missing = [str(r.get("key")) for r in records if _response_for(r, responses) is None]
    if missing and on_missing == "raise":
        raise KeyError(f"no response for IFEval record(s): {', '.join(missing[:20])}"
                       + (" …" if len(missing) > 20 else ""))
    results = []
    for record in records:
        response = _response_for(record, responses)
        if response is None and on_missing == "skip":
            continue
        results.append(check_record(record, response or ""))
    return _aggregate(results, tuple(missing) if on_missing == "skip" else ())


def _aggregate(results: list[IfevalRecordResult], missing: tuple[str, ...] = ()) -> IfevalResult:
    n_prompts = len(results)
    strict = [s for r in results for s in r.strict]
    loose = [s for r in results for s in r.loose]
    tally: dict[str, list[int]] = {}
    for r in results:
        for instruction_id, s, lo in zip(r.instruction_ids, r.strict, r.loose, strict=True):
            row = tally.setdefault(instruction_id, [0, 0, 0])
            row[0] += s
            row[1] += lo
            row[2] += 1
    return IfevalResult(
        prompt_level_strict=_ratio(sum(r.prompt_strict for r in results), n_prompts),
        prompt_level_loose=_ratio(sum(r.prompt_loose for r in results), n_prompts),
        instruction_level_strict=_ratio(sum(strict), len(strict)),
        instruction_level_loose=_ratio(sum(loose), len(loose)),
        n_prompts=n_prompts,
        n_instructions=len(strict),
        records=tuple(results),
        by_instruction={k: (v[0] / v[2], v[1] / v[2], v[2]) for k, v in sorted(tally.items())},
        missing=missing,
    )


def _ratio(numerator: float, denominator: int) -> float:
    return numerator / denominator if denominator else float("nan")


def aggregate_scores(scores: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Run-level IFEval metrics from stored `score_response` dicts (instruction level pooled)."""
    scores = list(scores)
    n = len(scores)
    instructions = sum(int(s["instructions"]) for s in scores)
    return {
        "prompt_level_strict": _ratio(sum(float(s["prompt_strict"]) for s in scores), n),
        "prompt_level_loose": _ratio(sum(float(s["prompt_loose"]) for s in scores), n),
        "instruction_level_strict": _ratio(sum(int(s["followed_strict"]) for s in scores), instructions),
        "instruction_level_loose": _ratio(sum(int(s["followed_loose"]) for s in scores), instructions),
        "n_prompts": n,
        "n_instructions": instructions,
    }


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """google/IFEval JSONL rows from a file (blank lines ignored)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def mini_records() -> list[dict[str, Any]]:
    """The shipped mini set (`data/ifeval_mini.jsonl`): our own prompts covering every instruction type."""
    text = resources.files("evaluation.metrics.ifeval").joinpath("data", MINI_DATASET).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
