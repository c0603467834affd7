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
- judge: "vote(" + the judges' names joined by "," + ")"; model_ids: every voter's.

Abstention: a judge that cannot produce a verdict (its model unavailable, malformed output after the
retries) returns `Verdict.abstain(...)`: accuracy and effectiveness are None, never 0, because "don't
know" is not "wrong". An abstention is left out of means and counted apart. In a vote abstaining judges
do not vote; when every judge abstains the vote abstains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ACCURACY_SCALE = (0, 1)
EFFECTIVENESS_SCALE = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class Verdict:
    """One judge's verdict on one (case, trace); accuracy and effectiveness are None for an abstention.

    `judge` is the judge's label; `model_ids` the judge models that produced it (empty for a judge without
    a model) and `judge_hash` the content hash of the judge harness (empty for code judges), so a score
    says exactly which judge gave it.
    """

    accuracy: int | None
    effectiveness: float | None
    reasons: tuple[str, ...] = ()
    checks: Mapping[str, bool] = field(default_factory=dict)
    judge: str = "reference/v1"
    model_ids: tuple[str, ...] = ()
    judge_hash: str = ""
    # In a vote, each judge's own accuracy (None where it abstained): disagreement is evidence against the verdict.
    votes: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def abstain(cls, *, judge: str, reasons: Iterable[str] = (), model_ids: Iterable[str] = (),
                judge_hash: str = "") -> Verdict:
        """No verdict: the judge could not decide (counted apart, excluded from means)."""
        return cls(accuracy=None, effectiveness=None, reasons=tuple(reasons), judge=judge,
                   model_ids=tuple(model_ids), judge_hash=judge_hash)

    @property
    def abstained(self) -> bool:
        return self.accuracy is None

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_ids", tuple(str(m) for m in self.model_ids))
        object.__setattr__(self, "reasons", tuple(str(r) for r in self.reasons))
        object.__setattr__(self, "votes", tuple((str(j), None if a is None else int(a)) for j, a in self.votes))
        if self.accuracy is None or self.effectiveness is None:
            if not (self.accuracy is None and self.effectiveness is None):
                raise ValueError("an abstention has neither accuracy nor effectiveness")
            object.__setattr__(self, "checks", {})
            return
        if isinstance(self.accuracy, bool) or self.accuracy not in ACCURACY_SCALE:
            raise ValueError(f"accuracy must be 0 or 1, not {self.accuracy!r}")
        if isinstance(self.effectiveness, bool) or self.effectiveness not in EFFECTIVENESS_SCALE:
            raise ValueError(f"effectiveness must be 0, 0.5 or 1, not {self.effectiveness!r}")
        object.__setattr__(self, "accuracy", int(self.accuracy))
        object.__setattr__(self, "effectiveness", float(self.effectiveness))
        object.__setattr__(self, "checks", {str(k): bool(v) for k, v in dict(self.checks).items()})

    def to_dict(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "effectiveness": self.effectiveness, "reasons": list(self.reasons),
                "checks": dict(self.checks), "judge": self.judge, "abstained": self.abstained,
                "model_ids": list(self.model_ids), "judge_hash": self.judge_hash,
                **({"votes": [list(v) for v in self.votes]} if self.votes else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        accuracy, effectiveness = data.get("accuracy"), data.get("effectiveness")
        return cls(accuracy=None if accuracy is None else int(accuracy),
                   effectiveness=None if effectiveness is None else float(effectiveness),
                   reasons=tuple(data.get("reasons") or ()), checks=dict(data.get("checks") or {}),
                   judge=str(data.get("judge", "reference/v1")), model_ids=tuple(data.get("model_ids") or ()),
                   judge_hash=str(data.get("judge_hash") or ""),
                   votes=tuple(tuple(v) for v in data.get("votes") or ()))


def vote(verdicts: Iterable[Verdict]) -> Verdict:
    """Combine several judges' verdicts on one case (rules in the module docstring)."""
    everyone = list(verdicts)
    if not everyone:
        raise ValueError("vote() needs at least one verdict")
    if len(everyone) == 1:
        return everyone[0]
    label = f"vote({','.join(v.judge for v in everyone)})"
    model_ids = tuple(m for v in everyone for m in v.model_ids)
    judge_hash = next((v.judge_hash for v in everyone if v.judge_hash), "")
    verdicts = [v for v in everyone if not v.abstained]
    each_say = tuple((v.judge, v.accuracy) for v in everyone)
    if not verdicts:
        return Verdict.abstain(judge=label, model_ids=model_ids, judge_hash=judge_hash,
                               reasons=dict.fromkeys(r for v in everyone for r in v.reasons))
    n = len(verdicts)
    accuracy = 1 if sum(v.accuracy for v in verdicts) * 2 > n else 0
    ordered = sorted(v.effectiveness for v in verdicts)
    effectiveness = ordered[(n - 1) // 2]  # the lower median
    keys = list(dict.fromkeys(k for v in verdicts for k in v.checks))
    checks = {}
    for key in keys:
        votes = [v.checks[key] for v in verdicts if key in v.checks]
        checks[key] = sum(votes) * 2 > len(votes)
    prefix = len({v.judge for v in everyone}) > 1
    reasons = dict.fromkeys(f"[{v.judge}] {r}" if prefix else r for v in everyone for r in v.reasons)
    return Verdict(accuracy=accuracy, effectiveness=effectiveness, reasons=tuple(reasons), checks=checks,
                   judge=label, model_ids=model_ids, judge_hash=judge_hash, votes=each_say)
