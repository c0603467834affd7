"""Teacher trajectories through the real runtime: oracle under original and HSA harnesses, judge filter,
retry policy, the data figures on the job page, and the lineage guard."""

import json
from dataclasses import replace

import pytest

from harness.augmentation import HsaConfig, augment
from harness.model_protocol import ModelResponse, ToolCall
from harness.simulator.cases import Case
from training.case_hashing import case_content_hash, case_hashes
from training.lineage import LineageError, check_disjoint, lineage_record
from training.teachers import FEEDBACK_PREFIX, teacher_for
from training.trajectories import (
    TrajectoryConfig,
    TrajectoryReport,
    generate_trajectories,
    reason_kind,
    strip_retries,
)
from training.validation import ConfigError

NO_SLIPS = {"mistake_rate": 0.0}


def test_oracle_trajectories_pass_the_judge_under_original_and_augmented_names(mini_spec, mini_cases):
    config = TrajectoryConfig(augmented_variants=2, teacher_config=NO_SLIPS,
                              hsa=HsaConfig.only("tool_definitions", "skill_identifiers",
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
    both = generate_trajectories(cases, [mini_spec], TrajectoryConfig(augmented_variants=1,
                                                                      teacher_config=NO_SLIPS))[0]
    config = TrajectoryConfig(augmented_variants=1, single_state=True, teacher_config=NO_SLIPS)
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


def test_retry_policy_keeps_all_or_none_of_the_full_retries_at_the_extremes(mini_spec, mini_cases):
    skips = {"mistake_rate": 1.0, "mistakes": ["skipped_skill"]}
    keep_none = TrajectoryConfig(teacher_config=skips, keep_full_retry_share=0.0)
    kept, report = generate_trajectories(mini_cases, [mini_spec], keep_none)
    assert report.retried == len(kept) > 0 and report.full_retry_kept == 0
    for trajectory in kept:
        assert not any(str(m.get("content", "")).startswith(FEEDBACK_PREFIX) for m in trajectory.messages)
        assert sum(1 for m in trajectory.messages if m["role"] == "assistant" and not m.get("tool_calls")) == 1
    keep_all = TrajectoryConfig(teacher_config=skips, keep_full_retry_share=1.0)
    kept, report = generate_trajectories(mini_cases, [mini_spec], keep_all)
    assert report.full_retry_kept == report.retried == len(kept)
    assert all(any(str(m.get("content", "")).startswith(FEEDBACK_PREFIX) for m in t.messages) for t in kept)


# --- a scripted teacher: right on some cases, wrong on others, slipping first on every case ----------------

def _viewer_case(messages, by_message):
    for message in messages:
        if message.get("role") == "user":
            for text, case in by_message.items():
                if str(message.get("content", "")).endswith(text):
                    return case
    raise AssertionError("the viewer's message is not in the prompt")


def scripted_teacher(cases, *, wrong=frozenset(), slip_first=False):
    """A stateless script for `serving.backends.scripted`: the expected tools, the expected skill, then the
    expected facts; the cases in `wrong` get a wrong fact instead. With `slip_first` every case first replies
    before loading a skill, so the harness's require-a-skill hook sends it back (a retry)."""
    by_message = {case.message: case for case in cases}

    def step(messages, tools):
        case = _viewer_case(messages, by_message)
        called = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()]
        feedback = any(m["role"] == "user" and str(m.get("content", "")).startswith(FEEDBACK_PREFIX)
                       for m in messages)
        if slip_first and not feedback:
            return "Great question, checking!"
        pending = [c for c in case.expected.tools if c.name not in called]
        if pending:
            return ModelResponse(tool_calls=tuple(
                ToolCall(id=f"call_{len(called)}_{i}", name=c.name, arguments=json.dumps(dict(c.arguments)))
                for i, c in enumerate(pending)))
        if case.expected.skills and "load_skill" not in called:
            return ModelResponse(tool_calls=(ToolCall(id=f"call_{len(called)}_skill", name="load_skill",
                                                      arguments=json.dumps({"name": case.expected.skills[0]})),))
        if case.case_id in wrong:
            return "Here's what I found: 1."
        facts = list(case.expected.facts)
        return "Here's what I found: " + ", ".join(facts) + "." if facts else "Thanks for watching, ask me anything!"

    return {"steps": [step], "cycle": True}


def many(mini_cases, copies):
    """Copies of the mini cases with messages of their own (so the script can tell them apart)."""
    return [replace(c, case_id=f"{c.case_id}-{k}", message=f"{c.message} ({k})")
            for k in range(copies) for c in mini_cases]


def test_the_judge_filter_drops_exactly_the_wrong_trajectories_of_a_scripted_teacher(mini_spec, mini_cases):
    cases = many(mini_cases, 3)
    wrong = frozenset(c.case_id for c in cases[::2] if c.expected.facts)
    assert wrong and len(wrong) < sum(1 for c in cases if c.expected.facts)
    config = TrajectoryConfig(teacher="scripted", teacher_config=scripted_teacher(cases, wrong=wrong),
                              augmented_variants=0)
    kept, report = generate_trajectories(cases, [mini_spec], config)
    assert {t.case_id for t in kept} == {c.case_id for c in cases} - wrong
    assert report.rejected == len(wrong) and report.kept == len(cases) - len(wrong) == report.turns - len(wrong)
    figures = report.to_dict()
    assert figures["generated"] == len(cases) and figures["rejected_by_reason"] == {"missing fact": len(wrong)}
    assert figures["retried"] == 0 and figures["teacher_mistakes"] == {}  # a model teacher's slips are not known


def test_about_a_fifth_of_the_retry_trajectories_are_kept_whole(mini_spec, mini_cases):
    # The HAT report: most retry trajectories keep only the final correct behaviour, a small share the whole
    # retry. trajectories.py draws per case and harness state with keep_full_retry_share (default 0.2).
    assert TrajectoryConfig().keep_full_retry_share == 0.2
    cases = many(mini_cases, 25)
    config = TrajectoryConfig(teacher="scripted", teacher_config=scripted_teacher(cases, slip_first=True),
                              augmented_variants=0)
    kept, report = generate_trajectories(cases, [mini_spec], config)
    assert report.kept == len(kept) == len(cases) == report.retried  # every case recovered after the feedback
    share = report.full_retry_kept / report.retried
    assert abs(share - 0.2) <= 0.08, share
    whole = [t for t in kept if t.full_retry]
    assert len(whole) == report.full_retry_kept and report.to_dict()["retries_cut"] == len(kept) - len(whole)
    for trajectory in kept:
        replies = [m for m in trajectory.messages if m["role"] == "assistant" and not m.get("tool_calls")]
        has_feedback = any(str(m.get("content", "")).startswith(FEEDBACK_PREFIX) for m in trajectory.messages)
        if trajectory.full_retry:  # the slip is context (weight 0), the recovery after the feedback is learnt
            assert has_feedback and [r.get("weight", 1) for r in replies] == [0, 1]
            assert replies[0]["content"] == "Great question, checking!"
        else:
            assert not has_feedback and len(replies) == 1 and "weight" not in replies[0]
        assert replies[-1]["content"] != "Great question, checking!"
    again = generate_trajectories(cases, [mini_spec], config)[0]
    assert [t.full_retry for t in again] == [t.full_retry for t in kept]  # the draw is stable


def test_the_oracle_slips_by_default_so_the_filter_and_the_retry_policy_act(mini_spec, mini_cases):
    cases = many(mini_cases, 10)
    kept, report = generate_trajectories(cases, [mini_spec], TrajectoryConfig(augmented_variants=0))
    figures = report.to_dict()
    slips = sum(figures["teacher_mistakes"].values())
    assert 0.05 * len(cases) <= slips <= 0.3 * len(cases)  # DEFAULT_MISTAKE_RATE is 0.15
    assert report.rejected > 0 and report.retried > 0 and report.kept == len(kept)
    assert report.kept + report.rejected + report.not_called == report.turns
    assert set(figures["rejected_by_reason"]) <= {"missing fact", "no expected reply skill loaded",
                                                  "expected tool call not made"}
    clean = generate_trajectories(cases, [mini_spec], TrajectoryConfig(augmented_variants=0,
                                                                        teacher_config=NO_SLIPS))[1]
    assert clean.rejected == clean.retried == 0 and clean.kept == len(cases)


def test_rejection_reasons_are_counted_by_kind_once_per_turn():
    assert reason_kind("missing fact: “88”") == "missing fact"
    assert reason_kind("no expected reply skill loaded (expected one of a; loaded b)") == \
        "no expected reply skill loaded"
    report = TrajectoryReport(turns=3, kept=1, rejected=2, retried=1, full_retry_kept=1,
                              reasons={"missing fact": 2}, mistakes={"wrong_field": 2})
    figures = report.to_dict()
    assert figures["generated"] == 3 and figures["retries_cut"] == 0
    assert figures["rejected_by_reason"] == figures["top_rejection_reasons"] == {"missing fact": 2}
    assert figures["teacher_mistakes"] == {"wrong_field": 2}
    json.dumps(figures)


@pytest.mark.django_db
def test_the_job_page_shows_the_sft_data_figures_escaped(client, members, workspace):
    from training.models import Checkpoint, TrainingJob
    from training.selectors import trajectory_figures

    report = TrajectoryReport(turns=40, kept=33, rejected=6, not_called=1, retried=5, full_retry_kept=1,
                              reasons={"missing fact": 4, "<b>odd</b> reason": 2},
                              mistakes={"wrong_field": 4, "skipped_skill": 5}).to_dict()
    job = TrainingJob.objects.create(workspace=workspace, name="figures", base_model="m", stages=["sft", "opd"],
                                     config={})
    Checkpoint.objects.create(workspace=workspace, job=job, stage="sft", base_model="m", path="/a",
                              data_lineage={"cases": 20, "report": report})
    Checkpoint.objects.create(workspace=workspace, job=job, stage="opd", base_model="m", path="/b",
                              data_lineage={"cases": 64, "report": {"prompts": 64}})
    rows = {row["label"]: row["value"] for row in trajectory_figures(report)}
    assert rows["Trajectories generated"] == 40 and rows["Kept for training"] == 33
    assert rows["Rejected by the judge"] == 6 and rows["missing fact"] == 4
    assert rows["kept whole (rejected reply and feedback as context)"] == 1
    assert rows["cut to the final behaviour"] == 4 and rows["stated the wrong field"] == 4
    assert trajectory_figures({"prompts": 64}) == [] and trajectory_figures(None) == []
    # a report stored before these figures existed still shows what it holds
    old = {row["label"]: row["value"] for row in trajectory_figures(
        {"turns": 8, "kept": 7, "rejected": 1, "retried": 2, "full_retry_kept": 1,
         "top_rejection_reasons": {"missing fact": 1}})}
    assert old["Trajectories generated"] == 8 and old["cut to the final behaviour"] == 1

    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/training/jobs/{job.pk}/").content.decode()
    table = page[page.index('id="data-reports"'):page.index("<h2>Log</h2>")]
    assert "Trajectories generated</td><td>40" in table and "Rejected by the judge</td><td>6" in table
    assert "&lt;b&gt;odd&lt;/b&gt; reason" in table and "<b>odd</b>" not in table
    assert "{" not in table and "_" not in table.split("</caption>", 1)[1]  # no dicts, no Python names
    assert 'id="data-reports-empty" hidden' in table
    assert table.count("<table") == 1  # the OPD checkpoint has no trajectory figures


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

    response = asyncio.run(teacher_for("oracle", case, NO_SLIPS).complete(
        [{"role": "user", "content": case.message}], openai_tools(augmentation.spec)))
    assert [c.name for c in response.tool_calls] == [augmentation.mapping.tool("get_product_info_by_link_id")]


def test_the_skill_first_oracle_loads_the_skill_then_calls_tools_by_the_names_of_the_case_it_is_given(
        mini_spec, mini_cases):
    import asyncio

    augmentation = augment(mini_spec, HsaConfig.only("tool_definitions", rename_tool_p=1.0), seed=3)
    case = augmentation.mapping.rewrite_case(next(c for c in mini_cases if c.expected.tools))
    from harness.spec import openai_tools

    teacher, tools = teacher_for("oracle", case, {"skill_first": True, **NO_SLIPS}), openai_tools(augmentation.spec)
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
    reply = asyncio.run(teacher_for("oracle", case, {"skill_first": True, **NO_SLIPS}).complete(
        messages, [], tool_choice="none")).content
    # 88 is the price field exactly; "wool" only occurs inside a text, so it stays bare
    assert reply == "Here's what I found: price 88, wool."
    default = asyncio.run(teacher_for("oracle", case, NO_SLIPS).complete(messages, [], tool_choice="none")).content
    assert default == "Here's what I found: 88, wool."
    with pytest.raises(ValueError, match="skill_first must be true or false"):
        teacher_for("oracle", case, {"skill_first": "false"})
    named = teacher_for("oracle", case, {"name_fields": True, **NO_SLIPS})
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
        return asyncio.run(teacher_for("oracle", edited, NO_SLIPS).complete([], [], tool_choice="none")).content

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
