"""Webhooks (workspaces.webhooks) against a real local HTTPS receiver with a certificate made here and trusted through
WEBHOOK_CA_BUNDLE: signed deliveries of the actions' events, retries with backoff, responses recorded, a failing or
slow endpoint never holding the action, replay from the console, and endpoints only where the tool-host rules
allow them."""

import datetime
import ipaddress
import json
import os
import queue
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import PermissionDenied

from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start, experiment_stop
from workspaces import webhooks
from workspaces.access import Actor
from workspaces.models import AuditEvent, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)  # deliveries start once the action's transaction commits
SYSTEM = Actor.system("test")


def self_signed(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harnessops test receiver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


class Receiver:
    """An HTTPS server that records each POST and answers the statuses queued in `answers` (then 200)."""

    def __init__(self, cert: str, key: str):
        self.received: queue.Queue = queue.Queue()
        self.answers: list[int] = []
        self.delay_s = 0.0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(receiver.delay_s)
                status = receiver.answers.pop(0) if receiver.answers else 200
                receiver.received.put((dict(self.headers), body, status))
                answer = json.dumps({"seen": True, "status": status}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/hooks"

    def next(self, timeout: float = 20.0):
        return self.received.get(timeout=timeout)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(tmp_path, settings, workspace):
    cert, key = self_signed(tmp_path)
    settings.WEBHOOK_CA_BUNDLE = cert
    settings.WEBHOOK_BACKOFF_S = (0.05, 0.1, 0.1, 0.1)
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the embedded mode's in-process worker
    workspace.tool_hosts = ["127.0.0.1"]  # a loopback endpoint must be allow-listed, as a tool host must
    workspace.save(update_fields=["tool_hosts"])
    running = Receiver(cert, key)
    yield running
    running.close()


def wait_for_status(delivery_id: int, status: str, timeout: float = 20.0) -> WebhookDelivery:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        delivery = WebhookDelivery.objects.get(pk=delivery_id)
        if delivery.status == status:
            return delivery
        time.sleep(0.05)
    raise AssertionError(f"delivery {delivery_id} is {delivery.status}, not {status}")


def test_an_endpoint_goes_only_where_tool_hosts_may_and_bad_input_writes_nothing(workspace, receiver, actors):
    admin = actors["admin"]
    cases = [
        ("http://127.0.0.1:9/hooks", ["label.moved"], "url: an endpoint must use https://"),
        ("https://10.1.2.3/hooks", ["label.moved"], "not in this workspace's HTTP tool allowlist"),
        (receiver.url, ["label.moved", "stock.changed"], "events: choose one or more of"),
        (receiver.url, [], "events: choose one or more of"),
        ("https://user:pw@127.0.0.1/hooks", ["label.moved"], "url: give a host, without a user name"),
    ]
    for url, events, problem in cases:
        with pytest.raises(webhooks.WebhookError, match=problem.replace("(", r"\(").split("{")[0]):
            webhooks.endpoint_create(actor=admin, workspace=workspace, url=url, events=events)
    workspace.tool_hosts = []
    workspace.save(update_fields=["tool_hosts"])
    with pytest.raises(webhooks.WebhookError, match="resolves to non-public address 127.0.0.1"):
        webhooks.endpoint_create(actor=admin, workspace=workspace, url=receiver.url, events=["label.moved"])
    with pytest.raises(PermissionDenied):
        webhooks.endpoint_create(actor=actors["operator"], workspace=workspace, url="https://hooks.example/x",
                                 events=["label.moved"])
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEvent.objects.filter(action="webhook.create").exists()


def test_a_label_move_is_delivered_signed_and_recorded(workspace, harness, receiver, actors):
    endpoint, secret = webhooks.endpoint_create(actor=actors["admin"], workspace=workspace, url=receiver.url,
                                                events=["label.moved"])
    assert secret.startswith("whsec_") and AuditEvent.objects.filter(action="webhook.create").count() == 1
    harness_services.label_move(actor=actors["approver"], harness=harness, name="production", version=harness.head,
                                reason="first release")
    headers, body, _ = receiver.next()
    assert headers["X-HarnessOps-Event"] == "label.moved"
    assert webhooks.verified(secret, headers["X-HarnessOps-Signature"], body)
    assert not webhooks.verified("whsec_another", headers["X-HarnessOps-Signature"], body)
    assert not webhooks.verified(secret, headers["X-HarnessOps-Signature"], body + b" ")
    payload = json.loads(body)
    assert payload["event"] == "label.moved" and payload["workspace"] == workspace.slug
    assert payload["data"] == {"harness": harness.name, "label": "production", "from_version": None,
                               "to_version": harness.head.number, "reason": "first release",
                               "actor": actors["approver"].label, "override": False}
    delivery = wait_for_status(payload["id"], "delivered")
    assert (delivery.attempts, delivery.response_status, delivery.endpoint_id) == (1, 200, endpoint.pk)
    assert json.loads(delivery.response_body) == {"seen": True, "status": 200}


def test_a_failing_endpoint_is_retried_with_backoff_and_never_holds_the_action(workspace, harness, receiver,
                                                                               actors):
    webhooks.endpoint_create(actor=actors["admin"], workspace=workspace, url=receiver.url,
                             events=["experiment.started", "experiment.stopped"])
    receiver.answers = [500, 503]
    receiver.delay_s = 1.5  # slow as well as failing
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="hooks", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "treatment", "weight": 1, "kind": "react"}])
    started = time.monotonic()
    experiment_start(actor=actors["operator"], experiment=experiment)
    experiment_stop(actor=actors["operator"], experiment=experiment, reason="enough data")
    assert time.monotonic() - started < 1.5  # neither action waited for the endpoint
    seen = [receiver.next() for _ in range(4)]  # start: 500, 503, 200 (the stop's first attempt in between)
    assert sorted(status for _, _, status in seen) == [200, 200, 500, 503]
    deliveries = {d.event: d for d in WebhookDelivery.objects.all()}
    started_delivery = wait_for_status(deliveries["experiment.started"].pk, "delivered")
    stopped_delivery = wait_for_status(deliveries["experiment.stopped"].pk, "delivered")
    assert started_delivery.attempts + stopped_delivery.attempts == 4
    assert stopped_delivery.payload["data"]["reason"] == "enough data"
    assert stopped_delivery.payload["data"]["by_guardrail"] is False


