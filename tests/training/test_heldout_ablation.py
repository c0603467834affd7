"""The held-out edits taken apart (training/hat/ablation.py): each kind alone is exactly that part of a case's
full edit, and the ablation tells a model that memorised the training names from one that reads the harness."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.hat.ablation import (
    CONDITIONS,
    added_skill_loads,
    condition_items,
    judge_control,
    renamed_skill_loads,
    renamed_tool_calls,
    render_markdown,
    run_ablation,
)
from training.hat.experiment import ExperimentConfig, build_data, teacher_config
from training.hat.heldout import HELDOUT_KINDS, heldout_variant
from training.teachers import OracleBackend


@pytest.fixture(scope="module")
def data():
    return build_data(ExperimentConfig(model="tiny", cases=5, train_examples=2, rl_cases=1))


def test_each_kind_alone_is_that_part_of_the_full_edit(data):
    spec, case = data.spec, data.eval_cases[0]
    full = heldout_variant(spec, case, 1301)
    assert full.spec.content_hash == data.heldout[0].spec.content_hash  # the default is all four kinds
    parts = {kind: heldout_variant(spec, case, 1301, kinds=(kind,)) for kind in HELDOUT_KINDS}
    original_names = {m.name for m in (*spec.skills, *spec.tools)}

    names = parts["names"]
    assert dict(names.mapping.skills) == dict(full.mapping.skills)
    assert dict(names.mapping.tools) == dict(full.mapping.tools)
    assert names.spec.settings == spec.settings and not names.late_skill
    assert {t.description for t in names.spec.tools} == {t.description for t in spec.tools}

    for kind in ("late_skill", "limits", "wording"):
        assert {m.name for m in (*parts[kind].spec.skills, *parts[kind].spec.tools)} - {parts[kind].late_skill} \
            == original_names
        assert parts[kind].case.expected == case.expected  # nothing renamed: the ground truth is the case's own
    assert parts["late_skill"].late_skill == full.late_skill
    assert parts["late_skill"].late_skill in {s.name for s in parts["late_skill"].spec.skills}
    assert parts["limits"].spec.settings == full.spec.settings
    assert {t.description for t in parts["wording"].spec.tools} == {t.description for t in full.spec.tools}
    # every part is an edit (a harness of its own), and no two parts are the same edit
    assert len({spec.content_hash, *(p.spec.content_hash for p in parts.values())}) == len(HELDOUT_KINDS) + 1


def test_unknown_or_no_kinds_are_refused(data):
    for kinds in ((), ("names", "colours")):
        with pytest.raises(ValueError, match="held-out edit kinds"):
            heldout_variant(data.spec, data.eval_cases[0], 1301, kinds=kinds)
    with pytest.raises(ValueError, match="condition must be one of"):
        condition_items(data, "everything", 1301, 2)


class ByCase:
    """A scripted model: the oracle of whichever case the prompt holds. `memorised` plays the oracle of the
    original case whatever the harness says (a model that learnt the training names by heart); otherwise the
    oracle of the case in the harness's own names (a model that reads the harness)."""

    name = "by-case"

    def __init__(self, data, *, memorised: bool):
        self.oracles = {}
        for condition in CONDITIONS:
            for case, spec in condition_items(data, condition, 1301, len(data.eval_cases)):
                original = next(c for c in data.eval_cases if c.case_id == case.case_id)
                key = (case.message, frozenset(t.name for t in spec.tools))
                self.oracles[key] = OracleBackend(original if memorised else case)

    async def complete(self, messages, tools, **options):
        message = next(m["content"] for m in messages if m["role"] == "user")
        names = frozenset(t["function"]["name"] for t in tools if t["function"]["name"] != "load_skill")
        oracle = next(o for (text, tool_names), o in self.oracles.items() if text in message and tool_names == names)
        return await oracle.complete(messages, tools, **options)


