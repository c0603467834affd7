"""Teachers chosen per job: the oracle's seeded slips (each judged as intended), an OpenAI-compatible model
over real HTTP under original and HSA harnesses, and the probe that refuses a teacher that does not answer
before anything trains, naming the field."""

import socket
import threading
import time
from collections import Counter
from dataclasses import replace

import pytest

from harness.spec import openai_tools
from serving.openai_compat import CompletionServer
from tests.training.conftest import MINI_HARNESS
from training.pipeline_config import PipelineConfig
from training.teachers import (
    DEFAULT_MISTAKE_RATE,
    MISTAKES,
    OracleBackend,
    draw_mistake,
    mistakes_for,
    teacher_for,
)
from training.trajectories import TrajectoryConfig, generate_trajectories, harness_variants
from training.validation import ConfigError

# --- the oracle's slips ------------------------------------------------------------------------------------


@pytest.fixture
def price_case(mini_cases):
    """A case with a fact, a tool and a skill to get wrong (every slip applies)."""
    return next(c for c in mini_cases if c.expected.facts and c.expected.tools and c.expected.skills)


@pytest.mark.parametrize(("mistake", "reason"), [
    ("wrong_field", "missing fact"),
    ("wrong_skill", "no expected reply skill loaded"),
    ("missed_tool", "expected tool call not made"),
])
def test_each_slip_the_judge_should_catch_is_rejected_for_its_reason(mini_spec, price_case, mistake, reason):
    config = TrajectoryConfig(teacher_config={"mistake_rate": 1.0, "mistakes": [mistake]}, augmented_variants=1)
    kept, report = generate_trajectories([price_case], [mini_spec], config)
    assert kept == [] and report.rejected == report.turns == 2
    assert report.to_dict()["rejected_by_reason"] == {reason: 2}
    assert report.mistakes == {mistake: 2}


def test_a_skipped_skill_is_sent_back_by_the_hook_and_kept_as_a_retry(mini_spec, price_case):
    config = TrajectoryConfig(teacher_config={"mistake_rate": 1.0, "mistakes": ["skipped_skill"]},
                              augmented_variants=1, keep_full_retry_share=1.0)
    kept, report = generate_trajectories([price_case], [mini_spec], config)
    assert len(kept) == report.retried == report.full_retry_kept == 2 and report.rejected == 0
    replies = [m for m in kept[0].messages if m["role"] == "assistant" and not m.get("tool_calls")]
    assert [r.get("weight", 1) for r in replies] == [0, 1]  # the slip, then the reply after loading the skill


def test_the_wrong_field_is_another_tool_result_value_never_the_fact(price_case):
    import asyncio
    import json

    results = {"price": 175.0, "promo_price": 140.0, "stock": 12, "link_id": "L001"}
    messages = [{"role": "user", "content": price_case.message},
                {"role": "tool", "tool_call_id": "1", "content": json.dumps(results)}]
    reply = asyncio.run(OracleBackend(price_case, mistake="wrong_field").complete(messages, [], tool_choice="none"))
    right = asyncio.run(OracleBackend(price_case).complete(messages, [], tool_choice="none"))
    from evaluation.judges.text import contains

    fact = price_case.expected.facts[0]  # matched as the judge matches it: "40" is not in "140"
    assert contains(right.content, fact) and not contains(reply.content, fact)
    assert any(str(v).removesuffix(".0") in reply.content for v in results.values())
    with pytest.raises(ValueError, match="oracle mistake must be one of"):
        OracleBackend(price_case, mistake="typo")


def test_slips_are_drawn_per_case_at_the_rate_and_only_where_the_case_allows_them(mini_cases):
    cases = [replace(c, case_id=f"{c.case_id}-{k}") for k in range(300) for c in mini_cases]
    drawn = [draw_mistake(c, 0.2) for c in cases]
    assert drawn == [draw_mistake(c, 0.2) for c in cases]  # reproducible: a stable draw per case id
    share = sum(bool(d) for d in drawn) / len(cases)
    assert abs(share - 0.2) < 0.04, share
    for case, mistake in zip(cases, drawn, strict=True):
        assert not mistake or mistake in mistakes_for(case)
    chat = [m for c, m in zip(cases, drawn, strict=True) if not c.expected.tools]
    assert {m for m in chat if m} <= {"skipped_skill", "wrong_skill"}  # no fact to get wrong, no tool to skip
    assert set(Counter(d for d in drawn if d)) == set(MISTAKES)
    assert all(not draw_mistake(c, 0.0) for c in cases)
    assert [draw_mistake(c, 1.0, ("missed_tool",)) for c in cases[:6]] == [
        "missed_tool" if c.expected.tools else "" for c in cases[:6]]
    assert teacher_for("oracle", cases[0]).mistake == draw_mistake(cases[0], DEFAULT_MISTAKE_RATE)


@pytest.mark.parametrize(("trajectories", "field"), [
    ({"teacher_config": {"mistake_rate": 2}}, "trajectories.teacher_config.mistake_rate"),
    ({"teacher_config": {"mistake_rate": True}}, "trajectories.teacher_config.mistake_rate"),
    ({"teacher_config": {"mistakes": ["typo"]}}, "trajectories.teacher_config.mistakes"),
    ({"teacher_config": {"mistakes": []}}, "trajectories.teacher_config.mistakes"),
    ({"teacher_config": {"skill_frist": True}}, "trajectories.teacher_config.skill_frist"),
    ({"teacher": "gpt-9"}, "trajectories.teacher"),
    ({"teacher": "openai", "teacher_config": {"model": "m"}}, "trajectories.teacher_config.base_url"),
    ({"teacher": "openai", "teacher_config": {"base_url": "http://h/v1"}}, "trajectories.teacher_config.model"),
    ({"teacher": "openai", "teacher_config": {"base_url": "ftp://h/v1", "model": "m"}},
     "trajectories.teacher_config.base_url"),
])
def test_a_bad_teacher_choice_names_its_field(trajectories, field):
    with pytest.raises(ConfigError) as error:
        TrajectoryConfig.from_dict(trajectories)
    assert error.value.field == field