def test_a_dead_endpoint_fails_after_its_attempts_and_the_console_replays_it(client, members, workspace, harness,
                                                                             receiver, actors, settings):
    endpoint, _ = webhooks.endpoint_create(actor=actors["admin"], workspace=workspace, url=receiver.url,
                                           events=["label.moved"])
    receiver.answers = [500] * webhooks.MAX_ATTEMPTS
    harness_services.label_move(actor=actors["approver"], harness=harness, name="staging", version=harness.head,
                                reason="try it")
    delivery = WebhookDelivery.objects.get()
    failed = wait_for_status(delivery.pk, "failed")
    assert failed.attempts == webhooks.MAX_ATTEMPTS and failed.response_status == 500
    for _ in range(webhooks.MAX_ATTEMPTS):
        receiver.next()

    client.force_login(members["viewer"])
    assert client.get(f"/w/{workspace.slug}/webhooks/").status_code in (403, 404)
    assert client.post(f"/w/{workspace.slug}/webhooks/deliveries/{delivery.pk}/replay/").status_code in (403, 404)
    client.force_login(members["admin"])
    page = client.get(f"/w/{workspace.slug}/webhooks/").content.decode()
    assert receiver.url in page and f'data-delivery="{delivery.pk}"' in page and "failed" in page
    assert f"/w/{workspace.slug}/webhooks/" in client.get(f"/w/{workspace.slug}/").content.decode()  # in the nav
    response = client.post(f"/w/{workspace.slug}/webhooks/deliveries/{delivery.pk}/replay/")
    assert response.status_code == 302
    again = WebhookDelivery.objects.exclude(pk=delivery.pk).get()
    assert again.replay_of_id == delivery.pk and again.payload == delivery.payload
    headers, body, status = receiver.next()
    assert status == 200 and json.loads(body)["data"] == delivery.payload["data"]
    assert wait_for_status(again.pk, "delivered").response_status == 200
    assert AuditEvent.objects.filter(action="webhook.replay").count() == 1


