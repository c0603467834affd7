"""The model-run proposer: a HarnessSpec run by the runtime, like the harness judge.

`proposer_harness/` holds it: a skill for reading failures, a skill for writing the edit, three read
tools bound to the diagnosis at hand (`fetch_case`, `fetch_cluster_cases`, `fetch_component`), and reply
hooks that only let a well-formed answer through (HYPOTHESIS / RATIONALE / EVIDENCE lines and one
```diff block; otherwise the model is asked again, then the turn falls back and no proposal is made).
Operators can version and evaluate the proposer like any harness. Its proposals name the proposer
spec's hash and the model (`proposer:<hash8>/<model>`); validation.py checks them like every other.
Pure: no Django.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from evaluation.evolution.clusters import FailureCluster
from evaluation.evolution.proposals import Proposal
from evaluation.evolution.signatures import CaseRecord
from harness.model_protocol import ModelBackend
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.runtime.tools import ToolError, ToolRegistry, declare_run_supplied
from harness.spec import HarnessSpec, parse_files, read_dir, to_files

PROPOSER_HARNESS = Path(__file__).resolve().parent / "proposer_harness"
# A workspace's harness of this name is the proposer its diagnoses run (see `diagnosing._proposer_spec`), so
# operators version it like any harness; without one, the shipped `proposer_harness/` runs.
PROPOSER_NAME = "evolution-proposer"
# The read tools close over one diagnosis, so each run passes them as overrides instead of registering them;
# declared for the proposer harness only, it validates in the store and no other harness can bind them.
READ_TOOLS = ("evolution.fetch_case", "evolution.fetch_cluster_cases", "evolution.fetch_component")
declare_run_supplied(PROPOSER_NAME, "sandbox", *READ_TOOLS)
_FIELD = re.compile(r"^(HYPOTHESIS|RATIONALE|EVIDENCE):\s*(.*)$", re.M)
_DIFF = re.compile(r"```diff\n(.*?)(?:```|\Z)", re.S)


@lru_cache(maxsize=1)
def proposer_spec() -> HarnessSpec:
    return parse_files(read_dir(PROPOSER_HARNESS))


def case_summary(record: CaseRecord, *, full: bool = False) -> dict[str, Any]:
    """What the proposer reads of one case: message, reply, verdict and (in full) the trace's steps."""
    trace = record.trace or {}
    out: dict[str, Any] = {"case_id": record.case_id, "category": record.category, "message": record.message,
                           "reply": record.reply, "accuracy": record.accuracy,
                           "effectiveness": record.effectiveness, "reasons": list(record.reasons),
                           "skills_loaded": list(trace.get("skills_loaded") or ()),
                           "tools_called": list(trace.get("tools_called") or ()),
                           "hooks_fired": list(trace.get("hooks_fired") or ()), "outcome": trace.get("outcome")}
    if full:
        out["steps"] = [{k: s.get(k) for k in ("kind", "name", "arguments", "error", "denied_by", "hook", "action",
                                                "message") if s.get(k) not in (None, "")}
                        for s in trace.get("steps") or () if isinstance(s, Mapping) and s.get("kind") != "model"]
    return out


def parse_answer(text: str) -> tuple[dict[str, str], str]:
    """(HYPOTHESIS/RATIONALE/EVIDENCE fields, diff text) of the proposer's reply."""
    fields = {name.lower(): value.strip() for name, value in _FIELD.findall(text or "")}
    match = _DIFF.search(text or "")
    diff = match.group(1) if match else ""
    return fields, diff if not diff or diff.endswith("\n") else diff + "\n"


