"""The versioned store on the real database: immutability, conflicts, no-op commits, labels, approver rule."""

import pytest
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, IntegrityError, connection, transaction

from harness import selectors, services
from harness.models import Draft, HarnessVersion, ImmutableRowError, Label, LabelMove
from harness.spec import SpecInvalid, content_hash, parse_files
from workspaces.models import AuditEvent

pytestmark = pytest.mark.django_db


def edited(files: dict[str, str], marker: str) -> dict[str, str]:
    """The same harness with one skill body changed."""
    path = next(p for p in sorted(files) if p.endswith("SKILL.md"))
    return {**files, path: files[path].rstrip("\n") + f"\n- {marker}\n"}


def test_commit_creates_numbered_immutable_versions(harness, actors, demo_files):
    v1 = harness.head
    assert v1.number == 1 and v1.parent is None
    assert v1.content_hash == content_hash(parse_files(demo_files))
    result = services.version_commit(actor=actors["operator"], harness=harness, files=edited(demo_files, "one"),
                                     base_version=v1, message="tighten rules")
    assert result.created and result.version.number == 2 and result.version.parent == v1
    harness.refresh_from_db()
    assert harness.head == result.version
    with pytest.raises(ImmutableRowError):
        result.version.message = "rewritten history"
        result.version.save()
    with pytest.raises(ImmutableRowError):
        result.version.delete()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigger exists on PostgreSQL only")
def test_database_refuses_version_updates(harness):
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        HarnessVersion.objects.filter(pk=harness.head.pk).update(message="sneaky")
    assert HarnessVersion.objects.get(pk=harness.head.pk).message == "first"


def test_identical_content_makes_no_new_version(harness, actors, demo_files):
    # Same content in a different formatting (CRLF line endings) is still the same content.
    crlf = {p: t.replace("\n", "\r\n") for p, t in demo_files.items()}
    result = services.version_commit(actor=actors["operator"], harness=harness, files=crlf,
                                     base_version=harness.head, message="no-op")
    assert result.created is False and result.version == harness.head
    assert HarnessVersion.objects.filter(harness=harness).count() == 1


def test_stale_draft_conflicts_instead_of_overwriting(harness, actors, members, demo_files):
    draft_a = services.draft_open(actor=actors["operator"], harness=harness, user=members["operator"])
    draft_b = services.draft_open(actor=actors["approver"], harness=harness, user=members["approver"])
    path = next(p for p in sorted(draft_a.files) if p.endswith("SKILL.md"))
    assert services.draft_write_file(actor=actors["operator"], draft=draft_a, path=path,
                                     text=edited(draft_a.files, "from a")[path]) == []
    assert services.draft_write_file(actor=actors["approver"], draft=draft_b, path=path,
                                     text=edited(draft_b.files, "from b")[path]) == []
    first = services.draft_commit(actor=actors["operator"], draft=draft_a, message="a's change")
    assert first.created and not Draft.objects.filter(pk=draft_a.pk).exists()
    with pytest.raises(services.CommitConflict) as conflict:
        services.draft_commit(actor=actors["approver"], draft=draft_b, message="b's change")
    assert conflict.value.head == first.version and conflict.value.base.number == 1
    assert [c.path for c in conflict.value.diff.changes] == [path]
    harness.refresh_from_db()
    assert harness.head == first.version  # b's change did not land
    assert Draft.objects.filter(pk=draft_b.pk).exists()  # and b's work is not lost
    services.draft_rebase(actor=actors["approver"], draft=draft_b)
    second = services.draft_commit(actor=actors["approver"], draft=draft_b, message="b's change, rebased")
    assert second.version.number == 3 and second.version.parent == first.version


def test_invalid_draft_edit_is_refused_whole(harness, actors, members):
    draft = services.draft_open(actor=actors["operator"], harness=harness, user=members["operator"])
    before = dict(draft.files)
    tool_path = next(p for p in sorted(draft.files) if p.startswith("tools/"))
    errors = services.draft_write_file(actor=actors["operator"], draft=draft, path=tool_path, text="{not json")
    assert errors and all(str(e).startswith(tool_path) for e in errors)
    draft.refresh_from_db()
    assert draft.files == before


