"""Tokens per turn: each model call's prompt, cached and completion tokens from the backend onto the stored trace,
the trace page, and their P50/P95 per version (the harness page), per experiment arm and per eval run."""

import asyncio
import json

import pytest

from harness import services as harness_services
from harness.runtime.latency import replay_stats, token_stats
from serving.backends.openai import _response_from_json, _StreamState
from serving.backends.scripted import ScriptedBackend
from serving.experiments.guardrails import arm_guardrails
from serving.experiments.lifecycle import experiment_create, experiment_start
from serving.models import Trace
from serving.services import api_key_create, room_upsert
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

SYSTEM = Actor.system("test")


def turn(tokens_in: int, cached: int, tokens_out: int) -> list:
    return [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                            {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}],
             "tokens_in": tokens_in, "tokens_cached": cached, "tokens_out": 20},
            {"content": "The sweater is $71.2 now, down from $89.", "tokens_in": tokens_in + 40,
             "tokens_cached": tokens_in, "tokens_out": tokens_out}]


@pytest.fixture
def platform(client, workspace, harness, settings):
    settings.MODEL_BACKEND, settings.REPLY_RATE_PER_MINUTE, settings.LIVE_JUDGE_RATE = "scripted", 1000, 0.0
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read"])[1]

    def reply(steps: list, viewer: str = "v1") -> dict:
        settings.SCRIPTED_STEPS = steps
        response = client.post("/api/v1/rooms/demo-room/reply", json.dumps({"message": "price?", "viewer_id": viewer}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 200, response.content
        return response.json()

    return reply


@pytest.mark.django_db
def test_each_model_calls_tokens_are_stored_and_shown_on_the_trace_page(platform, client, members):
    body = platform(turn(300, 120, 14))
    trace = Trace.objects.get(trace_id=body["trace_id"])
    assert (trace.tokens_in, trace.tokens_cached, trace.tokens_out) == (300 + 340, 120 + 300, 20 + 14)
    calls = [s for s in trace.data["steps"] if s["kind"] == "model"]
    assert [(s["tokens_in"], s["tokens_cached"], s["tokens_out"]) for s in calls] == [(300, 120, 20), (340, 300, 14)]
    client.force_login(members["viewer"])
    html = client.get(f"/w/acme/traces/{body['trace_id']}/").content.decode()
    assert "tokens 640 in (420 cached) / 34 out" in html
    assert "300→20 tokens (120 of the prompt cached)" in html and "340→14 tokens (300 of the prompt cached)" in html


@pytest.mark.django_db
def test_the_harness_page_shows_each_versions_token_percentiles_beside_its_accuracy(platform, client, members,
                                                                                      harness):
    for i, prompt in enumerate((100, 200, 300)):  # turns of 2·prompt + 40 prompt tokens: 240, 440, 640
        platform(turn(prompt, prompt // 2, 10 * (i + 1)), viewer=f"v{i}")
    client.force_login(members["viewer"])
    response = client.get(f"/w/acme/harnesses/{harness.name}/")
    html = response.content.decode()
    row = html[html.index(f'data-version="{harness.head.number}"'):]
    row = row[:row.index("</tr>")]
    # P50 and P95 (linear interpolation) of the turns' 240, 440, 640 prompt tokens.
    assert "<td>3</td>" in row and "440 / 620" in row
    assert "<td>300 / 435</td>" in row  # cached: 50 + 100, 100 + 200, 150 + 300
    assert "<td>40 / 49</td>" in row  # completion: 20+10, 20+20, 20+30
    chart = json.loads(html.split('id="usage-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert chart == [{"version": f"v{harness.head.number}", "n": 3, "prompt_p50": 440.0, "prompt_p95": 620.0,
                      "cached_p50": 300.0, "cached_p95": 435.0, "completion_p50": 40.0, "completion_p95": 49.0,
                      "latency_p50_ms": chart[0]["latency_p50_ms"], "latency_p95_ms": chart[0]["latency_p95_ms"]}]
    assert 'id="chart-usage"' in html


@pytest.mark.django_db
def test_each_experiment_arm_has_its_token_percentiles(platform, workspace, harness):
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="tokens", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=SYSTEM, experiment=experiment)
    arms = {}
    for i in range(12):
        arms.setdefault(platform(turn(100 + i, 0, 5), viewer=f"x{i}")["arm"].rsplit(":", 1)[1], []).append(i)
    rows = {row["arm"]: row for row in arm_guardrails(experiment, list(experiment.arms.all()))}
    for arm, viewers in arms.items():
        stored = Trace.objects.filter(arm=f"exp:tokens:{arm}")
        assert rows[arm]["tokens"] == token_stats(stored.values("tokens_in", "tokens_cached", "tokens_out"))
        assert rows[arm]["tokens"]["n"] == len(viewers) and rows[arm]["tokens"]["completion_p50"] == 25


def test_token_percentiles_and_turns_without_counts():
    stats = token_stats([{"tokens_in": 10, "tokens_out": 1, "tokens_cached": 4}, {"tokens_in": 30, "tokens_out": 3},
                         {"prompt": "an IFEval record"}])
    assert stats == {"n": 2, "prompt_p50": 20.0, "prompt_p95": 29.0, "cached_p50": 2.0, "cached_p95": 3.8,
                     "completion_p50": 2.0, "completion_p95": 2.9}
    assert replay_stats([{"duration_ms": 5.0, "outcome": "replied", "tokens_in": 10, "tokens_out": 1}])["tokens"] == \
        {"n": 1, "prompt_p50": 10.0, "prompt_p95": 10.0, "cached_p50": 0.0, "cached_p95": 0.0,
         "completion_p50": 1.0, "completion_p95": 1.0}  # an eval run's tokens a turn (its run page)
    assert token_stats([]) == {"n": 0, "prompt_p50": None, "prompt_p95": None, "cached_p50": None,
                               "cached_p95": None, "completion_p50": None, "completion_p95": None}


def test_backends_report_cached_prompt_tokens():
    message = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    vllm = _response_from_json({**message, "usage": {"prompt_tokens": 50, "completion_tokens": 2,
                                                     "prompt_tokens_details": {"cached_tokens": 32}}}, latency_ms=1)
    llama_server = _response_from_json({**message, "usage": {"prompt_tokens": 50, "completion_tokens": 2},
                                        "timings": {"cache_n": 48, "prompt_n": 2}}, latency_ms=1)
    plain = _response_from_json({**message, "usage": {"prompt_tokens": 50, "completion_tokens": 2}}, latency_ms=1)
    assert (vllm.tokens_cached, llama_server.tokens_cached, plain.tokens_cached) == (32, 48, 0)
    stream = _StreamState()
    stream.add({"choices": [{"delta": {"content": "hi"}}]})
    stream.add({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 1}, "timings": {"cache_n": 40}})
    assert stream.response(latency_ms=1).tokens_cached == 40
    # The scripted model counts words: its prompt's too, when its script gives no count.
    response = asyncio.run(ScriptedBackend(["two words"]).complete(
        [{"role": "system", "content": "one two three"}, {"role": "user", "content": "four five"}], []))
    assert (response.tokens_in, response.tokens_out, response.tokens_cached) == (5, 2, 0)


@pytest.mark.django_db
def test_an_eval_runs_page_shows_its_tokens_a_turn(client, members, workspace, harness, settings):
    from evaluation import services as eval_services

    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "casual-chat"}}],
                                "tokens_in": 500, "tokens_cached": 400, "tokens_out": 12},
                               {"content": "Hi! Welcome to the stream, great to have you here.", "tokens_in": 530,
                                "tokens_cached": 500, "tokens_out": 11}]
    version = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="tok", suite="live_stream_qa",
                                              seed=3, n=4)
    run = eval_services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=harness,
                                   version=harness.head, backend="scripted", start=False)
    eval_services.run_execute(run_id=run.pk)
    turns = [r.trace for r in run.results.all() if "tokens_in" in r.trace]
    assert turns and all(t["tokens_in"] == 1030 for t in turns if t["model_calls"] == 2)
    client.force_login(members["viewer"])
    html = client.get(f"/w/acme/eval/runs/{run.pk}/").content.decode()
    table = html[html.index('id="replay-tokens"'):]
    table = table[:table.index("</table>")]
    stats = token_stats(turns)
    for kind in ("prompt", "cached", "completion"):
        assert f"<td>{stats[kind + '_p50']:.0f}</td><td>{stats[kind + '_p95']:.0f}</td>" in table
