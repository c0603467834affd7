"""Issue 42's targets for the shipped model, computed from per-turn records, and the recipe choice made on
validation figures alone.

`compute_targets(...)` takes one split's judged turns (the shipped arm under its decoding: original harness,
every name changed, all four held-out edits; Fixed-SFT's original and all-edits turns under the same decoding;
both arms' IFEval verdicts) and returns the `targets` object of `docs/default-model.json`: each key
`{"value", "target", "n"}` in the units of the issue's table (accuracy in %, drops in points, negative when the
edit costs accuracy; the wrong-fact share as a share; the IFEval delta in points against the base; the ratio of
the two arms' held-out drops). Drops are paired: the same cases under both harnesses, so a case judged under one
and not the other counts in neither.

`assess(targets)` says, per target, whether it is met and by how much (`None` when the value could not be
computed: "don't know" is not "no"). `distance(targets)` sums the shortfalls, each over its target's scale (10
points, a share of 0.10, a ratio of 0.5): how far a model is from the table as a whole, where a model that answers
nothing (no drop, no wrong fact) is still 7 scales short on accuracy. `choose_recipe(candidates)` ranks (arm,
decoding) candidates by their validation targets and says why the first won; it is handed validation figures only,
so the test split cannot move it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    key: str
    title: str
    target: float
    higher_is_better: bool
    unit: str  # "%", "pts", "share" or "ratio": how the value is printed
    scale: float  # what one unit of `distance` is for this target

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.target - 1e-9 if self.higher_is_better else value <= self.target + 1e-9

    def shortfall(self, value: float | None) -> float | None:
        """How far the value is from the target in its own units: positive when missed, 0 when met."""
        if value is None:
            return None
        gap = self.target - value if self.higher_is_better else value - self.target
        return round(max(0.0, gap), 4)


TARGETS = (
    Target("original_accuracy", "original-harness accuracy", 70.0, True, "%", 10.0),
    Target("renames_drop", "drop under renamed skills and tools", -8.0, True, "pts", 10.0),
    Target("heldout_drop", "drop under all held-out edits", -10.0, True, "pts", 10.0),
    Target("wrong_fact_share", "replies stating a wrong fact (original harness)", 0.20, False, "share", 0.10),
    Target("ifeval_delta", "IFEval prompt-strict vs base", -5.0, True, "pts", 10.0),
    Target("hsa_vs_fixed_drop_ratio", "HSA drop vs Fixed-SFT drop (all held-out edits)", 0.5, False, "ratio", 0.5),
)
BY_KEY = {target.key: target for target in TARGETS}


def _by_case(turns: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {turn["case_id"]: turn for turn in turns}


def accuracy_points(turns: Sequence[Mapping[str, Any]]) -> float | None:
    return round(100.0 * sum(t["accuracy"] for t in turns) / len(turns), 2) if turns else None


def paired_drop(original: Sequence[Mapping[str, Any]], edited: Sequence[Mapping[str, Any]]) -> tuple[float | None, int]:
    """Edited minus original accuracy in points over the cases judged under both, and how many those are."""
    before, after = _by_case(original), _by_case(edited)
    common = [case for case in before if case in after]
    if not common:
        return None, 0
    delta = sum(after[c]["accuracy"] - before[c]["accuracy"] for c in common) / len(common)
    return round(100.0 * delta, 2), len(common)


def wrong_fact_share(turns: Sequence[Mapping[str, Any]]) -> float | None:
    """Turns whose reply the judge failed (the model spoke and was wrong, which a viewer sees; a fallback line is
    not a wrong fact), as a share of all turns."""
    if not turns:
        return None
    return round(sum(1 for t in turns if t["outcome"] == "replied" and not t["accuracy"]) / len(turns), 4)


def ifeval_delta(candidate: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]) -> tuple[float | None, int]:
    """Prompt-strict IFEval of the candidate minus the base's, in points, over the prompts both answered (records
    `{"key", "strict"}`)."""
    mine, theirs = ({r["key"]: r["strict"] for r in records} for records in (candidate, base))
    common = [key for key in mine if key in theirs]
    if not common:
        return None, 0
    return round(100.0 * sum(mine[k] - theirs[k] for k in common) / len(common), 2), len(common)


def drop_ratio(hsa_drop: float | None, fixed_drop: float | None) -> float | None:
    """HSA's held-out drop over Fixed-SFT's; None when Fixed-SFT lost nothing (no drop to halve) or a drop is
    unknown."""
    if hsa_drop is None or fixed_drop is None or fixed_drop >= 0:
        return None
    return round(hsa_drop / fixed_drop, 4)


def compute_targets(*, shipped: Mapping[str, Sequence[Mapping[str, Any]]],
                    fixed: Mapping[str, Sequence[Mapping[str, Any]]],
                    ifeval: Sequence[Mapping[str, Any]], base_ifeval: Sequence[Mapping[str, Any]]
                    ) -> dict[str, dict[str, Any]]:
    """The six targets (module docstring). `shipped` and `fixed` map a condition ("original", "names", "all") to
    its turn records (`case_id`, `accuracy`, `outcome`); a condition not judged gives a None value and n 0."""
    original = list(shipped.get("original", ()))
    renames, renames_n = paired_drop(original, shipped.get("names", ()))
    heldout, heldout_n = paired_drop(original, shipped.get("all", ()))
    fixed_drop, fixed_n = paired_drop(fixed.get("original", ()), fixed.get("all", ()))
    delta, ifeval_n = ifeval_delta(ifeval, base_ifeval)
    values = {
        "original_accuracy": (accuracy_points(original), len(original)),
        "renames_drop": (renames, renames_n),
        "heldout_drop": (heldout, heldout_n),
        "wrong_fact_share": (wrong_fact_share(original), len(original)),
        "ifeval_delta": (delta, ifeval_n),
        "hsa_vs_fixed_drop_ratio": (drop_ratio(heldout, fixed_drop), min(heldout_n, fixed_n)),
    }
    return {key: {"value": values[key][0], "target": BY_KEY[key].target, "n": values[key][1]} for key in BY_KEY}


def assess(targets: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per target, in the issue's order: its figures, whether it is met (None: not measured) and the
    shortfall in its own units."""
    rows = []
    for target in TARGETS:
        figures = targets.get(target.key) or {}
        value = figures.get("value")
        rows.append({"key": target.key, "title": target.title, "unit": target.unit, "value": value,
                     "target": figures.get("target", target.target), "n": figures.get("n", 0),
                     "higher_is_better": target.higher_is_better, "met": target.met(value),
                     "shortfall": target.shortfall(value)})
    return rows