def test_invalid_commit_writes_nothing(harness, actors, demo_files):
    broken = {**demo_files, "tools/bad tool.json": "{}"}
    audit_before = AuditEvent.objects.count()
    with pytest.raises(SpecInvalid) as invalid:
        services.version_commit(actor=actors["operator"], harness=harness, files=broken,
                                base_version=harness.head, message="broken")
    assert any(e.path.startswith("tools/bad tool.json") for e in invalid.value.errors)
    assert HarnessVersion.objects.filter(harness=harness).count() == 1
    assert AuditEvent.objects.count() == audit_before


def test_viewer_cannot_commit(harness, actors, demo_files):
    with pytest.raises(PermissionDenied):
        services.version_commit(actor=actors["viewer"], harness=harness, files=edited(demo_files, "x"),
                                base_version=harness.head, message="nope")


def test_label_moves_are_recorded_and_rollback_moves_back(harness, actors, demo_files):
    v1 = harness.head
    v2 = services.version_commit(actor=actors["operator"], harness=harness, files=edited(demo_files, "v2"),
                                 base_version=v1, message="v2").version
    services.label_move(actor=actors["operator"], harness=harness, name="staging", version=v1, reason="first")
    services.label_move(actor=actors["operator"], harness=harness, name="staging", version=v2, reason="try v2")
    label = Label.objects.get(harness=harness, name="staging")
    assert label.version == v2 and not label.protected
    back = services.label_rollback(actor=actors["operator"], label=label, reason="v2 regressed")
    assert (back.from_version, back.to_version, back.reason) == (v2, v1, "v2 regressed")
    history = [(m.from_version and m.from_version.number, m.to_version.number) for m in label.moves.all()]
    assert history == [(2, 1), (1, 2), (None, 1)]
    assert AuditEvent.objects.filter(action="label.move", target_label="avatar@staging").count() == 3
    assert selectors.version_by_label(harness, "staging") == v1


def test_protected_label_needs_approver(harness, actors):
    with pytest.raises(PermissionDenied):
        services.label_move(actor=actors["operator"], harness=harness, name="production", version=harness.head,
                            reason="ship it")
    assert not LabelMove.objects.exists()
    move = services.label_move(actor=actors["approver"], harness=harness, name="production",
                               version=harness.head, reason="ship it")
    assert move.label.protected


def test_label_move_rejects_other_harness_versions_and_empty_reason(harness, foreign_harness, actors):
    with pytest.raises(services.StoreError):
        services.label_move(actor=actors["operator"], harness=harness, name="staging",
                            version=foreign_harness.head, reason="x")
    with pytest.raises(services.StoreError):
        services.label_move(actor=actors["operator"], harness=harness, name="staging", version=harness.head,
                            reason="  ")


def test_commit_is_audited_with_before_and_after(harness, actors, demo_files):
    services.version_commit(actor=actors["operator"], harness=harness, files=edited(demo_files, "a"),
                            base_version=harness.head, message="audited")
    event = AuditEvent.objects.filter(action="version.commit").first()
    assert event.actor_label == "operator" and event.actor_kind == "user"
    assert event.before["head"] == 1 and event.after["head"] == 2 and event.after["message"] == "audited"


def test_harness_names_are_unique_per_workspace(harness, actors, demo_files, workspace):
    with pytest.raises((services.StoreError, IntegrityError)):
        services.harness_create(actor=actors["operator"], workspace=workspace, name="avatar", files=demo_files)


def test_a_stored_versions_spec_knows_its_content_hash_without_dumping_itself_again(harness, monkeypatch):
    """A version's files are stored canonical with their hash (version_commit), so its parsed spec takes that hash
    as its own; files that are not canonical (changed behind the store's back) still get theirs computed."""
    from harness.spec import canonical

    version = harness.head
    selectors._SPEC_CACHE.clear()
    dumped = []
    real_to_files = canonical.to_files
    monkeypatch.setattr(canonical, "to_files", lambda spec: dumped.append(spec) or real_to_files(spec))
    assert selectors.version_spec(version).content_hash == version.content_hash and not dumped
    selectors._SPEC_CACHE.clear()
    path = next(p for p in sorted(version.files) if p.endswith("SKILL.md"))
    altered = HarnessVersion(pk=version.pk, content_hash=version.content_hash,
                             files={**version.files, path: version.files[path] + "\n- changed by hand\n"})
    assert selectors.version_spec(altered).content_hash != version.content_hash and dumped
    selectors._SPEC_CACHE.clear()
