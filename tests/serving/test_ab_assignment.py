"""serving.experiments.assignment against GrowthBook's published SDK cases.

Every case of the sections hash, getBucketRange, chooseVariation, inNamespace and getEqualWeights of
growthbook/growthbook packages/sdk-js/test/cases.json (commit 021bf498f75c8491c156184ca1b3a1fbafa1d64e,
specVersion 0.5.4), vendored verbatim in data/growthbook_cases.json, plus end-to-end buckets/arms asserted in
that file's feature/stickyBucket cases (see the file's _source note).
"""

import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from serving.experiments.assignment import (
    assign,
    bucket_ranges,
    choose_variation,
    equal_weights,
    fnv1a32,
    hash_value,
    in_namespace,
    in_range,
)

CASES = json.loads((Path(__file__).parent / "data" / "growthbook_cases.json").read_text())


def _ids(section):
    return [str(case[0]) for case in CASES[section]]


# --- hash -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("seed", "value", "version", "expected"), CASES["hash"],
                         ids=[f"{c[0]!r}|{c[1]!r}|v{c[2]}" for c in CASES["hash"]])
def test_hash_matches_growthbook(seed, value, version, expected):
    # Upstream asserts exact equality; (k % 1000) / 1000 is the correctly rounded double of the literal.
    assert hash_value(seed, value, version) == expected


def test_fnv1a32_reference_vectors():
    # The FNV-1a 32-bit offset basis and the textbook vector for "a" (0xe40c292c).
    assert fnv1a32("") == 0x811C9DC5
    assert fnv1a32("a") == 0xE40C292C


def test_fnv1a32_hashes_utf16_code_units_like_the_js_sdk():
    # JS charCodeAt yields two surrogate code units for a character outside the BMP; we hash those, so an emoji
    # differs from the single code point it is in Python.
    emoji = "\U0001F600"  # U+1F600 = UTF-16 D83D DE00
    h = 0x811C9DC5
    for unit in (0xD83D, 0xDE00):
        h = ((h ^ unit) * 0x01000193) & 0xFFFFFFFF
    assert fnv1a32(emoji) == h


def test_hash_value_default_version_is_2():
    assert hash_value("seed", "a") == 0.0505


# --- getBucketRange -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "args", "expected"), CASES["getBucketRange"], ids=_ids("getBucketRange"))
def test_bucket_ranges_match_growthbook(name, args, expected):
    n_variations, coverage, weights = args
    ranges = bucket_ranges(n_variations, coverage, weights)
    assert len(ranges) == len(expected)
    for got, want in zip(ranges, expected, strict=True):
        assert got == pytest.approx(tuple(want), abs=1e-12)


def test_bucket_ranges_logs_each_fallback(caplog):
    with caplog.at_level(logging.WARNING, logger="serving.experiments.assignment"):
        bucket_ranges(2, 1.5, [0.7, 0.6])
    text = caplog.text
    assert "coverage must be less than or equal to 1" in text
    assert "must add up to 1" in text


def test_bucket_ranges_coverage_none_means_full():
    assert bucket_ranges(2, None) == [(0.0, 0.5), (0.5, 1.0)]


# --- chooseVariation / inRange ----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "n", "ranges", "expected"), CASES["chooseVariation"], ids=_ids("chooseVariation"))
def test_choose_variation_matches_growthbook(name, n, ranges, expected):
    assert choose_variation(n, [tuple(r) for r in ranges]) == expected


def test_in_range_is_half_open():
    assert in_range(0.0, (0.0, 0.5))
    assert not in_range(0.5, (0.0, 0.5))
    assert not in_range(0.5, (0.5, 0.5))


# --- inNamespace / getEqualWeights -----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "hash_id", "namespace", "expected"), CASES["inNamespace"], ids=_ids("inNamespace"))
def test_in_namespace_matches_growthbook(name, hash_id, namespace, expected):
    assert in_namespace(hash_id, tuple(namespace)) is expected


@pytest.mark.parametrize(("n", "expected"), CASES["getEqualWeights"], ids=_ids("getEqualWeights"))
def test_equal_weights_match_growthbook(n, expected):
    # Upstream rounds to 8 decimals before comparing (the 3-way case is listed as 0.33333333).
    assert [round(w, 8) for w in equal_weights(n)] == expected


# --- end to end: buckets and arms asserted in upstream feature/stickyBucket cases --------------------------

DERIVED = CASES["_derivedFromFeatureCases"]["cases"]


@pytest.mark.parametrize(("section", "name", "seed", "hash_id", "version", "bucket", "weights", "coverage", "arm"),
                         DERIVED, ids=[c[1] for c in DERIVED])
def test_published_experiment_buckets_and_arms(section, name, seed, hash_id, version, bucket, weights, coverage, arm):
    assert hash_value(seed, hash_id, version) == bucket
    index = choose_variation(bucket, bucket_ranges(len(weights), coverage, weights))
    assert (None if index < 0 else index) == arm
    if version == 2:  # assign() is the v2 path
        assert assign(seed, hash_id, weights, coverage=coverage) == arm


# --- assign(): our contract on top of the SDK functions ---------------------------------------------------

def test_assign_is_deterministic_and_follows_weights():
    weights = [0.5, 0.3, 0.2]
    arms = [assign("exp-seed", f"viewer-{i}", weights) for i in range(20_000)]
    assert arms == [assign("exp-seed", f"viewer-{i}", weights) for i in range(20_000)]
    counts = Counter(arms)
    assert None not in counts
    for index, weight in enumerate(weights):  # 20k draws: sd of a share ≤ 0.0036, allow ~4 sd
        assert abs(counts[index] / 20_000 - weight) < 0.015


def test_assign_coverage_excludes_and_growing_it_keeps_arms():
    weights = [0.5, 0.5]
    half = {i: assign("grow", f"v{i}", weights, coverage=0.5) for i in range(5_000)}
    full = {i: assign("grow", f"v{i}", weights, coverage=1.0) for i in range(5_000)}
    share_in = sum(a is not None for a in half.values()) / 5_000
    assert abs(share_in - 0.5) < 0.04
    assert all(full[i] == arm for i, arm in half.items() if arm is not None)  # coverage ranges nest from the start
    assert all(a is not None for a in full.values())


def test_assign_zero_coverage_assigns_nobody():
    assert {assign("s", f"v{i}", [0.5, 0.5], coverage=0.0) for i in range(200)} == {None}


def test_assign_different_seeds_are_independent():
    a = [assign("seed-a", f"v{i}", [0.5, 0.5]) for i in range(4_000)]
    b = [assign("seed-b", f"v{i}", [0.5, 0.5]) for i in range(4_000)]
    agreement = sum(x == y for x, y in zip(a, b, strict=True)) / 4_000
    assert abs(agreement - 0.5) < 0.05


@pytest.mark.parametrize(("weights", "coverage"), [
    ([], 1.0), ([0.7, 0.6], 1.0), ([0.4, 0.1], 1.0), ([1.2, -0.2], 1.0), ([0.5, 0.5], 1.5), ([0.5, 0.5], -0.1),
])
def test_assign_refuses_what_the_sdk_would_silently_correct(weights, coverage):
    with pytest.raises(ValueError):
        assign("s", "v", weights, coverage=coverage)
