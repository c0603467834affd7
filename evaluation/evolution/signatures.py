"""Failure signatures: a deterministic, explainable fingerprint of why one evaluated case failed. Pure: no Django.

A signature is read off the per-case record (verdict, judge reasons, trace), never guessed:

- verdict: `inaccurate` (accuracy 0) or `ineffective` (accurate, effectiveness below 1);
- checks: the kinds of judge reason that fired (`facts`, `tools`, `skills`, …), read from the reason text;
- failing tool and error class: the first tool step that errored or was denied (`denied:<hook>`);
- hooks that fired, and those among them that blocked, denied, rewrote or fell back;
- skills loaded, and expected skills that were not;
- the last step of the trace and the tool-call sequence; the turn's outcome.

Exact signatures group first (`group_by_signature`); clustering (clusters.py) works within and across groups.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Judge reason text → the check it reports (reference judge wording first, harness judge free text last).
REASON_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("silence", re.compile(r"^expected (silence|a reply)", re.I)),
    ("facts", re.compile(r"^(missing fact|partially correct)", re.I)),
    ("forbidden", re.compile(r"^forbidden claim", re.I)),
    ("tools", re.compile(r"^(expected tool call not made|none of the expected tools|forbidden tool called)", re.I)),
    ("skills", re.compile(r"^no expected reply skill loaded", re.I)),
    ("answered", re.compile(r"^outcome ", re.I)),
)
BLOCKING_ACTIONS = ("block", "deny", "rewrite", "fallback", "retry_with_feedback")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}|\([^)]*\)")
_NUMBER = re.compile(r"\d+(\.\d+)?")


@dataclass(frozen=True)
class CaseRecord:
    """One evaluated case as the diagnosis reads it (built from an EvalResult row, or a live trace)."""

    case_id: str
    category: str
    accuracy: float
    effectiveness: float
    reasons: tuple[str, ...] = ()
    reply: str = ""
    message: str = ""
    expected_skills: tuple[str, ...] = ()
    trace: Mapping[str, Any] = field(default_factory=dict)
    texts: tuple[str, ...] = ()  # the case's own words (message, dialogue): what an edit must not copy
    judge_votes: tuple[tuple[str, float | None], ...] = ()  # each judge's accuracy in a vote (None: abstained)
    human_accuracy: float | None = None  # the mean of people's accuracy labels of this case, when labelled

    @property
    def failed(self) -> bool:
        return self.accuracy < 1 or self.effectiveness < 1


@dataclass(frozen=True)
class Signature:
    verdict: str
    checks: tuple[str, ...]
    failing_tool: str
    error_class: str
    hooks_fired: tuple[str, ...]
    hooks_blocking: tuple[str, ...]
    skills_loaded: tuple[str, ...]
    skills_missing: tuple[str, ...]
    last_step: str
    tool_sequence: tuple[str, ...]
    outcome: str

    @property
    def key(self) -> str:
        """The exact signature as one readable line (what groups compare on)."""
        parts = [self.verdict, "checks=" + ",".join(self.checks), f"outcome={self.outcome}"]
        if self.failing_tool:
            parts.append(f"tool={self.failing_tool}:{self.error_class}")
        if self.hooks_blocking:
            parts.append("blocked=" + ",".join(self.hooks_blocking))
        if self.skills_missing:
            parts.append("missing_skill=" + ",".join(self.skills_missing))
        parts.append("loaded=" + (",".join(self.skills_loaded) or "-"))
        parts.append(f"last={self.last_step}")
        parts.append("seq=" + (">".join(self.tool_sequence) or "-"))
        return " | ".join(parts)

    @property
    def core(self) -> str:
        """The cause-level part of the signature (no sequence, no last step): used for stable cluster ids."""
        parts = [self.verdict, ",".join(self.checks)]
        if self.failing_tool:
            parts.append(f"{self.failing_tool}:{self.error_class}")
        if self.skills_missing:
            parts.append("missing:" + ",".join(self.skills_missing))
        if self.hooks_blocking:
            parts.append("blocked:" + ",".join(self.hooks_blocking))
        return "|".join(parts)

    def tokens(self) -> list[str]:
        """Signature facts as words, so the text clustering sees them beside the reasons and reply."""
        words = [f"verdict_{self.verdict}", f"outcome_{self.outcome}", f"last_{self.last_step}"]
        words += [f"check_{c}" for c in self.checks]
        if self.failing_tool:
            words += [f"failtool_{self.failing_tool}", f"error_{self.error_class}"]
        words += [f"blocked_{h}" for h in self.hooks_blocking] + [f"fired_{h}" for h in self.hooks_fired]
        words += [f"missing_{s}" for s in self.skills_missing] + [f"loaded_{s}" for s in self.skills_loaded]
        words += [f"called_{t}" for t in self.tool_sequence]
        return [re.sub(r"[^\w]+", "_", w) for w in words]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "core": self.core, "verdict": self.verdict, "checks": list(self.checks),
                "failing_tool": self.failing_tool, "error_class": self.error_class,
                "hooks_fired": list(self.hooks_fired), "hooks_blocking": list(self.hooks_blocking),
                "skills_loaded": list(self.skills_loaded), "skills_missing": list(self.skills_missing),
                "last_step": self.last_step, "tool_sequence": list(self.tool_sequence), "outcome": self.outcome}


def reason_kind(reason: str) -> str:
    """The check a judge reason reports; unknown wording becomes its shape (quotes and numbers removed)."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", reason.strip())  # "[judge-name] " prefix of voted verdicts
    for kind, pattern in REASON_KINDS:
        if pattern.search(text):
            return kind
    shape = _NUMBER.sub("N", _QUOTED.sub("", text)).lower()
    return "other:" + "_".join(re.findall(r"[a-z]+", shape)[:4])


