"""`/metrics` (workspaces.metrics, console.metrics): hidden without a scrape token, refused without the right one,
and after real traffic through both reply routes, the event ingest, a Celery job and a guardrail stop, each
counter has moved by exactly the traffic sent."""

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from prometheus_client.parser import text_string_to_metric_families

from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start
from serving.models import Experiment, Trace
from serving.services import api_key_create, room_upsert
from tests.serving.test_reply_api import ROOM
from workspaces import metrics
from workspaces.access import Actor
from workspaces.jobs import registered_task

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
TOKEN = "scrape-token-for-tests"
STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}],
          "tokens_in": 300, "tokens_cached": 120, "tokens_out": 20},
         {"content": "The sweater is $71.2 now, down from $89.", "tokens_in": 340, "tokens_cached": 300,
          "tokens_out": 14}]


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.content.decode()) for sample in family.samples}


def moved(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.fixture
def scrape_token(monkeypatch):
    monkeypatch.setenv("HARNESSOPS_METRICS_TOKEN", TOKEN)


@pytest.fixture
def platform(workspace, harness, settings, client):
    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS = "scripted", STEPS
    settings.REPLY_RATE_PER_MINUTE, settings.LIVE_JUDGE_RATE = 1000, 0.0
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read", "ingest"])[1]

    def post(path, body):
        return client.post(path, json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    return post


def test_metrics_are_not_there_without_a_token_and_refused_with_a_wrong_one(client, monkeypatch):
    monkeypatch.delenv("HARNESSOPS_METRICS_TOKEN", raising=False)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404
    monkeypatch.setenv("HARNESSOPS_METRICS_TOKEN", TOKEN)
    assert client.get("/metrics").status_code == 401
    refused = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert refused.status_code == 401 and b"harnessops_" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_counters_move_by_exactly_the_replies_and_events_sent(client, platform, scrape_token, settings):
    before = scrape(client)
    for i in range(3):
        assert platform("/api/v1/rooms/demo-room/reply", {"message": "price?", "viewer_id": f"v{i}"}).json()[
            "outcome"] == "replied"
    settings.SCRIPTED_STEPS = [{"error": "the model server is down"}]
    failed = platform("/api/v1/rooms/demo-room/reply", {"message": "price?", "viewer_id": "v9"}).json()
    assert failed["outcome"] == "error"
    now = datetime.now(UTC).isoformat()
    event = {"type": "item_page_view", "viewer_id": "v1", "room_id": "demo-room", "item_id": "L001", "ts": now}
    ingest = platform("/api/v1/events", {"events": [{**event, "event_id": "e1"}, {**event, "event_id": "e2"},
                                                    {**event, "event_id": "e1"},
                                                    {**event, "event_id": "bad", "ts": "2026-13-45T00:00:00Z"}]})
    assert ingest.status_code == 200, ingest.content
    after = scrape(client)

    assert moved(before, after, "harnessops_reply_requests_total", outcome="replied", harness="avatar",
                 label="production") == 3
    assert moved(before, after, "harnessops_reply_requests_total", outcome="error", harness="avatar",
                 label="production") == 1
    assert moved(before, after, "harnessops_reply_duration_seconds_count", outcome="replied", label="production") == 3
    stored = sum(t.latency_ms for t in Trace.objects.filter(outcome="replied")) / 1000
    assert moved(before, after, "harnessops_reply_duration_seconds_sum", outcome="replied",
                 label="production") == pytest.approx(stored, rel=1e-6)
    assert moved(before, after, "harnessops_model_call_duration_seconds_count", backend="scripted") == 6
    assert moved(before, after, "harnessops_model_call_errors_total", backend="scripted") == 1
    assert moved(before, after, "harnessops_model_tokens_total", backend="scripted", kind="prompt") == 3 * 640
    assert moved(before, after, "harnessops_model_tokens_total", backend="scripted", kind="cached") == 3 * 420
    assert moved(before, after, "harnessops_model_tokens_total", backend="scripted", kind="completion") == 3 * 34
    assert moved(before, after, "harnessops_tool_call_duration_seconds_count",
                 tool="get_product_info_by_link_id") == 3
    assert moved(before, after, "harnessops_tool_call_errors_total", tool="get_product_info_by_link_id") == 0
    assert moved(before, after, "harnessops_events_total", result="accepted") == 2
    assert moved(before, after, "harnessops_events_total", result="duplicate") == 1
    assert moved(before, after, "harnessops_events_total", result="rejected") == 1


def test_hook_blocks_and_retries_are_counted(client, platform, scrape_token, settings):
    # The demo harness denies a coupon above its cap before the tool runs, and sends a markdown reply back once.
    settings.SCRIPTED_STEPS = [
        {"tool_calls": [{"name": "load_skill", "arguments": {"name": "discount-promotion"}},
                        {"name": "issue_coupon", "arguments": {"link_id": "L001", "discount_pct": 60}}]},
        "**Sure**, let me check that for you.", "Let me check that for you."]
    before = scrape(client)
    body = platform("/api/v1/rooms/demo-room/reply", {"message": "price?", "viewer_id": "h1"}).json()
    blocked = platform("/api/v1/rooms/demo-room/reply", {"message": "dm me for crypto", "viewer_id": "h2"}).json()
    after = scrape(client)
    assert body["outcome"] == "replied" and blocked["silent"]
    assert moved(before, after, "harnessops_hook_blocks_total", event="pre_tool", hook="cap-coupon-discount",
                 action="deny") == 1
    assert moved(before, after, "harnessops_hook_blocks_total", event="input", hook="refuse-irrelevant-input",
                 action="block") == 1
    assert moved(before, after, "harnessops_hook_retries_total", hook="reply-format") == 1
    assert moved(before, after, "harnessops_tool_call_errors_total", tool="issue_coupon") == 0  # a hook's denial
    assert moved(before, after, "harnessops_reply_requests_total", outcome="replied", harness="avatar",
                 label="production") == 1


def test_a_guardrail_stop_and_its_job_are_counted(client, platform, workspace, harness, scrape_token):
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="guarded", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=SYSTEM, experiment=experiment)
    for i in range(4):
        platform("/api/v1/rooms/demo-room/reply", {"message": "price?", "viewer_id": f"g{i}"})
    before = scrape(client)
    task = registered_task("serving.check_guardrails")
    task.apply(args=[experiment.pk])  # nothing trips yet
    Experiment.objects.filter(pk=experiment.pk).update(guardrails={"latency_p95_ms": 0.0001, "min_samples": 1})
    task.apply(args=[experiment.pk])
    after = scrape(client)
    assert Experiment.objects.get(pk=experiment.pk).status == "stopped"
    assert moved(before, after, "harnessops_guardrail_stops_total") == 1
    assert moved(before, after, "harnessops_job_duration_seconds_count", kind="serving.check_guardrails",
                 state="success") == 2


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="the queue depth is read from the broker's Redis")
def test_queue_depth_is_the_broker_list_length(client, scrape_token, monkeypatch):
    import redis

    queue = f"harnessops-test-queue-{os.getpid()}"
    monkeypatch.setattr(metrics, "QUEUES", (queue,))
    broker = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        broker.rpush(queue, "a", "b", "c")
        assert scrape(client)[("harnessops_celery_queue_depth", (("queue", queue),))] == 3
    finally:
        broker.delete(queue)
        broker.close()


