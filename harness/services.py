"""Writes to the harness store: commits, drafts, labels and imports.

Every function takes the acting `Actor`, checks its capability, changes rows in
one transaction and records an audit event in that same transaction, so a
failed write leaves nothing behind.
"""

from dataclasses import dataclass

from django.db import transaction

from harness.models import Draft, Harness, HarnessVersion, Label, LabelMove
from harness.routing import routing_changed
from harness.selectors import binding_targets
from harness.spec import SpecDiff, SpecError, SpecInvalid, content_hash, diff_specs, parse_files, to_files
from workspaces import webhooks
from workspaces.access import APPROVE, PROPOSE, WRITE, Actor, require
from workspaces.identifiers import check_identifier
from workspaces.models import ActorKind, Workspace
from workspaces.services import archived_set, audit_record

PROTECTED_LABELS = frozenset({"production"})
MAX_MESSAGE = 500


class StoreError(ValueError):
    """A request the store refuses, with a message fit for the user."""


class LabelConflict(StoreError):
    """A valid label move the label's current state refuses (already there, or blocked by the gate): HTTP 409."""


class CommitConflict(Exception):
    """The draft's base is no longer the head: someone committed meanwhile."""

    def __init__(self, *, base: HarnessVersion | None, head: HarnessVersion, diff: SpecDiff):
        self.base, self.head, self.diff = base, head, diff
        base_name = f"v{base.number}" if base else "nothing"
        super().__init__(
            f"Your draft is based on {base_name}, but the head is now v{head.number} "
            f"({head.author_label}: “{head.message}”). Review the changes, then rebase or discard your draft."
        )


@dataclass(frozen=True)
class CommitResult:
    version: HarnessVersion
    created: bool


def _clean_message(message: str) -> str:
    message = (message or "").strip()
    if not message:
        raise StoreError("A commit needs a message saying what changed and why.")
    if len(message) > MAX_MESSAGE:
        raise StoreError(f"Commit message is longer than {MAX_MESSAGE} characters.")
    return message


def version_commit(
    *, actor: Actor, harness: Harness, files: dict[str, str], base_version: HarnessVersion | None, message: str
) -> CommitResult:
    """Commit `files` on top of `base_version` if it is still the head.

    Raises SpecInvalid (every error with its path), CommitConflict (stale base)
    or StoreError. Identical content returns the head with created=False.
    """
    require(actor, harness.workspace, WRITE)
    message = _clean_message(message)
    # Every way in (editor, API, zip, CLI) checks bindings, as this harness will find them when it runs.
    spec = parse_files(files, bindings=binding_targets(harness.name))
    canonical, digest = to_files(spec), content_hash(spec)
    with transaction.atomic():
        locked = Harness.objects.select_for_update().get(pk=harness.pk)
        head = locked.head
        base_id = base_version.pk if base_version else None
        if locked.head_id != base_id:
            base_spec = parse_files(base_version.files) if base_version else None
            diff = diff_specs(base_spec, parse_files(head.files)) if base_spec else None
            raise CommitConflict(base=base_version, head=head, diff=diff)
        if head is not None and head.content_hash == digest:
            return CommitResult(version=head, created=False)
        version = HarnessVersion.objects.create(
            harness=locked, number=_next_number(locked), content_hash=digest, files=canonical,
            parent=head, author_kind=actor.kind, author_label=actor.label, author_user_id=actor.user_id,
            message=message,
        )
        locked.head = version
        locked.save(update_fields=["head"])
        routing_changed(locked.pk)  # the harness's row: the rooms the reply route keeps with it are read again
        harness.head = version
        audit_record(actor=actor, workspace=harness.workspace, action="version.commit", target_type="harness_version",
                     target_id=version.pk, target_label=str(version),
                     before={"head": head.number if head else None, "hash": head.content_hash if head else None},
                     after={"head": version.number, "hash": digest, "message": message})
        if _is_ai(actor):
            webhooks.emit(harness.workspace, "version.committed", {
                "harness": harness.name, "version": version.number, "parent": head.number if head else None,
                "hash": digest, "message": message, "actor": actor.label, "candidate": False})
    return CommitResult(version=version, created=True)