def error_class(error: str) -> str:
    """A tool error reduced to its class: `timeout`, `permission`, `not_found`, `invalid_arguments`, …"""
    text = error.lower()
    for name, words in (("timeout", ("timed out", "timeout", "deadline")), ("permission", ("permission",)),
                        ("not_found", ("no product", "not found", "no order", "unknown", "no such")),
                        ("invalid_arguments", ("invalid", "argument", "must be", "pattern", "schema")),
                        ("malformed_output", ("malformed",)), ("unavailable", ("unavailable", "http 5", "503"))):
        if any(w in text for w in words):
            return name
    return "other"


def _tool_steps(trace: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in trace.get("steps") or () if isinstance(s, Mapping) and s.get("kind") == "tool"]


def _last_step(trace: Mapping[str, Any]) -> str:
    steps = [s for s in trace.get("steps") or () if isinstance(s, Mapping)]
    if not steps:
        return "none"
    last = steps[-1]
    kind = str(last.get("kind", "?"))
    name = last.get("name") or last.get("hook") or ""
    return f"{kind}:{name}" if name else kind


def signature_of(record: CaseRecord) -> Signature:
    """The signature of one failed case (deterministic: the same record always gives the same signature)."""
    trace = record.trace or {}
    steps = _tool_steps(trace)
    failing_tool, error = "", ""
    for step in steps:
        if step.get("denied_by"):
            failing_tool, error = str(step.get("name")), f"denied:{step['denied_by']}"
            break
        if step.get("error"):
            failing_tool, error = str(step.get("name")), error_class(str(step["error"]))
            break
    hook_steps = [s for s in trace.get("steps") or () if isinstance(s, Mapping) and s.get("kind") == "hook"]
    blocking = sorted({str(s.get("hook")) for s in hook_steps if s.get("fired") and s.get("action") in BLOCKING_ACTIONS})
    loaded = tuple(dict.fromkeys(str(s) for s in trace.get("skills_loaded") or ()))
    missing = tuple(s for s in record.expected_skills if s not in loaded) if record.expected_skills and not any(
        s in loaded for s in record.expected_skills) else ()
    checks = tuple(sorted({reason_kind(r) for r in record.reasons}))
    return Signature(
        verdict="inaccurate" if record.accuracy < 1 else "ineffective",
        checks=checks,
        failing_tool=failing_tool,
        error_class=error,
        hooks_fired=tuple(sorted({str(h) for h in trace.get("hooks_fired") or ()})),
        hooks_blocking=tuple(blocking),
        skills_loaded=tuple(sorted(loaded)),
        skills_missing=missing,
        last_step=_last_step(trace),
        tool_sequence=tuple(str(s.get("name")) for s in steps),
        outcome=str(trace.get("outcome") or "?"),
    )


@dataclass(frozen=True)
class SignatureGroup:
    signature: Signature
    case_ids: tuple[str, ...]


def group_by_signature(records: Iterable[CaseRecord]) -> list[SignatureGroup]:
    """Failed cases grouped by exact signature, largest group first (ties by key, so the order is stable)."""
    groups: dict[str, list[str]] = defaultdict(list)
    signatures: dict[str, Signature] = {}
    for record in records:
        if not record.failed:
            continue
        signature = signature_of(record)
        groups[signature.key].append(record.case_id)
        signatures[signature.key] = signature
    return [SignatureGroup(signatures[key], tuple(ids))
            for key, ids in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))]


def failure_text(record: CaseRecord, signature: Signature | None = None) -> str:
    """What the clustering reads for one failure: signature words, judge reasons (shape), reply, tool sequence."""
    signature = signature or signature_of(record)
    reasons = " ".join(_QUOTED.sub(" ", r) for r in record.reasons)
    return " ".join([*signature.tokens(), reasons, record.reply[:300]])


def case_words(texts: Sequence[str]) -> list[str]:
    """Lower-case word tokens, for the copy check (no run of five or more words from an eval case)."""
    return [w for text in texts for w in re.findall(r"[a-z0-9']+", text.lower())]
