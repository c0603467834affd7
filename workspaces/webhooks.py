"""Webhooks: a workspace's HTTPS endpoints hear of its events, signed, retried, recorded and replayable.

On the ground floor so that every app can announce an event with `emit(workspace, event, data)` inside the
transaction that made it: a delivery row is written (in a savepoint: a failure here never undoes the action) and
the job `workspaces.deliver_webhook` starts once that transaction commits. The job POSTs the JSON payload with

    X-HarnessOps-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body, keyed by the endpoint's secret>

and records the answer; anything but a 2xx is tried again after WEBHOOK_BACKOFF_S (5 attempts by default), then
the delivery is failed. A failing or slow endpoint costs the action nothing: it only ever sees the row.

Where an endpoint may point follows the workspace's HTTP tool allowlist (Workspace.tool_hosts), as tool calls do
(harness.runtime.tools.HttpPolicy, which this floor cannot import): HTTPS only; an empty list allows public hosts
only; a non-empty list allows only its hosts, and only a listed host may resolve to a private, loopback or
link-local address. The URL is checked when the endpoint is made and again before every attempt.
"""

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import time
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from workspaces.access import ADMIN, Actor, require
from workspaces.models import WebhookDelivery, WebhookEndpoint, Workspace
from workspaces.services import audit_record

log = logging.getLogger(__name__)

EVENTS = {
    "label.moved": "a label moved to another version",
    "version.committed": "the AI actor (Harness Evolution) committed a version, e.g. a candidate off the head",
    "gate.verdict": "a regression gate gave its verdict on a candidate run",
    "experiment.started": "an experiment started",
    "experiment.stopped": "an experiment stopped, and why (a person, or a guardrail)",
    "training.finished": "a training job finished",
    "training.failed": "a training job failed",
    "diagnosis.ready": "a diagnosis of an eval run is ready",
}
MAX_ENDPOINTS = 20
MAX_ATTEMPTS = 5
TIMEOUT_S = 10.0
RESPONSE_KEPT_CHARS = 2000
SIGNATURE_HEADER = "X-HarnessOps-Signature"


class WebhookError(ValueError):
    """An endpoint cannot be made as asked; the message names the field."""


# Signing ----------------------------------------------------------------------------------------------

def signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verified(secret: str, header: str, body: bytes, *, tolerance_s: int = 300, now: float | None = None) -> bool:
    """What a consumer checks (docs/observability.md): the signature, and a timestamp within `tolerance_s`."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), fields.get("v1", ""))


# Where an endpoint may point ----------------------------------------------------------------------------

def url_problem(url: str, allowed_hosts: list[str]) -> str | None:
    """Why `url` may not receive this workspace's webhooks, or None."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        return "url: an endpoint must use https://"
    host = (parts.hostname or "").lower()
    if not host or parts.username or parts.password:
        return "url: give a host, without a user name or password"
    try:
        port = parts.port or 443
    except ValueError:
        return "url: the port is not a number from 1 to 65535"
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0])
                                           for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))
        except (socket.gaierror, UnicodeError) as exc:
            return f"url: cannot resolve {host} ({getattr(exc, 'strerror', None) or exc})"
    names, networks = set(), []
    for entry in allowed_hosts or ():
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            names.add(entry.strip().lower())

    def listed(address=None) -> bool:
        return host in names or (address is not None and any(address in network for network in networks))

    if allowed_hosts and not (listed() or all(listed(a) for a in addresses)):
        return f"url: host {host} is not in this workspace's HTTP tool allowlist"
    for address in addresses:
        public = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
        if not (public.is_global and not public.is_multicast) and not (listed() or listed(address)):
            return f"url: host {host} resolves to non-public address {address}; allow-list it for this workspace"
    return None


# Endpoints ------------------------------------------------------------------------------------------------

