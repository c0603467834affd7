"""Reads from the harness store, always within one workspace."""

import threading
from collections import OrderedDict

from django.db.models import Prefetch, QuerySet
from django.http import Http404

from console.models import Workspace
from harness.models import Draft, Harness, HarnessVersion, Label, LabelMove
from harness.runtime.tools import builtin_names
from harness.simulator import SANDBOX_TARGETS
from harness.spec import HarnessSpec, SpecDiff, diff_specs, parse_files

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
    with _SPEC_CACHE_LOCK:
        spec = _SPEC_CACHE.setdefault(key, spec)  # another thread may have parsed it meanwhile: keep one
        _SPEC_CACHE.move_to_end(key)
        while len(_SPEC_CACHE) > _SPEC_CACHE_SIZE:
            _SPEC_CACHE.popitem(last=False)
    return spec


def binding_targets() -> dict[str, frozenset[str]]:
    """What a tool may bind to in this installation, by binding kind: the registered builtins and the
    simulator's sandbox tools. (HTTP targets are any allowed URL, so they are checked for form only.)"""
    return {"builtin": frozenset(builtin_names()), "sandbox": frozenset(SANDBOX_TARGETS.values())}


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
        raise Http404(f"No harness named {name!r}.")
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
        raise Http404(f"{harness.name} has no label {label_name!r}.")
    return label.version


def version_resolve(harness: Harness, ref: str) -> HarnessVersion:
    """A version from `v3`, `3`, a label name or a content-hash prefix (≥ 8 characters)."""
    ref = ref.strip()
    number = ref[1:] if ref.startswith("v") else ref
    if number.isascii() and number.isdigit() and len(number) <= 9:  # fits the number column
        return version_get(harness, int(number))
    if harness.labels.filter(name=ref).exists():
        return version_by_label(harness, ref)
    if len(ref) >= 8:
        matches = list(harness.versions.filter(content_hash__startswith=ref.lower())[:2])
        if len(matches) == 1:
            return matches[0]
    raise Http404(f"{harness.name} has no version, label or hash {ref!r}.")


def version_diff(a: HarnessVersion, b: HarnessVersion) -> SpecDiff:
    return diff_specs(version_spec(a), version_spec(b))


def labels_with_history(harness: Harness) -> list[tuple[Label, list[LabelMove]]]:
    labels = harness.labels.select_related("version").prefetch_related(
        Prefetch("moves", queryset=LabelMove.objects.select_related("from_version", "to_version"))
    )
    return [(label, list(label.moves.all())) for label in labels]


def draft_for(harness: Harness, user) -> Draft | None:
    return Draft.objects.select_related("base_version").filter(harness=harness, author=user).first()