def test_a_model_that_reads_the_harness_keeps_its_accuracy_under_every_edit(data, tmp_path):
    result = run_ablation(ByCase(data, memorised=False), data, model="reader", generator_seed=1301, limit=5,
                          workdir=tmp_path)
    accuracy = {c: row["accuracy"] for c, row in result["conditions"].items()}
    assert accuracy["original"] > 0.5  # the oracle answers the compact harness's cases
    assert set(accuracy.values()) == {accuracy["original"]}, accuracy  # the judge follows every rename
    assert {row["judge_control"] for row in result["conditions"].values()} == {accuracy["original"]}


def test_a_model_that_memorised_the_names_fails_only_where_the_names_change(data, tmp_path):
    result = run_ablation(ByCase(data, memorised=True), data, model="memoriser", generator_seed=1301, limit=5,
                          workdir=tmp_path)
    rows = result["conditions"]
    assert rows["original"]["accuracy"] > 0.5
    for kind in ("late_skill", "limits", "wording"):
        assert rows[kind]["accuracy"] == rows["original"]["accuracy"], kind
        assert rows[kind]["vs_original"]["worse"] == 0
    for condition in ("names", "all"):
        assert rows[condition]["accuracy"] == 0.0, condition
        assert rows[condition]["vs_original"]["delta"] == -rows["original"]["accuracy"]
        assert rows[condition]["vs_original"]["worse"] == round(5 * rows["original"]["accuracy"])
    # the memoriser finds none of its names among the renamed tools, so it calls none
    calls = rows["names"]["renamed_tool_calls"]
    assert calls["no tool"] > 0 and sum(calls.values()) == calls["no tool"]
    loads = rows["names"]["renamed_skill_loads"]  # it asks for the skill by the name it knows
    assert loads["a training-harness name"] > 0 and sum(loads.values()) == loads["a training-harness name"]
    assert rows["late_skill"]["added_skill_loads"] == {"turns": 0, "wrong": 0}  # it never asks for a new name
    page = render_markdown(result, command="python benchmarks/heldout_ablation.py", wall_s=1.0)
    assert "Turns that loaded the late skill (no case needs it): 0, 0 of them judged wrong." in page
    assert "| every skill and tool renamed | 5 | 0.0 [0.0, 0.0] |" in page
    control = rows["names"]["judge_control"]
    assert control == rows["original"]["accuracy"]  # the oracle that reads the harness is not fooled
    assert f"| {100 * control:.1f} | " in page


def test_missed_tool_calls_are_told_apart_by_what_was_called(data):
    items = condition_items(data, "names", 1301, 5)
    trained, shown = data.spec.tools[0].name, items[2][1].tools[0].name
    miss = ["expected tool call not made: x({})"]
    turns = [{"reasons": miss, "tools_called": ["load_skill", trained]},
             {"reasons": miss, "tools_called": ["fetch_thing"]},
             {"reasons": miss, "tools_called": [shown]},
             {"reasons": miss, "tools_called": ["load_skill"]},
             {"reasons": ["missing fact"], "tools_called": []}]  # not a missed call: not counted
    assert renamed_tool_calls(data, items, turns) == {"a training-harness name": 1,
                                                      "another name not in its harness": 1,
                                                      "only its harness's tools": 1, "no tool": 1}


def test_missed_skill_loads_are_told_apart_by_what_was_asked_for(data):
    items = condition_items(data, "names", 1301, 5)
    trained, shown = data.spec.skills[0].name, items[2][1].skills[0].name
    miss = ["no expected reply skill loaded (expected one of x; loaded none)"]
    turns = [{"reasons": miss, "skills_asked": [trained]},
             {"reasons": miss, "skills_asked": ["friendly-chat"]},
             {"reasons": miss, "skills_asked": [shown]},
             {"reasons": miss, "skills_asked": []},
             {"reasons": ["missing fact"], "skills_asked": [trained]}]  # its skill was right: not counted
    assert renamed_skill_loads(data, items, turns) == {"a training-harness name": 1,
                                                       "another name not in its harness": 1,
                                                       "only its harness's skills": 1, "no skill": 1}


