"""HSA-SFT data: teacher trajectories through the real runtime, judged, with the retry policy applied.

For every case and every harness given, the teacher (`teachers.py`) answers under the original
harness (`include_original`) and under `augmented_variants` HSA variants (seeded per case and
variant, `harness.augmentation.augment`), or with `single_state` under one of those states drawn per
case, with the case's ground truth rewritten into the variant's names. Each turn runs through
`harness.runtime.run_turn` in the simulator's sandbox, exactly as an eval run does; the reference judge
grades the trace and only Accuracy 1 with Effectiveness at or above `min_effectiveness` is kept.

A kept trajectory is what the teacher saw and said: the messages of its last model call (system
prompt, viewer message, tool calls and results, loaded skills, hook feedback) plus the final reply
as the hooks accepted it, and the tool schemas it was offered.

Retry policy (HAT report): a trajectory whose reply a hook sent back (`[harness feedback]`) keeps
only the final correct behaviour (the rejected reply and the feedback are cut) unless it falls in
the `keep_full_retry_share` (a stable per-case draw), which keeps the full retry so the model also
learns to recover; there the rejected reply is marked `weight: 0` (context: the chat template gives
it no labels), so the model learns to read the feedback and fix the reply, not to make the slip.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evaluation.judges.reference import judge_reference
from harness.augmentation import HsaConfig, augment
from harness.model_protocol import ModelBackend, ModelResponse
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.simulator import SandboxTools, generate_cases
from harness.simulator.cases import Case
from harness.spec import HarnessSpec
from serving.backends.openai import close_shared_clients
from training.case_hashing import case_hashes
from training.teachers import FEEDBACK_PREFIX, TeacherRefused, check_teacher, teacher_for
from training.validation import ConfigError, build, knob, require

# Prompts carry the date; a fixed one keeps trajectories (and their hashes) reproducible.
TRAINING_NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class TrajectoryConfig:
    teacher: str = knob("oracle", "Teacher name: 'oracle' (ground truth, offline: CPU machines and tests) or a "
                                  "registered model backend, e.g. 'openai' (any OpenAI-compatible server, such as "
                                  "vLLM serving a larger model on a GPU node).")
    teacher_config: dict[str, Any] = knob({}, "Passed to the teacher: oracle {mistake_rate (default 0.15), mistakes, "
                                              "skill_first, name_fields}; a backend's factory arguments (openai: "
                                              "base_url, model, api_key, timeout_s, …). An openai teacher's "
                                              "GET {base_url}/models must answer when the job is validated.")
    include_original: bool = knob(True, "Also run every case under the unaugmented harness.")
    augmented_variants: int = knob(1, "HSA variants per case and harness (0..8).")
    single_state: bool = knob(False, "Run each case under one of those harness states only (the original or one "
                                     "variant, drawn per case from the seed): as many distinct cases as rows.")
    hsa: dict[str, Any] = knob({}, "HsaConfig overrides for the variants (harness/augmentation/config.py).")
    min_effectiveness: float = knob(1.0, "Keep trajectories with Accuracy 1 and Effectiveness ≥ this (0, 0.5, 1).")
    keep_full_retry_share: float = knob(0.2, "Share of retried trajectories kept with the rejected reply and "
                                             "the hook's feedback; the rest keep only the final behaviour.")
    seed: int = knob(0, "Seed for HSA variants and the retry-policy draws.")
    concurrency: int = knob(4, "Cases in flight at once (model-backend teachers).")
    deadline_s: float = knob(60.0, "Per-turn deadline for the teacher (a remote teacher is slower than serving).")

    def check(self) -> None:
        require(self.teacher.strip() != "", "teacher", "must name a teacher")
        try:
            check_teacher(self.teacher, self.teacher_config)
        except TeacherRefused as error:
            raise ConfigError(f"teacher_config.{error.option}" if error.option else "teacher", str(error)) from None
        require(0 <= self.augmented_variants <= 8, "augmented_variants", "must be within 0..8")
        require(self.include_original or self.augmented_variants > 0, "augmented_variants",
                "at least one harness per case: include_original or augmented_variants > 0")
        require(self.min_effectiveness in (0.0, 0.5, 1.0), "min_effectiveness", "must be 0, 0.5 or 1")
        require(0.0 <= self.keep_full_retry_share <= 1.0, "keep_full_retry_share", "must be within 0..1")
        require(1 <= self.concurrency <= 64, "concurrency", "must be within 1..64")
        require(self.deadline_s > 0, "deadline_s", "must be positive")
        try:
            HsaConfig(**self.hsa)
        except (TypeError, ValueError) as error:
            raise ConfigError("hsa", str(error)) from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "trajectories") -> TrajectoryConfig:
        return build(cls, data, where)


@dataclass(frozen=True)
class Trajectory:
    case_id: str
    case_hash: str
    variant: str            # "original" or "hsa:<seed>"
    harness_hash: str       # the (augmented) spec the teacher ran under
    messages: list[dict[str, Any]] = field(compare=False)
    tools: list[dict[str, Any]] = field(compare=False)
    effectiveness: float = 1.0
    retried: bool = False
    full_retry: bool = False

    def to_row(self) -> dict[str, Any]:
        """TRL's conversational format with tools, plus provenance."""
        return {"messages": self.messages, "tools": self.tools,
                "meta": {"case_id": self.case_id, "case_hash": self.case_hash, "variant": self.variant,
                         "harness_hash": self.harness_hash, "retried": self.retried, "full_retry": self.full_retry}}


