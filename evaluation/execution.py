"""Evaluating one case: run the agent in the simulator's sandbox, then judge the trace. Pure: no Django.

Per suite:
- live_stream_qa: the case as is, against the sandbox world of its room.
- harness_variant: the same case under an HSA-augmented spec (seeded by the case), with the case's
  ground truth rewritten through the augmentation's mapping.
- robustness: the case's injected tool faults (`case.faults`) are forced in the sandbox; the
  robustness rubric scores the trace beside the judge.
- ifeval: the record's prompt goes straight to the model (general instruction following, no
  harness), scored by the official IFEval checkers.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.model_protocol import ModelBackend
from harness.runtime import HttpPolicy, RoomContext, TurnInput, run_turn
from harness.simulator.cases import Case
from harness.spec import HarnessSpec

SUITES = ("live_stream_qa", "harness_variant", "robustness", "ifeval")


@dataclass(frozen=True)
class CaseOutcome:
    """One evaluated case. accuracy/effectiveness are None when the judge abstained (`abstained`)."""

    accuracy: float | None
    effectiveness: float | None
    judge_version: str
    outcome: str
    latency_ms: float
    reply: str
    trace: dict[str, Any]
    scores: dict[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    abstained: bool = False
    judge_models: tuple[str, ...] = ()
    judge_hash: str = ""


ERRORED = "errored"


def errored_outcome(exc: BaseException) -> CaseOutcome:
    """A case whose evaluation raised (a judge bug, a malformed case): recorded as a failed case with the
    error, so one bad case neither fails the whole run nor counts as a success."""
    error = f"{type(exc).__name__}: {exc}"[:2000]  # kept in the trace (and the worker's log) for whoever debugs it
    return CaseOutcome(accuracy=0.0, effectiveness=0.0, judge_version=ERRORED, outcome=ERRORED, latency_ms=0.0,
                       reply="", trace={"error": error}, reasons=(ERRORED_REASON,))


# What the run page says of an errored case: Python's exception text means nothing to an operator.
ERRORED_REASON = ("This case could not be evaluated: an unexpected error stopped it, so it counts as failed "
                  "(the worker's log has the details).")


def case_seed(case_id: str) -> int:
    """A stable per-case seed, so a resumed run re-creates exactly the same augmentation."""
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:4], "big")


async def evaluate_case(*, suite: str, data: Mapping[str, Any], spec: HarnessSpec, backend: ModelBackend,
                        judge: Callable[[Case, dict], Any], http_policy: HttpPolicy | None = None) -> CaseOutcome:
    """`http_policy`: where the spec's HTTP tools may connect (the workspace's host allowlist)."""
    if suite == "ifeval":
        return await _evaluate_ifeval(data, backend)
    from harness.simulator import SandboxTools

    case = Case.from_dict(data)
    scores: dict[str, float] = {}
    if suite == "harness_variant":
        from harness.augmentation import HsaConfig, augment

        augmentation = augment(spec, HsaConfig(), seed=case_seed(case.case_id))
        spec, case = augmentation.spec, augmentation.mapping.rewrite_case(case)
    room = RoomContext.from_dict({**case.room})
    sandbox = SandboxTools(dict(case.room), forced_faults=dict(case.faults) if suite == "robustness" else None,
                           seed=case_seed(case.case_id))
    turn = TurnInput(message=case.message, viewer_id=case.viewer_id, room=room, recent_dialogue=case.dialogue)
    result = await run_turn(spec, turn, backend, sandbox.registry(http_policy=http_policy), arm=f"eval:{suite}")
    verdict = judge(case, result.trace)
    if inspect.isawaitable(verdict):  # model judges (the harness judge) are async
        verdict = await verdict
    if suite == "robustness":
        from evaluation.metrics.robustness import robustness_scores

        scores.update(robustness_scores(case, result.trace, spec, accuracy=verdict.accuracy))
        if verdict.abstained:  # no judge verdict, so nothing that rests on its accuracy either
            scores.pop("correctness_under_fault", None)
            if (case.meta.get("perturbation") or {}).get("kind") == "distractor":
                scores.pop("perturbation_resisted", None)
    if not verdict.abstained:
        scores.update(accuracy=float(verdict.accuracy), effectiveness=float(verdict.effectiveness))
    trace = result.trace
    if verdict.votes:  # each judge's own say, so a diagnosis can see judges disagree or abstain
        trace = {**trace, "judge_votes": [{"judge": j, "accuracy": a} for j, a in verdict.votes]}
    return CaseOutcome(accuracy=None if verdict.abstained else float(verdict.accuracy),
                       effectiveness=None if verdict.abstained else float(verdict.effectiveness),
                       judge_version=verdict.judge, outcome=result.outcome, latency_ms=result.latency_ms,
                       reply=result.reply, trace=trace, scores=scores, reasons=tuple(verdict.reasons),
                       abstained=verdict.abstained, judge_models=tuple(verdict.model_ids),
                       judge_hash=verdict.judge_hash)


async def _evaluate_ifeval(record: Mapping[str, Any], backend: ModelBackend) -> CaseOutcome:
    from evaluation.metrics.ifeval import score_response

    response = await backend.complete([{"role": "user", "content": record["prompt"]}], [], max_tokens=512)
    text = response.content
    scored = score_response(record, text)
    trace = {"schema": "harnessops.ifeval/v1", "prompt": record["prompt"], "response": text,
             "tokens_in": response.tokens_in, "tokens_out": response.tokens_out, "latency_ms": response.latency_ms,
             "ttft_ms": response.ttft_ms, "checks": scored}
    return CaseOutcome(
        accuracy=float(scored["prompt_strict"]), effectiveness=float(scored["instruction_strict"]),
        judge_version="ifeval/official", outcome="replied", latency_ms=response.latency_ms, reply=text, trace=trace,
        scores={k: float(v) for k, v in scored.items() if isinstance(v, (int, float, bool))},  # incl. instruction counts, pooled in the summary
        reasons=tuple(f"{i}: {'ok' if ok else 'failed'}" for i, ok in scored.get("per_instruction", {}).items()),
    )
