"""Platform API for the harness registry: read versions and labels, commit, move labels."""

from django.db.models import Prefetch
from ninja import Path, Router, Status

from harness import selectors, services
from harness.models import Harness, HarnessVersion, Label
from harness.schemas import (
    LABEL_MAX,
    LABEL_PATTERN,
    CommitIn,
    CommitOut,
    DiffOut,
    HarnessOut,
    LabelMoveIn,
    LabelMoveOut,
    VersionDetailOut,
    VersionOut,
)
from harness.spec import spec_to_dict
from workspaces.access import READ, require
from workspaces.schemas import errors, links, reject_unknown_query

router = Router(tags=["harnesses"])


def _version_out(version: HarnessVersion) -> dict:
    return {
        "harness": version.harness.name,
        "number": version.number,
        "content_hash": version.content_hash,
        "parent": version.parent.number if version.parent_id else None,
        "author": version.author_label,
        "message": version.message,
        "created_at": version.created_at,
        "labels": sorted(label.name for label in version.labels.all()),
    }


def _version_detail(version: HarnessVersion) -> dict:
    return {**_version_out(version), "spec": spec_to_dict(selectors.version_spec(version)), "files": version.files}


def _harness(request, name: str) -> Harness:
    require(request.actor, request.workspace, READ)
    return selectors.harness_get(request.workspace, name)


# What a client does next with a harness, a version or a label it was given (OpenAPI links).
_FIRST_HARNESS = {"name": "$response.body#/0/name"}
_SAME_HARNESS = {"name": "$request.path.name"}
_COMMITTED = links(200, 201, harness_api_get_version={**_SAME_HARNESS, "ref": "$response.body#/version/number"},
                   harness_api_list_versions=_SAME_HARNESS, harness_api_move_label=_SAME_HARNESS,
                   harness_api_diff_versions={**_SAME_HARNESS, "from_ref": "$response.body#/version/number",
                                              "to_ref": "$response.body#/version/number"})


@router.get("/harnesses", response={200: list[HarnessOut], **errors(401, 403)}, openapi_extra=links(
    200, harness_api_list_versions=_FIRST_HARNESS, harness_api_commit_version=_FIRST_HARNESS,
    harness_api_move_label=_FIRST_HARNESS,
    harness_api_get_version={**_FIRST_HARNESS, "ref": "$response.body#/0/head"},
    harness_api_get_version_by_label={**_FIRST_HARNESS, "label": "$response.body#/0/labels/0/name"},
    harness_api_diff_versions={**_FIRST_HARNESS, "from_ref": "$response.body#/0/head",
                               "to_ref": "$response.body#/0/head"}))
def list_harnesses(request):
    require(request.actor, request.workspace, READ)
    return [
        {"name": h.name, "description": h.description, "head": h.head.number if h.head else None,
         "labels": [{"name": lb.name, "version": lb.version.number, "protected": lb.protected} for lb in h.labels.all()]}
        for h in selectors.harness_list(request.workspace)
    ]


@router.get("/harnesses/{name}/versions", response={200: list[VersionOut], **errors(401, 403, 404)},
            openapi_extra=links(200, harness_api_get_version={**_SAME_HARNESS, "ref": "$response.body#/0/number"},
                                harness_api_diff_versions={**_SAME_HARNESS, "from_ref": "$response.body#/0/number",
                                                           "to_ref": "$response.body#/0/number"}))
def list_versions(request, name: str):
    harness = _harness(request, name)
    versions = harness.versions.select_related("parent", "harness").prefetch_related(
        Prefetch("labels", queryset=Label.objects.only("name", "version_id"))
    ).defer("files")
    return [_version_out(v) for v in versions]


@router.get("/harnesses/{name}/versions/{ref}", response={200: VersionDetailOut, **errors(401, 403, 404)})
def get_version(request, name: str, ref: str):
    """A version by number (`3` or `v3`), label (`production`) or content-hash prefix."""
    return _version_detail(selectors.version_resolve(_harness(request, name), ref))


@router.get("/harnesses/{name}/labels/{label}", response={200: VersionDetailOut, **errors(401, 403, 404)})
def get_version_by_label(request, name: str, label: str):
    return _version_detail(selectors.version_by_label(_harness(request, name), label))


@router.get("/harnesses/{name}/diff", response={200: DiffOut, **errors(401, 403, 404, 422)})
def diff_versions(request, name: str, from_ref: str, to_ref: str):
    reject_unknown_query(request, "from_ref", "to_ref")
    harness = _harness(request, name)
    a, b = selectors.version_resolve(harness, from_ref), selectors.version_resolve(harness, to_ref)
    changes = selectors.version_diff(a, b).changes
    return {"harness": name, "from_version": a.number, "to_version": b.number,
            "changes": [vars(c) if not hasattr(c, "_asdict") else c._asdict() for c in changes]}


@router.post("/harnesses/{name}/versions",
             response={200: CommitOut, 201: CommitOut, **errors(400, 401, 403, 404, 409, 422)},
             openapi_extra=_COMMITTED)
def commit_version(request, name: str, payload: CommitIn):
    """Commit files on top of `base_version` (write scope). 409 when the base is stale, 422 with paths when invalid."""
    harness = _harness(request, name)
    base = selectors.version_get(harness, payload.base_version) if payload.base_version else None
    result = services.version_commit(actor=request.actor, harness=harness, files=payload.files,
                                     base_version=base, message=payload.message)
    return Status(201 if result.created else 200, {"created": result.created, "version": _version_out(result.version)})


@router.put("/harnesses/{name}/labels/{label}", response={200: LabelMoveOut, **errors(400, 401, 403, 404, 409, 422)},
            openapi_extra=links(200, harness_api_get_version_by_label={**_SAME_HARNESS, "label": "$request.path.label"},
                                harness_api_get_version={**_SAME_HARNESS, "ref": "$response.body#/to_version"}))
def move_label(request, name: str, payload: LabelMoveIn,
               label: str = Path(..., max_length=LABEL_MAX, pattern=LABEL_PATTERN)):
    """Point a label at a version (write scope; approve scope for protected labels such as production)."""
    harness = _harness(request, name)
    version = selectors.version_get(harness, payload.version)
    move = services.label_move(actor=request.actor, harness=harness, name=label, version=version,
                               reason=payload.reason, override=payload.override)
    return {"label": label, "from_version": move.from_version.number if move.from_version else None,
            "to_version": move.to_version.number, "actor": move.actor_label, "reason": move.reason, "at": move.at}
