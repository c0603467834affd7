"""Replay statistics on hand-built traces."""

import pytest

from harness.runtime.latency import percentile, replay_stats


def trace(duration, outcome="replied", ttft=None, steps=()):
    return {"duration_ms": duration, "outcome": outcome, "ttft_ms": ttft, "steps": list(steps)}


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10.0], 95) == 10.0 and percentile([], 50) is None


def test_replay_stats():
    model = {"kind": "model", "latency_ms": 1100.0, "ttft_ms": 100.0, "tokens_out": 50}
    stats = replay_stats([
        trace(1000, ttft=100, steps=[model]),
        trace(2000, ttft=300, steps=[model, {"kind": "tool"}]),
        trace(16_000, outcome="deadline"),
        trace(500, outcome="silent"),
        {"schema": "harnessops.ifeval/v1"},  # not an agent turn: ignored
    ])
    assert stats["n"] == 4
    assert stats["wall_p50_ms"] == 1500 and stats["wall_p95_ms"] == pytest.approx(2000 + 0.85 * 14_000)
    assert stats["ttft_p50_ms"] == 200
    assert stats["decode_tokens_per_s"] == pytest.approx(100 / 2.0)  # 2 calls: 50 tokens in 1.0 s each
    assert stats["success_rate"] == 0.75 and stats["within_deadline"] == 0.75


def test_a_decode_too_short_to_measure_gives_no_rate():
    scripted = {"kind": "model", "latency_ms": 0.02, "ttft_ms": 0.01, "tokens_out": 12}
    assert replay_stats([trace(1, ttft=0.01, steps=[scripted])])["decode_tokens_per_s"] is None
