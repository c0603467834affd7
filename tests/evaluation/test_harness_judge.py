"""The Agent-as-a-Judge: a HarnessSpec run by the runtime, checking facts with tools, forced to answer in JSON."""

import asyncio
import json

import pytest

from evaluation.judges.harness_judge import HarnessJudge, judge_message, judge_spec, parse_verdict
from harness.model_protocol import ModelResponse, ToolCall
from harness.simulator.cases import Case, Expected
from harness.spec import validate
from serving.backends.scripted import ScriptedBackend

ROOM = {"room_id": "r", "title": "T", "products": [{"link_id": "L001", "name": "Sweater", "price": 89.0,
                                                     "promo_price": 71.2}]}
CASE = Case(case_id="c1", category="product_qa", room=ROOM, viewer_id="v1", message="price of L001?",
            expected=Expected(facts=("71.2",)))
TRACE = {"reply": "It is $71.2 now.", "silent": False,
         "steps": [{"kind": "tool", "name": "get_product_info_by_link_id", "arguments": '{"link_id": "L001"}',
                    "result": {"promo_price": 71.2}}]}
LOOKUP = ModelResponse(tool_calls=(
    ToolCall("a", "load_skill", json.dumps({"name": "accuracy-rubric"})),
    ToolCall("b", "get_product_info_by_link_id", json.dumps({"link_id": "L001"})),
))
VERDICT = json.dumps({"accuracy": 1, "effectiveness": 0.5, "reasons": ["promo price matches the tool"]})


def test_judge_harness_is_a_valid_spec_with_tools_and_a_json_hook():
    spec = judge_spec()
    assert validate(spec) == []
    assert {s.name for s in spec.skills} == {"accuracy-rubric", "effectiveness-rubric"}
    assert "get_product_info_by_link_id" in {t.name for t in spec.tools}
    assert {h.name for h in spec.hooks} == {"json-verdict", "require-json"}


def test_judge_verifies_with_tools_and_is_forced_to_answer_in_json():
    backend = ScriptedBackend([LOOKUP, "Looks right to me.", VERDICT])
    verdict = asyncio.run(HarnessJudge([lambda: backend])(CASE, TRACE))
    assert (verdict.accuracy, verdict.effectiveness) == (1, 0.5)
    assert verdict.judge.startswith(f"harness-judge/{judge_spec().content_hash[:8]}/scripted")
    tool_result = next(m for m in backend.calls[1].messages if m.get("tool_call_id") == "b")
    assert json.loads(tool_result["content"])["promo_price"] == 71.2  # the judge looked the fact up itself
    assert "[harness feedback]" in backend.calls[2].messages[-1]["content"]  # non-JSON was sent back


def test_several_judge_models_vote_and_a_silent_judge_abstains():
    yes = lambda: ScriptedBackend([VERDICT])  # noqa: E731
    no = lambda: ScriptedBackend([json.dumps({"accuracy": 0, "effectiveness": 0, "reasons": ["wrong"]})])  # noqa: E731
    mute = lambda: ScriptedBackend(["no json", "still none", "nothing"])  # noqa: E731
    verdict = asyncio.run(HarnessJudge([yes, yes, no, mute])(CASE, TRACE))
    assert verdict.accuracy == 1 and "+".join(["scripted"] * 4) in verdict.judge
    assert verdict.model_ids == ("scripted",) * 4 and verdict.judge_hash == judge_spec().content_hash
    nothing = asyncio.run(HarnessJudge([mute])(CASE, TRACE))
    # "don't know" is not "no": no accuracy 0, an abstention
    assert nothing.abstained and (nothing.accuracy, nothing.effectiveness) == (None, None)
    assert "failed to give a verdict" in nothing.reasons[0] and nothing.judge_hash == judge_spec().content_hash


@pytest.mark.parametrize("outcome", ["fallback", "deadline", "error"])
def test_a_safety_net_turn_is_a_failure_without_asking_any_model(outcome):
    backend = ScriptedBackend([VERDICT])  # would say "accurate" if asked
    verdict = asyncio.run(HarnessJudge([lambda: backend])(CASE, {**TRACE, "outcome": outcome}))
    assert (verdict.accuracy, verdict.effectiveness) == (0, 0.0) and not backend.calls
    assert f"“{outcome}” is a harness safety net" in verdict.reasons[0]


def test_judge_models_by_name_over_real_http(scripted_server, settings):
    """Two OpenAI-compatible endpoints configured by name vote; each score records the model ids."""
    from evaluation.services import resolve_judge

    settings.JUDGE_MODELS = {
        "judge-a": {"base_url": scripted_server([VERDICT], "--model-name", "org/judge-a-8b"), "model": "org/judge-a-8b"},
        "judge-b": {"base_url": scripted_server(["not json", "still not", "nope"], "--model-name", "org/judge-b-70b"),
                    "model": "org/judge-b-70b"},
    }
    judge = resolve_judge("harness:judge-a,judge-b", "scripted")
    verdict = asyncio.run(judge(CASE, {**TRACE, "outcome": "replied"}))
    assert (verdict.accuracy, verdict.effectiveness) == (1, 0.5)  # judge-b abstained, judge-a decided
    assert verdict.model_ids == ("org/judge-a-8b", "org/judge-b-70b")
    assert verdict.judge == f"harness-judge/{judge_spec().content_hash[:8]}/judge-a+judge-b"
    settings.JUDGE_DEFAULT = ["judge-a"]
    assert [name for name, _ in resolve_judge("harness", "scripted").models] == ["judge-a"]


def test_judge_model_configuration_is_validated(settings):
    from django.core.exceptions import ImproperlyConfigured

    from evaluation.judges.judge_models import parse_judge_models
    from evaluation.services import EvalError, resolve_judge

    assert parse_judge_models('{"a": {"base_url": "http://x/v1", "model": "m", "timeout_s": 5}}')["a"].timeout_s == 5
    for bad in ('[]', '{"A B": {"base_url": "u", "model": "m"}}', '{"a": {"model": "m"}}',
                '{"a": {"base_url": "u", "model": "m", "key": "secret"}}', '{"a": {"base_url": "u", "model": "m", '
                '"timeout_s": -1}}'):
        with pytest.raises(ValueError):
            parse_judge_models(bad)
    settings.JUDGE_MODELS = {"a": {"model": "m"}}
    with pytest.raises(ImproperlyConfigured, match="HARNESSOPS_JUDGE_MODELS"):
        resolve_judge("harness:a", "scripted")
    settings.JUDGE_MODELS = {}
    with pytest.raises(EvalError, match="Unknown judge model “nope”"):
        resolve_judge("harness:nope", "scripted")


def test_message_and_parse():
    text = judge_message(CASE, TRACE)
    assert "price of L001?" in text and "$71.2" in text and "get_product_info_by_link_id" in text
    assert parse_verdict("noise " + VERDICT + " trailing", "j").effectiveness == 0.5
    assert parse_verdict('{"accuracy": 3, "effectiveness": 1}', "j") is None