def test_the_secret_is_shown_once_and_an_unreachable_endpoint_is_recorded(client, members, workspace, receiver,
                                                                          harness, actors):
    client.force_login(members["admin"])
    response = client.post(f"/w/{workspace.slug}/webhooks/", {"url": "https://127.0.0.1:9/gone",
                                                               "events": ["label.moved"]})
    assert response.status_code == 302
    endpoint = WebhookEndpoint.objects.get()
    first = client.get(f"/w/{workspace.slug}/webhooks/").content.decode()
    assert endpoint.secret in first and endpoint.secret not in client.get(f"/w/{workspace.slug}/webhooks/").content.decode()
    started = time.monotonic()
    harness_services.label_move(actor=actors["approver"], harness=harness, name="canary", version=harness.head,
                                reason="nobody listens")
    assert time.monotonic() - started < 1.0
    failed = wait_for_status(WebhookDelivery.objects.get().pk, "failed")
    assert failed.response_status is None and "ConnectError" in failed.error


@pytest.mark.parametrize(("allowed", "host"), [
    ([], "8.8.8.8"), ([], "127.0.0.1"), ([], "10.0.0.5"), (["127.0.0.1"], "127.0.0.1"),
    (["10.0.0.0/8"], "10.0.0.5"), (["10.0.0.0/8"], "8.8.8.8"), (["hooks.example"], "169.254.169.254"),
])
def test_endpoint_hosts_follow_the_tool_host_rules(allowed, host):
    """The same verdict as an HTTP tool call's policy (harness.runtime.tools.HttpPolicy) for each case."""
    import asyncio

    from harness.runtime.tools import HttpPolicy, ToolPermissionError

    try:
        asyncio.run(HttpPolicy(allowed_hosts=tuple(allowed)).resolve(f"https://{host}/x"))
        tool_allowed = True
    except ToolPermissionError:
        tool_allowed = False
    assert (webhooks.url_problem(f"https://{host}/x", allowed) is None) == tool_allowed


def test_only_the_ai_actors_commits_are_announced(workspace, harness, receiver, actors):
    webhooks.endpoint_create(actor=actors["admin"], workspace=workspace, url=receiver.url,
                             events=["version.committed"])
    prompt = next(path for path in harness.head.files if path.startswith("prompt/"))

    def files(text):
        return {**harness.head.files, prompt: harness.head.files[prompt] + f"\n{text}\n"}

    base = harness.head
    harness_services.version_commit(actor=actors["operator"], harness=harness, files=files("A person's edit."),
                                    base_version=base, message="a person")
    harness_services.version_commit(actor=Actor.system("cli:harness_import"), harness=harness,
                                    files=files("An import."), base_version=harness.head, message="a command")
    ai = harness_services.version_commit_candidate(actor=Actor.ai("evolution", workspace), harness=harness,
                                                   files=files("The evolution loop's edit."), base_version=base,
                                                   message="the AI")
    headers, body, _ = receiver.next()
    payload = json.loads(body)
    assert headers["X-HarnessOps-Event"] == "version.committed"
    assert payload["data"]["version"] == ai.number and payload["data"]["actor"] == "ai:evolution"
    assert payload["data"]["candidate"] is True and payload["data"]["parent"] == base.number
    assert WebhookDelivery.objects.count() == 1  # neither the person's commit nor the command's was announced