def _is_ai(actor: Actor) -> bool:
    """The AI actor (Actor.ai: Harness Evolution's proposals and candidates), not a person, a key or a command."""
    return actor.kind == ActorKind.SYSTEM and actor.label.startswith("ai:")


def _next_number(harness: Harness) -> int:
    """After the highest number so far: candidate versions off the head take numbers too."""
    last = HarnessVersion.objects.filter(harness=harness).order_by("-number").values_list("number", flat=True).first()
    return (last or 0) + 1


def version_commit_candidate(*, actor: Actor, harness: Harness, files: dict[str, str], base_version: HarnessVersion,
                             message: str) -> HarnessVersion:
    """Commit `files` as a child of `base_version` WITHOUT moving the head: a candidate that no label points at
    and that nothing serves until a person promotes it (`head_promote`). Needs only the propose permission,
    which the AI actor holds. Identical content to the base is refused (nothing to try)."""
    require(actor, harness.workspace, PROPOSE)
    if base_version.harness_id != harness.pk:
        raise StoreError("That version belongs to another harness.")
    message = _clean_message(message)
    spec = parse_files(files, bindings=binding_targets(harness.name))
    canonical, digest = to_files(spec), content_hash(spec)
    if digest == base_version.content_hash:
        raise StoreError(f"The candidate is identical to v{base_version.number}: nothing changed.")
    with transaction.atomic():
        locked = Harness.objects.select_for_update().get(pk=harness.pk)
        version = HarnessVersion.objects.create(
            harness=locked, number=_next_number(locked), content_hash=digest, files=canonical, parent=base_version,
            author_kind=actor.kind, author_label=actor.label, author_user_id=actor.user_id, message=message)
        audit_record(actor=actor, workspace=harness.workspace, action="version.commit", target_type="harness_version",
                     target_id=version.pk, target_label=str(version),
                     before={"head": locked.head.number if locked.head else None},
                     after={"candidate": version.number, "parent": base_version.number, "hash": digest,
                            "message": message, "head_moved": False})
        if _is_ai(actor):
            webhooks.emit(harness.workspace, "version.committed", {
                "harness": harness.name, "version": version.number, "parent": base_version.number, "hash": digest,
                "message": message, "actor": actor.label, "candidate": True})
    return version


def head_promote(*, actor: Actor, harness: Harness, version: HarnessVersion, reason: str) -> HarnessVersion:
    """Make a candidate (a child of the current head) the head: a fast-forward by a person with write access,
    audited. A candidate whose parent is no longer the head is refused (it would drop what was committed)."""
    require(actor, harness.workspace, WRITE)
    reason = (reason or "").strip()
    if not reason:
        raise StoreError("Say why the candidate becomes the head (the reason is kept in the audit log).")
    with transaction.atomic():
        locked = Harness.objects.select_for_update().get(pk=harness.pk)
        head = locked.head
        if version.harness_id != locked.pk:
            raise StoreError("That version belongs to another harness.")
        if head is not None and head.pk == version.pk:
            raise StoreError(f"v{version.number} is already the head.")
        if version.parent_id != locked.head_id:
            raise StoreError(f"v{version.number} was made from v{version.parent.number if version.parent else '?'}, "
                             f"but the head is now v{head.number if head else '?'}: diagnose the head again.")
        locked.head = version
        locked.save(update_fields=["head"])
        routing_changed(locked.pk)
        harness.head = version
        audit_record(actor=actor, workspace=harness.workspace, action="version.promote",
                     target_type="harness_version", target_id=version.pk, target_label=str(version),
                     before={"head": head.number if head else None},
                     after={"head": version.number, "reason": reason[:500]})
    return version