@transaction.atomic
def endpoint_create(*, actor: Actor, workspace: Workspace, url: str, events: list[str]
                    ) -> tuple[WebhookEndpoint, str]:
    """Register an endpoint (admin); returns it with its signing secret, which is never shown again."""
    require(actor, workspace, ADMIN)
    url = (url or "").strip()
    unknown = sorted(set(events) - set(EVENTS))
    if unknown or not events:
        raise WebhookError(f"events: choose one or more of {', '.join(EVENTS)}"
                           + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    if len(url) > 500:
        raise WebhookError("url: at most 500 characters")
    problem = url_problem(url, workspace.tool_hosts)
    if problem:
        raise WebhookError(problem)
    if WebhookEndpoint.objects.filter(workspace=workspace).count() >= MAX_ENDPOINTS:
        raise WebhookError(f"url: a workspace has at most {MAX_ENDPOINTS} endpoints")
    secret = f"whsec_{secrets.token_urlsafe(32)}"
    endpoint = WebhookEndpoint.objects.create(workspace=workspace, url=url, events=sorted(set(events)),
                                              secret=secret, created_by=actor.label)
    audit_record(actor=actor, workspace=workspace, action="webhook.create", target_type="webhook",
                 target_id=endpoint.pk, target_label=url[:300], after={"events": endpoint.events})
    return endpoint, secret


@transaction.atomic
def endpoint_delete(*, actor: Actor, endpoint: WebhookEndpoint) -> None:
    require(actor, endpoint.workspace, ADMIN)
    audit_record(actor=actor, workspace=endpoint.workspace, action="webhook.delete", target_type="webhook",
                 target_id=endpoint.pk, target_label=endpoint.url[:300], before={"events": endpoint.events})
    endpoint.delete()


# Emitting and delivering ------------------------------------------------------------------------------------

def emit(workspace: Workspace | int, event: str, data: dict) -> int:
    """Announce `event` to the workspace's endpoints that take it; returns how many deliveries were queued.
    Call it inside the action's transaction. It never raises: a webhook never blocks the action."""
    if event not in EVENTS:
        raise ValueError(f"unknown webhook event {event!r}")  # a programming error, not the endpoint's
    workspace_id = workspace if isinstance(workspace, int) else workspace.pk
    try:
        with transaction.atomic():  # a savepoint inside the caller's transaction
            endpoints = [e for e in WebhookEndpoint.objects.filter(workspace_id=workspace_id, active=True)
                         if event in e.events]
            if not endpoints:
                return 0
            payload = {"event": event, "workspace": _slug(workspace), "occurred_at": timezone.now().isoformat(),
                       "data": data}
            deliveries = WebhookDelivery.objects.bulk_create(
                [WebhookDelivery(endpoint=endpoint, event=event, payload=payload) for endpoint in endpoints])
        ids = [delivery.pk for delivery in deliveries]
        transaction.on_commit(lambda: [_queued(pk) for pk in ids])
        return len(ids)
    except Exception:  # noqa: BLE001 (the action goes on; the log says which event was not announced)
        log.exception("webhook event %s of workspace %s could not be queued", event, workspace_id)
        return 0


def _slug(workspace: Workspace | int) -> str:
    if isinstance(workspace, Workspace):
        return workspace.slug
    return Workspace.objects.filter(pk=workspace).values_list("slug", flat=True).first() or ""


def _queued(delivery_id: int, countdown: float = 0.0) -> None:
    from workspaces.jobs import enqueue

    try:
        enqueue("workspaces.deliver_webhook", args=[delivery_id], queue=settings.WEBHOOK_QUEUE, countdown=countdown)
    except Exception:  # noqa: BLE001 (the broker away: the delivery stays pending, replayable from the console)
        log.exception("webhook delivery %s could not be queued", delivery_id)


def backoff_s(attempt: int) -> float:
    """Seconds before attempt `attempt + 1`."""
    steps = settings.WEBHOOK_BACKOFF_S
    return float(steps[min(attempt - 1, len(steps) - 1)])


def deliver(delivery_id: int) -> str:
    """One attempt of a delivery (the job); returns its status. A failed attempt queues the next one."""
    import httpx

    from workspaces.metrics import WEBHOOK_DELIVERIES

    delivery = (WebhookDelivery.objects.select_related("endpoint__workspace").filter(pk=delivery_id).first())
    if delivery is None or delivery.status != WebhookDelivery.Status.PENDING:
        return delivery.status if delivery else "missing"
    endpoint = delivery.endpoint
    body = json.dumps({"id": delivery.pk, **delivery.payload}, sort_keys=True, separators=(",", ":")).encode()
    timestamp = int(time.time())
    status, text, error = None, "", ""
    problem = url_problem(endpoint.url, endpoint.workspace.tool_hosts)
    if problem:
        error = problem
    else:
        try:
            response = httpx.post(endpoint.url, content=body, timeout=TIMEOUT_S, follow_redirects=False,
                                  verify=_verify(), headers={
                                      "Content-Type": "application/json", "User-Agent": "HarnessOps-Webhooks/1",
                                      "X-HarnessOps-Event": delivery.event,
                                      "X-HarnessOps-Delivery": str(delivery.pk),
                                      SIGNATURE_HEADER: signature_header(endpoint.secret, timestamp, body)})
            status, text = response.status_code, response.text[:RESPONSE_KEPT_CHARS]
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
    delivery.attempts += 1
    delivery.last_attempt_at = timezone.now()
    delivery.response_status, delivery.response_body, delivery.error = status, text, error
    ok = status is not None and 200 <= status < 300
    if ok:
        delivery.status = WebhookDelivery.Status.DELIVERED
    elif delivery.attempts >= MAX_ATTEMPTS or not endpoint.active:
        delivery.status = WebhookDelivery.Status.FAILED
    delivery.save(update_fields=["attempts", "last_attempt_at", "response_status", "response_body", "error",
                                 "status"])
    WEBHOOK_DELIVERIES.labels(delivery.event, "delivered" if ok else "failed_attempt").inc()
    if delivery.status == WebhookDelivery.Status.PENDING:
        _queued(delivery.pk, countdown=backoff_s(delivery.attempts))
    return delivery.status


def _verify():
    """TLS verification: the system's CAs, or WEBHOOK_CA_BUNDLE's (an internal CA; the tests' own)."""
    bundle = settings.WEBHOOK_CA_BUNDLE
    if not bundle:
        return True
    import ssl

    return ssl.create_default_context(cafile=bundle)


@transaction.atomic
def delivery_replay(*, actor: Actor, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery's payload again, as a new delivery (admin; audited)."""
    require(actor, delivery.endpoint.workspace, ADMIN)
    again = WebhookDelivery.objects.create(endpoint=delivery.endpoint, event=delivery.event,
                                           payload=delivery.payload, replay_of=delivery)
    audit_record(actor=actor, workspace=delivery.endpoint.workspace, action="webhook.replay",
                 target_type="webhook_delivery", target_id=again.pk, target_label=delivery.event,
                 before={"delivery": delivery.pk})
    transaction.on_commit(lambda: _queued(again.pk))
    return again
