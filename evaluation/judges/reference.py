"""The deterministic reference judge: a simulator case's ground truth against a `harnessops.trace/v1` trace.

`judge_reference(case, trace) -> Verdict` (judge name "reference/v1"). It needs no
model: every check is computed from `case.expected` and the trace.

Checks (`Verdict.checks`; every key is always present):

- `silence`   — `case.expected.silent == trace["silent"]`.
- `facts`     — every expected fact appears in the reply (`evaluation.judges.text`:
  case-insensitive, whitespace-insensitive, numbers compared numerically so
  "71.20" == "71.2" and "$71.2" matches "71.2", punctuation ignored, token
  boundaries respected). Vacuously true when the case lists no facts.
- `forbidden` — none of `case.expected.forbidden` appears in the reply (same matching).
- `tools`     — each expected call is matched by a DISTINCT tool step of the trace
  (`kind == "tool"`) with the same name whose `arguments` (a JSON string) parse to
  an object containing the expected arguments as a subset: nested objects
  recursively, lists element-wise, numbers numerically (30 == 30.0; booleans
  only equal booleans), strings after trimming and case-folding. A step counts
  even if the tool then failed or was denied: the judge grades the agent's
  choice, and injected faults are the robustness rubric's business. Two
  simulator conventions in `case.meta` (harness/simulator/viewers.py) also count:
  `any_of_tools` (at least one step must call one of these tools) and
  `forbidden_tools` (write tools a good turn must not call; an attempted call,
  even a denied one, fails the check). Vacuously true when none of these apply.
- `skills`    — at least one of `case.expected.skills` is in `trace["skills_loaded"]`;
  vacuously true when the case names none.
- `answered`  — the turn ended the way a good turn ends: outcome `replied` when a
  reply is expected, `silent` (an input/reply hook's block included) when silence
  is expected. `fallback`, `deadline` and `error` are harness safety nets, never
  answers: a fallback line that happens to contain a fact, or a deadline that
  happened to leave the turn silent, is still a failed turn.

Rubric:

- Accuracy = 1 iff `answered` and `silence` and, when a reply is expected, `facts`
  and `forbidden`. (When silence is expected and the turn was silent there is no
  reply to check.)
- Effectiveness:
  - 0   — whenever `answered` fails (a safety net earns no partial credit);
  - 1   — accurate, and `skills` and `tools` hold;
  - 0.5 — accurate but `skills` or `tools` failed (the right answer reached the
    wrong way), OR partially correct: `silence` and `forbidden` hold and at least
    one but not all of the expected facts are present;
  - 0   — otherwise (wrong silence, a forbidden claim, or no expected fact at all).

`reasons` lists, in plain words, every check that failed (and partial credit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.judges.text import contains, tokens
from evaluation.judges.verdict import Verdict
from harness.simulator.cases import Case, ExpectedCall

JUDGE_NAME = "reference/v1"
CHECKS = ("silence", "facts", "forbidden", "tools", "skills", "answered")


def tool_steps(trace: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The trace's tool steps in order."""
    return [s for s in trace.get("steps") or () if isinstance(s, Mapping) and s.get("kind") == "tool"]