def harness_create(
    *, actor: Actor, workspace: Workspace, name: str, files: dict[str, str], message: str = "Initial version"
) -> Harness:
    """Create a harness with its first version (validated before anything is written)."""
    require(actor, workspace, WRITE)
    check_identifier(name, field="harness name")
    spec = parse_files(files, bindings=binding_targets(name))
    if Harness.objects.filter(workspace=workspace, name=name).exists():
        raise StoreError(f"A harness named “{name}” already exists in this workspace.")
    with transaction.atomic():
        harness = Harness.objects.create(workspace=workspace, name=name, description=spec.description[:500])
        audit_record(actor=actor, workspace=workspace, action="harness.create", target_type="harness",
                     target_id=harness.pk, target_label=name)
        version_commit(actor=actor, harness=harness, files=files, base_version=None, message=message)
    return harness


def harness_import(*, actor: Actor, workspace: Workspace, name: str, files: dict[str, str], message: str) -> CommitResult:
    """Import a directory: a new harness, or a new version on top of the current head."""
    harness = Harness.objects.filter(workspace=workspace, name=name).first()
    if harness is None:
        harness = harness_create(actor=actor, workspace=workspace, name=name, files=files, message=message)
        return CommitResult(version=harness.head, created=True)
    return version_commit(actor=actor, harness=harness, files=files, base_version=harness.head, message=message)


def harness_archive(*, actor: Actor, harness: Harness, archived: bool = True) -> Harness:
    """Hide a harness from lists and pickers (or bring it back). Versions are history and are never deleted,
    so archiving is how a harness leaves the console; labels keep answering the reply API."""
    require(actor, harness.workspace, WRITE)
    if archived and harness.experiments.filter(status="running").exists():
        raise StoreError("An experiment is running on this harness: stop it before archiving the harness.")
    archived_set(actor=actor, obj=harness, kind="harness", label=harness.name, archived=archived)
    return harness


# Drafts -------------------------------------------------------------------------------------------


def draft_open(*, actor: Actor, harness: Harness, user) -> Draft:
    """The user's draft of this harness, started from the head if they have none."""
    require(actor, harness.workspace, WRITE)
    draft, _ = Draft.objects.get_or_create(
        harness=harness, author=user, defaults={"base_version": harness.head, "files": dict(harness.head.files)}
    )
    return draft


def draft_check(files: dict[str, str], *, harness: Harness) -> list[SpecError]:
    """Every error the files would have as a version of `harness` (empty when valid), tool bindings included."""
    try:
        parse_files(files, bindings=binding_targets(harness.name))
    except SpecInvalid as invalid:
        return list(invalid.errors)
    return []


def _draft_replace(*, actor: Actor, draft: Draft, files: dict[str, str]) -> list[SpecError]:
    require(actor, draft.harness.workspace, WRITE)
    errors = draft_check(files, harness=draft.harness)
    if not errors:
        draft.files = to_files(parse_files(files))
        draft.save(update_fields=["files", "updated_at"])
    return errors


def draft_write_file(*, actor: Actor, draft: Draft, path: str, text: str) -> list[SpecError]:
    """Save one file into the draft only if the whole draft stays valid; otherwise return the errors."""
    return _draft_replace(actor=actor, draft=draft, files={**draft.files, path: text})


def draft_remove_file(*, actor: Actor, draft: Draft, path: str) -> list[SpecError]:
    if path not in draft.files:
        raise StoreError(f"{path} is not in this draft.")
    if path == "harness.yaml":
        raise StoreError("harness.yaml cannot be removed.")
    # A skill is a directory: removing its SKILL.md removes the skill.
    return _draft_replace(actor=actor, draft=draft, files={p: t for p, t in draft.files.items() if p != path})


def draft_rebase(*, actor: Actor, draft: Draft) -> Draft:
    """Move the draft's base to the head, keeping the draft's files: the user chose to override."""
    require(actor, draft.harness.workspace, WRITE)
    draft.base_version = Harness.objects.get(pk=draft.harness_id).head
    draft.save(update_fields=["base_version", "updated_at"])
    return draft


