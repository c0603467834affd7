"""Console pages for the harness registry: list, history, versions, diffs, the draft editor, labels."""

import io
import zipfile

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.text import slugify
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from console.form_values import whole_number
from console.views.scoping import workspace_view
from evaluation.selectors import version_evidence
from harness import selectors, services
from harness.skeletons import skeleton, skeleton_path
from harness.spec import SpecInvalid, parse_files, render_system_prompt
from harness.spec.locate import error_line
from workspaces.access import WRITE
from workspaces.identifiers import InvalidIdentifier

MODULE_ORDER = (("settings", "Settings"), ("skills", "Skills"), ("tools", "Tools"), ("hooks", "Hooks"),
                ("prompt", "Prompt blocks"))


def module_of(path: str) -> str:
    return "settings" if path == "harness.yaml" else path.split("/", 1)[0]


def grouped_files(files: dict[str, str]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Files grouped by module, in the order the editor and version pages show them."""
    groups = {key: [] for key, _ in MODULE_ORDER}
    for path in sorted(files):
        groups.setdefault(module_of(path), []).append((path, files[path]))
    return [(key, title, groups[key]) for key, title in MODULE_ORDER]


def _back_to_editor(ws: str, name: str, path: str = ""):
    response = redirect("harness_edit", ws=ws, name=name)
    if path:
        response["Location"] += f"?path={path}"
    return response


@workspace_view()
def harness_list(request):
    archived = request.GET.get("archived") == "1"
    return render(request, "harness/list.html", {"harnesses": selectors.harness_list(request.workspace, archived=archived),
                                                 "archived": archived})


@require_POST
@workspace_view(WRITE)
def harness_archive(request, name: str):
    """Archive (or, with archived=0, restore) a harness: it leaves lists and pickers, its history stays."""
    harness = selectors.harness_get(request.workspace, name)
    archive = request.POST.get("archived", "1") != "0"
    try:
        services.harness_archive(actor=request.actor, harness=harness, archived=archive)
        messages.success(request, f"{'Archived' if archive else 'Restored'} harness {harness.name}.")
    except services.StoreError as exc:
        messages.error(request, str(exc))
        return redirect("harness_detail", ws=request.workspace.slug, name=harness.name)
    return redirect("harness_list", ws=request.workspace.slug)


@workspace_view()
def harness_detail(request, name: str):
    harness = selectors.harness_get(request.workspace, name)
    versions = selectors.version_list(harness)
    context = {
        "harness": harness,
        "versions": versions,
        "labels": selectors.labels_with_history(harness),
        "draft": selectors.draft_for(harness, request.user),
        "evidence": version_evidence(versions),
    }
    context["usage_chart"] = [{"version": f"v{row['version'].number}", **row["live"]}
                              for row in reversed(context["evidence"]) if row["live"]]
    if request.htmx and request.GET.get("partial") == "labels":
        return render(request, "harness/detail.html#labels", context)
    return render(request, "harness/detail.html", context)


@workspace_view()
def version_detail(request, name: str, number: int):
    harness = selectors.harness_get(request.workspace, name)
    version = selectors.version_get(harness, number)
    spec = selectors.version_spec(version)
    return render(request, "harness/version.html", {
        "harness": harness, "version": version, "spec": spec, "groups": grouped_files(version.files),
        "system_prompt": render_system_prompt(spec),
    })


@workspace_view()
def version_export(request, name: str, number: int):
    harness = selectors.harness_get(request.workspace, name)
    version = selectors.version_get(harness, number)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, text in sorted(version.files.items()):
            archive.writestr(path, text)
    response = HttpResponse(buffer.getvalue(), content_type="application/zip")
    # slugify: a name stored before names were validated must not break (or inject into) the header.
    response["Content-Disposition"] = f'attachment; filename="{slugify(harness.name) or "harness"}-v{version.number}.zip"'
    return response


@workspace_view()
def version_diff(request, name: str):
    harness = selectors.harness_get(request.workspace, name)
    versions = list(selectors.version_list(harness))
    if not versions:
        raise Http404("This harness has no versions.")
    # A ref that names nothing (or a hash prefix that is too short or ambiguous) is reported on the page.
    errors = []
    try:
        b = selectors.version_resolve(harness, request.GET.get("b") or str(versions[0].number))
    except selectors.VersionRefNotFound as exc:
        errors.append(f"To: {exc}")
        b = versions[0]
    default_a = b.parent.number if b.parent_id else b.number
    try:
        a = selectors.version_resolve(harness, request.GET.get("a") or str(default_a))
    except selectors.VersionRefNotFound as exc:
        errors.append(f"From: {exc}")
        a = selectors.version_get(harness, default_a)
    context = {"harness": harness, "versions": versions, "a": a, "b": b, "errors": errors,
               "diff": None if errors else selectors.version_diff(a, b)}
    return render(request, "harness/diff.html", context, status=422 if errors else 200)


def _read_zip(upload) -> dict[str, str]:
    if upload is None:
        raise ValueError("Choose a .zip file to upload.")
    if upload.size > settings.HARNESS_ZIP_MAX_BYTES:
        raise ValueError(f"The zip is larger than {settings.HARNESS_ZIP_MAX_BYTES // 1024} KiB.")
    try:
        with zipfile.ZipFile(upload) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
            total = sum(archive.getinfo(n).file_size for n in names)
            if total > settings.HARNESS_ZIP_MAX_BYTES * 4:
                raise ValueError("The zip expands to more than the allowed size.")
            files = {n: archive.read(n).decode("utf-8") for n in names}
    except zipfile.BadZipFile as exc:
        raise ValueError("That file is not a valid zip archive.") from exc
    except UnicodeDecodeError as exc:
        raise ValueError("Every file in a harness must be UTF-8 text.") from exc
    # Accept archives that wrap everything in one top-level folder.
    roots = {path.split("/", 1)[0] for path in files}
    if "harness.yaml" not in files and len(roots) == 1 and all("/" in p for p in files):
        files = {path.split("/", 1)[1]: text for path, text in files.items()}
    return files


@workspace_view(WRITE)
def harness_import(request):
    context = {"errors": [], "name": request.POST.get("name", ""), "message": request.POST.get("message", "")}
    if request.method == "POST":
        name = context["name"].strip()
        try:
            if not name:
                raise ValueError("Give the harness a name.")
            files = _read_zip(request.FILES.get("archive"))
            result = services.harness_import(actor=request.actor, workspace=request.workspace, name=name,
                                             files=files, message=context["message"] or "Imported from zip")
        except SpecInvalid as invalid:
            context["errors"] = [str(e) for e in invalid.errors]
        except (ValueError, services.CommitConflict) as exc:
            context["errors"] = [str(exc)]
        else:
            verb = "Imported" if result.created else "No change: identical to"
            messages.success(request, f"{verb} {result.version}.")
            return redirect("harness_detail", ws=request.workspace.slug, name=name)
    return render(request, "harness/import.html", context, status=422 if context["errors"] else 200)


# The draft editor -------------------------------------------------------------------------------


def _editor_language(path: str) -> str:
    return "json" if path.endswith(".json") else "yaml" if path.endswith(".yaml") else "markdown"


def _validation(path: str, text: str, errors) -> dict:
    """The errors as listed under the editor, and markers for those in the open file, on the line each
    error names (counted from the top of the file, front matter included)."""
    diagnostics, markers = [], []
    for error in errors:
        line = error_line(text, error) if error.file == path else None
        diagnostics.append({"text": str(error), "line": line})
        if line is not None:
            where = f"{error.location}: " if error.location else ""
            markers.append({"line": line, "message": where + error.message})
    return {"errors": errors, "diagnostics": diagnostics, "markers": markers}


def _editor_context(request, harness, draft, path: str, text: str | None = None, errors=None) -> dict:
    if path not in draft.files and text is None:
        path = "harness.yaml"
    saved = draft.files.get(path, "")
    text = saved if text is None else text
    return {
        "harness": harness,
        "draft": draft,
        "stale": draft.base_version_id != harness.head_id,
        "groups": grouped_files(draft.files),
        "path": path,
        "text": text,
        "saved_text": saved,
        "language": _editor_language(path),
        "builtin_targets": sorted(selectors.binding_targets(harness.name)["builtin"]),
        **_validation(path, text, errors or []),
        "changed_paths": sorted(
            p for p in set(draft.files) | set(draft.base_version.files)
            if draft.files.get(p) != draft.base_version.files.get(p)
        ),
    }


@workspace_view(WRITE)
def harness_edit(request, name: str):
    """GET shows the draft editor for one file; POST saves that file if the draft stays valid."""
    harness = selectors.harness_get(request.workspace, name)
    draft = services.draft_open(actor=request.actor, harness=harness, user=request.user)
    path = request.POST.get("path") or request.GET.get("path") or "harness.yaml"
    if request.method == "POST":
        text = request.POST.get("text", "")
        errors = services.draft_write_file(actor=request.actor, draft=draft, path=path, text=text)
        if not errors:
            messages.success(request, f"Saved {path} to your draft.")
            return _back_to_editor(request.workspace.slug, name, path)
        context = _editor_context(request, harness, draft, path, text=text, errors=errors)
        return render(request, "harness/editor.html", context, status=422)
    return render(request, "harness/editor.html", _editor_context(request, harness, draft, path))


@require_POST
@workspace_view(WRITE)
def harness_edit_check(request, name: str):
    """htmx: validate the file being typed, in the context of the whole draft; nothing is saved."""
    harness = selectors.harness_get(request.workspace, name)
    draft = services.draft_open(actor=request.actor, harness=harness, user=request.user)
    path, text = request.POST.get("path", ""), request.POST.get("text", "")
    errors = services.draft_check({**draft.files, path: text}, harness=harness)
    return render(request, "harness/editor.html#errors", {"path": path, **_validation(path, text, errors)})


@vary_on_headers("HX-Request")  # the same URL answers a fragment or the page: caches must tell them apart
@workspace_view(WRITE)
def harness_edit_preview(request, name: str):
    harness = selectors.harness_get(request.workspace, name)
    draft = services.draft_open(actor=request.actor, harness=harness, user=request.user)
    prompt = render_system_prompt(parse_files(draft.files))
    # htmx fills the editor's panel; the "(open)" link gets a page of its own, not a bare fragment.
    template = "harness/editor.html#preview" if request.htmx else "harness/preview.html"
    return render(request, template, {"system_prompt": prompt, "harness": harness})


@require_POST
@workspace_view(WRITE)
def harness_edit_add(request, name: str):
    harness = selectors.harness_get(request.workspace, name)
    draft = services.draft_open(actor=request.actor, harness=harness, user=request.user)
    kind, module = request.POST.get("kind", ""), request.POST.get("module", "").strip()
    try:
        order = whole_number(request.POST, "order", label="Order", default=90, minimum=0, maximum=99)
        path = skeleton_path(kind, module, order)
        text = skeleton(kind, module, binding=request.POST.get("binding", ""))
    except (ValueError, KeyError) as exc:
        messages.error(request, str(exc) if isinstance(exc, ValueError) else "Unknown module kind.")
        return _back_to_editor(request.workspace.slug, name)
    if path in draft.files:
        messages.error(request, f"{path} already exists.")
        return _back_to_editor(request.workspace.slug, name, path)
    errors = services.draft_write_file(actor=request.actor, draft=draft, path=path, text=text)
    for error in errors:
        messages.error(request, str(error))
    return _back_to_editor(request.workspace.slug, name, "" if errors else path)


@require_POST
@workspace_view(WRITE)
def harness_edit_remove(request, name: str):
    harness = selectors.harness_get(request.workspace, name)
    draft = services.draft_open(actor=request.actor, harness=harness, user=request.user)
    path = request.POST.get("path", "")
    try:
        errors = services.draft_remove_file(actor=request.actor, draft=draft, path=path)
    except services.StoreError as exc:
        errors = [exc]
    for error in errors:
        messages.error(request, f"Not removed: {error}")
    if not errors:
        messages.success(request, f"Removed {path} from your draft.")
    return _back_to_editor(request.workspace.slug, name)


@require_POST
@workspace_view(WRITE)
def harness_commit(request, name: str):
    harness = selectors.harness_get(request.workspace, name)
    draft = selectors.draft_for(harness, request.user)
    if draft is None:
        messages.error(request, "You have no draft of this harness.")
        return redirect("harness_detail", ws=request.workspace.slug, name=name)
    try:
        result = services.draft_commit(actor=request.actor, draft=draft, message=request.POST.get("message", ""))
    except services.CommitConflict as conflict:
        return render(request, "harness/conflict.html", {"harness": harness, "draft": draft, "conflict": conflict},
                      status=409)
    except services.StoreError as exc:
        messages.error(request, str(exc))
        return _back_to_editor(request.workspace.slug, name)
    if result.created:
        messages.success(request, f"Committed {result.version}.")
    else:
        messages.info(request, f"Nothing to commit: your draft is identical to v{result.version.number}.")
    return redirect("harness_detail", ws=request.workspace.slug, name=name)


@require_POST
@workspace_view(WRITE)
def harness_draft_action(request, name: str, action: str):
    harness = selectors.harness_get(request.workspace, name)
    draft = selectors.draft_for(harness, request.user)
    if draft is None:
        messages.info(request, "You have no draft of this harness.")
        return redirect("harness_detail", ws=request.workspace.slug, name=name)
    if action == "rebase":
        services.draft_rebase(actor=request.actor, draft=draft)
        messages.success(request, f"Your draft is now based on v{harness.head.number}; your files were kept.")
        return _back_to_editor(request.workspace.slug, name)
    if action == "discard":
        services.draft_discard(actor=request.actor, draft=draft)
        messages.success(request, "Draft discarded.")
        return redirect("harness_detail", ws=request.workspace.slug, name=name)
    raise Http404("Unknown draft action.")


# Labels -----------------------------------------------------------------------------------------


@require_POST
@workspace_view(WRITE)
def label_move(request, name: str):
    """Promote: point a label at a version (approver role for protected labels)."""
    harness = selectors.harness_get(request.workspace, name)
    try:
        number = request.POST.get("version", "")
        if not number.isdigit():
            raise services.StoreError("Choose a version to point the label at.")
        version = selectors.version_get(harness, int(number))
        services.label_move(actor=request.actor, harness=harness, name=request.POST.get("label", "").strip(),
                            version=version, reason=request.POST.get("reason", ""),
                            override=request.POST.get("override") == "1")
        messages.success(request, f"{request.POST.get('label')} → v{version.number}.")
    except (services.StoreError, InvalidIdentifier, Http404) as exc:
        messages.error(request, str(exc))
    return _labels_response(request, harness)


@require_POST
@workspace_view(WRITE)
def label_rollback(request, name: str, label: str):
    harness = selectors.harness_get(request.workspace, name)
    target = harness.labels.filter(name=label).first()
    if target is None:
        raise Http404("No such label.")
    try:
        move = services.label_rollback(actor=request.actor, label=target, reason=request.POST.get("reason", ""))
        messages.success(request, f"{label} rolled back to v{move.to_version.number}.")
    except services.StoreError as exc:
        messages.error(request, str(exc))
    return _labels_response(request, harness)


def _labels_response(request, harness):
    if request.htmx:
        versions = selectors.version_list(harness)
        context = {"harness": harness, "versions": versions, "labels": selectors.labels_with_history(harness),
                   "evidence": version_evidence(versions)}
        # The version history's label column shows the same state: it is swapped out-of-band with the panel.
        response = render(request, "harness/detail.html#labels", context)
        history = render_to_string("harness/detail.html#history", {**context, "oob": True}, request=request)
        response.content += history.encode()
        return response
    return redirect("harness_detail", ws=request.workspace.slug, name=harness.name)


HSA_DIMENSIONS = ("skill_identifiers", "skill_content", "tool_definitions", "system_prompt", "hooks")


@workspace_view()
def version_augment(request, name: str, number: int):
    """Preview a Harness-State Augmentation of a version: the mapping and the diff against the original."""
    from harness.augmentation import HsaConfig, augment, augmentation_diff

    harness = selectors.harness_get(request.workspace, name)
    version = selectors.version_get(harness, number)
    requested = request.GET.getlist("dimension")
    errors = [f"Unknown dimension {d}: choose among {', '.join(HSA_DIMENSIONS)}." for d in requested
              if d not in HSA_DIMENSIONS]
    chosen = [d for d in requested if d in HSA_DIMENSIONS] or list(HSA_DIMENSIONS)
    seed_text = request.GET.get("seed", "").strip()
    seed = 0
    if seed_text:
        try:
            seed = int(seed_text)
        except ValueError:
            errors.append(f"The seed must be a whole number; {seed_text} is not one.")
    context = {"harness": harness, "version": version, "seed": seed, "seed_text": seed_text or "0",
               "dimensions": HSA_DIMENSIONS, "chosen": chosen, "errors": errors}
    if errors:
        return render(request, "harness/augment.html", context, status=422)
    spec = selectors.version_spec(version)
    result = augment(spec, HsaConfig.only(*chosen), seed=seed)
    context.update(mapping=result.mapping.to_dict(), diff=augmentation_diff(spec, result.spec))
    return render(request, "harness/augment.html", context)