def parse_arguments(raw: Any) -> dict[str, Any] | None:
    """A tool step's `arguments` (JSON string, or already a dict) as a dict; None when not a JSON object."""
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def argument_matches(expected: Any, actual: Any) -> bool:
    """`expected` is a subset of `actual` (rules in the module docstring)."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and argument_matches(value, actual[key]) for key, value in expected.items())
    if isinstance(expected, Sequence) and not isinstance(expected, str):
        return (isinstance(actual, Sequence) and not isinstance(actual, str) and len(expected) == len(actual)
                and all(argument_matches(e, a) for e, a in zip(expected, actual, strict=True)))
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if _number(expected):
        return _number(actual) and float(expected) == float(actual)
    if isinstance(expected, str):
        return isinstance(actual, str) and expected.strip().casefold() == actual.strip().casefold()
    return expected == actual


def match_calls(expected: Sequence[ExpectedCall], steps: Sequence[Mapping[str, Any]]
                ) -> tuple[list[ExpectedCall], list[ExpectedCall]]:
    """(matched, missing) expected calls; each tool step satisfies at most one expected call.

    The most specific expectations (most arguments) pick first, so a bare
    `search_faq` expectation cannot take the step a specific one needs.
    """
    parsed = [(s.get("name"), parse_arguments(s.get("arguments"))) for s in steps]
    used: set[int] = set()
    matched, missing = [], []
    for call in sorted(expected, key=lambda c: -len(c.arguments)):
        hit = next((i for i, (name, args) in enumerate(parsed)
                    if i not in used and name == call.name and args is not None
                    and argument_matches(dict(call.arguments), args)), None)
        if hit is None:
            missing.append(call)
        else:
            used.add(hit)
            matched.append(call)
    return matched, missing


def _describe(call: ExpectedCall) -> str:
    return f"{call.name}({json.dumps(dict(call.arguments), sort_keys=True, ensure_ascii=False)})"


def judge_reference(case: Case, trace: Mapping[str, Any]) -> Verdict:
    """Grade one trace against the case's ground truth (rubric in the module docstring)."""
    expected = case.expected
    silent = bool(trace.get("silent", False))
    reply = "" if silent else str(trace.get("reply") or "")
    outcome = str(trace.get("outcome") or "")
    reply_tokens = tokens(reply)
    reasons: list[str] = []

    silence_ok = silent == expected.silent
    if not silence_ok:
        reasons.append("expected silence, but the turn replied" if expected.silent
                       else "expected a reply, but the turn was silent")

    present = [f for f in expected.facts if contains(reply_tokens, f)]
    missing_facts = [f for f in expected.facts if f not in present]
    facts_ok = not missing_facts
    if not expected.silent:
        reasons.extend(f"missing fact: “{f}”" for f in missing_facts)

    claimed = [f for f in expected.forbidden if contains(reply_tokens, f)]
    forbidden_ok = not claimed
    reasons.extend(f"forbidden claim present: “{f}”" for f in claimed)

    steps = tool_steps(trace)
    called = [str(s.get("name")) for s in steps]
    _, missing_calls = match_calls(expected.tools, steps)
    reasons.extend(f"expected tool call not made: {_describe(c)}" for c in missing_calls)
    any_of = [str(t) for t in case.meta.get("any_of_tools") or ()]
    any_of_ok = not any_of or any(name in any_of for name in called)
    if not any_of_ok:
        reasons.append(f"none of the expected tools called (any of {', '.join(any_of)})")
    banned = [str(t) for t in case.meta.get("forbidden_tools") or ()]
    misused = list(dict.fromkeys(name for name in called if name in banned))
    reasons.extend(f"forbidden tool called: {name}" for name in misused)
    tools_ok = not missing_calls and any_of_ok and not misused

    loaded = [str(s) for s in trace.get("skills_loaded") or ()]
    skills_ok = not expected.skills or any(s in loaded for s in expected.skills)
    if not skills_ok:
        reasons.append(f"no expected reply skill loaded (expected one of {', '.join(expected.skills)}; "
                       f"loaded {', '.join(loaded) or 'none'})")

    answered = outcome == ("silent" if expected.silent else "replied")
    if not answered:
        reasons.append(f"outcome “{outcome or '(none)'}” is not a real "
                       f"{'silence' if expected.silent else 'answer'}")

    accurate = answered and silence_ok and (expected.silent or (facts_ok and forbidden_ok))
    if not answered:
        effectiveness = 0.0
    elif accurate:
        effectiveness = 1.0 if (skills_ok and tools_ok) else 0.5
    elif silence_ok and forbidden_ok and present and missing_facts:
        effectiveness = 0.5
        reasons.append(f"partially correct: {len(present)} of {len(expected.facts)} facts")
    else:
        effectiveness = 0.0

    checks = {"silence": silence_ok, "facts": facts_ok, "forbidden": forbidden_ok, "tools": tools_ok,
              "skills": skills_ok, "answered": answered}
    return Verdict(accuracy=int(accurate), effectiveness=effectiveness, reasons=tuple(reasons), checks=checks,
                   judge=JUDGE_NAME)
