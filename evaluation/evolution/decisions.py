"""A person's decisions on proposals: accept, reject with a reason, take into the editor, or revert later.

Each decision is an audited write by the acting person; a rejection's reason is stored because later
diagnoses read it (the same edit is not proposed again). A revert is a new version by the person, on top
of whatever the harness's head is now, not a rollback, so nothing committed since is lost.
"""

from django.db import transaction
from django.utils import timezone

from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Proposal
from evaluation.evolution.patches import PatchError, apply_diff, reverse_diff
from harness import selectors as harness_selectors
from harness.models import Draft, HarnessVersion
from harness.services import version_commit
from harness.spec import SpecInvalid, parse_files
from workspaces.access import WRITE, Actor, require
from workspaces.services import audit_record

MAX_REASON = 1000


def _decide(actor: Actor, proposal: Proposal, status: str, reason: str = "") -> Proposal:
    require(actor, proposal.diagnosis.workspace, WRITE)
    if not proposal.valid:
        raise EvolutionError("An invalid proposal is not a candidate: " + "; ".join(proposal.errors)[:300])
    if proposal.status != Proposal.Status.PENDING:
        raise EvolutionError(f"This proposal was already {proposal.status}.")
    if hasattr(proposal.diagnosis, "round"):
        raise EvolutionError("This diagnosis already made its candidate version; diagnose again to go on.")
    with transaction.atomic():
        proposal.status, proposal.reason = status, reason
        proposal.decided_by, proposal.decided_at = actor.label, timezone.now()
        proposal.save(update_fields=["status", "reason", "decided_by", "decided_at"])
        audit_record(actor=actor, workspace=proposal.diagnosis.workspace, action=f"evolution.proposal.{status}",
                     target_type="proposal", target_id=proposal.pk, target_label=proposal.hypothesis[:300],
                     after={"generator": proposal.generator, "fingerprint": proposal.fingerprint, "reason": reason})
    return proposal


def proposal_accept(*, actor: Actor, proposal: Proposal) -> Proposal:
    return _decide(actor, proposal, Proposal.Status.ACCEPTED)


def proposal_reject(*, actor: Actor, proposal: Proposal, reason: str) -> Proposal:
    """Reject with a reason: later diagnoses read it, and the same edit is not proposed again."""
    reason = (reason or "").strip()
    if not reason:
        raise EvolutionError("Say why you reject it: the next diagnosis reads the reason.")
    if len(reason) > MAX_REASON:
        raise EvolutionError(f"The reason is longer than {MAX_REASON} characters.")
    return _decide(actor, proposal, Proposal.Status.REJECTED, reason)


def proposal_edit(*, actor: Actor, proposal: Proposal, user) -> Draft:
    """Put the diagnosed version with this edit applied into the user's draft, for the file editor."""
    if user is None or not getattr(user, "pk", None):
        raise EvolutionError("Editing needs a signed-in user (drafts belong to people).")
    diagnosis = proposal.diagnosis
    files = _applied(diagnosis.version.files, proposal)
    existing = Draft.objects.filter(harness=diagnosis.harness, author=user).first()
    if existing is not None and existing.files != existing.base_version.files:
        raise EvolutionError("You have unsaved changes in your draft of this harness: commit or discard them first.")
    _decide(actor, proposal, Proposal.Status.EDITED)
    with transaction.atomic():
        Draft.objects.filter(harness=diagnosis.harness, author=user).delete()
        return Draft.objects.create(harness=diagnosis.harness, author=user, base_version=diagnosis.version,
                                    files=files)


def _applied(files: dict, proposal: Proposal) -> dict:
    try:
        edited = apply_diff(files, proposal.diff)
        parse_files(edited)
    except (PatchError, SpecInvalid) as exc:
        raise EvolutionError(f"The edit no longer applies: {exc}") from exc
    return edited


def _holds(head: HarnessVersion, candidate: HarnessVersion) -> bool:
    """Whether the head descends from (or is) the candidate: only then is the candidate's edit on the head."""
    version, seen = head, 0
    while version is not None and seen < 10_000:
        if version.pk == candidate.pk:
            return True
        version, seen = version.parent, seen + 1
    return False


def proposal_revert(*, actor: Actor, proposal: Proposal) -> HarnessVersion:
    """Undo one accepted edit on top of the harness's head, as a new version by `actor`."""
    require(actor, proposal.diagnosis.workspace, WRITE)
    if proposal.status != Proposal.Status.ACCEPTED or not hasattr(proposal.diagnosis, "round"):
        raise EvolutionError("Only an edit that went into a candidate version can be reverted.")
    harness = proposal.diagnosis.harness
    head = harness_selectors.harness_get(proposal.diagnosis.workspace, harness.name).head
    candidate = proposal.diagnosis.round.candidate
    if not HarnessVersion.objects.filter(pk=head.pk).exists() or not _holds(head, candidate):
        raise EvolutionError(f"v{candidate.number} was never promoted: the head (v{head.number}) does not hold "
                             "this edit, so there is nothing to revert.")
    try:
        files = apply_diff(head.files, reverse_diff(proposal.diff))
    except PatchError as exc:
        raise EvolutionError(f"The edit cannot be reverted on v{head.number}: {exc}") from exc
    with transaction.atomic():
        result = version_commit(actor=actor, harness=harness, files=files, base_version=head,
                                message=f"Revert evolution edit #{proposal.pk} ({proposal.generator}): "
                                        f"{proposal.hypothesis}"[:500])
        audit_record(actor=actor, workspace=harness.workspace, action="evolution.proposal.revert",
                     target_type="proposal", target_id=proposal.pk, target_label=proposal.hypothesis[:300],
                     after={"version": result.version.number})
    return result.version
