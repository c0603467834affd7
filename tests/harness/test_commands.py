"""manage.py harness_import / harness_export round trip, and the demo seed."""

import pytest
from django.core.management import CommandError, call_command

from harness.models import Harness
from harness.spec import content_hash, parse_files, read_dir
from tests.conftest import DEMO_HARNESS

pytestmark = pytest.mark.django_db


def test_import_export_round_trip_is_lossless(workspace, tmp_path):
    call_command("harness_import", str(DEMO_HARNESS), workspace="acme", harness="avatar")
    harness = Harness.objects.get(workspace=workspace, name="avatar")
    call_command("harness_export", "avatar@v1", str(tmp_path / "out"))
    exported = read_dir(tmp_path / "out")
    assert exported == harness.head.files
    assert content_hash(parse_files(exported)) == harness.head.content_hash == content_hash(
        parse_files(read_dir(DEMO_HARNESS)))
    # Re-importing the export changes nothing.
    call_command("harness_import", str(tmp_path / "out"), workspace="acme", harness="avatar")
    assert harness.versions.count() == 1


def test_import_reports_every_error(workspace, tmp_path):
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "harness.yaml").write_text("format: harnessops/v1\nsettings: {max_turns: 0}\n")
    (tmp_path / "h" / "tools").mkdir()
    (tmp_path / "h" / "tools" / "x.json").write_text("{")
    with pytest.raises(CommandError) as error:
        call_command("harness_import", str(tmp_path / "h"), workspace="acme", harness="broken")
    assert "harness.yaml" in str(error.value) and "tools/x.json" in str(error.value)
    assert not Harness.objects.filter(name="broken").exists()


def test_export_refuses_unknown_label_and_non_empty_dir(workspace, tmp_path):
    call_command("harness_import", str(DEMO_HARNESS), workspace="acme", harness="avatar")
    with pytest.raises(CommandError, match="no version, label or content hash"):
        call_command("harness_export", "avatar@production", str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("x")
    with pytest.raises(CommandError, match="not empty"):
        call_command("harness_export", "avatar@v1", str(tmp_path / "b"))


def test_seed_demo_is_idempotent(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("HARNESSOPS_ADMIN_PASSWORD", "demo-password-123")
    call_command("seed_demo")
    call_command("seed_demo")
    harness = Harness.objects.get(workspace__slug="demo", name="avatar")
    assert harness.versions.count() == 1
    assert sorted(harness.labels.values_list("name", flat=True)) == ["production", "staging"]
    compact = Harness.objects.get(workspace__slug="demo", name="avatar-compact")
    assert compact.versions.count() == 1 and list(compact.labels.values_list("name", flat=True)) == ["production"]
    from serving.models import Room

    room = Room.objects.get(room_id="demo-room")
    assert len(room.context["products"]) >= 20 and room.context["faq"]


@pytest.mark.parametrize("shipped, constrained", [(None, True), ({"decoding": "constrained"}, True),
                                                  ({"decoding": "free"}, False)])
def test_the_compact_demo_harness_decodes_as_the_embedded_default_was_chosen_to(settings, tmp_path, monkeypatch,
                                                                                 shipped, constrained):
    from console.management.commands import seed_demo

    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("HARNESSOPS_ADMIN_PASSWORD", "demo-password-123")
    monkeypatch.setattr(seed_demo, "local_default_manifest", lambda: shipped)
    call_command("seed_demo")
    compact = Harness.objects.get(workspace__slug="demo", name="avatar-compact")
    spec = parse_files(compact.head.files)
    assert spec.settings.constrained_decoding is constrained
    # only the decoding differs from the committed compact harness
    committed = parse_files(read_dir(seed_demo.DEMO_DIR / "compact"))
    assert spec.skills == committed.skills and spec.tools == committed.tools and spec.hooks == committed.hooks