# --- an OpenAI-compatible teacher over HTTP ---------------------------------------------------------------


class CaseOracles:
    """The model behind the test server: the slip-free oracle of the case the prompt is about, in the names of
    the harness state it is offered (a stand-in for a strong model that reads the harness)."""

    name = "case-oracles"

    def __init__(self, variants):
        self.variants = variants  # (case in that state's names, the names the state offers)
        self.requests = 0

    async def complete(self, messages, tools, **kwargs):
        self.requests += 1
        viewer = next(m["content"] for m in messages if m["role"] == "user")
        offered = {t["function"]["name"] for t in tools}
        case = next(c for c, names in self.variants if viewer.endswith(c.message) and offered <= names)
        return await OracleBackend(case).complete(messages, tools, **kwargs)


@pytest.fixture
def teacher_server(mini_spec, mini_cases):
    """An in-process OpenAI-compatible server (serving.openai_compat) on a free port; yields its /v1 URL."""
    config = TrajectoryConfig(augmented_variants=1)
    variants = [(case, {t["function"]["name"] for t in openai_tools(spec)})
                for original in mini_cases for _, spec, case in harness_variants(mini_spec, original, config)]
    model = CaseOracles(variants)
    server = CompletionServer(("127.0.0.1", 0), model, model_name="big-teacher")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.model = model
    yield server, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_an_openai_teacher_answers_under_original_and_hsa_harnesses_through_the_runtime(
        mini_spec, mini_cases, teacher_server):
    server, base_url = teacher_server
    config = TrajectoryConfig(teacher="openai", teacher_config={"base_url": base_url, "model": "big-teacher"},
                              augmented_variants=1)
    kept, report = generate_trajectories(mini_cases, [mini_spec], config)
    assert report.turns == 2 * len(mini_cases) and len(kept) == report.kept == report.turns
    assert server.model.requests >= report.turns  # every turn's model calls went over HTTP
    augmented = [t for t in kept if t.variant.startswith("hsa:")]
    assert len(augmented) == len(mini_cases)
    for trajectory in kept:  # every call uses a name the harness state offered
        called = {c["function"]["name"] for m in trajectory.messages for c in m.get("tool_calls") or ()}
        assert called <= {t["function"]["name"] for t in trajectory.tools}


def pipeline(trajectories, stages=({"kind": "sft", "config": {"max_steps": 1}},)):
    return {"model": {"base": "tiny-random-smollm2", "device": "cpu"},
            "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}], "data": {"simulator_cases": 2},
            "trajectories": trajectories, "stages": list(stages)}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed on leaving: nothing listens there


def test_the_job_validation_probes_the_teacher_and_refuses_one_that_does_not_answer(teacher_server):
    _, base_url = teacher_server
    good = {"teacher": "openai", "teacher_config": {"base_url": base_url, "model": "big-teacher"}}
    assert PipelineConfig.from_dict(pipeline(good)).trajectories.teacher == "openai"

    dead = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(ConfigError) as error:
        PipelineConfig.from_dict(pipeline({**good, "teacher_config": {"base_url": dead, "model": "big-teacher"}}))
    assert error.value.field == "trajectories.teacher_config.base_url"
    assert f"{dead}/models did not answer" in str(error.value) and time.monotonic() - started < 10
    with pytest.raises(ConfigError) as error:  # the API root is /v1: /models there is a 404
        PipelineConfig.from_dict(pipeline({**good, "teacher_config": {"base_url": base_url.removesuffix("/v1"),
                                                                      "model": "big-teacher"}}))
    assert error.value.field == "trajectories.teacher_config.base_url" and "HTTP 404" in str(error.value)
    with pytest.raises(ConfigError) as error:
        PipelineConfig.from_dict(pipeline({**good, "teacher_config": {"base_url": base_url, "model": "small"}}))
    assert error.value.field == "trajectories.teacher_config.model" and "big-teacher" in str(error.value)
    # no sft stage, no teacher to ask
    opd_only = pipeline({**good, "teacher_config": {"base_url": dead, "model": "m"}},
                        stages=[{"kind": "opd", "config": {"max_steps": 1}}])
    assert PipelineConfig.from_dict(opd_only).stages[0].kind == "opd"
    # a caller whose SFT data is already prepared (a resumed job) need not ask
    resumed = pipeline({**good, "teacher_config": {"base_url": dead, "model": "big-teacher"}})
    assert PipelineConfig.from_dict(resumed, probe=False).trajectories.teacher_config["base_url"] == dead


def test_a_job_naming_a_teacher_that_does_not_answer_is_refused_with_the_field():
    from training.services import TrainingError, config_validate

    dead = {"teacher": "openai", "teacher_config": {"base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "m"}}
    with pytest.raises(TrainingError) as error:
        config_validate(pipeline(dead))
    assert error.value.field == "trajectories.teacher_config.base_url"