class HarnessProposer:
    """`await proposer(cluster, records, spec) -> Proposal | None`: one run of the proposer harness."""

    def __init__(self, backend: Callable[[], ModelBackend], spec: HarnessSpec | None = None,
                 rejections: Sequence[str] = (), rejections_by_core: Mapping[str, Sequence[str]] | None = None):
        self.make_backend = backend
        self.spec = spec or proposer_spec()
        self.rejections = [r for r in rejections if r][-5:]  # operators' reasons for earlier rejected edits
        # ... and those given for clusters of the same signature core, which steer this cluster's edit
        self.rejections_by_core = {core: [r for r in reasons if r][-5:]
                                   for core, reasons in (rejections_by_core or {}).items()}
        self.runs: list[dict[str, Any]] = []  # one entry per call: what the turn did, shown with the diagnosis

    def tools(self, cluster: FailureCluster, records: Mapping[str, CaseRecord], target: HarnessSpec) -> ToolRegistry:
        files = to_files(target)

        async def fetch_case(args, ctx):
            record = records.get(str(args.get("case_id", "")))
            if record is None:
                raise ToolError(f"no case “{args.get('case_id')}” in this diagnosis")
            return case_summary(record, full=True)

        async def fetch_cluster_cases(args, ctx):
            return {"cluster": cluster.cluster_id, "signature": cluster.signature.key,
                    "cases": [case_summary(records[i]) for i in cluster.case_ids[:12] if i in records],
                    "passing": [case_summary(records[i]) for i in cluster.passing_cases if i in records]}

        async def fetch_component(args, ctx):
            path = str(args.get("path", ""))
            if path not in files:
                raise ToolError(f"no file “{path}”; files: {', '.join(sorted(files))}")
            return "\n".join(f"{n:>4}| {line}" for n, line in enumerate(files[path].split("\n"), 1))

        return ToolRegistry(overrides=dict(zip(READ_TOOLS, (fetch_case, fetch_cluster_cases, fetch_component),
                                               strict=True)))

    def message(self, cluster: FailureCluster, target: HarnessSpec) -> str:
        component = cluster.component
        lines = [f"Cluster {cluster.cluster_id}: {cluster.title}", f"Signature: {cluster.signature.key}",
                 f"Cases: {len(cluster.case_ids)} ({cluster.share:.0%} of failures); nearest the centre "
                 f"{cluster.centre_case}, boundary {cluster.boundary_case}; passing for contrast: "
                 f"{', '.join(cluster.passing_cases) or 'none'}",
                 f"Top terms: {', '.join(cluster.terms)}"]
        if component:
            lines.append(f"It points at the {component.kind} {component.name} ({component.path}) of version "
                         f"{target.content_hash[:12]}.")
        similar = self.rejections_by_core.get(cluster.core, [])
        if similar:
            lines.append("Operators rejected earlier edits for failures with this same signature because: "
                         + " | ".join(similar) + ". Propose a different edit that meets their objection.")
        elif self.rejections:
            lines.append("Operators rejected earlier edits of this harness because: "
                         + " | ".join(self.rejections) + ". Do not propose those edits again.")
        lines.append("Find the root cause and propose one minimal edit.")
        return "\n".join(lines)

    async def __call__(self, cluster: FailureCluster, records: Mapping[str, CaseRecord],
                       target: HarnessSpec, variant: int = 0) -> Proposal | None:
        backend = self.make_backend()
        model = getattr(backend, "name", "?")
        message = self.message(cluster, target)
        if variant:  # another answer for the same cluster: the variants are tried and the best is kept
            message += f"\nThis is variant {variant + 1}: propose a different edit from your first one."
        turn = TurnInput(message=message, viewer_id="evolution",
                         room=RoomContext(room_id="evolution"))
        try:
            result = await run_turn(self.spec, turn, backend, self.tools(cluster, records, target), arm="proposer")
        finally:
            close = getattr(backend, "aclose", None)
            if close is not None:
                await close()
        steps = result.trace.get("steps", ())
        self.runs.append({"cluster": cluster.cluster_id, "variant": variant, "model": model, "outcome": result.outcome,
                          "reason": str(result.trace.get("reason") or "")[:300],
                          "model_calls": sum(1 for s in steps if s.get("kind") == "model"),
                          "sent_back": sum(1 for s in steps if s.get("kind") == "retry")})
        if result.outcome != "replied":
            return None  # the hooks refused every answer: no proposal rather than a malformed one
        models = [s for s in steps if s.get("kind") == "model"]
        finish = str(models[-1].get("finish_reason") or "stop") if models else "stop"
        fields, diff = parse_answer(result.reply)
        paths = re.findall(r"^\+\+\+ b/(\S+)", diff, re.M)
        evidence = tuple(e.strip() for e in fields.get("evidence", "").split(",") if e.strip() in records)
        return Proposal(cluster_id=cluster.cluster_id, generator=f"proposer:{self.spec.content_hash[:8]}/{model}",
                        hypothesis=fields.get("hypothesis", ""), rationale=fields.get("rationale", ""), diff=diff,
                        base_hash=target.content_hash, evidence=evidence or cluster.case_ids[:3],
                        target=paths[0] if paths else "", finish_reason=finish)


def scripted_answer(hypothesis: str, rationale: str, evidence: list[str], diff: str) -> str:
    """A well-formed proposer answer (what a scripted model step returns in tests)."""
    return f"HYPOTHESIS: {hypothesis}\nRATIONALE: {rationale}\nEVIDENCE: {', '.join(evidence)}\n```diff\n{diff}```"
