"""Teacher trajectories through the real runtime: oracle under original and HSA harnesses, judge filter,
retry policy, and the lineage guard."""

import json
from dataclasses import replace

import pytest

from harness.augmentation import HsaConfig, augment
from harness.simulator.cases import Case
from training.case_hashing import case_content_hash, case_hashes
from training.lineage import LineageError, check_disjoint, lineage_record
from training.teachers import FEEDBACK_PREFIX, teacher_for
from training.trajectories import TrajectoryConfig, generate_trajectories, strip_retries
from training.validation import ConfigError


def test_oracle_trajectories_pass_the_judge_under_original_and_augmented_names(mini_spec, mini_cases):
    config = TrajectoryConfig(augmented_variants=2, hsa=HsaConfig.only("tool_definitions", "skill_identifiers",
                                                                        rename_tool_p=1.0, rename_skill_p=1.0).__dict__)
    kept, report = generate_trajectories(mini_cases, [mini_spec], config)
    assert report.turns == len(mini_cases) * 3 and report.kept == len(kept) == report.turns
    augmented = [t for t in kept if t.variant.startswith("hsa:")]
    assert augmented and all(t.harness_hash != mini_spec.content_hash for t in augmented)
    for trajectory in augmented:
        called = [c["function"]["name"] for m in trajectory.messages for c in m.get("tool_calls") or ()]
        offered = {t["function"]["name"] for t in trajectory.tools}
        # every call uses a name the augmented harness offers (load_skill is the runtime's own)
        assert all(name in offered or name == "load_skill" for name in called)
        assert "get_product_info_by_link_id" not in offered  # the tool was renamed, and the teacher followed
    row = kept[0].to_row()
    assert set(row) == {"messages", "tools", "meta"} and row["messages"][-1]["role"] == "assistant"
    json.dumps(row)  # the JSONL artifact is plain JSON


def test_single_state_puts_each_case_under_one_harness_state_drawn_per_case(mini_spec, mini_cases):
    cases = [replace(c, case_id=f"{c.case_id}-{k}") for k in range(4) for c in mini_cases]
    both = generate_trajectories(cases, [mini_spec], TrajectoryConfig(augmented_variants=1))[0]
    config = TrajectoryConfig(augmented_variants=1, single_state=True)
    single = generate_trajectories(cases, [mini_spec], config)[0]
    assert len(both) == 2 * len(cases) and len(single) == len(cases)
    assert len({t.case_id for t in single}) == len(cases)
    originals = sum(t.variant == "original" for t in single)
    assert 0 < originals < len(cases)  # both states occur
    # the drawn state is the same row the pairs layout has for that case, and the draw is stable
    assert {(t.case_id, t.harness_hash) for t in single} <= {(t.case_id, t.harness_hash) for t in both}
    again = generate_trajectories(cases, [mini_spec], config)[0]
    assert [t.variant for t in again] == [t.variant for t in single]


def test_judge_filter_drops_what_a_wrong_teacher_says(mini_spec, mini_cases):
    from serving.backends.scripted import ScriptedBackend  # noqa: F401  (registers "scripted")

    config = TrajectoryConfig(teacher="scripted", teacher_config={"steps": ["The price is 1 dollar."],
                                                                   "cycle": True})
    kept, report = generate_trajectories(mini_cases, [mini_spec], config)
    # a reply without a skill gets the hook's feedback, the retry says the same, the judge refuses every fact case
    assert report.rejected >= sum(1 for c in mini_cases if c.expected.facts)
    assert all(t.effectiveness == 1.0 for t in kept)
    assert report.reasons.get("missing fact", 0) > 0


def test_retry_policy_keeps_a_share_of_full_retries(mini_spec, mini_cases):
    cases = mini_cases * 1
    keep_none = TrajectoryConfig(teacher_config={"mistake_rate": 1.0}, keep_full_retry_share=0.0)
    kept, report = generate_trajectories(cases, [mini_spec], keep_none)
    assert report.retried == len(kept) > 0 and report.full_retry_kept == 0
    for trajectory in kept:
        assert not any(str(m.get("content", "")).startswith(FEEDBACK_PREFIX) for m in trajectory.messages)
        assert sum(1 for m in trajectory.messages if m["role"] == "assistant" and not m.get("tool_calls")) == 1
    keep_all = TrajectoryConfig(teacher_config={"mistake_rate": 1.0}, keep_full_retry_share=1.0)
    kept, report = generate_trajectories(cases, [mini_spec], keep_all)
    assert report.full_retry_kept == report.retried == len(kept)
    assert all(any(str(m.get("content", "")).startswith(FEEDBACK_PREFIX) for m in t.messages) for t in kept)


def test_strip_retries_cuts_the_rejected_reply_with_its_feedback():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "too early"},
                {"role": "user", "content": f"{FEEDBACK_PREFIX} load a skill"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function",
                                                                        "function": {"name": "load_skill",
                                                                                     "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "1", "content": "body"},
                {"role": "assistant", "content": "hello"}]
    assert [m["content"] for m in strip_retries(messages)] == ["s", "hi", None, "body", "hello"]


def _call_message(response):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                           for c in response.tool_calls]}


def test_the_oracle_reads_names_from_the_case_it_is_given(mini_spec, mini_cases):
    import asyncio

    augmentation = augment(mini_spec, HsaConfig.only("tool_definitions", rename_tool_p=1.0), seed=3)
    case = augmentation.mapping.rewrite_case(next(c for c in mini_cases if c.expected.tools))
    from harness.spec import openai_tools

    response = asyncio.run(teacher_for("oracle", case).complete(
        [{"role": "user", "content": case.message}], openai_tools(augmentation.spec)))
    assert [c.name for c in response.tool_calls] == [augmentation.mapping.tool("get_product_info_by_link_id")]


