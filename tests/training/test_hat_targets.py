"""Issue 42's targets from per-turn records, and the recipe choice that only sees validation figures."""

from __future__ import annotations

import pytest

from training.hat.targets import (
    TARGETS,
    assess,
    choose_recipe,
    compute_targets,
    distance,
    drop_ratio,
    paired_drop,
)


def turns(*verdicts: str) -> list[dict]:
    """One turn per letter: R right, W a wrong reply, F a fallback (wrong, but no fact stated)."""
    return [{"case_id": f"c{i}", "accuracy": int(v == "R"), "outcome": "fallback" if v == "F" else "replied"}
            for i, v in enumerate(verdicts)]


def prompts(*strict: int) -> list[dict]:
    return [{"key": f"p{i}", "strict": s} for i, s in enumerate(strict)]


def test_the_six_targets_in_the_units_of_the_issue_table():
    shipped = {"original": turns(*"RRRRRRRWWF"),    # 70 %, 2 wrong replies of 10
               "names": turns(*"RRRRRRWWWF"),       # 60 %: −10 pts
               "all": turns(*"RRRRRWWWFF")}         # 50 %: −20 pts
    fixed = {"original": turns(*"RRRRRRRRWW"), "all": turns(*"RRWWWWWWWW")}  # 80 → 20: −60 pts
    targets = compute_targets(shipped=shipped, fixed=fixed, ifeval=prompts(1, 0, 1, 0), base_ifeval=prompts(1, 1, 1, 0))
    assert targets == {
        "original_accuracy": {"value": 70.0, "target": 70.0, "n": 10},
        "renames_drop": {"value": -10.0, "target": -8.0, "n": 10},
        "heldout_drop": {"value": -20.0, "target": -10.0, "n": 10},
        "wrong_fact_share": {"value": 0.2, "target": 0.2, "n": 10},
        "ifeval_delta": {"value": -25.0, "target": -5.0, "n": 4},
        "hsa_vs_fixed_drop_ratio": {"value": pytest.approx(1 / 3, abs=1e-4), "target": 0.5, "n": 10},
    }
    rows = {row["key"]: row for row in assess(targets)}
    assert [row["key"] for row in assess(targets)] == [t.key for t in TARGETS]
    assert rows["original_accuracy"]["met"] and rows["wrong_fact_share"]["met"]  # at the bound is met
    assert rows["hsa_vs_fixed_drop_ratio"]["met"]
    assert not rows["renames_drop"]["met"] and rows["renames_drop"]["shortfall"] == 2.0
    assert not rows["heldout_drop"]["met"] and rows["heldout_drop"]["shortfall"] == 10.0
    assert rows["ifeval_delta"]["shortfall"] == 20.0
    assert distance(targets) == pytest.approx(0.2 + 1.0 + 2.0)


def test_drops_pair_cases_and_ignore_a_case_judged_under_one_harness_only():
    original = turns(*"RRWW")
    edited = [{**t, "accuracy": 0} for t in original[:3]]  # c3 not judged under the edit
    assert paired_drop(original, edited) == (round(100 * -2 / 3, 2), 3)
    assert paired_drop(original, []) == (None, 0)


def test_no_fixed_drop_means_no_ratio_and_an_unmeasured_target_is_not_a_miss():
    assert drop_ratio(-5.0, 0.0) is None and drop_ratio(-5.0, 3.0) is None and drop_ratio(None, -10.0) is None
    assert drop_ratio(2.0, -10.0) == -0.2  # HSA gained under the edits: well within half of Fixed's drop
    targets = compute_targets(shipped={"original": turns(*"RW")}, fixed={}, ifeval=[], base_ifeval=[])
    rows = {row["key"]: row for row in assess(targets)}
    assert targets["renames_drop"] == {"value": None, "target": -8.0, "n": 0}
    assert rows["renames_drop"]["met"] is None and rows["hsa_vs_fixed_drop_ratio"]["met"] is None
    assert rows["ifeval_delta"]["met"] is None


def test_wrong_facts_count_replies_the_judge_failed_not_fallbacks():
    targets = compute_targets(shipped={"original": turns(*"RWFF")}, fixed={}, ifeval=[], base_ifeval=[])
    assert targets["wrong_fact_share"]["value"] == 0.25


def candidate(original: str, names: str, heldout: str, ifeval: list[int]) -> dict:
    targets = compute_targets(shipped={"original": turns(*original), "names": turns(*names), "all": turns(*heldout)},
                              fixed={"original": turns(*"RRRRRRRRRR"), "all": turns(*"WWWWWWWWWW")},
                              ifeval=prompts(*ifeval), base_ifeval=prompts(1, 1, 1, 1))
    return {"targets": targets, "heldout": 10.0 * heldout.count("R")}


def test_the_choice_is_the_candidate_closest_to_the_targets_and_says_why():
    useful = candidate("RRRRRRRWWW", "RRRRRRWWWW", "RRRRRWWWWW", [1, 1, 1, 0])
    silent = candidate("FFFFFFFFFF", "FFFFFFFFFF", "FFFFFFFFFF", [1, 1, 1, 1])  # no drop, no wrong fact: useless
    choice = choose_recipe({("hsa_sft", "constrained"): silent, ("hsa_sft_opd", "constrained"): useful},
                           preference=[("hsa_sft", "constrained"), ("hsa_sft_opd", "constrained")])
    assert (choice["arm"], choice["decoding"]) == ("hsa_sft_opd", "constrained") and choice["split"] == "validation"
    assert [row["arm"] for row in choice["ranking"]] == ["hsa_sft_opd", "hsa_sft"]
    assert "closest to the targets" in choice["reason"] and "decided by distance" in choice["reason"]
    # identical figures: the preference order decides, and the reason says so
    tie = choose_recipe({("hsa_sft", "free"): useful, ("hsa_sft", "constrained"): useful},
                        preference=[("hsa_sft", "constrained"), ("hsa_sft", "free")])
    assert tie["decoding"] == "constrained" and "decided by preference order" in tie["reason"]
    with pytest.raises(ValueError):
        choose_recipe({}, preference=[])
