"""What recording one reply's Prometheus figures costs (serving.observability.reply_observed, export off). Prints µs.

    .venv/bin/python benchmarks/observability_cost.py            # in-process counters
    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) .venv/bin/python benchmarks/observability_cost.py   # multiprocess mode

A turn of two model calls, a tool call, a hook decision and a retry, recorded 20,000 times after a warm-up; CPU
time of this thread (benchmarks/reply_path.py --otlp-endpoint measures the spans' share on the real reply path).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from serving.observability import reply_observed  # noqa: E402

TRACE = {"trace_id": "ab" * 16, "outcome": "replied", "duration_ms": 512.0, "started_at": time.time(),
         "arm": "label:production", "steps": [
             {"kind": "model", "backend": "openai", "latency_ms": 300.0, "tokens_in": 1800, "tokens_cached": 1500,
              "tokens_out": 40},
             {"kind": "tool", "name": "get_product_info_by_link_id", "latency_ms": 3.0},
             {"kind": "hook", "event": "reply", "hook": "reply-format", "fired": True, "action": "retry_with_feedback"},
             {"kind": "retry", "hook": "reply-format"},
             {"kind": "model", "backend": "openai", "latency_ms": 200.0, "tokens_in": 1900, "tokens_cached": 1800,
              "tokens_out": 30}]}


def main(turns: int = 20_000) -> None:
    for _ in range(2_000):
        reply_observed(TRACE, harness="avatar", arm="label:production")
    started = time.thread_time()
    for _ in range(turns):
        reply_observed(TRACE, harness="avatar", arm="label:production")
    spent = (time.thread_time() - started) / turns * 1e6
    mode = "multiprocess" if __import__("os").environ.get("PROMETHEUS_MULTIPROC_DIR") else "in-process"
    print(f"{mode} metrics: {spent:.1f} µs CPU a reply ({len(TRACE['steps'])} steps, {turns} replies)")


if __name__ == "__main__":
    main()