def targets_met(targets: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(1 for row in assess(targets) if row["met"])


def distance(targets: Mapping[str, Mapping[str, Any]]) -> float:
    """The shortfalls summed, each over its target's scale (module docstring); an unmeasured target adds nothing."""
    return round(sum(row["shortfall"] / BY_KEY[row["key"]].scale for row in assess(targets)
                     if row["shortfall"] is not None), 4)


RULE = ("distance to the targets (shortfalls summed in scales of 10 points, 0.10 share, 0.5 ratio; lower first), "
        "then targets met, then accuracy under all held-out edits, then preference order")


def choose_recipe(candidates: Mapping[tuple[str, str], Mapping[str, Any]], *, preference: Sequence[tuple[str, str]]
                  ) -> dict[str, Any]:
    """The (arm, decoding) to ship, from VALIDATION figures only, and why.

    `candidates` maps (arm, decoding) to `{"targets": compute_targets(...), "heldout": accuracy under all held-out
    edits in points}`. Ranked by `RULE`: how far from the issue's table as a whole (`distance`), then how many
    targets met, then held-out accuracy (the product's reason to exist: it keeps working while operators edit the
    harness), then `preference` order (the served default, the simpler model). Returns the winner, the ranking
    and the reason in words."""
    def key(item: tuple[tuple[str, str], Mapping[str, Any]]) -> tuple[Any, ...]:
        candidate, figures = item
        return (distance(figures["targets"]), -targets_met(figures["targets"]), -(figures.get("heldout") or 0.0),
                preference.index(candidate) if candidate in preference else len(preference))

    if not candidates:
        raise ValueError("no candidate to choose from")
    ranked = sorted(candidates.items(), key=key)
    ranking = [{"arm": arm, "decoding": decoding, "distance": distance(f["targets"]),
                "targets_met": targets_met(f["targets"]), "heldout": f.get("heldout"),
                "original": f["targets"]["original_accuracy"]["value"],
                "ifeval_delta": f["targets"]["ifeval_delta"]["value"]}
               for (arm, decoding), f in ranked]
    best = ranking[0]
    reason = (f"{best['arm']} with {best['decoding']} decoding is closest to the targets on the validation split "
              f"(distance {best['distance']}, {best['targets_met']} of {len(TARGETS)} met; original "
              f"{best['original']} %, all held-out edits {best['heldout']} %)")
    if len(ranking) > 1:
        runner = ranking[1]
        reason += (f"; next: {runner['arm']} / {runner['decoding']} (distance {runner['distance']}, "
                   f"{runner['targets_met']} met), decided by {_deciding(key(ranked[0]), key(ranked[1]))}")
    return {"arm": best["arm"], "decoding": best["decoding"], "split": "validation", "reason": reason,
            "ranking": ranking, "rule": RULE}


def _deciding(first: tuple[Any, ...], second: tuple[Any, ...]) -> str:
    names = ("distance", "targets met", "held-out accuracy", "preference order")
    return next(name for name, a, b in zip(names, first, second, strict=True) if a != b)
