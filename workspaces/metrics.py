"""Prometheus metrics of every floor (docs/observability.md), defined on the ground floor so any app records them.

Counters and histograms live in process memory, or, where PROMETHEUS_MULTIPROC_DIR is set before the process
starts (several uvicorn workers, Celery's pool), in files there that one scrape adds up. Recording one is an
increment under a lock (a few µs): the reply path records after its trace is stored, from the trace itself.
The Celery queue depth is read at scrape time (one LLEN a queue).
"""

import os
import secrets
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily

# Seconds: a reply on a 4B-8B model takes 0.3-5 s; the scripted model takes milliseconds.
_REPLY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0)
_TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_JOB_BUCKETS = (0.1, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0)

REPLIES = Counter("harnessops_reply_requests", "Reply turns answered, by outcome, harness and label",
                  ["outcome", "harness", "label"])
REPLY_SECONDS = Histogram("harnessops_reply_duration_seconds", "Turn duration of a reply, by outcome and label",
                          ["outcome", "label"], buckets=_REPLY_BUCKETS)
MODEL_SECONDS = Histogram("harnessops_model_call_duration_seconds", "Model call time, by backend",
                          ["backend"], buckets=_REPLY_BUCKETS)
MODEL_ERRORS = Counter("harnessops_model_call_errors", "Model calls that failed, by backend", ["backend"])
MODEL_TOKENS = Counter("harnessops_model_tokens", "Model tokens, by backend and kind (prompt, cached, completion)",
                       ["backend", "kind"])
TOOL_SECONDS = Histogram("harnessops_tool_call_duration_seconds", "Tool call time, by tool", ["tool"],
                         buckets=_TOOL_BUCKETS)
TOOL_ERRORS = Counter("harnessops_tool_call_errors", "Tool calls that ended in an error, by tool", ["tool"])
HOOK_BLOCKS = Counter("harnessops_hook_blocks", "Hook decisions that blocked, denied or fell back, by event, hook and action",
                      ["event", "hook", "action"])
HOOK_RETRIES = Counter("harnessops_hook_retries", "Replies sent back to the model with a hook's feedback", ["hook"])
EVENTS = Counter("harnessops_events", "Platform events ingested, by result (accepted, duplicate, rejected)",
                 ["result"])
JOB_SECONDS = Histogram("harnessops_job_duration_seconds", "Background job run time, by kind and state",
                        ["kind", "state"], buckets=_JOB_BUCKETS)
GUARDRAIL_STOPS = Counter("harnessops_guardrail_stops", "Experiments stopped by a guardrail")
WEBHOOK_DELIVERIES = Counter("harnessops_webhook_deliveries", "Webhook delivery attempts, by event and result",
                             ["event", "result"])

QUEUES = ("cpu", "gpu")  # Celery queues (console/settings.py CELERY_TASK_ROUTES)


def configured_token() -> str:
    return os.environ.get("HARNESSOPS_METRICS_TOKEN", "")


def authorised(header: str) -> bool | None:
    """None: /metrics is off (no token configured); else whether `header` carries the scrape token."""
    token = configured_token()
    if not token:
        return None
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), token.encode())


def exposition(redis_url: str | None) -> tuple[bytes, str]:
    """The text a scrape gets: this process's metrics, or every process's in multiprocess mode, and the queues."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        text = generate_latest(registry)
    else:
        text = generate_latest(REGISTRY)
    if redis_url:
        queues = CollectorRegistry()
        queues.register(_QueueDepth(redis_url))
        text += generate_latest(queues)
    return text, CONTENT_TYPE_LATEST


class _QueueDepth:
    """Jobs waiting in each Celery queue (the broker's Redis list), read when scraped."""

    def __init__(self, redis_url: str):
        self.redis_url = redis_url

    def collect(self):
        import redis

        family = GaugeMetricFamily("harnessops_celery_queue_depth", "Jobs waiting in a Celery queue",
                                   labels=["queue"])
        try:
            client = redis.Redis.from_url(self.redis_url, socket_timeout=2)
            try:
                depths = [(queue, client.llen(queue)) for queue in QUEUES]
            finally:
                client.close()
        except redis.RedisError:
            return  # no figure beats a wrong zero: the scrape shows the series missing
        for queue, depth in depths:
            family.add_metric([queue], depth)
        yield family


# Celery jobs ------------------------------------------------------------------------------------------
_job_started: dict[str, float] = {}


def job_started(task_id: str) -> None:
    _job_started[task_id] = time.monotonic()


def job_ended(task_id: str, kind: str, state: str) -> None:
    started = _job_started.pop(task_id, None)
    if started is not None:
        JOB_SECONDS.labels(kind, (state or "unknown").lower()).observe(time.monotonic() - started)


def connect_celery_signals() -> None:
    """Job durations by task name, in whichever process runs the job (a worker; a thread in embedded mode)."""
    from celery.signals import task_postrun, task_prerun

    def prerun(task_id=None, **_kwargs):
        if task_id:
            job_started(task_id)

    def postrun(task_id=None, task=None, state=None, **_kwargs):
        if task_id:
            job_ended(task_id, getattr(task, "name", "unknown"), state or "unknown")

    task_prerun.connect(prerun, weak=False, dispatch_uid="harnessops-metrics-prerun")
    task_postrun.connect(postrun, weak=False, dispatch_uid="harnessops-metrics-postrun")