def draft_discard(*, actor: Actor, draft: Draft) -> None:
    require(actor, draft.harness.workspace, WRITE)
    draft.delete()


def draft_commit(*, actor: Actor, draft: Draft, message: str) -> CommitResult:
    """Commit the draft (see version_commit); on success the draft is gone."""
    with transaction.atomic():
        result = version_commit(actor=actor, harness=draft.harness, files=draft.files,
                                base_version=draft.base_version, message=message)
        draft.delete()
    return result


# Labels -------------------------------------------------------------------------------------------

LABEL_NAME_MAX = 64

# Checks consulted before a protected label moves, registered by other packages (evaluation's regression
# gate): `check(harness, version) -> str` returns why the move should not happen, or "".
_PROMOTION_CHECKS: list = []


def register_promotion_check(check):
    _PROMOTION_CHECKS.append(check)
    return check


def label_move(*, actor: Actor, harness: Harness, name: str, version: HarnessVersion, reason: str,
               override: bool = False) -> LabelMove:
    """Point label `name` at `version`, creating it on first use. Protected labels need the approve permission
    and pass the registered promotion checks (the regression gate) unless `override` — which is audited."""
    if version.harness_id != harness.pk:
        raise StoreError("That version belongs to another harness.")
    reason = (reason or "").strip()
    if not reason:
        raise StoreError("Say why the label moves (the reason is kept in its history).")
    check_identifier(name, field="label", max_length=LABEL_NAME_MAX)
    with transaction.atomic():
        # Lock the harness first: a label that does not exist yet has no row to lock, and two first
        # promotions would both create it (one failing with an IntegrityError).
        Harness.objects.select_for_update().filter(pk=harness.pk).first()
        label = Label.objects.select_for_update().filter(harness=harness, name=name).first()
        protected = label.protected if label else name in PROTECTED_LABELS
        require(actor, harness.workspace, APPROVE if protected else WRITE)
        # The first placement of a protected label has no baseline to compare against, so it is not gated.
        gated = protected and label is not None
        blocked = [why for check in _PROMOTION_CHECKS if gated for why in [check(harness, version)] if why]
        if blocked and not override:
            raise LabelConflict(f"Promotion of v{version.number} to {name} needs confirmation: {'; '.join(blocked)} "
                                "(an approver may confirm the move anyway, with a reason; it is audited).")
        previous = label.version if label else None
        if label is None:
            label = Label.objects.create(harness=harness, name=name, version=version, protected=protected)
        elif label.version_id == version.pk:
            raise LabelConflict(f"{name} already points at v{version.number}.")
        else:
            label.version = version
            label.save(update_fields=["version", "updated_at"])
        routing_changed(harness.pk)
        move = LabelMove.objects.create(label=label, from_version=previous, to_version=version,
                                        actor_kind=actor.kind, actor_label=actor.label, reason=reason[:500])
        audit_record(actor=actor, workspace=harness.workspace, action="label.move", target_type="label",
                     target_id=label.pk, target_label=str(label),
                     before={"version": previous.number if previous else None},
                     after={"version": version.number, "reason": reason,
                            **({"override": blocked} if blocked else {})})
        webhooks.emit(harness.workspace, "label.moved", {
            "harness": harness.name, "label": name, "from_version": previous.number if previous else None,
            "to_version": version.number, "reason": reason, "actor": actor.label, "override": bool(blocked)})
    return move


def label_rollback(*, actor: Actor, label: Label, reason: str) -> LabelMove:
    """Move the label back to where it pointed before its latest move."""
    latest = label.moves.first()
    if latest is None or latest.from_version is None:
        raise StoreError(f"{label.name} has no earlier version to roll back to.")
    return label_move(actor=actor, harness=label.harness, name=label.name, version=latest.from_version,
                      reason=reason or f"Roll back to v{latest.from_version.number}")