def test_multiprocess_mode_adds_up_every_process(tmp_path):
    """Two processes count under PROMETHEUS_MULTIPROC_DIR (as uvicorn workers do); a third one's scrape has both."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(root)}
    count = ("from workspaces import metrics; metrics.REPLIES.labels('replied', 'demo', 'production').inc(%d); "
             "metrics.MODEL_TOKENS.labels('scripted', 'prompt').inc(100)")
    for n in (2, 5):
        subprocess.run([sys.executable, "-c", count % n], env=env, check=True, cwd=root)
    text = subprocess.run([sys.executable, "-c", "from workspaces import metrics; "
                           "print(metrics.exposition(None)[0].decode())"], env=env, check=True, cwd=root,
                          capture_output=True, text=True).stdout
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("harnessops_reply_requests_total",
                    (("harness", "demo"), ("label", "production"), ("outcome", "replied")))] == 7
    assert samples[("harnessops_model_tokens_total", (("backend", "scripted"), ("kind", "prompt")))] == 200


@pytest.mark.skipif(not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
                    or not django_settings.REDIS_URL, reason="the route on the loop needs PostgreSQL and Redis")
@pytest.mark.django_db(transaction=True)
def test_the_route_on_the_event_loop_counts_its_replies_once(client, workspace, harness, settings, scrape_token):
    from django.core.cache import cache

    from tests.serving import test_lean_reply as lean

    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS = "scripted", lean.STEPS
    settings.REPLY_RATE_PER_MINUTE = 1000
    cache.clear()
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=lean.ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read"])[1]
    before = scrape(client)
    answers = lean.asgi([(lean.REPLY, {**lean.HELLO, "viewer_id": f"v{i}"}, lean.bearer(token)) for i in range(4)])
    after = scrape(client)
    assert [a["status"] for a in answers] == [200] * 4
    assert answers[0]["django"] and not answers[-1]["django"]  # both routes answered
    assert moved(before, after, "harnessops_reply_requests_total", outcome="replied", harness="avatar",
                 label="production") == 4
    assert moved(before, after, "harnessops_tool_call_duration_seconds_count",
                 tool="get_product_info_by_link_id") == 4


def test_a_scrape_is_answered_before_host_validation_and_the_https_redirect(client, scrape_token, settings):
    """Prometheus scrapes a web container by its address, over the internal network, in production settings."""
    settings.ALLOWED_HOSTS, settings.SECURE_SSL_REDIRECT = ["console.shop.example"], True
    scraped = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", HTTP_HOST="10.0.3.7:8000")
    assert scraped.status_code == 200 and b"harnessops_reply_requests" in scraped.content
    assert client.get("/metrics", HTTP_HOST="10.0.3.7:8000").status_code == 401
    assert client.get("/healthz/x", HTTP_HOST="console.shop.example").status_code == 301  # the rest: redirected


def test_the_dashboard_and_the_scrape_configuration_name_metrics_that_exist():
    """docs/observability/: every metric the Grafana dashboard queries is one /metrics serves (a renamed metric
    fails here, not on an operator's empty panel), and the Prometheus and collector configurations parse."""
    import re

    import yaml
    from prometheus_client import REGISTRY

    root = Path(__file__).resolve().parents[2] / "docs" / "observability"
    dashboard = json.loads((root / "grafana-dashboard.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"harnessops_[a-z_]+", target["expr"])}
    served = {sample_name for family in REGISTRY.collect() if family.name.startswith("harnessops_")
              for sample_name in (family.name, f"{family.name}_total", f"{family.name}_bucket",
                                  f"{family.name}_sum", f"{family.name}_count")}
    served.add("harnessops_celery_queue_depth")  # read from the broker at scrape time
    assert queried and queried <= served, queried - served
    scrape = yaml.safe_load((root / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics" and scrape["authorization"]["type"] == "Bearer"
    collector = yaml.safe_load((root / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
