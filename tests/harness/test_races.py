"""Label moves and the parsed-spec cache under real concurrency (PostgreSQL transactions, threads)."""

import sys
import threading

import pytest

from harness import selectors, services
from harness.models import Label, LabelMove
from tests.concurrency import concurrently
from workspaces.access import Actor

SYSTEM = Actor.system("test")


def variant(files, tag):
    """The demo harness with a different description (so a different content hash)."""
    return {**files, "harness.yaml": files["harness.yaml"].replace("description: 'Demo", f"description: '{tag} Demo", 1)}


@pytest.mark.django_db(transaction=True)
def test_two_first_promotions_of_a_label_both_land_without_integrity_error(harness, demo_files):
    first = harness.head
    second = services.version_commit(actor=SYSTEM, harness=harness, files=variant(demo_files, "second"),
                                     base_version=first, message="second").version
    for round_ in range(15):
        name = f"canary-{round_}"
        results = concurrently(
            lambda name=name: services.label_move(actor=SYSTEM, harness=harness, name=name, version=first, reason="a"),
            lambda name=name: services.label_move(actor=SYSTEM, harness=harness, name=name, version=second, reason="b"),
        )
        assert [kind for kind, _ in results] == ["ok", "ok"], results
        label = Label.objects.get(harness=harness, name=name)
        moves = list(LabelMove.objects.filter(label=label).order_by("id"))
        assert len(moves) == 2 and moves[0].from_version is None and moves[1].from_version == moves[0].to_version
        assert label.version == moves[1].to_version


def test_spec_cache_is_safe_across_threads(monkeypatch, demo_files):
    """Threads reading through a tiny cache (constant eviction) never see a KeyError or a wrong spec.
    (Without the lock a hit's move_to_end races another thread's eviction: KeyError within a second.)"""
    from harness.spec import content_hash, parse_files

    monkeypatch.setattr(selectors, "_SPEC_CACHE_SIZE", 2)
    monkeypatch.setattr(selectors, "_SPEC_CACHE", type(selectors._SPEC_CACHE)())

    class Version:  # what version_spec reads of a HarnessVersion
        def __init__(self, files):
            self.files, self.content_hash = files, content_hash(parse_files(files))

    versions = [Version(variant(demo_files, f"variant {i}")) for i in range(3)]
    errors, barrier = [], threading.Barrier(8)
    monkeypatch.setattr(selectors, "parse_files", lambda files: specs[files["harness.yaml"]])  # parse once, below
    specs = {v.files["harness.yaml"]: parse_files(v.files) for v in versions}
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, so unlocked races show up

    def hammer(offset):
        barrier.wait()
        try:
            # Each thread reads its own version: mostly hits, while the others' misses evict it.
            version = versions[offset % len(versions)]
            for _ in range(20_000):
                assert selectors.version_spec(version) is specs[version.files["harness.yaml"]]
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert errors == [] and len(selectors._SPEC_CACHE) <= 2
