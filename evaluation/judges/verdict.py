"""The verdict every judge returns, and `vote` for combining several judges' verdicts.

Scales (HAT report): Accuracy is binary (0/1), Effectiveness is 0 / 0.5 / 1.

`vote(verdicts)` combines the verdicts of several judges on ONE case (the paper's
Agent-as-a-Judge lets three models vote):

- accuracy: strict majority of the 0/1 votes; a tie (possible with an even
  number of judges) resolves to 0, the conservative side.
- effectiveness: the median of the votes; with an even number of judges the
  LOWER median, so the result stays on the 0/0.5/1 scale and a tie again
  resolves to the conservative side.
- checks: per key, True iff a strict majority of the judges that report the key
  say True (a tie is False).
- reasons: every judge's reasons, de-duplicated, in judge order; each is
  prefixed "[judge] " when the judges have different names.
- judge: "vote(" + the judges' names joined by "," + ")".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ACCURACY_SCALE = (0, 1)
EFFECTIVENESS_SCALE = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class Verdict:
    """One judge's verdict on one (case, trace)."""

    accuracy: int
    effectiveness: float
    reasons: tuple[str, ...] = ()
    checks: Mapping[str, bool] = field(default_factory=dict)
    judge: str = "reference/v1"

    def __post_init__(self) -> None:
        if isinstance(self.accuracy, bool) or self.accuracy not in ACCURACY_SCALE:
            raise ValueError(f"accuracy must be 0 or 1, not {self.accuracy!r}")
        if isinstance(self.effectiveness, bool) or self.effectiveness not in EFFECTIVENESS_SCALE:
            raise ValueError(f"effectiveness must be 0, 0.5 or 1, not {self.effectiveness!r}")
        object.__setattr__(self, "accuracy", int(self.accuracy))
        object.__setattr__(self, "effectiveness", float(self.effectiveness))
        object.__setattr__(self, "reasons", tuple(str(r) for r in self.reasons))
        object.__setattr__(self, "checks", {str(k): bool(v) for k, v in dict(self.checks).items()})

    def to_dict(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "effectiveness": self.effectiveness, "reasons": list(self.reasons),
                "checks": dict(self.checks), "judge": self.judge}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(accuracy=int(data["accuracy"]), effectiveness=float(data["effectiveness"]),
                   reasons=tuple(data.get("reasons") or ()), checks=dict(data.get("checks") or {}),
                   judge=str(data.get("judge", "reference/v1")))


def vote(verdicts: Iterable[Verdict]) -> Verdict:
    """Combine several judges' verdicts on one case (rules in the module docstring)."""
    verdicts = list(verdicts)
    if not verdicts:
        raise ValueError("vote() needs at least one verdict")
    if len(verdicts) == 1:
        return verdicts[0]
    n = len(verdicts)
    accuracy = 1 if sum(v.accuracy for v in verdicts) * 2 > n else 0
    ordered = sorted(v.effectiveness for v in verdicts)
    effectiveness = ordered[(n - 1) // 2]  # the lower median
    keys = list(dict.fromkeys(k for v in verdicts for k in v.checks))
    checks = {}
    for key in keys:
        votes = [v.checks[key] for v in verdicts if key in v.checks]
        checks[key] = sum(votes) * 2 > len(votes)
    names = [v.judge for v in verdicts]
    prefix = len(set(names)) > 1
    reasons = dict.fromkeys(f"[{v.judge}] {r}" if prefix else r for v in verdicts for r in v.reasons)
    return Verdict(accuracy=accuracy, effectiveness=effectiveness, reasons=tuple(reasons), checks=checks,
                   judge=f"vote({','.join(names)})")
