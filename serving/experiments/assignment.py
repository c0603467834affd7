"""GrowthBook-compatible deterministic assignment: hash (experiment seed, viewer id) into [0, 1) and pick
the arm whose bucket range holds it.

Ported from GrowthBook's JavaScript SDK, `packages/sdk-js/src/util.ts` (growthbook/growthbook, version read
at commit 00e780bfbff45045b64dc37d3ea8bf24610a314b): `hashFnv32a`, `hash`, `getEqualWeights`, `inRange`,
`inNamespace`, `chooseVariation`, `getBucketRanges`. Tested against the SDK's shared cases
(`packages/sdk-js/test/cases.json`, vendored in tests/serving/data/growthbook_cases.json).

The JS SDK hashes UTF-16 code units (`charCodeAt`); so does `fnv1a32` here, so ids outside the Basic
Multilingual Plane (emoji) hash as in the JS SDK. (GrowthBook's Python SDK iterates code points instead; the
two agree on every BMP string, which includes every id we issue.)

Pure Python: no Django, no project imports.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

__all__ = [
    "assign",
    "bucket_ranges",
    "choose_variation",
    "equal_weights",
    "fnv1a32",
    "hash_value",
    "in_namespace",
    "in_range",
]

log = logging.getLogger(__name__)

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193  # 2**24 + 2**8 + 0x93; the SDK's shift-and-add form multiplies by the same number
_MASK = 0xFFFFFFFF

Range = tuple[float, float]


def fnv1a32(s: str) -> int:
    """32-bit FNV-1a of `s` over its UTF-16 code units, as GrowthBook's `hashFnv32a` (unsigned result)."""
    h = _FNV_OFFSET
    data = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= data[i] | (data[i + 1] << 8)
        h = (h * _FNV_PRIME) & _MASK
    return h


def hash_value(seed: str, value: str, version: int = 2) -> float | None:
    """GrowthBook's `hash(seed, value, version)`: a number in [0, 1), or None for an unknown version.

    v2 (unbiased): (fnv1a32(str(fnv1a32(seed + value))) % 10000) / 10000
    v1 (legacy, biased, still used by namespaces): (fnv1a32(value + seed) % 1000) / 1000
    """
    if version == 2:
        return (fnv1a32(str(fnv1a32(seed + value))) % 10000) / 10000
    if version == 1:
        return (fnv1a32(value + seed) % 1000) / 1000
    return None


def equal_weights(n: int) -> list[float]:
    """GrowthBook's `getEqualWeights`: n weights of 1/n ([] for n <= 0)."""
    if n <= 0:
        return []
    return [1 / n] * n


def in_range(n: float, range_: Range) -> bool:
    """Half-open: start <= n < end."""
    return range_[0] <= n < range_[1]


def in_namespace(hash_id: str, namespace: tuple[str, float, float]) -> bool:
    """GrowthBook's `inNamespace`: (name, start, end); v1 hash of the id with seed "__" + name."""
    n = hash_value("__" + namespace[0], hash_id, 1)
    if n is None:
        return False
    return namespace[1] <= n < namespace[2]


def choose_variation(n: float, ranges: Sequence[Range]) -> int:
    """Index of the first range holding `n`; -1 when none does (outside coverage)."""
    for i, range_ in enumerate(ranges):
        if in_range(n, range_):
            return i
    return -1


def bucket_ranges(n_variations: int, coverage: float | None = 1.0,
                  weights: Sequence[float] | None = None) -> list[Range]:
    """GrowthBook's `getBucketRanges`, including its forgiving validation:

    - coverage None means 1; below 0 is clamped to 0, above 1 to 1;
    - weights missing, of the wrong length, or not summing to within [0.99, 1.01] fall back to equal weights;
    - arm i gets [cumulative_i, cumulative_i + coverage * w_i): reduced coverage shrinks every arm's range
      from its start, so raising coverage later keeps everyone already in the experiment in the same arm.

    Each fallback is logged as a warning (the SDK logs it to the console).
    """
    coverage = 1.0 if coverage is None else coverage
    if coverage < 0:
        log.warning("Experiment coverage must be greater than or equal to 0 (got %s); using 0", coverage)
        coverage = 0.0
    elif coverage > 1:
        log.warning("Experiment coverage must be less than or equal to 1 (got %s); using 1", coverage)
        coverage = 1.0

    equal = equal_weights(n_variations)
    chosen = list(weights) if weights is not None else equal
    if len(chosen) != n_variations:
        log.warning("Experiment weights must have one entry per variation; using equal weights")
        chosen = equal
    total = sum(chosen)
    if total < 0.99 or total > 1.01:
        log.warning("Experiment weights must add up to 1 (got %s); using equal weights", total)
        chosen = equal

    ranges: list[Range] = []
    cumulative = 0.0
    for w in chosen:
        start = cumulative
        cumulative += w
        ranges.append((start, start + coverage * w))
    return ranges


def assign(seed: str, viewer_id: str, weights: Sequence[float], coverage: float = 1.0) -> int | None:
    """The arm index of `viewer_id` in the experiment with `seed`, or None when the viewer falls outside
    `coverage` (not in the experiment).

    Deterministic and stateless (GrowthBook v2 hash + `bucket_ranges` + `choose_variation`); stickiness
    across weight or coverage changes is the caller's job (record the first exposure).

    Unlike `bucket_ranges`, which silently falls back to equal weights as the SDK does, this refuses
    (ValueError) weights or a coverage that the SDK would have "corrected": a misconfigured split must fail
    loudly, not run a different experiment than the one configured.
    """
    if len(weights) < 1:
        raise ValueError("An experiment needs at least one arm weight.")
    if any(w < 0 for w in weights):
        raise ValueError(f"Arm weights must be non-negative, got {', '.join(f'{w:g}' for w in weights)}.")
    total = sum(weights)
    if total < 0.99 or total > 1.01:
        raise ValueError(f"Arm weights must add up to 1 (within 0.99-1.01), got {total}.")
    if not 0 <= coverage <= 1:
        raise ValueError(f"Coverage must be within [0, 1], got {coverage}.")
    n = hash_value(seed, viewer_id, 2)
    assert n is not None
    index = choose_variation(n, bucket_ranges(len(weights), coverage, weights))
    return None if index < 0 else index
