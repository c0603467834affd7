"""Reads from the harness store, always within one workspace."""

import itertools
import threading
from collections import OrderedDict

from django.db.models import Prefetch, QuerySet
from django.http import Http404

from harness.models import Draft, Harness, HarnessVersion, Label, LabelMove
from harness.runtime.tools import builtin_names, run_supplied_targets
from harness.simulator import SANDBOX_TARGETS
from harness.spec import HarnessSpec, SpecDiff, diff_specs, parse_files
from harness.spec.canonical import hash_files
from workspaces.models import Workspace

_SPEC_CACHE: "OrderedDict[str, HarnessSpec]" = OrderedDict()
_SPEC_CACHE_SIZE = 256
# Request threads (ASGI's sync workers, the eval runner's helpers) share the cache: every read-modify
# of the OrderedDict holds the lock. Parsing happens outside it, so a slow parse never blocks hits.
_SPEC_CACHE_LOCK = threading.Lock()


def version_spec(version: HarnessVersion) -> HarnessSpec:
    """The parsed spec of a version. Versions are immutable, so the parse is cached by content hash."""
    key = version.content_hash
    with _SPEC_CACHE_LOCK:
        spec = _SPEC_CACHE.get(key)
        if spec is not None:
            _SPEC_CACHE.move_to_end(key)
            return spec
    spec = parse_files(version.files)
    if hash_files(version.files) == key:
        # Stored canonical (version_commit stores to_files' output and its hash): that hash is the spec's, known
        # without dumping the spec back to YAML (its first turn in a process paid 7-22 ms for that).
        spec.__dict__["content_hash"] = key  # where functools.cached_property keeps it
    with _SPEC_CACHE_LOCK:
        spec = _SPEC_CACHE.setdefault(key, spec)  # another thread may have parsed it meanwhile: keep one
        _SPEC_CACHE.move_to_end(key)
        while len(_SPEC_CACHE) > _SPEC_CACHE_SIZE:
            _SPEC_CACHE.popitem(last=False)
    return spec


def binding_targets(harness: str) -> dict[str, frozenset[str]]:
    """What a tool of the harness named `harness` may bind to in this installation, by binding kind: the
    registered builtins, the simulator's sandbox tools and, for a harness that a caller runs with targets
    of its own (the evolution proposer's read tools), those targets. (HTTP targets are any allowed URL, so
    they are checked for form only.)"""
    supplied = run_supplied_targets(harness)
    return {"builtin": frozenset(builtin_names()) | supplied.get("builtin", frozenset()),
            "sandbox": frozenset(SANDBOX_TARGETS.values()) | supplied.get("sandbox", frozenset())}


def harness_list(workspace: Workspace, *, archived: bool = False) -> QuerySet[Harness]:
    """The workspace's harnesses: the active ones, or (archived=True) only the archived ones."""
    return (
        Harness.objects.filter(workspace=workspace, archived_at__isnull=not archived)
        .select_related("head")
        .prefetch_related(Prefetch("labels", queryset=Label.objects.select_related("version")))
    )


def harness_get(workspace: Workspace, name: str) -> Harness:
    harness = Harness.objects.select_related("head", "workspace").filter(workspace=workspace, name=name).first()
    if harness is None:
        raise Http404(f"No harness named “{name}”.")
    return harness


def version_list(harness: Harness) -> QuerySet[HarnessVersion]:
    return harness.versions.defer("files").prefetch_related("labels")


def version_get(harness: Harness, number: int) -> HarnessVersion:
    version = harness.versions.filter(number=number).first()
    if version is None:
        raise Http404(f"{harness.name} has no version {number}.")
    return version


def version_by_label(harness: Harness, label_name: str) -> HarnessVersion:
    label = Label.objects.select_related("version").filter(harness=harness, name=label_name).first()
    if label is None:
        raise Http404(f"{harness.name} has no label “{label_name}”.")
    return label.version


HASH_PREFIX_MIN = 8
_HEX = frozenset("0123456789abcdef")


class VersionRefNotFound(Http404):
    """A version ref that names nothing, or more than one version; the message says which and what to type."""


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def hash_prefix_needed(hashes: list[str]) -> int:
    """The shortest prefix length that tells every one of `hashes` apart (at least HASH_PREFIX_MIN)."""
    ordered = sorted(hashes)
    longest = max((_common_prefix(a, b) for a, b in itertools.pairwise(ordered)), default=0)
    return max(HASH_PREFIX_MIN, longest + 1)


def version_resolve(harness: Harness, ref: str) -> HarnessVersion:
    """A version from `v3`, `3`, a label name or a content-hash prefix (≥ 8 characters).

    A ref that matches nothing, a hash prefix that is too short or one that matches several versions
    raises `VersionRefNotFound` (a 404) whose message says so and how many characters would be enough.
    """
    ref = ref.strip()
    if not ref:
        raise VersionRefNotFound("Give a version: a number (3 or v3), a label or a content-hash prefix.")
    number = ref[1:] if ref.startswith("v") else ref
    if number.isascii() and number.isdigit() and len(number) <= 9:  # fits the number column
        version = harness.versions.filter(number=int(number)).first()
        if version is not None:
            return version
        if ref.startswith("v") or len(ref) < HASH_PREFIX_MIN:
            hint = (f" (as a content-hash prefix it is too short: give at least {HASH_PREFIX_MIN} characters)"
                    if not ref.startswith("v") and harness.versions.filter(content_hash__startswith=ref).exists()
                    else "")
            raise VersionRefNotFound(f"{harness.name} has no version {int(number)}{hint}.")
    if harness.labels.filter(name=ref).exists():
        return version_by_label(harness, ref)
    prefix = ref.lower()
    if not set(prefix) <= _HEX or len(prefix) > 64:
        raise VersionRefNotFound(f"{harness.name} has no version, label or content hash “{ref}”.")
    matches = list(harness.versions.filter(content_hash__startswith=prefix).values_list("number", "content_hash")
                   .order_by("number")[:50])
    if len(prefix) >= HASH_PREFIX_MIN and len(matches) == 1:
        return version_get(harness, matches[0][0])
    if not matches:
        raise VersionRefNotFound(f"{harness.name} has no version, label or content hash starting “{ref}”.")
    needed = hash_prefix_needed([h for _, h in matches]) if len(matches) > 1 else HASH_PREFIX_MIN
    which = ", ".join(f"v{n}" for n, _ in matches[:5]) + (" and more" if len(matches) > 5 else "")
    if len(prefix) < HASH_PREFIX_MIN:
        raise VersionRefNotFound(f"The hash prefix “{ref}” is too short ({len(prefix)} characters; it matches "
                                 f"{which}); give at least {needed} characters.")
    raise VersionRefNotFound(f"The hash prefix “{ref}” is ambiguous: it matches {len(matches)} versions "
                             f"of {harness.name} ({which}); give at least {needed} characters.")


def version_diff(a: HarnessVersion, b: HarnessVersion) -> SpecDiff:
    return diff_specs(version_spec(a), version_spec(b))


def labels_with_history(harness: Harness) -> list[tuple[Label, list[LabelMove]]]:
    labels = harness.labels.select_related("version").prefetch_related(
        Prefetch("moves", queryset=LabelMove.objects.select_related("from_version", "to_version"))
    )
    return [(label, list(label.moves.all())) for label in labels]


def draft_for(harness: Harness, user) -> Draft | None:
    return Draft.objects.select_related("base_version").filter(harness=harness, author=user).first()
