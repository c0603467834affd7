"""Deployment-replay statistics over the traces of a replayed request set (an eval run's cases).

- wall latency: each turn's `duration_ms` (everything the caller waited for), P50/P95;
- TTFT: time to the first token of the turn's first model call that streamed, P50/P95;
- decode tokens/s: Σ tokens_out / Σ (latency − TTFT) over model calls that report both;
- execution success: share of turns that ended `replied` or `silent` (no fallback, deadline or error);
- within deadline: share of turns whose wall latency is at most `deadline_s` (15 s by default);
- tokens a turn: prompt, cached (of the prompt, from the backend's prefix cache) and completion tokens summed over
  the turn's model calls, P50/P95 (`token_stats`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Any


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# Latency bands for distributions (ms): finer below a second, then doubling up to the 15 s deadline.
LATENCY_BANDS_MS = (250, 500, 1000, 2000, 4000, 8000, 15000)


def latency_band_labels(bands: tuple[int, ...] = LATENCY_BANDS_MS) -> list[str]:
    """One label per band of `latency_histogram`: "< 250 ms", "250–500 ms", …, "≥ 15 s"."""
    def fmt(ms: int) -> str:
        return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms} ms"

    labels = [f"< {fmt(bands[0])}"]
    labels += [f"{fmt(low)}–{fmt(high)}" for low, high in zip(bands, bands[1:], strict=False)]
    return labels + [f"≥ {fmt(bands[-1])}"]


def latency_histogram(values: Iterable[float], bands: tuple[int, ...] = LATENCY_BANDS_MS) -> list[int]:
    """How many of `values` (ms) fall in each band: below bands[0], [bands[i], bands[i+1]), at or above the last."""
    counts = [0] * (len(bands) + 1)
    for value in values:
        counts[bisect_right(bands, value)] += 1
    return counts


MIN_DECODE_S = 0.001
TOKEN_KINDS = (("prompt", "tokens_in"), ("cached", "tokens_cached"), ("completion", "tokens_out"))


def token_stats(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """P50/P95 of each kind of tokens a turn, over `rows` (traces, or rows with the same keys): `n`, and
    `prompt_p50`, `prompt_p95`, `cached_p50`, … (None without rows). A trace stored before cached tokens were
    counted has none: 0."""
    values: dict[str, list[float]] = {kind: [] for kind, _ in TOKEN_KINDS}
    n = 0
    for row in rows:
        if "tokens_in" not in row:  # not an agent turn (an IFEval record keeps its own)
            continue
        n += 1
        for kind, key in TOKEN_KINDS:
            values[kind].append(float(row.get(key) or 0))
    stats: dict[str, Any] = {"n": n}
    for kind, found in values.items():
        stats[f"{kind}_p50"], stats[f"{kind}_p95"] = percentile(found, 50), percentile(found, 95)
    return stats


def replay_stats(traces: Iterable[Mapping[str, Any]], *, deadline_s: float = 15.0) -> dict[str, Any]:
    walls, ttfts, decode_tokens, decode_seconds, successes, n = [], [], 0, 0.0, 0, 0
    turns = []
    for trace in traces:
        if "duration_ms" not in trace:  # not an agent trace (e.g. an IFEval record)
            continue
        n += 1
        turns.append(trace)
        walls.append(float(trace["duration_ms"]))
        if trace.get("ttft_ms") is not None:
            ttfts.append(float(trace["ttft_ms"]))
        successes += trace.get("outcome") in ("replied", "silent")
        for step in trace.get("steps", ()):
            if step.get("kind") == "model" and step.get("ttft_ms") is not None and step.get("tokens_out"):
                seconds = (float(step["latency_ms"]) - float(step["ttft_ms"])) / 1000
                # Under a millisecond is no measured decode (a scripted reply arrives whole): counting it
                # showed millions of tokens/s on the run page.
                if seconds >= MIN_DECODE_S:
                    decode_tokens += int(step["tokens_out"])
                    decode_seconds += seconds
    return {
        "n": n,
        "wall_p50_ms": percentile(walls, 50),
        "wall_p95_ms": percentile(walls, 95),
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p95_ms": percentile(ttfts, 95),
        "decode_tokens_per_s": decode_tokens / decode_seconds if decode_seconds else None,
        "success_rate": successes / n if n else None,
        "within_deadline": sum(w <= deadline_s * 1000 for w in walls) / n if n else None,
        "tokens": token_stats(turns),
    }
