"""The diagnosis split and the gate split of an evolution run. Pure: no Django.

Edits are fitted to the cases they were written from, so those cases cannot also judge them: a diagnosis
reads only its diagnosis split, and the round's gate (and every figure reported for the round) reads only
the gate split. The default split is seeded and stratified by category, so both halves see every kind of
case, and the same seed on the same eval set gives the same split (rounds of one harness stay comparable).
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_SEED = 0
DEFAULT_GATE_SHARE = 0.5


@dataclass(frozen=True)
class Split:
    diagnosis: tuple[str, ...]
    gate: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"diagnosis_case_ids": list(self.diagnosis), "gate_case_ids": list(self.gate)}


def stratified_split(cases: Iterable[tuple[str, str]], *, seed: int = DEFAULT_SEED,
                     gate_share: float = DEFAULT_GATE_SHARE) -> Split:
    """Split `(case_id, category)` pairs: within each category a seeded shuffle sends `gate_share` of the
    cases (rounded, at least one of two or more) to the gate, the rest to the diagnosis. A category of one
    case goes to the gate every other category (by a hash of its name), so neither side collects them all."""
    if not 0 < gate_share < 1:
        raise ValueError("gate_share must be between 0 and 1 (exclusive)")
    by_category: dict[str, list[str]] = defaultdict(list)
    for case_id, category in cases:
        by_category[category].append(case_id)
    diagnosis, gate = [], []
    for category in sorted(by_category):
        ids = sorted(set(by_category[category]))
        random.Random(f"{seed}:{category}").shuffle(ids)
        if len(ids) == 1:
            salt = int.from_bytes(hashlib.sha256(f"{seed}:{category}".encode()).digest()[:2], "big")
            (gate if salt % 2 else diagnosis).extend(ids)
            continue
        n_gate = min(len(ids) - 1, max(1, round(len(ids) * gate_share)))
        gate.extend(ids[:n_gate])
        diagnosis.extend(ids[n_gate:])
    return Split(tuple(sorted(diagnosis)), tuple(sorted(gate)))


def fitted(diagnosis: dict | None, gate: dict | None, *, metric: str = "accuracy") -> str:
    """Why the two splits disagree about a round ('' when they do not): the diagnosis cases improved while
    the gate cases did not (or clearly less), which is what an edit fitted to the diagnosis cases does."""
    d, g = (diagnosis or {}).get(metric) or {}, (gate or {}).get(metric) or {}
    if d.get("delta") is None or g.get("delta") is None:
        return ""
    d_delta, g_delta = d["delta"], g["delta"]
    significant_on_diagnosis = (d.get("ci_low") or 0) > 0
    significant_on_gate = (g.get("ci_low") or 0) > 0
    if d_delta > 0 and (g_delta <= 0 or (significant_on_diagnosis and not significant_on_gate)):
        return (f"{metric} rose {d_delta:+.3f} on the diagnosis cases but {g_delta:+.3f} on the gate cases"
                + (" (significant only on the diagnosis cases)" if g_delta > 0 else "")
                + ": the edits look fitted to the diagnosis cases")
    return ""