def test_loads_of_the_late_skill_are_counted_with_the_wrong_ones_among_them(data):
    items = condition_items(data, "late_skill", 1301, 4)
    trained = {skill.name for skill in data.spec.skills}
    late = [next(s.name for s in spec.skills if s.name not in trained) for _, spec in items]
    known = data.spec.skills[0].name
    turns = [{"accuracy": 0, "skills_asked": [late[0]]},
             {"accuracy": 1, "skills_asked": [known, late[1]]},
             {"accuracy": 0, "skills_asked": [known, "unboxing-tips"]},  # a name its harness lacks: not the late one
             {"accuracy": 0, "skills_asked": []}]
    assert added_skill_loads(data, items, turns) == {"turns": 2, "wrong": 1}


def test_judged_conditions_are_kept_and_read_back(data, tmp_path):
    first = run_ablation(ByCase(data, memorised=True), data, model="m", generator_seed=1301, limit=3,
                         workdir=tmp_path)
    saved = json.loads((tmp_path / "names.json").read_text())
    assert saved["model"] == "m" and len(saved["turns"]) == 3

    class Unused:
        async def complete(self, *args, **kwargs):
            raise AssertionError("a kept condition was judged again")

    again = run_ablation(Unused(), data, model="m", generator_seed=1301, limit=3, workdir=tmp_path)
    assert again["conditions"] == first["conditions"]


def test_the_script_refuses_a_model_dir_without_its_run():
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "heldout_ablation.py"
    done = subprocess.run([sys.executable, str(script), "--model-dir", "var/nowhere"], capture_output=True, text=True)
    assert done.returncode == 2 and "go together" in done.stderr


def test_decoding_is_set_on_every_judged_harness_and_kept_apart_on_resume(data, tmp_path):
    for condition in ("original", "names", "all"):
        free = condition_items(data, condition, 1301, 3, "free")
        constrained = condition_items(data, condition, 1301, 3, "constrained")
        assert all(not spec.settings.constrained_decoding for _, spec in free)
        assert all(spec.settings.constrained_decoding for _, spec in constrained)
        assert [case for case, _ in free] == [case for case, _ in constrained]
    with pytest.raises(ValueError, match="decoding must be one of"):
        condition_items(data, "original", 1301, 3, "greedy")

    seen = []

    class Constraining(ByCase):
        constrains_tool_calls = True

        async def complete(self, messages, tools, **kwargs):
            seen.append(kwargs.get("constraint"))
            return await super().complete(messages, tools, **{k: v for k, v in kwargs.items() if k != "constraint"})

    from training.hat.evaluate import Capped

    result = run_ablation(Capped(Constraining(data, memorised=False), 64), data, model="m", generator_seed=1301,
                          limit=2, workdir=tmp_path, judged=["names"])
    assert list(result["conditions"]) == ["original", "names"] and result["decoding"] == "constrained"
    assert seen and all(c is not None for c in seen)  # the cap passes the harness's constraint through
    seen.clear()
    free = run_ablation(Capped(Constraining(data, memorised=False), 64), data, model="m", generator_seed=1301,
                        limit=2, workdir=tmp_path, judged=["names"], decoding="free")
    assert seen and all(c is None for c in seen)  # judged again (not read back as the constrained records)
    assert free["decoding"] == "free" and "harness-constrained" in render_markdown(result, command="c", wall_s=1)
    # the judge control takes the experiment's teacher config (its mistake rate included) and stays a perfect reader
    assert judge_control(condition_items(data, "names", 1301, 2), teacher_config(ExperimentConfig())) == 1.0
    with pytest.raises(ValueError, match="conditions must be among"):
        run_ablation(ByCase(data, memorised=False), data, model="m", generator_seed=1301, limit=2,
                     workdir=tmp_path, judged=["colours"])