def test_the_skill_first_oracle_loads_the_skill_then_calls_tools_by_the_names_of_the_case_it_is_given(
        mini_spec, mini_cases):
    import asyncio

    augmentation = augment(mini_spec, HsaConfig.only("tool_definitions", rename_tool_p=1.0), seed=3)
    case = augmentation.mapping.rewrite_case(next(c for c in mini_cases if c.expected.tools))
    from harness.spec import openai_tools

    teacher, tools = teacher_for("oracle", case, {"skill_first": True}), openai_tools(augmentation.spec)
    messages = [{"role": "user", "content": case.message}]
    first = asyncio.run(teacher.complete(messages, tools))
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("load_skill", {"name": case.expected.skills[0]})]
    messages += [_call_message(first), {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "body"}]
    second = asyncio.run(teacher.complete(messages, tools))
    assert [c.name for c in second.tool_calls] == [augmentation.mapping.tool("get_product_info_by_link_id")]


def test_the_skill_first_oracle_names_the_field_each_fact_came_from_and_the_default_does_not(mini_spec, mini_cases):
    import asyncio

    from harness.spec import openai_tools

    case = next(c for c in mini_cases if c.expected.tools)
    case = Case.from_dict({**case.to_dict(), "expected": {**case.to_dict()["expected"], "facts": ["88", "wool"]}})
    messages = [{"role": "user", "content": case.message},
                {"role": "tool", "tool_call_id": "1", "content": "Call the tool."},
                {"role": "tool", "tool_call_id": "2",
                 "content": json.dumps({"price": 88.0, "stock": 20, "promo_price": None, "specs": {"care": "wool wash"}})}]
    reply = asyncio.run(teacher_for("oracle", case, {"skill_first": True}).complete(
        messages, [], tool_choice="none")).content
    # 88 is the price field exactly; "wool" only occurs inside a text, so it stays bare
    assert reply == "Here's what I found: price 88, wool."
    default = asyncio.run(teacher_for("oracle", case).complete(messages, [], tool_choice="none")).content
    assert default == "Here's what I found: 88, wool."
    with pytest.raises(ValueError, match="skill_first must be true or false"):
        teacher_for("oracle", case, {"skill_first": "false"})
    named = teacher_for("oracle", case, {"name_fields": True})
    assert asyncio.run(named.complete(messages, [], tool_choice="none")).content == "Here's what I found: price 88, wool."
    first = asyncio.run(named.complete([{"role": "user", "content": case.message}], openai_tools(mini_spec)))
    assert first.tool_calls[0].name != "load_skill"  # named facts, but the tools still come first
    with pytest.raises(ValueError, match="name_fields must be true or false"):
        teacher_for("oracle", case, {"name_fields": 1})


def test_the_oracle_answers_what_was_asked_when_the_ground_truth_holds_no_fact_to_quote(mini_cases):
    import asyncio

    case = next(c for c in mini_cases if c.expected.tools)

    def reply(facts, **meta):
        edited = Case.from_dict({**case.to_dict(), "meta": meta,
                                 "expected": {**case.to_dict()["expected"], "facts": facts}})
        return asyncio.run(teacher_for("oracle", edited).complete([], [], tool_choice="none")).content

    assert reply(["XL"], size="XL", in_stock=False) == "Here's what I found: XL is sold out."
    assert reply([], in_stock=True) == "Yes, it's in stock!"
    assert reply([], colour="red", available=False, colours=["navy", "black"]) == "Sorry, not in red. Colours: navy, black."
    assert reply([], spec="fragrance_free", answer=True) == "fragrance free: yes."
    assert reply([], sizes=["S", "M"], fit="slim") == "Sizes: S, M; fit: slim."
    assert reply([]) == "Thanks for watching! Ask me anything about the items in the stream."


def test_content_hash_ignores_ids_and_lineage_refuses_eval_cases(mini_cases):
    case = mini_cases[0]
    copy = Case.from_dict({**case.to_dict(), "case_id": "eval-0001", "suite": "harness_variant", "meta": {}})
    assert case_content_hash(copy.to_dict()) == case_content_hash(case.to_dict())
    changed = Case.from_dict({**case.to_dict(), "message": case.message + "?"})
    assert case_content_hash(changed.to_dict()) != case_content_hash(case.to_dict())
    train = case_hashes(mini_cases)
    check_disjoint(train, {"other@v1": [case_content_hash(changed.to_dict())]})
    with pytest.raises(LineageError, match=r"eval set lsqa@v2: .*" + case.case_id):
        check_disjoint(train, {"lsqa@v2": [case_content_hash(copy.to_dict())]})
    record = lineage_record(train, {"lsqa@v2": ["0" * 64]}, sources=[{"kind": "simulator"}])
    assert record["cases"] == len(mini_cases) and record["excluded_eval_sets"]["lsqa@v2"]["cases"] == 1


@pytest.mark.parametrize(("data", "field"), [
    ({"augmented_variants": 9}, "trajectories.augmented_variants"),
    ({"min_effectiveness": 0.7}, "trajectories.min_effectiveness"),
    ({"keep_full_retry_share": "lots"}, "trajectories.keep_full_retry_share"),
    ({"hsa": {"rename_tool_p": 2}}, "trajectories.hsa"),
    ({"teacher_oops": 1}, "trajectories.teacher_oops"),
])
def test_bad_trajectory_config_names_the_field(data, field):
    with pytest.raises(ConfigError) as error:
        TrajectoryConfig.from_dict(data)
    assert error.value.field == field