@dataclass
class TrajectoryReport:
    """What generation produced and what the judge and the retry policy made of it. `turns` counts every
    trajectory generated; each is kept, rejected or not called. A rejected turn counts once under each
    reason the judge gave (`reasons`, by kind: "missing fact", "expected tool call not made", …).
    `mistakes` counts the oracle's deliberate slips by kind (empty for a model teacher)."""

    turns: int = 0
    kept: int = 0
    rejected: int = 0          # judged below the bar
    not_called: int = 0        # an input hook answered without the model (nothing to learn)
    retried: int = 0           # kept trajectories whose reply a hook sent back
    full_retry_kept: int = 0   # of those, kept whole (the rest keep only the final behaviour)
    reasons: dict[str, int] = field(default_factory=dict)  # judge reasons of rejected turns, counted
    mistakes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        by_reason = dict(sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return {"turns": self.turns, "generated": self.turns, "kept": self.kept, "rejected": self.rejected,
                "not_called": self.not_called, "retried": self.retried, "full_retry_kept": self.full_retry_kept,
                "retries_cut": self.retried - self.full_retry_kept, "rejected_by_reason": by_reason,
                "top_rejection_reasons": dict(list(by_reason.items())[:8]),
                "teacher_mistakes": dict(sorted(self.mistakes.items()))}

    def nothing_kept(self) -> str:
        """Why no turn was kept, in words (a job's page shows it; a dict printed whole is not for people)."""
        text = (f"0 of {self.turns} turns kept ({self.rejected} rejected by the judge, "
                f"{self.not_called} answered by an input hook without the model)")
        reasons = sorted(self.reasons.items(), key=lambda item: (-item[1], item[0]))[:3]
        if reasons:
            text += "; most often: " + ", ".join(f"“{reason}” ({count})" for reason, count in reasons)
        return text + "."


# --- case sources ----------------------------------------------------------------------------------

def simulator_cases(seed: int | str, n: int, *, n_rooms: int = 1) -> list[Case]:
    return generate_cases(seed, n, n_rooms=n_rooms)


def jsonl_cases(path: str | Path) -> list[Case]:
    """Cases from a JSONL file of `Case.to_dict()` lines; a bad line names its number."""
    cases = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            cases.append(Case.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a case ({error})") from None
    return cases


# --- generation --------------------------------------------------------------------------------------

class _Recording:
    """Wraps a teacher and remembers the last call (the loop only appends, so it holds the whole turn)."""

    def __init__(self, inner: ModelBackend):
        self.inner = inner
        self.name = getattr(inner, "name", "teacher")
        self.last_messages: list[dict[str, Any]] | None = None
        self.last_tools: list[dict[str, Any]] = []

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kwargs: Any
                       ) -> ModelResponse:
        self.last_messages = copy.deepcopy(messages)
        self.last_tools = copy.deepcopy(tools)
        return await self.inner.complete(messages, tools, **kwargs)


def variant_seed(case_id: str, index: int, seed: int) -> int:
    digest = hashlib.sha256(f"{seed}:{case_id}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _draw(key: str) -> float:
    return random.Random(hashlib.sha256(key.encode()).hexdigest()).random()


def strip_retries(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cut every rejected reply together with the hook feedback that answered it."""
    out: list[dict[str, Any]] = []
    for message in messages:
        is_feedback = message.get("role") == "user" and str(message.get("content", "")).startswith(FEEDBACK_PREFIX)
        if is_feedback and out and out[-1].get("role") == "assistant" and not out[-1].get("tool_calls"):
            out.pop()
            continue
        out.append(message)
    return out


def mark_rejected(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A full retry kept as is, except that each rejected reply gets `weight: 0` (context, not a label)."""
    out = [dict(m) for m in messages]
    for index, message in enumerate(out[1:], 1):
        is_feedback = message.get("role") == "user" and str(message.get("content", "")).startswith(FEEDBACK_PREFIX)
        previous = out[index - 1]
        if is_feedback and previous.get("role") == "assistant" and not previous.get("tool_calls"):
            previous["weight"] = 0
    return out


def reason_kind(reason: str) -> str:
    """A judge reason without its particulars: "missing fact: “88”" → "missing fact", "no expected reply skill
    loaded (expected one of a; loaded b)" → "no expected reply skill loaded"."""
    return reason.split(":")[0].split(" (")[0].strip()


def _has_retry(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(m.get("role") == "user" and str(m.get("content", "")).startswith(FEEDBACK_PREFIX) for m in messages)


async def _one(case: Case, spec: HarnessSpec, variant: str, config: TrajectoryConfig, report: TrajectoryReport,
               case_hash: str) -> Trajectory | None:
    teacher = _Recording(teacher_for(config.teacher, case, config.teacher_config))
    sandbox = SandboxTools(dict(case.room), forced_faults=dict(case.faults) or None,
                           seed=variant_seed(case.case_id, 0, config.seed))
    turn = TurnInput(message=case.message, viewer_id=case.viewer_id, room=RoomContext.from_dict(dict(case.room)),
                     recent_dialogue=case.dialogue)
    result = await run_turn(spec, turn, teacher, sandbox.registry(), arm=f"train:{variant}", now=TRAINING_NOW,
                            deadline_s=config.deadline_s)
    report.turns += 1
    mistake = getattr(teacher.inner, "mistake", "")
    if mistake:
        report.mistakes[mistake] = report.mistakes.get(mistake, 0) + 1
    if teacher.last_messages is None:
        report.not_called += 1
        return None
    verdict = judge_reference(case, result.trace)
    if verdict.accuracy != 1 or verdict.effectiveness < config.min_effectiveness or result.outcome != "replied":
        report.rejected += 1
        kinds = {reason_kind(reason) for reason in verdict.reasons or (f"outcome {result.outcome}",)}
        for kind in kinds:
            report.reasons[kind] = report.reasons.get(kind, 0) + 1
        return None
    messages = [*teacher.last_messages, {"role": "assistant", "content": result.reply}]
    retried = _has_retry(messages)
    full = retried and _draw(f"{config.seed}:full-retry:{case.case_id}:{variant}") < config.keep_full_retry_share
    if retried:
        report.retried += 1
        if full:
            report.full_retry_kept += 1
            messages = mark_rejected(messages)
        else:
            messages = strip_retries(messages)
    report.kept += 1
    return Trajectory(case_id=case.case_id, case_hash=case_hash, variant=variant, harness_hash=spec.content_hash,
                      messages=messages, tools=teacher.last_tools, effectiveness=verdict.effectiveness,
                      retried=retried, full_retry=full)


def harness_variants(spec: HarnessSpec, case: Case, config: TrajectoryConfig
                     ) -> list[tuple[str, HarnessSpec, Case]]:
    """(variant label, spec, case in that spec's names) for one case: the original and HSA variants."""
    states: list[int | None] = [None] if config.include_original else []  # None: the original
    states += range(config.augmented_variants)
    if config.single_state and len(states) > 1:
        states = [states[random.Random(f"state:{config.seed}:{case.case_id}").randrange(len(states))]]
    variants = []
    hsa = HsaConfig(**config.hsa)
    for index in states:
        if index is None:
            variants.append(("original", spec, case))
            continue
        seed = variant_seed(case.case_id, index + 1, config.seed)
        augmentation = augment(spec, hsa, seed=seed)
        variants.append((f"hsa:{seed}", augmentation.spec, augmentation.mapping.rewrite_case(case)))
    return variants


def generate_trajectories(cases: Sequence[Case], specs: Sequence[HarnessSpec], config: TrajectoryConfig
                          ) -> tuple[list[Trajectory], TrajectoryReport]:
    """Kept trajectories (in case, harness, variant order) and the report of what was dropped and why."""
    report = TrajectoryReport()
    hashes = case_hashes(cases)
    jobs = [(variant, variant_spec, variant_case, hashes[case.case_id])
            for case in cases for spec in specs for variant, variant_spec, variant_case in
            harness_variants(spec, case, config)]

    async def run_all() -> list[Trajectory | None]:
        gate = asyncio.Semaphore(config.concurrency)

        async def guarded(job: tuple[str, HarnessSpec, Case, str]) -> Trajectory | None:
            variant, variant_spec, variant_case, case_hash = job
            async with gate:
                return await _one(variant_case, variant_spec, variant, config, report, case_hash)

        try:
            return await asyncio.gather(*(guarded(job) for job in jobs))
        finally:
            await close_shared_clients()  # a model teacher's HTTP sessions belong to this event loop

    kept = [t for t in asyncio.run(run_all()) if t is not None]
    return kept, report
