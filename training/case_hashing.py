"""A case's content hash: what lineage compares and what trajectories and prepared data record.

A case's hash covers what the model sees and what it is graded on (room, viewer, message, dialogue,
expected behaviour), not its id, suite or meta: the same viewer message in the same room copied into
another set under a new id is still the same case. IFEval-style records hash their prompt.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.simulator.cases import Case

# The parts of a Case that make it the same case (see the module docstring).
CASE_KEYS = ("room", "viewer_id", "message", "dialogue", "expected")


def case_content_hash(data: Mapping[str, Any]) -> str:
    """sha256 of a case's content (a `Case.to_dict()` or an IFEval record with a `prompt`)."""
    if "prompt" in data and "message" not in data:
        content: Any = {"prompt": data["prompt"]}
    else:
        content = {key: data.get(key) for key in CASE_KEYS}
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def case_hashes(cases: Iterable[Case]) -> dict[str, str]:
    """Case id → content hash."""
    return {case.case_id: case_content_hash(case.to_dict()) for case in cases}