def test_a_gate_verdict_and_a_guardrail_stop_are_announced(workspace, harness, receiver, actors, settings):
    from evaluation import services as eval_services

    webhooks.endpoint_create(actor=actors["admin"], workspace=workspace, url=receiver.url,
                             events=["gate.verdict", "experiment.stopped"])
    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS = "scripted", [
        {"tool_calls": [{"name": "load_skill", "arguments": {"name": "casual-chat"}}]},
        "Hi! Welcome to the stream, great to have you here."]
    version = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="gate", suite="live_stream_qa",
                                              seed=8, n=4)
    runs = []
    for _ in range(2):
        run = eval_services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=harness,
                                       version=harness.head, backend="scripted", start=False)
        eval_services.run_execute(run_id=run.pk)
        run.refresh_from_db()
        runs.append(run)
    comparison = eval_services.comparison_create(actor=SYSTEM, baseline=runs[0], candidate=runs[1])
    headers, body, _ = receiver.next()
    data = json.loads(body)["data"]
    assert headers["X-HarnessOps-Event"] == "gate.verdict"
    assert (data["comparison"], data["passed"], data["verdict"]) == (comparison.pk, comparison.passed,
                                                                     comparison.verdict)
    assert data["candidate_run"] == runs[1].pk and data["reasons"] == comparison.reasons

    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="guarded", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"}, {"name": "treatment", "weight": 1, "kind": "react"}])
    experiment_start(actor=SYSTEM, experiment=experiment)
    experiment_stop(actor=Actor.system("system:guardrail"), experiment=experiment,
                    reason="auto-stop guardrail: treatment: latency P95 9000 ms above 5000 ms", control_only=True)
    headers, body, _ = receiver.next()
    data = json.loads(body)["data"]
    assert headers["X-HarnessOps-Event"] == "experiment.stopped" and data["by_guardrail"] is True
    assert data["reason"].startswith("auto-stop guardrail") and data["control_only"] is True


@pytest.mark.skipif(not os.environ.get("REDIS_URL") or not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                    reason="a real Celery worker needs PostgreSQL and Redis")
def test_a_real_celery_worker_delivers_and_retries(workspace, harness, receiver, actors, settings, tmp_path):
    """Production's path: the job goes through the broker to a worker process, which retries after its backoff.
    The queue is this test's own, so no other worker takes its jobs."""
    from tests.live_servers import start_worker, stop, wait_for

    queue_name = f"webhooks-test-{os.getpid()}"
    settings.CELERY_TASK_ALWAYS_EAGER, settings.WEBHOOK_QUEUE = False, queue_name
    endpoint, secret = webhooks.endpoint_create(actor=actors["admin"], workspace=workspace, url=receiver.url,
                                                events=["label.moved"])
    receiver.answers = [502]
    worker = start_worker(queues=queue_name, HARNESSOPS_WEBHOOK_QUEUE=queue_name,
                          HARNESSOPS_WEBHOOK_CA_BUNDLE=settings.WEBHOOK_CA_BUNDLE,
                          HARNESSOPS_WEBHOOK_BACKOFF_S="0.5")
    try:
        harness_services.label_move(actor=actors["approver"], harness=harness, name="production",
                                    version=harness.head, reason="through the worker")
        first = receiver.next(timeout=180)  # the worker's start-up takes a while on a loaded machine
        second = receiver.next(timeout=60)
        assert (first[2], second[2]) == (502, 200) and first[1] == second[1]  # the same body, signed again
        assert webhooks.verified(secret, second[0]["X-HarnessOps-Signature"], second[1])
        delivery = wait_for(lambda: WebhookDelivery.objects.filter(status="delivered").first(), 30, "the delivery")
        assert delivery.attempts == 2 and delivery.response_status == 200 and delivery.endpoint_id == endpoint.pk
    finally:
        stop(worker)
