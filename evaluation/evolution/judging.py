"""Where a judge's reasons contradict the trace it judged: evidence that a cluster is the evaluation's fault.

A cluster whose cases mostly carry such contradictions is flagged "check the evaluation", not "edit the
harness" (clusters.py). Pure: no Django.
"""

from __future__ import annotations

import json
import re

from evaluation.evolution.signatures import CaseRecord
from evaluation.judges.reference import argument_matches, parse_arguments
from evaluation.judges.text import contains, tokens

_TOOL_REASON = re.compile(r"expected tool call not made: ([\w.-]+)\((.*)\)\s*$")
_FACT_REASON = re.compile(r"missing fact: ['\"“](.*)['\"”]\s*$")  # older runs stored Python's quotes
_SKILL_REASON = re.compile(r"no expected reply skill loaded")


def judge_contradictions(record: CaseRecord) -> list[str]:
    """Reasons of this record's verdict that the trace itself disproves (empty when none)."""
    trace = record.trace or {}
    found = []
    if record.accuracy < 1 and not record.reasons:
        found.append("a failing verdict with no reason")
    reply_tokens = tokens("" if trace.get("silent") else str(trace.get("reply") or record.reply))
    steps = [s for s in trace.get("steps") or () if isinstance(s, dict) and s.get("kind") == "tool"]
    loaded = set(trace.get("skills_loaded") or ())
    for reason in record.reasons:
        text = re.sub(r"^\[[^\]]*\]\s*", "", reason.strip())
        if match := _FACT_REASON.search(text):
            if contains(reply_tokens, match.group(1)):
                found.append(f"says “{match.group(1)}” is missing, but the reply states it")
        elif match := _TOOL_REASON.search(text):
            name, raw = match.groups()
            try:
                expected = json.loads(raw or "{}")
            except ValueError:
                continue
            if any(s.get("name") == name and (args := parse_arguments(s.get("arguments"))) is not None
                   and argument_matches(expected, args) for s in steps):
                found.append(f"says {name} was not called, but the trace calls it with those arguments")
        elif _SKILL_REASON.search(text) and loaded & set(record.expected_skills):
            found.append(f"says no expected skill was loaded, but the trace loaded {', '.join(sorted(loaded & set(record.expected_skills)))}")
    return found
